"""The producer: appends keyed events to the shard their partition key routes to (docs/producer.md).

Theory of operation
-------------------
Routing is Kafka's: ``shard_index(key, shard_count)`` over the ACTIVE routing version
(docs/protocol.md section 10). The producer caches that version and shard count per stream prefix and
passes them, with the stream keys it computed, to the ``produce`` function (``produce.lua`` in the data
plane's Redis Functions library, :mod:`consumers.dataplane.library`); it compares them with the
``route`` field of the metadata hash and appends only if they are still current. After a shard-count
change the old version is sealed, so a producer with a stale cache is refused (nothing appended), gets
the current route in the same reply, recomputes and retries. In the steady state a send is one round
trip and one function call; an append can never land in a sealed version, since the check and the
append are one function.

Three paths, one function:

* ``send`` (no linger): the fast path. One event, one ``FCALL`` sent through
  :class:`rsc_redis.clients.HotFunction` (connections kept out of the pool between calls: redis-py's
  command path costs more than the command itself): no batch planning, the stream keys and shards of
  the cached route precomputed once per route.
* ``send_batch``: the items are encoded once, in one loop (:func:`_encode_items`: each key hashed once,
  the event ids cut from one block of random bytes), grouped by shard and packed into calls of at most
  ``max_entries_per_call`` entries, several shards per call (``produce`` takes several streams of one
  prefix: they share its hash tag). Up to 500 entries are one function call, sent as a single send's
  is; more go in one pipeline. In Redis each entry is then one ``XADD`` of its value as it came
  (docs/producer.md, "Performance": what that costs against a pipelined ``XADD``).
* ``send`` with ``linger_ms``: concurrent senders (threads) are gathered for up to ``linger_ms`` and
  sent together through the batch path; each sender gets its own result or error (:class:`_Linger`).

The producer sends no Lua: the coordinator loads the library. :meth:`Producer.require_functions` checks
at start that this version's library is there; a call that finds it missing (a restarted, flushed or
new Redis: ``Function not found``, nothing ran) raises :class:`~consumers.errors.FunctionsNotLoaded`,
retriable: the coordinator's tick loads it again. The only re-send is after a stale-route refusal,
which says nothing was written.

Guarantee: **at-least-once**. A send that raises :class:`~consumers.errors.DataPlaneUnavailable` may or
may not have been appended (the reply was lost after the append), so a caller that retries may write the
event twice. Each call appends with a fresh ``event_id``; consumers that must de-duplicate use their own
business keys. **Enqueue once** is opt-in per send: with an ``idempotency_key`` the call goes through
``idempotent_produce`` instead, which appends a key at most once per prefix and window and answers a
retry with the first append (:mod:`consumers.idempotency`, docs/producer.md "Enqueue once"). A
connection error is never retried here. Nor should the client re-send on its own: build it with
:func:`consumers.dataplane.redis_client` (a client that would re-send is accepted with a warning, see
:mod:`consumers.dataplane.connection`).

Entries of one partition key keep their order within a batch: they go to one shard, in input order, in
calls sent in order; a refused call appended nothing, and once a route is stale every later call on it
is refused too.

Thread-safe: the route cache is a dict replaced under a lock (reads need none); the client is a pool.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from consumers import idempotency
from consumers.dataplane import checks, connection, library, scripts
from consumers.dataplane.envelope import JSON, OCTET_STREAM, dumps_json, encode_event
from consumers.errors import (
    ConsumersError,
    DataPlaneError,
    InvalidRequest,
    NotReplicated,
    RoutingUnstable,
    StreamPrefixNotFound,
)
from coordinator.protocol.envelope import head
from coordinator.protocol.model import Shard
from coordinator.protocol.routing import murmur2, shard_index
from rsc_redis.clients import run_functions, run_functions_replicated
from rsc_redis.keys import meta_key, once_key, once_previous_key, stream_key

__all__ = ["DURABILITY_LEVELS", "Producer", "Route", "SendResult"]

# docs/producer.md, "Durability": "primary" acknowledges once the primary appended, "replicated" once
# at least one replica has it too (WAIT 1 <replication_timeout_ms> on the connection that appended).
DURABILITY_LEVELS = ("primary", "replicated")

# One encoded event: its event_id, its key's hash (murmur2 & 0x7fffffff: its shard under any route is
# hash % shard count, docs/protocol.md section 10) and its packed envelope from the third number on
# (coordinator/protocol/envelope.py); the call puts the route's head (version, produced_at_ms not
# written) in front of it. Nothing of it depends on the route, so a refused call is sent again as it is.
_Event = tuple[str, int, bytes]
# One script call: (shard index, indices of its events) per stream, in the order they are appended.
_Call = list[tuple[int, list[int]]]

_OK = (b"OK", "OK")
_STALE = (b"STALE_ROUTE", "STALE_ROUTE")
_NO_ROUTE = (b"NO_ROUTE", "NO_ROUTE")
_NO_STREAM = (b"NO_STREAM", "NO_STREAM")


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    stream_key: str
    entry_id: str
    event_id: str
    routing_version: int
    shard: Shard
    # True: an idempotent send whose key was already appended within the window (docs/producer.md,
    # "Enqueue once"): this call appended nothing, and the fields are the first append's.
    duplicate: bool = False


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


class _Target:
    """A cached route with everything a send needs precomputed: the keys, shards and script arguments
    of every shard of the version (built once per route, not once per send)."""

    __slots__ = (
        "count_arg", "head", "index_args", "keys", "meta", "once", "route", "shards", "single", "version_arg"
    )  # fmt: skip

    def __init__(self, stream_prefix: str, route: Route) -> None:
        self.route = route
        self.meta = meta_key(stream_prefix)
        self.once = (once_key(stream_prefix), once_previous_key(stream_prefix))
        self.shards = tuple(Shard(version=route.version, index=i) for i in range(route.shard_count))
        self.keys = tuple(stream_key(stream_prefix, s) for s in self.shards)
        self.version_arg = str(route.version)
        self.count_arg = str(route.shard_count)
        self.index_args = tuple(str(i) for i in range(route.shard_count))
        # Every value of this route starts with it: "<version> 0 " (coordinator/protocol/envelope.py).
        self.head = head(route.version)
        # A single send to each shard: the script's KEYS, and its ARGV before the event's value.
        self.single = tuple(
            ((self.meta, key), (self.version_arg, self.count_arg, index, 1))
            for key, index in zip(self.keys, self.index_args, strict=True)
        )


class Producer:
    """Sends keyed events to sharded streams. See the module docstring for routing and guarantees.

    ``linger_ms`` (default ``None``: off): ``send`` waits up to this long for other threads' sends and
    appends them all in one script call (docs/producer.md, "Linger"). ``send_batch`` never lingers.
    """

    max_entries_per_call = 500

    def __init__(
        self,
        client: redis.Redis,
        *,
        max_retries: int = 5,
        linger_ms: float | None = None,
        durability: str = "primary",
        replication_timeout_ms: int = 1000,
        idempotency_window_ms: int = idempotency.DEFAULT_WINDOW_MS,
        idempotency_max_keys: int = idempotency.DEFAULT_MAX_KEYS,
    ) -> None:
        _check_durability(durability)
        self.idempotency_window_ms = idempotency.window_ms(idempotency_window_ms)
        self.idempotency_max_keys = idempotency.max_keys(idempotency_max_keys)
        if (
            isinstance(replication_timeout_ms, bool)
            or not isinstance(replication_timeout_ms, int)
            or not 1 <= replication_timeout_ms <= 60_000
        ):
            raise InvalidRequest(
                f"replication_timeout_ms must be an int in [1, 60000]; got {replication_timeout_ms!r}"
            )
        self.durability = durability
        self.replication_timeout_ms = replication_timeout_ms
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidRequest(f"max_retries must be a non-negative int; got {max_retries!r}")
        if linger_ms is not None and (
            isinstance(linger_ms, bool) or not isinstance(linger_ms, int | float) or not 0 < linger_ms <= 1000
        ):
            raise InvalidRequest(f"linger_ms must be None (off) or a number in (0, 1000]; got {linger_ms!r}")
        connection.warn_if_resending(client, "Producer")
        self.client = client
        self.max_retries = max_retries
        self.linger_ms = linger_ms
        self._function = library.function_name("produce")
        self._hot = scripts.hot_function(client, "produce")  # the single send's call
        self._once_function = library.function_name("idempotent_produce")
        self._hot_once = scripts.hot_function(client, "idempotent_produce")
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()
        self._linger = _Linger(self, linger_ms / 1000) if linger_ms is not None else None

    # ------------------------------------------------------------------------------------------ API

    def send(
        self,
        stream_prefix: str,
        partition_key: str | bytes,
        payload: Any,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
        *,
        durability: str | None = None,
        idempotency_key: str | bytes | None = None,
    ) -> SendResult:
        """Append one event; returns where it went. ``content_type=None``: JSON, or octet-stream for
        bytes (see :func:`consumers.dataplane.envelope.encode_event`). At-least-once (module docstring).
        ``durability`` (default: the producer's): ``"replicated"`` returns once a replica has it too,
        or raises :class:`~consumers.errors.NotReplicated` (appended, not replicated in time).
        ``idempotency_key``: enqueue once (docs/producer.md, "Enqueue once"): if this key of the prefix
        was appended within the window, nothing is appended and the result is the first append's
        (``duplicate=True``). Such a send never lingers.
        """
        event = _encode(partition_key, payload, headers, content_type)
        if idempotency_key is not None:
            once = idempotency.idempotency_key(idempotency_key)
            if durability is not None:
                _check_durability(durability)
            if (durability or self.durability) == "replicated":
                return self._send_once(stream_prefix, [event], [once], durability)[0]
            return self._send_one_once(stream_prefix, event, once)
        if durability is not None and durability != self.durability:
            _check_durability(durability)
            if durability == "replicated":
                return self._send_replicated(stream_prefix, [event])[0]
            return self._send_one(stream_prefix, event)
        if self._linger is not None:
            return self._linger.send(stream_prefix, event)
        if self.durability == "replicated":
            return self._send_replicated(stream_prefix, [event])[0]
        return self._send_one(stream_prefix, event)

    def _send_one(self, stream_prefix: str, event: _Event) -> SendResult:
        """The fast path of ``send`` (durability "primary", no linger)."""
        target = self._targets.get(stream_prefix) if type(stream_prefix) is str else None
        if target is None:
            target = self._load_target(stream_prefix)
        for _attempt in range(self.max_retries + 1):
            index = event[1] % target.route.shard_count
            key = target.keys[index]
            keys, args = target.single[index]
            try:
                reply = self._hot(keys, (*args, target.head + event[2]))
            except (redis.RedisError, RedisClusterException) as e:
                with scripts.translate_redis_errors(f"appending to {stream_prefix!r}"):
                    raise e
            if reply[0] in _OK:
                return _result(key, _text(reply[1][0]), event[0], target.route.version, target.shards[index])
            target = self._refused(stream_prefix, target.shards[index], reply)
        raise _unstable(stream_prefix, self.max_retries, sent=0, total=1)

    def _send_one_once(self, stream_prefix: str, event: _Event, once: bytes) -> SendResult:
        """``_send_one`` for a keyed send: one ``idempotent_produce`` call of one entry (durability
        "primary"; the batch path's planning, packing and spreading cost a single send twice the client
        CPU)."""
        target = self._target(stream_prefix)
        for _attempt in range(self.max_retries + 1):
            index = event[1] % target.route.shard_count
            keys = (target.meta, *target.once, target.keys[index])
            args = (
                target.version_arg,
                target.count_arg,
                self.idempotency_window_ms,
                self.idempotency_max_keys,
                target.index_args[index],
                1,
                once,
                event[0],
                target.head + event[2],
            )
            try:
                reply = self._hot_once(keys, args)
            except (redis.RedisError, RedisClusterException) as e:
                with scripts.translate_redis_errors(f"appending to {stream_prefix!r}"):
                    raise e
            if reply[0] in _OK:
                if reply[2]:
                    results: list[SendResult | None] = [None]
                    _record_duplicates(stream_prefix, [(index, [0])], reply[2], results)
                    return results[0]  # type: ignore[return-value]  # filled: the call's one entry
                key = target.keys[index]
                return _result(key, _text(reply[1][0]), event[0], target.route.version, target.shards[index])
            target = self._refused(stream_prefix, target.shards[index], reply)
        raise _unstable(stream_prefix, self.max_retries, sent=0, total=1)

    def send_batch(
        self,
        stream_prefix: str,
        items: Iterable[tuple[str | bytes, Any] | tuple[str | bytes, Any, Mapping[str, str] | None]],
        *,
        durability: str | None = None,
        idempotency_keys: Sequence[str | bytes | None] | None = None,
    ) -> list[SendResult]:
        """Append ``(key, payload)`` or ``(key, payload, headers)`` items; results in input order.

        If it raises, some entries may have been appended (at-least-once: a retry of the whole batch may
        duplicate those, unless they have idempotency keys). ``durability`` as for :meth:`send`.
        ``idempotency_keys``: one per item (``None`` for an item without), as ``send``'s
        ``idempotency_key``; an item whose key an earlier item of the batch has gets that item's result
        (``duplicate=True``)."""
        events = _encode_items(items)
        if idempotency_keys is not None:
            once = _idempotency_keys(idempotency_keys, len(events))
            if durability is not None:
                _check_durability(durability)
            return self._send_once(stream_prefix, events, once, durability) if events else []
        if not events:
            return []
        if durability is not None:
            _check_durability(durability)
        if (durability or self.durability) == "replicated":
            return self._send_replicated(stream_prefix, events)
        results: list[SendResult | None] = [None] * len(events)
        self._send_events(stream_prefix, events, results)
        return results  # type: ignore[return-value]  # every slot is filled when nothing raised

    def route(self, stream_prefix: str) -> Route:
        """The cached route of ``stream_prefix``, read from Redis on first use."""
        return self._target(stream_prefix).route

    def require_functions(self) -> None:
        """Raise :class:`~consumers.errors.FunctionsNotLoaded` unless this code version's library is
        loaded on every primary (call it once at start: a clear error, naming the command that loads it,
        before the first send)."""
        library.require_loaded(self.client)

    def forget_route(self, stream_prefix: str) -> None:
        with self._lock:
            self._targets.pop(stream_prefix, None)

    # ------------------------------------------------------------------------------------------ routes

    def _target(self, stream_prefix: str) -> _Target:
        target = self._targets.get(stream_prefix) if type(stream_prefix) is str else None
        return target if target is not None else self._load_target(stream_prefix)

    def _load_target(self, stream_prefix: str) -> _Target:
        checks.identifier(stream_prefix, "stream_prefix")
        with scripts.translate_redis_errors(f"reading the route of {stream_prefix!r}"):
            text = self.client.hget(meta_key(stream_prefix), "route")
        if text is None:
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist (only the coordinator's Admin API creates "
                "stream prefixes)",
                stream_prefix=stream_prefix,
            )
        return self._remember(stream_prefix, Route.parse(text))

    def _remember(self, stream_prefix: str, route: Route) -> _Target:
        target = _Target(stream_prefix, route)
        with self._lock:
            self._targets[stream_prefix] = target
        return target

    def _refused(self, stream_prefix: str, shard: Shard | None, reply: Any) -> _Target:
        """A call that appended nothing: the newer route to retry with, or the typed error."""
        status = reply[0]
        if status in _STALE:
            return self._remember(stream_prefix, Route.parse(reply[1]))
        if status in _NO_ROUTE:
            self.forget_route(stream_prefix)
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist any more", stream_prefix=stream_prefix
            )
        where = f"shard {shard} of " if shard is not None else ""
        if status in _NO_STREAM:
            raise DataPlaneError(
                f"appending to {where}{stream_prefix!r}: a stream of the active version is missing; nothing "
                "appended"
            )
        raise DataPlaneError(f"appending to {where}{stream_prefix!r}: unexpected script reply {reply!r}")

    # ------------------------------------------------------------------------------------------ calls

    def _send_replicated(
        self, stream_prefix: str, events: list[_Event], once: list[bytes] | None = None
    ) -> list[SendResult]:
        """The batch path, each call followed by ``WAIT 1`` on its connection; raises ``NotReplicated``
        (every entry appended) when a call was not acknowledged by a replica in time."""
        results: list[SendResult | None] = [None] * len(events)
        acks: list[int | None] = []
        self._send_events(stream_prefix, events, results, acks=acks, once=once)
        short = [a for a in acks if a is None or a < 1]
        if short:
            raise NotReplicated(
                f"appending to {stream_prefix!r}: {len(events)} entries appended, but no replica "
                f"acknowledged {len(short)} of {len(acks)} calls within {self.replication_timeout_ms} ms",
                results=results,
                replicas=min((a or 0) for a in short),
            )
        return results  # type: ignore[return-value]  # every slot is filled when nothing raised

    def _send_events(
        self,
        stream_prefix: str,
        events: list[_Event],
        results: list[SendResult | None],
        *,
        acks: list[int | None] | None = None,
        once: list[bytes] | None = None,
    ) -> None:
        """The batch path: fill ``results`` (input order) or raise. ``RoutingUnstable`` leaves the slots
        of the entries that were appended filled and the others ``None``. ``once``: an idempotency key
        per event (``b""``: none), sent through ``idempotent_produce``."""
        target = self._target(stream_prefix)
        todo: Sequence[int] = range(len(events))
        for _attempt in range(self.max_retries + 1):
            calls = self._plan(target.route, events, todo)
            replies = self._execute(stream_prefix, target, calls, events, acks=acks, once=once)
            refused: list[int] = []
            newer = target
            for call, reply in zip(calls, replies, strict=True):
                if reply[0] in _OK:
                    self._record(target, call, reply[1], events, results)
                    if once is not None and reply[2]:
                        _record_duplicates(stream_prefix, call, reply[2], results)
                else:
                    newer = self._refused(stream_prefix, None, reply)
                    refused += (i for _, indices in call for i in indices)
            if not refused:
                return
            target, todo = newer, sorted(refused)
        raise _unstable(stream_prefix, self.max_retries, sent=len(events) - len(todo), total=len(events))

    def _plan(self, route: Route, events: list[_Event], todo: Sequence[int]) -> list[_Call]:
        """Group the entries by shard (input order kept within each), then pack the groups, in shard
        order, into calls of at most ``max_entries_per_call`` entries (a group larger than the room left
        continues in the next call)."""
        by_shard: dict[int, list[int]] = {}
        count = route.shard_count
        for i in todo:
            index = events[i][1] % count
            group = by_shard.get(index)
            if group is None:
                by_shard[index] = [i]
            else:
                group.append(i)
        size = self.max_entries_per_call
        if len(todo) <= size:  # the common batch: one call, every shard in it
            return [sorted(by_shard.items())]
        calls: list[_Call] = [[]]
        room = size
        for index in sorted(by_shard):
            indices = by_shard[index]
            while indices:
                if room == 0:
                    calls.append([])
                    room = size
                calls[-1].append((index, indices[:room]))
                indices, room = indices[room:], room - min(room, len(indices))
        return calls

    def _execute(
        self,
        stream_prefix: str,
        target: _Target,
        calls: list[_Call],
        events: list[_Event],
        *,
        acks: list[int | None] | None = None,
        once: list[bytes] | None = None,
    ) -> list[Any]:
        """One ``FCALL produce`` per call (one call: the hot call, as a single send's; more: one
        pipeline), or ``idempotent_produce`` with ``once``; the replies in order. No ``redis.*`` error
        leaves."""
        packed = (
            self._pack(target, calls, events)
            if once is None
            else self._pack_once(target, calls, events, once)
        )
        function, hot = (self._function, self._hot) if once is None else (self._once_function, self._hot_once)
        if acks is not None:
            return self._replicated([(len(k), *k, *a) for k, a in packed], stream_prefix, acks, function)
        with scripts.translate_redis_errors(f"appending to {stream_prefix!r}"):
            if len(packed) == 1:
                return [hot(*packed[0])]
            # Not redis-py's ClusterPipeline on a cluster: it would re-send a call whose reply a
            # connection error cut (an append written twice). One prefix is one slot: one primary's
            # plain pipeline.
            replies = run_functions(self.client, function, [(len(k), *k, *a) for k, a in packed])
        for reply in replies:
            if isinstance(reply, Exception):
                raise scripts.translate_reply_error(f"appending to {stream_prefix!r}", reply) from reply
        return replies

    @staticmethod
    def _pack(target: _Target, calls: list[_Call], events: list[_Event]) -> list[tuple[list[str], list[Any]]]:
        """Each call's KEYS and ARGV for ``produce`` (produce.lua's header)."""
        head = target.head
        packed: list[tuple[list[str], list[Any]]] = []
        for call in calls:
            keys = [target.meta]
            args: list[Any] = [target.version_arg, target.count_arg]
            for index, indices in call:
                keys.append(target.keys[index])
                args += (target.index_args[index], len(indices))
                args += [head + events[i][2] for i in indices]
            packed.append((keys, args))
        return packed

    def _pack_once(
        self, target: _Target, calls: list[_Call], events: list[_Event], once: list[bytes]
    ) -> list[tuple[list[str], list[Any]]]:
        """Each call's KEYS and ARGV for ``idempotent_produce`` (idempotent_produce.lua's header)."""
        head, limits = target.head, (self.idempotency_window_ms, self.idempotency_max_keys)
        packed: list[tuple[list[str], list[Any]]] = []
        for call in calls:
            keys = [target.meta, *target.once]
            args: list[Any] = [target.version_arg, target.count_arg, *limits]
            for index, indices in call:
                keys.append(target.keys[index])
                args += (target.index_args[index], len(indices))
                for i in indices:
                    args += (once[i], events[i][0], head + events[i][2])
            packed.append((keys, args))
        return packed

    def _send_once(
        self, stream_prefix: str, events: list[_Event], once: Sequence[bytes | None], durability: str | None
    ) -> list[SendResult]:
        """Idempotent sends (docs/producer.md, "Enqueue once"): each key's first item of the batch goes
        through ``idempotent_produce``; a repeat of a key gets its first item's result, marked
        ``duplicate``. ``NotReplicated`` carries every item's result, repeats included."""
        send, repeats = idempotency.first_occurrences(once)
        sent_events = [events[i] for i in send]
        sent_once = [once[i] or b"" for i in send]
        results: list[SendResult | None] = [None] * len(events)

        def spread(done: Sequence[SendResult | None]) -> list[SendResult]:
            for i, result in zip(send, done, strict=True):
                results[i] = result
            for later, first in repeats:
                earlier = results[first]
                results[later] = None if earlier is None else dataclasses.replace(earlier, duplicate=True)
            return results  # type: ignore[return-value]  # every slot is filled when nothing raised

        if (durability or self.durability) == "replicated":
            try:
                return spread(self._send_replicated(stream_prefix, sent_events, sent_once))
            except NotReplicated as e:
                e.results = spread(e.results)
                raise
        done: list[SendResult | None] = [None] * len(sent_events)
        self._send_events(stream_prefix, sent_events, done, once=sent_once)
        return spread(done)

    def _replicated(
        self, packed: list[tuple[Any, ...]], stream_prefix: str, acks: list[int | None], function: str
    ) -> list[Any]:
        """The calls, each node's followed by ``WAIT 1 <replication_timeout_ms>`` on its connection; the
        replica count of every call that appended goes to ``acks``."""
        what = f"appending to {stream_prefix!r}"
        with scripts.translate_redis_errors(what):
            pairs = run_functions_replicated(self.client, function, packed, 1, self.replication_timeout_ms)
        for reply, acked in pairs:
            if isinstance(reply, Exception):
                raise scripts.translate_reply_error(what, reply) from reply
            if reply[0] in _OK:
                acks.append(acked)
        return [reply for reply, _ in pairs]

    @staticmethod
    def _record(
        target: _Target,
        call: _Call,
        ids: Sequence[Any],
        events: list[_Event],
        results: list[SendResult | None],
    ) -> None:
        version = target.route.version
        texts = [i.decode() for i in ids] if ids and type(ids[0]) is bytes else [_text(i) for i in ids]
        new, fields = object.__new__, _RESULT_FIELDS
        set_stream_key, set_entry_id, set_event_id, set_version, set_shard, set_duplicate = fields
        position = 0
        for index, indices in call:
            key, shard = target.keys[index], target.shards[index]
            for i in indices:
                # _result, inlined: a batch makes one per entry
                result = new(SendResult)
                set_stream_key(result, key)
                set_entry_id(result, texts[position])
                set_event_id(result, events[i][0])
                set_version(result, version)
                set_shard(result, shard)
                set_duplicate(result, False)
                results[i] = result
                position += 1


