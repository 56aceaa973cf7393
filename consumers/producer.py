"""The producer: appends keyed events to the shard their partition key routes to (docs/producer.md).

Theory of operation
-------------------
Routing is Kafka's: ``shard_index(key, shard_count)`` over the ACTIVE routing version
(docs/protocol.md section 10). The producer caches that version and shard count per stream prefix and
passes them, with the stream key it computed, to ``produce.lua``; the script compares them with the
``route`` field of the metadata hash and appends only if they are still current. After a shard-count
change the old version is sealed, so a producer with a stale cache is refused (nothing appended), gets
the current route in the same reply, recomputes and retries. In the steady state a send is one round
trip; an append can never land in a sealed version, since the check and the append are one script.

Guarantee: **at-least-once**. A send that raises :class:`~consumers.errors.DataPlaneUnavailable` may or
may not have been appended (the reply was lost after the append), so a caller that retries may write the
event twice. Each call appends with a fresh ``event_id``; consumers that must de-duplicate use their own
business keys. A stale-route refusal is not ambiguous (nothing was written) and is retried here, up to
``max_retries`` times; a connection error never is. Nor should the client re-send on its own: build it
with :func:`consumers.dataplane.redis_client` (a client that would re-send is accepted with a warning,
see :mod:`consumers.dataplane.connection`).

Batches: the entries of ``send_batch`` are grouped by shard and sent as one script call per shard
(in chunks of at most ``max_entries_per_call``), all in one pipeline; refused groups are re-routed and
re-sent. Entries of one partition key keep their order: they travel in one call, and a refused call
appended nothing.

Thread-safe: the route cache is guarded by a lock; the client is a connection pool.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from consumers.dataplane import checks, connection, scripts
from consumers.dataplane.envelope import EncodedEvent, encode_event
from consumers.errors import DataPlaneError, InvalidRequest, RoutingUnstable, StreamPrefixNotFound
from coordinator.protocol.model import Shard
from coordinator.protocol.routing import shard_index
from coordinator.store.codec import meta_key, stream_key

__all__ = ["Producer", "Route", "SendResult"]

_Call = tuple[Shard, list[int]]  # one script call: a shard and the indices of the entries it appends


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    stream_key: str
    entry_id: str
    event_id: str
    routing_version: int
    shard: Shard


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """The ACTIVE routing version of a stream prefix, as the ``route`` metadata field states it."""

    version: int
    shard_count: int

    @classmethod
    def parse(cls, text: str | bytes) -> Route:
        """``"<active version> <shard count> <draining versions or ->"`` (coordinator/store/codec.py)."""
        raw = text.decode() if isinstance(text, bytes) else text
        parts = raw.split()
        try:
            return cls(version=int(parts[0]), shard_count=int(parts[1]))
        except (IndexError, ValueError) as e:
            raise DataPlaneError(f"malformed route field {raw!r}") from e

    def shard_for(self, key: bytes) -> Shard:
        return Shard(version=self.version, index=shard_index(key, self.shard_count))


class Producer:
    """Sends keyed events to sharded streams. See the module docstring for routing and guarantees."""

    max_entries_per_call = 500

    def __init__(self, client: redis.Redis, *, max_retries: int = 5) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidRequest(f"max_retries must be a non-negative int; got {max_retries!r}")
        connection.warn_if_resending(client, "Producer")
        self.client = client
        self.max_retries = max_retries
        self._produce = scripts.register(client, "produce")
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ API

    def send(
        self,
        stream_prefix: str,
        partition_key: str | bytes,
        payload: Any,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> SendResult:
        """Append one event; returns where it went. ``content_type=None``: JSON, or octet-stream for
        bytes (see :func:`consumers.dataplane.envelope.encode_event`). At-least-once (module docstring).
        """
        event = encode_event(partition_key, payload, headers, content_type)
        return self._send(stream_prefix, [event])[0]

    def send_batch(
        self,
        stream_prefix: str,
        items: Iterable[tuple[str | bytes, Any] | tuple[str | bytes, Any, Mapping[str, str] | None]],
    ) -> list[SendResult]:
        """Append ``(key, payload)`` or ``(key, payload, headers)`` items; results in input order.

        If it raises, some entries may have been appended (at-least-once: a retry of the whole batch may
        duplicate those)."""
        events = [_encode_item(item) for item in items]
        return self._send(stream_prefix, events) if events else []

    def route(self, stream_prefix: str) -> Route:
        """The cached route of ``stream_prefix``, read from Redis on first use."""
        checks.identifier(stream_prefix, "stream_prefix")
        with self._lock:
            cached = self._routes.get(stream_prefix)
        if cached is not None:
            return cached
        with scripts.translate_redis_errors(f"reading the route of {stream_prefix!r}"):
            text = self.client.hget(meta_key(stream_prefix), "route")
        if text is None:
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist (only the coordinator's Admin API creates "
                "stream prefixes)",
                stream_prefix=stream_prefix,
            )
        return self._remember(stream_prefix, Route.parse(text))

    def forget_route(self, stream_prefix: str) -> None:
        with self._lock:
            self._routes.pop(stream_prefix, None)

    # ------------------------------------------------------------------------------------------ internals

    def _remember(self, stream_prefix: str, route: Route) -> Route:
        with self._lock:
            self._routes[stream_prefix] = route
        return route

    def _send(self, stream_prefix: str, events: list[EncodedEvent]) -> list[SendResult]:
        route = self.route(stream_prefix)
        results: list[SendResult | None] = [None] * len(events)
        todo = list(range(len(events)))
        for _attempt in range(self.max_retries + 1):
            calls = self._plan(route, events, todo)
            replies = self._execute(stream_prefix, route, calls, events)
            refused: list[int] = []
            current = route
            for (shard, indices), reply in zip(calls, replies, strict=True):
                newer = self._handle(stream_prefix, route, shard, indices, reply, events, results)
                if newer is not None:
                    refused += indices
                    current = newer
            if not refused:
                return [r for r in results if r is not None]
            route = self._remember(stream_prefix, current)
            todo = sorted(refused)
        sent = sum(r is not None for r in results)
        raise RoutingUnstable(
            f"stream prefix {stream_prefix!r}: the route changed under {self.max_retries + 1} attempts in a "
            f"row; {len(events) - sent} of {len(events)} entries were not appended",
            stream_prefix=stream_prefix,
            sent=sent,
            not_sent=len(events) - sent,
        )

    def _plan(self, route: Route, events: list[EncodedEvent], todo: list[int]) -> list[_Call]:
        """Group the entries to send by shard (input order kept within each), chunked per call."""
        by_shard: dict[Shard, list[int]] = {}
        for i in todo:
            by_shard.setdefault(route.shard_for(events[i].partition_key), []).append(i)
        size = self.max_entries_per_call
        return [
            (shard, indices[start : start + size])
            for shard, indices in sorted(by_shard.items())
            for start in range(0, len(indices), size)
        ]

    def _execute(
        self, stream_prefix: str, route: Route, calls: list[_Call], events: list[EncodedEvent]
    ) -> list[Any]:
        meta = meta_key(stream_prefix)

        def call(shard: Shard, indices: list[int], client: Any) -> Any:
            args: list[Any] = [route.version, route.shard_count, shard.index]
            for i in indices:
                args += events[i].script_args()
            return self._produce(keys=[meta, stream_key(stream_prefix, shard)], args=args, client=client)

        with scripts.translate_redis_errors(f"appending to {stream_prefix!r}"):
            if len(calls) == 1:
                try:
                    return [call(*calls[0], self.client)]
                except redis.ResponseError as e:
                    return [e]
            pipe = self.client.pipeline(transaction=False)
            for shard, indices in calls:
                call(shard, indices, pipe)
            return list(pipe.execute(raise_on_error=False))

    def _handle(
        self,
        stream_prefix: str,
        route: Route,
        shard: Shard,
        indices: list[int],
        reply: Any,
        events: list[EncodedEvent],
        results: list[SendResult | None],
    ) -> Route | None:
        """Record one call's outcome; returns the newer route if the call was refused as stale."""
        what = f"appending to shard {shard} of {stream_prefix!r}"
        if isinstance(reply, Exception):
            raise scripts.translate_reply_error(what, reply) from reply
        status = _text(reply[0])
        if status == "OK":
            key = stream_key(stream_prefix, shard)
            for i, entry_id in zip(indices, reply[1], strict=True):
                results[i] = SendResult(
                    stream_key=key,
                    entry_id=_text(entry_id),
                    event_id=events[i].event_id,
                    routing_version=route.version,
                    shard=shard,
                )
            return None
        if status == "STALE_ROUTE":
            return Route.parse(reply[1])
        if status == "NO_ROUTE":
            self.forget_route(stream_prefix)
            raise StreamPrefixNotFound(f"stream prefix {stream_prefix!r} does not exist any more")
        if status == "NO_STREAM":
            raise DataPlaneError(f"{what}: the stream of the active version is missing; nothing appended")
        raise DataPlaneError(f"{what}: unexpected script reply {reply!r}")


def _encode_item(item: Sequence[Any]) -> EncodedEvent:
    if not isinstance(item, tuple | list) or len(item) not in (2, 3):
        raise InvalidRequest("batch items are (key, payload) or (key, payload, headers) tuples")
    return encode_event(item[0], item[1], item[2] if len(item) == 3 else None)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
