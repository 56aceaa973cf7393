"""A group's dead letters, seen and handled by operators: list, inspect, replay, purge (docs/protocol.md
section 14).

:class:`DeadLetters` is composed by :class:`coordinator.store.redis_store.MetadataStore`, with its Redis
client, its :class:`~coordinator.store.reading.Reader` and its operator scripts.

Theory of operation
-------------------
Listeners that opt in with ``dead_letter=True`` give up on an entry after ``max_deliveries``: the data
plane's fenced ``dead_letter.lua`` copies it to ``rsc:{P}:dlq:<G>`` (a stream under the prefix's hash
tag, capped at about 100,000 entries) and acks it, in one function. A dead letter holds every field of
the source entry, in order, followed by ``dlq_source_shard``, ``dlq_source_id``, ``dlq_deliveries``,
``dlq_error``, ``dlq_member_id``, ``dlq_at_ms`` and ``dlq_mac``.

Trust: a member's Redis user may ``XADD`` to the dead-letter streams (the function runs as it), so not
every entry there is a dead letter. ``dlq_mac`` is the MAC the function computes with keys only the
coordinator holds (rsc_redis/dead_letter_mac.py, coordinator/store/functions.py); every view carries
its ``verdict`` (``SIGNED``, ``UNSIGNED``: no MAC, written before signing or by hand; ``FORGED``: a MAC
that does not verify), and a replay refuses, changing nothing, any dead letter that is not ``SIGNED``
(``DEAD_LETTER_NOT_VERIFIED``), but for ``UNSIGNED`` ones the operator accepts explicitly
(``accept_unsigned``: the dead letters written before the upgrade that signs them).

Replay puts the original event back in front of consumers: the store routes each dead letter's
``partition_key`` with the producer's partitioner over the ACTIVE version (Lua has no murmur2), and
``replay_dead_letter.lua`` checks that route against the ``route`` field, appends the envelope fields
(``event_id`` kept; ``routing_version`` and ``produced_at_ms``, Redis ``TIME``, set anew) and
deletes the dead letters, all in one script: a replay is never lost between the two streams, never
appended to a sealed version, and a refused one changes nothing. A route that changed meanwhile is
re-read and the batch routed again, a few times. The replayed entry reaches every group of the prefix:
the other groups, which handled it already, see an at-least-once duplicate with the same ``event_id``.
Dead letters are replayed in id order (the order they failed in), so entries of one key keep their
relative order.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol import envelope
from coordinator.protocol.errors import (
    ConcurrentUpdate,
    DeadLetterNotFound,
    DeadLetterNotVerified,
    GroupNotFound,
    MetadataCorrupt,
    StreamPrefixNotFound,
)
from coordinator.protocol.model import Shard, entry_id_key, require_int_in_range, validate_entry_ids
from coordinator.protocol.routing import shard_index
from rsc_redis import keys as rkeys
from rsc_redis.dead_letter_mac import FIELD as MAC_FIELD
from rsc_redis.dead_letter_mac import Verdict

from .functions import DataPlaneFunctions
from .operator_scripts import OperatorScripts, decode_fields, load_group
from .reading import Reader
from .replies import text
from .replies import translate_redis_errors as redis_errors

MAX_PAGE = 500
_BOOKKEEPING = {
    "dlq_source_shard": "source_shard",
    "dlq_source_id": "source_id",
    "dlq_deliveries": "deliveries",
    "dlq_error": "error",
    "dlq_member_id": "member_id",
    "dlq_at_ms": "at_ms",
}


# What a verdict means, for operators (the API's ``verdict_reason``, the operator pages).
VERDICT_REASONS = {
    Verdict.SIGNED: "written by the dead-letter function (its MAC verifies)",
    Verdict.UNSIGNED: (
        "unsigned: no MAC; written before dead letters were signed, or appended by hand (replayed only "
        "with accept_unsigned)"
    ),
    Verdict.FORGED: "refused: not written by the dead-letter function (its MAC does not verify)",
}


def dead_letter_view(entry_id: Any, raw: dict[Any, Any], verdict: Verdict) -> dict[str, Any]:
    """A dead letter for operators: its bookkeeping, the original event's id and key, the original
    fields (decoded for reading; ``decode_fields``) and whether the dead-letter function wrote it
    (``verdict``, ``verdict_reason``)."""
    source_id = raw.get(b"dlq_source_id", raw.get("dlq_source_id"))
    fields = decode_fields(raw.items(), source_id)  # the original entry's time, from its id
    view: dict[str, Any] = {"id": text(entry_id)}
    for name, key in _BOOKKEEPING.items():
        view[key] = fields.pop(name, None)
    fields.pop(MAC_FIELD, None)
    view["verdict"] = verdict.value
    view["verdict_reason"] = VERDICT_REASONS[verdict]
    for key in ("deliveries", "at_ms"):
        view[key] = _int_or_none(view[key])
    view["event_id"] = fields.get("event_id")
    view["partition_key"] = fields.get("partition_key")
    view["fields"] = fields
    return view


def _partition_key(raw: dict[Any, Any]) -> bytes:
    """A dead letter's partition key, from its packed envelope or its own field (b"" if neither)."""
    try:
        return bytes(envelope.fields_of(raw).get(b"partition_key", b""))
    except envelope.MalformedEnvelope:
        return b""