# ---------------------------------------------------------------------------------------------- linger


class _Waiter:
    """One lingering send: its event and, once its window is flushed, its result or error."""

    __slots__ = ("done", "error", "event", "result", "stream_prefix")

    def __init__(self, stream_prefix: str, event: _Event) -> None:
        self.stream_prefix = stream_prefix
        self.event = event
        self.done = threading.Event()
        self.result: SendResult | None = None
        self.error: BaseException | None = None


class _Window:
    __slots__ = ("full", "waiters")

    def __init__(self) -> None:
        self.waiters: list[_Waiter] = []
        self.full = threading.Event()


class _Linger:
    """Gathers concurrent sends into windows; no thread of its own.

    The first sender of a window is its leader: it waits until the window is ``linger_s`` old (or holds
    ``max_entries_per_call`` events), closes it, sends its events through the batch path (one script
    call per stream prefix) and hands each sender its own outcome. The other senders of the window just
    wait for that. A window closed, the next sender opens a new one, whose leader lingers while the
    previous window is being sent. Errors are per sender: an unknown prefix fails only its own senders,
    a ``RoutingUnstable`` only the senders whose entries were not appended, and a
    ``DataPlaneUnavailable`` every sender of that prefix in the window (each outcome unknown).
    """

    def __init__(self, producer: Producer, linger_s: float) -> None:
        self._producer = producer
        self._linger_s = linger_s
        self._lock = threading.Lock()
        self._open: _Window | None = None

    def send(self, stream_prefix: str, event: _Event) -> SendResult:
        waiter = _Waiter(stream_prefix, event)
        with self._lock:
            window, leader = self._open, self._open is None
            if window is None:
                window = self._open = _Window()
            window.waiters.append(waiter)
            if len(window.waiters) >= self._producer.max_entries_per_call:
                self._open = None  # full: the next sender opens a new window
                window.full.set()
        if leader:
            window.full.wait(self._linger_s)
            with self._lock:
                if self._open is window:
                    self._open = None
            self._flush(window.waiters)
        else:
            waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        assert waiter.result is not None
        return waiter.result

    def _flush(self, waiters: list[_Waiter]) -> None:
        by_prefix: dict[str, list[_Waiter]] = {}
        for w in waiters:
            by_prefix.setdefault(w.stream_prefix, []).append(w)
        try:
            for stream_prefix, group in by_prefix.items():
                self._flush_prefix(stream_prefix, group)
        except BaseException as e:  # never leave a sender waiting forever
            for w in waiters:
                if not w.done.is_set():
                    w.error = e
            raise
        finally:
            for w in waiters:
                w.done.set()

    def _flush_prefix(self, stream_prefix: str, group: list[_Waiter]) -> None:
        results: list[SendResult | None] = [None] * len(group)
        error: ConsumersError | None = None
        acks: list[int | None] | None = [] if self._producer.durability == "replicated" else None
        try:
            self._producer._send_events(stream_prefix, [w.event for w in group], results, acks=acks)
        except ConsumersError as e:
            error = e
        if error is None and acks is not None and any(a is None or a < 1 for a in acks):
            for w, result in zip(group, results, strict=True):  # one window, one call: all or none
                w.error = NotReplicated(
                    f"appending to {stream_prefix!r}: appended, but no replica acknowledged it within "
                    f"{self._producer.replication_timeout_ms} ms",
                    results=[result],
                    replicas=0,
                )
                w.done.set()
            return
        for w, result in zip(group, results, strict=True):
            w.result, w.error = result, (error if result is None else None)
            w.done.set()


# ---------------------------------------------------------------------------------------------- encoding

_VERSION_4_MASK = ~((0xF000 << 64) | (0xC000 << 48))
_VERSION_4_BITS = (0x4000 << 64) | (0x8000 << 48)
# The same two, for 16 random bytes: byte 6's high nibble is the version (4), byte 8's two high bits the
# variant (10).
_ID_MASK = bytes(0x0F if i == 6 else 0x3F if i == 8 else 0xFF for i in range(16))
_ID_BITS = bytes(0x40 if i == 6 else 0x80 if i == 8 else 0 for i in range(16))
_JSON = JSON.encode()
_OCTET_STREAM = OCTET_STREAM.encode()
_POSITIVE = 0x7FFFFFFF
# The common event's body (coordinator/protocol/envelope.py, pack_body): a 32-character event_id, no
# headers ("{}"); the key's and the content type's lengths, then event_id, key, content type, payload.
_COMMON_BODY = b"32 %d %d 2\n%b%b%b{}%b"


def _check_durability(durability: Any) -> None:
    if durability not in DURABILITY_LEVELS:
        raise InvalidRequest(f"durability must be one of {DURABILITY_LEVELS}; got {durability!r}")


def _event_id() -> str:
    """``uuid.uuid4().hex`` without building a ``UUID``: 122 random bits, version 4, RFC 4122 variant."""
    return "%032x" % ((int.from_bytes(os.urandom(16)) & _VERSION_4_MASK) | _VERSION_4_BITS)