def _int_or_none(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _route(value: Any, stream_prefix: str) -> tuple[int, int]:
    if value is None:
        raise StreamPrefixNotFound(
            f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
        )
    parts = text(value).split()
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError) as e:
        raise MetadataCorrupt(f"malformed route field {text(value)!r} of {stream_prefix!r}") from e


def _not_found(consumer_group: str, ids: list[str]) -> DeadLetterNotFound:
    shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
    return DeadLetterNotFound(
        f"no such dead letter of group {consumer_group!r}: {shown}; nothing was changed", ids=ids
    )


class DeadLetters:
    """A group's dead letters: list, inspect, replay, purge."""

    # A replay routed with a route that changed under it is routed again, at most this many times in all.
    replay_attempts = 5

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        reader: Reader,
        scripts: OperatorScripts,
        functions: DataPlaneFunctions,
    ) -> None:
        self.client = client
        self.reader = reader
        self.scripts = scripts
        self.functions = functions

    def page(
        self, stream_prefix: str, consumer_group: str, *, after: str = "-", count: int = 50
    ) -> dict[str, Any]:
        """A page of the group's dead letters, oldest first, with ids strictly after ``after``."""
        if after != "-":
            validate_entry_ids([after], "after")
        require_int_in_range(count, "count", 1, MAX_PAGE)
        load_group(self.reader, stream_prefix, consumer_group)
        key = rkeys.dead_letter_key(stream_prefix, consumer_group)
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.xlen(key)
            pipe.xrange(key, "-" if after == "-" else f"({after}", "+", count=count)
            length, entries = pipe.execute()
        return {
            "stream_key": key,
            "length": int(length),
            "entries": [self._view(key, entry_id, raw) for entry_id, raw in entries],
        }

    def one(self, stream_prefix: str, consumer_group: str, dlq_id: str) -> dict[str, Any]:
        """One dead letter, or ``DEAD_LETTER_NOT_FOUND``."""
        (dlq_id,) = validate_entry_ids([dlq_id], "id")
        load_group(self.reader, stream_prefix, consumer_group)
        key = rkeys.dead_letter_key(stream_prefix, consumer_group)
        with redis_errors():
            entries = self.client.xrange(key, dlq_id, dlq_id)
        if not entries:
            raise _not_found(consumer_group, [dlq_id])
        entry_id, raw = entries[0]
        return self._view(key, entry_id, raw or {})

    def _view(self, key: str, entry_id: Any, raw: dict[Any, Any]) -> dict[str, Any]:
        return dead_letter_view(entry_id, raw, self.functions.verdict(key, raw))

    def replay(
        self, stream_prefix: str, consumer_group: str, ids: list[str], *, accept_unsigned: bool = False
    ) -> dict[str, Any]:
        """Append the listed dead letters' events to the ACTIVE version and delete them from the
        dead-letter stream, all or nothing (module docstring). ``DEAD_LETTER_NOT_FOUND`` (details
        ``ids``) if any is missing; ``DEAD_LETTER_NOT_VERIFIED`` (details ``refused``) if any was not
        written by the dead-letter function (``FORGED``), or is ``UNSIGNED`` and ``accept_unsigned`` is
        not set. Dead letters are immutable (ids are never reused), so what is verified here is what
        the script appends."""
        ids = sorted(validate_entry_ids(ids, "ids"), key=entry_id_key)
        active = load_group(self.reader, stream_prefix, consumer_group)[1].topology.active_version
        route: Any = f"{active.version} {active.shard_count}"  # the script re-checks it atomically
        meta, dlq = rkeys.meta_key(stream_prefix), rkeys.dead_letter_key(stream_prefix, consumer_group)
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for dlq_id in ids:
                pipe.xrange(dlq, dlq_id, dlq_id)
            rows = pipe.execute()
        missing = [dlq_id for dlq_id, row in zip(ids, rows, strict=True) if not row]
        if missing:
            raise _not_found(consumer_group, missing)
        self._require_verified(dlq, consumer_group, ids, rows, accept_unsigned)
        # Entries are immutable and ids never reused: the keys read here are the ones the script appends.
        keys = [_partition_key(row[0][1]) for row in rows]
        for _attempt in range(self.replay_attempts):
            version, count = _route(route, stream_prefix)
            shards = [Shard(version=version, index=shard_index(k, count)) for k in keys]
            args: list[str] = [consumer_group, str(version), str(count)]
            for dlq_id, shard in zip(ids, shards, strict=True):
                args += [dlq_id, str(shard.index)]
            streams = [rkeys.stream_key(stream_prefix, s) for s in shards]
            with redis_errors():
                reply = self.scripts["replay_dead_letter"](keys=[meta, dlq, *streams], args=args)
            status = text(reply[0])
            if status == "STALE_ROUTE":
                route = reply[1]
                continue
            self._raise_for_dead_letter_status(status, reply, stream_prefix, consumer_group)
            replayed = zip(ids, shards, reply[1], strict=True)
            return {
                "replayed": [
                    {"id": dlq_id, "shard": str(shard), "entry_id": text(entry_id)}
                    for dlq_id, shard, entry_id in replayed
                ]
            }
        raise ConcurrentUpdate(
            f"the route of stream prefix {stream_prefix!r} changed under {self.replay_attempts} replay "
            "attempts in a row; nothing was replayed"
        )

    def _require_verified(
        self, dlq: str, consumer_group: str, ids: list[str], rows: list[Any], accept_unsigned: bool
    ) -> None:
        refused = []
        for dlq_id, row in zip(ids, rows, strict=True):
            verdict = self.functions.verdict(dlq, row[0][1] or {})
            if verdict is Verdict.FORGED or (verdict is Verdict.UNSIGNED and not accept_unsigned):
                refused.append({"id": dlq_id, "verdict": verdict.value})
        if not refused:
            return
        shown = ", ".join(f"{r['id']} ({r['verdict']})" for r in refused[:10])
        more = ", ..." if len(refused) > 10 else ""
        forged = any(r["verdict"] == Verdict.FORGED.value for r in refused)
        raise DeadLetterNotVerified(
            f"dead letters of group {consumer_group!r} not written by the dead-letter function: "
            f"{shown}{more}; "
            + (
                "a FORGED one's MAC does not verify (appended by hand, e.g. with a member's Redis user); "
                if forged
                else ""
            )
            + "an UNSIGNED one has no MAC (written before dead letters were signed, or by hand): replay it "
            "with accept_unsigned once you have checked it. Nothing was replayed",
            refused=refused,
        )

    def purge(self, stream_prefix: str, consumer_group: str, ids: list[str] | None) -> dict[str, Any]:
        """Delete the listed dead letters (all or nothing: ``DEAD_LETTER_NOT_FOUND``), or every one of
        the group's when ``ids`` is None. Returns how many were deleted."""
        if ids is not None:
            ids = validate_entry_ids(ids, "ids")
        load_group(self.reader, stream_prefix, consumer_group)
        dlq = rkeys.dead_letter_key(stream_prefix, consumer_group)
        with redis_errors():
            reply = self.scripts["purge_dead_letters"](
                keys=[rkeys.meta_key(stream_prefix), dlq], args=[consumer_group, *(ids or ())]
            )
        self._raise_for_dead_letter_status(text(reply[0]), reply, stream_prefix, consumer_group)
        return {"purged": int(reply[1])}

    @staticmethod
    def _raise_for_dead_letter_status(
        status: str, reply: Any, stream_prefix: str, consumer_group: str
    ) -> None:
        if status == "OK":
            return
        if status == "NOT_FOUND":
            raise _not_found(consumer_group, [text(i) for i in reply[1]])
        if status == "NO_GROUP":
            raise GroupNotFound(
                f"group {consumer_group!r} does not exist on stream prefix {stream_prefix!r}",
                stream_prefix=stream_prefix,
                consumer_group=consumer_group,
            )
        if status == "NO_ROUTE":
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
            )
        if status == "NO_STREAM":
            raise MetadataCorrupt(
                f"the active version's stream {text(reply[1])} of {stream_prefix!r} is missing; nothing "
                "was replayed"
            )
        raise MetadataCorrupt(f"unexpected reply {status!r} from a dead-letter script")