def _event_ids(count: int) -> str:
    """``count`` event ids (as :func:`_event_id` makes them) back to back, 32 hex digits each: one read of
    random bytes and one formatting for a whole batch."""
    random = int.from_bytes(os.urandom(16 * count))
    return (
        ((random & int.from_bytes(_ID_MASK * count)) | int.from_bytes(_ID_BITS * count))
        .to_bytes(16 * count)
        .hex()
    )


def _json_bytes(payload: Any) -> bytes:
    try:
        return dumps_json(payload).encode()
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"payload is not JSON-serializable: {e}") from e


def _encode(partition_key: Any, payload: Any, headers: Any, content_type: Any) -> _Event:
    """What ``encode_event`` makes, packed for ``produce.lua`` (but for the route's head). The common call
    (a ``str`` key, no headers, no content type) is encoded here directly; everything else goes through
    ``encode_event``. Both pack as :func:`coordinator.protocol.envelope.pack_body` does."""
    if type(partition_key) is str and headers is None and content_type is None:
        key = partition_key.encode()
        if type(payload) is bytes:
            data, kind = payload, _OCTET_STREAM
        else:
            data, kind = _json_bytes(payload), _JSON
        event_id = _event_id()
        body = _COMMON_BODY % (len(key), len(kind), event_id.encode(), key, kind, data)
        return (event_id, murmur2(key) & _POSITIVE, body)
    e = encode_event(partition_key, payload, headers, content_type)
    return (e.event_id, murmur2(e.partition_key) & _POSITIVE, e.body())


def _encode_items(items: Iterable[Any]) -> list[_Event]:
    """A batch's items as events, in order: :func:`_encode` of each, with the common item (``(str key,
    payload)``) encoded in this loop, its event id cut from one :func:`_event_ids` for the batch. A batch
    pays per entry only for its own bytes: the JSON, the key's hash and one formatting."""
    items = items if type(items) is list else list(items)
    ids = _event_ids(len(items)) if items else ""
    id_bytes = ids.encode()
    events: list[_Event] = []
    append = events.append
    for at, item in enumerate(items):
        if type(item) is tuple and len(item) == 2 and type(item[0]) is str:
            key, payload = item[0].encode(), item[1]
            if type(payload) is bytes:
                data, kind = payload, _OCTET_STREAM
            else:
                data, kind = _json_bytes(payload), _JSON
            a = 32 * at
            body = _COMMON_BODY % (len(key), len(kind), id_bytes[a : a + 32], key, kind, data)
            append((ids[a : a + 32], murmur2(key) & _POSITIVE, body))
        else:
            append(_encode_item(item))
    return events


def _encode_item(item: Sequence[Any]) -> _Event:
    if not isinstance(item, tuple | list) or len(item) not in (2, 3):
        raise InvalidRequest("batch items are (key, payload) or (key, payload, headers) tuples")
    return _encode(item[0], item[1], item[2] if len(item) == 3 else None, None)


# SendResult's fields' slot setters, in its fields' order: a batch makes one result per entry, and the
# frozen dataclass's __init__ (object.__setattr__ per field) costs about three times these.
_RESULT_FIELDS = tuple(getattr(SendResult, f.name).__set__ for f in dataclasses.fields(SendResult))


def _result(stream_key: str, entry_id: str, event_id: str, routing_version: int, shard: Shard) -> SendResult:
    """``SendResult(...)`` of these, made as :meth:`Producer._record` makes one."""
    set_stream_key, set_entry_id, set_event_id, set_version, set_shard, set_duplicate = _RESULT_FIELDS
    result = object.__new__(SendResult)
    set_stream_key(result, stream_key)
    set_entry_id(result, entry_id)
    set_event_id(result, event_id)
    set_version(result, routing_version)
    set_shard(result, shard)
    set_duplicate(result, False)
    return result


def _record_duplicates(
    stream_prefix: str, call: _Call, duplicates: Sequence[Any], results: list[SendResult | None]
) -> None:
    """The entries of an ``idempotent_produce`` call that appended nothing (their key was found):
    ``duplicates`` is ``[position, record, ...]`` (position 1-based in the call's order), each result
    the first append's (idempotent_produce.lua's header)."""
    order = [i for _, indices in call for i in indices]
    for at in range(0, len(duplicates), 2):
        version, index, entry_id, event_id = idempotency.parse_record(duplicates[at + 1])
        shard = Shard(version=version, index=index)
        results[order[int(duplicates[at]) - 1]] = SendResult(
            stream_key=stream_key(stream_prefix, shard),
            entry_id=entry_id,
            event_id=event_id,
            routing_version=version,
            shard=shard,
            duplicate=True,
        )


def _idempotency_keys(keys: Any, count: int) -> list[bytes | None]:
    """``send_batch``'s ``idempotency_keys``: one per item, each ``None`` or a key."""
    if isinstance(keys, str | bytes) or not isinstance(keys, Sequence) or len(keys) != count:
        raise InvalidRequest(
            f"idempotency_keys must be a sequence of one key (or None) per item: {count} items",
            field="idempotency_keys",
        )
    return [None if key is None else idempotency.idempotency_key(key) for key in keys]


def _unstable(stream_prefix: str, max_retries: int, *, sent: int, total: int) -> RoutingUnstable:
    return RoutingUnstable(
        f"stream prefix {stream_prefix!r}: the route changed under {max_retries + 1} attempts in a row; "
        f"{total - sent} of {total} entries were not appended",
        stream_prefix=stream_prefix,
        sent=sent,
        not_sent=total - sent,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
