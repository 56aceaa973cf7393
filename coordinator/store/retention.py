"""Retention: trimming what every group has finished with, deleting retired versions' streams and
deleting stream prefixes (docs/store.md, "Retention"; docs/protocol.md, retention).

Theory of operation
-------------------
Streams only grow unless something trims them. The retention pass (a Celery beat task of its own,
``coordinator.tasks.retention``, never part of the tick, so it can never slow lease expiry) visits, per
stream prefix, every stream of its non-retired versions and runs ``trim.lua`` on each: one atomic script
that reads the stream's consumer groups and trims below the oldest entry any of them still needs (its
oldest pending entry, or its first undelivered one). That is the ``acked`` mode, always on; the prefix's
opt-in caps (``max_age_ms``, ``max_len``) trim further, at the price of dropping unconsumed entries.
Each script call removes at most ``max_trim_per_stream`` entries (whole stream nodes first), so a stream
never trimmed before cannot block Redis for seconds; the next visits remove the rest.

A RETIRED version is no longer read by anyone the coordinator knows of; ``delete_retired.lua`` deletes
each of its streams once the grace period has passed *and* every consumer group on the stream has
nothing pending and nothing undelivered (checked in the same script). Its record stays in the topology.

Work per run is bounded: at most ``max_streams`` streams are visited, in a fixed order (prefix, then
shard), and ``rsc:retention:cursor`` remembers where the run stopped so the next continues there. Every
script decides on what it reads itself, so two passes at once are harmless (the second finds nothing).

Deleting a prefix is a core command (``DeletePrefix``) whose outcome state is ``None``: the store's
commit for it is ``delete_prefix.lua``, which deletes the metadata key, every stream, dead-letter
stream and redeliver counter of the prefix in one script, only if the topology revision is the one
decided on (and, unless forced, only if those streams are still empty).

The end of a version's life starts with the tick's drain observation (:meth:`observe_drained`, kept
here with the rest of the streams' life cycle): a draining shard on which a group has nothing pending
and nothing left to read. "Nothing left to read" is asked of the stream (no entry after the group's
last-delivered id), not answered by comparing that id with the stream's last-generated one: an opt-in
cap may have trimmed entries the group never read (a sealed stream only ages, so ``max_age_ms``
eventually trims all of it), and the group's last-delivered id then never reaches the last generated
one: the shard would never drain and the migration never complete.

:class:`Retention` is composed by :class:`coordinator.store.redis_store.MetadataStore`: its Redis client
and :class:`~coordinator.store.reading.Reader`, and the store's full path (``execute``), prefix view
(``describe_prefix``) and prefix index (``stream_prefixes``) as callables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import Command, DeletePrefix, Outcome, PrefixDeleted, SetRetention
from coordinator.protocol.errors import (
    CoordinatorError,
    InvalidRequest,
    StoreUnavailable,
    StreamPrefixNotEmpty,
    StreamPrefixNotFound,
)
from coordinator.protocol.model import (
    PrefixState,
    RetentionPolicy,
    RoutingVersion,
    Shard,
    Topology,
    VersionState,
    entry_id_key,
    validate_identifier,
)
from rsc_redis import clients
from rsc_redis import keys as rkeys
from rsc_redis.keys import RETENTION_CURSOR_KEY

from . import codec
from .reading import Reader
from .replies import text
from .replies import translate_redis_errors as _redis_errors

log = logging.getLogger(__name__)
_LUA = Path(__file__).with_name

DEFAULT_MAX_STREAMS = 2000
# Entries one trim call may remove (about 3 ms of Redis time): bounded work even on a stream that was
# never trimmed; the rest goes on the next visits.
DEFAULT_MAX_TRIM_PER_STREAM = 100_000
_PIPELINE_CHUNK = 50  # script calls per round trip: at most a few hundred ms of Redis time at once


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionReport:
    """What one retention pass did to one stream prefix."""

    stream_prefix: str
    streams_visited: int = 0
    # stream key -> entries trimmed from it (acked floor and caps together); streams with 0 are left out
    trimmed: Mapping[str, int] = field(default_factory=dict)
    # stream key -> the part of ``trimmed`` removed by the opt-in caps: entries a group may not have handled
    trimmed_by_caps: Mapping[str, int] = field(default_factory=dict)
    deleted_keys: tuple[str, ...] = ()  # streams of retired versions deleted
    waiting: tuple[str, ...] = ()  # why retired versions' streams are still kept
    error: CoordinatorError | None = None  # this prefix failed; the others were visited

    @property
    def changed(self) -> bool:
        return bool(self.trimmed or self.deleted_keys)


@dataclass(slots=True)
class _Progress:
    """A report being built (the frozen :class:`RetentionReport` is made from it at the end)."""

    stream_prefix: str
    streams_visited: int = 0
    trimmed: dict[str, int] = field(default_factory=dict)
    trimmed_by_caps: dict[str, int] = field(default_factory=dict)
    deleted_keys: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    error: CoordinatorError | None = None

    def report(self) -> RetentionReport:
        return RetentionReport(
            stream_prefix=self.stream_prefix,
            streams_visited=self.streams_visited,
            trimmed=dict(self.trimmed),
            trimmed_by_caps=dict(self.trimmed_by_caps),
            deleted_keys=tuple(self.deleted_keys),
            waiting=tuple(dict.fromkeys(self.waiting)),  # a prefix visited in two segments: once each
            error=self.error,
        )


@dataclass(frozen=True, slots=True)
class _Segment:
    """Part of the visiting order: the shards of ``stream_prefix`` after ``after`` and up to ``upto``."""

    stream_prefix: str
    after: Shard | None = None
    upto: Shard | None = None

    def covers(self, shard: Shard) -> bool:
        return (self.after is None or shard > self.after) and (self.upto is None or shard <= self.upto)


class Retention:
    """The streams' life cycle: drain observation, retention policy and pass, prefix deletion."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        reader: Reader,
        *,
        execute: Callable[[Command, list[str] | None], Any],
        describe_prefix: Callable[[str], dict[str, Any]],
        stream_prefixes: Callable[[], list[str]],
    ) -> None:
        self.client = client
        self.reader = reader
        self._execute = execute
        self.describe_prefix = describe_prefix
        self.stream_prefixes = stream_prefixes
        self._retention_scripts = {
            name: client.register_script(_LUA(f"{name}.lua").read_text())
            for name in ("trim", "delete_retired", "delete_prefix")
        }

    # ------------------------------------------------------------------------------------ drain

    def observe_drained(self, state: PrefixState) -> dict[str, list[Shard]]:
        """Shards of draining versions that a group has read to the end and acked (sealed: final)."""
        candidates = [
            (name, shard)
            for v in state.topology.draining_versions
            for shard in v.shards()
            for name, group in state.groups.items()
            if shard not in group.drained
        ]
        if not candidates:
            return {}
        prefix = state.topology.stream_prefix
        with _redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for _name, shard in candidates:
                pipe.xinfo_stream(rkeys.stream_key(prefix, shard))
                pipe.xinfo_groups(rkeys.stream_key(prefix, shard))
            replies = pipe.execute(raise_on_error=False)
        found: dict[str, list[Shard]] = {}
        behind: list[tuple[str, Shard, str]] = []  # nothing pending, last entry not delivered: look
        for k, (name, shard) in enumerate(candidates):
            stream_info, groups_info = replies[2 * k], replies[2 * k + 1]
            if isinstance(stream_info, Exception) or isinstance(groups_info, Exception):
                continue  # a missing stream is not evidence of anything
            delivered = _delivered_if_nothing_pending(name, groups_info)
            if delivered is None:
                continue
            if entry_id_key(delivered) >= entry_id_key(text(stream_info.get("last-generated-id", "0-0"))):
                found.setdefault(name, []).append(shard)
            else:
                behind.append((name, shard, delivered))
        if behind:
            # Sealed: whatever is after the last-delivered id now is all there will ever be.
            with _redis_errors():
                pipe = self.client.pipeline(transaction=False)
                for _name, shard, delivered in behind:
                    pipe.xrange(rkeys.stream_key(prefix, shard), f"({delivered}", "+", count=1)
                rest = pipe.execute(raise_on_error=False)
            for (name, shard, _delivered), entries in zip(behind, rest, strict=True):
                if not isinstance(entries, Exception) and not entries:
                    found.setdefault(name, []).append(shard)
        return found

    # ------------------------------------------------------------------------------------ policy

    def set_retention(self, stream_prefix: str, policy: RetentionPolicy) -> dict[str, Any]:
        """Set the prefix's retention policy (validated by the core: INVALID_REQUEST names the field)."""
        self._execute(SetRetention(stream_prefix=stream_prefix, policy=policy), [])
        return dict(self.describe_prefix(stream_prefix))

    # ------------------------------------------------------------------------------------ deletion

    def prefix_usage(self, stream_prefix: str) -> dict[str, Any]:
        """What deleting the prefix would remove: its groups, the entries of its streams and dead-letter
        streams (``unconsumed_entries``: everything still in them) and how many shard streams exist."""
        validate_identifier(stream_prefix, "stream_prefix")
        loaded = self.reader.load(stream_prefix, [])
        if loaded.state is None:
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
            )
        shard_keys = [rkeys.stream_key(stream_prefix, s) for s in _all_shards(loaded.state.topology)]
        dlq_keys = [rkeys.dead_letter_key(stream_prefix, g) for g in loaded.group_names]
        with _redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for key in shard_keys + dlq_keys:
                pipe.xlen(key)
            for key in shard_keys:
                pipe.exists(key)
            replies = pipe.execute()
        lengths, exists = (
            replies[: len(shard_keys) + len(dlq_keys)],
            replies[len(shard_keys) + len(dlq_keys) :],
        )
        return {
            "groups": sorted(loaded.group_names),
            "unconsumed_entries": sum(int(n) for n in lengths),
            "streams": sum(int(e) for e in exists),
        }

    def delete_prefix(self, stream_prefix: str, *, force: bool = False) -> dict[str, Any]:
        """Delete the prefix: metadata, every version's streams, dead letters, redeliver counters.

        Without ``force`` it is refused (STREAM_PREFIX_NOT_EMPTY, nothing changed) while the prefix has
        groups or any of its streams or dead-letter streams holds an entry; the script checks the
        entries again, atomically with the deletion, so an append that raced the check is not lost."""
        if not isinstance(force, bool):
            raise InvalidRequest("force must be true or false", field="force")
        usage = self.prefix_usage(stream_prefix)
        if not force and (usage["groups"] or usage["unconsumed_entries"]):
            raise _not_empty(stream_prefix, usage["groups"], usage["unconsumed_entries"])
        try:
            outcome = self._execute(DeletePrefix(stream_prefix=stream_prefix, force=force), None)
        except StreamPrefixNotEmpty as e:  # a group was created meanwhile
            e.details.setdefault("unconsumed_entries", usage["unconsumed_entries"])
            raise
        assert isinstance(outcome.result, PrefixDeleted)
        with _redis_errors():
            self.client.srem(rkeys.PREFIXES_KEY, stream_prefix)
            if self.client.exists(rkeys.meta_key(stream_prefix)):
                # Created again meanwhile (create_group indexes before and after its commit).
                self.client.sadd(rkeys.PREFIXES_KEY, stream_prefix)
        return {"deleted_keys": outcome.result.deleted_keys}

    def commit_deletion(self, command: Any, topology_rev: str, outcome: Outcome) -> Outcome | None:
        """The commit of a command whose outcome state is ``None``: ``delete_prefix.lua``. Returns the
        outcome (with the number of keys deleted), or ``None`` on a conflict (decide again)."""
        result = outcome.result
        assert isinstance(command, DeletePrefix) and isinstance(result, PrefixDeleted)
        prefix = command.stream_prefix
        streams = [rkeys.stream_key(prefix, s) for s in _all_shards(result.topology)]
        streams += [rkeys.dead_letter_key(prefix, g) for g in result.consumer_groups]
        others = [rkeys.redeliver_key(prefix, g) for g in result.consumer_groups]
        others += codec.commit_keys(prefix)[1:]  # the members' own renewals and both indexes
        others += [rkeys.once_key(prefix), rkeys.once_previous_key(prefix)]  # the producers' idempotency keys
        others.append(rkeys.parked_reports_key(prefix))  # the members' parked-key reports
        with _redis_errors():
            reply = self._retention_scripts["delete_prefix"](
                keys=[rkeys.meta_key(prefix), *streams, *others],
                args=[topology_rev, str(len(streams)), "0" if command.force else "1"],
            )
        status = int(reply[0])
        if status == -1:
            return None
        if status == 0:
            raise _not_empty(prefix, list(result.consumer_groups), int(reply[1]))
        return replace(outcome, result=replace(result, deleted_keys=int(reply[1])))

    # ------------------------------------------------------------------------------------ the pass

    def retention_pass(
        self,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_trim_per_stream: int = DEFAULT_MAX_TRIM_PER_STREAM,
    ) -> list[RetentionReport]:
        """Visit at most ``max_streams`` streams, continuing where the previous pass stopped: trim the
        streams of non-retired versions (at most ``max_trim_per_stream`` entries from each), delete the
        finished streams of retired versions. One report per stream prefix visited. A prefix that fails
        (unreadable metadata) is reported in its ``error`` and the others are visited;
        ``StoreUnavailable`` (Redis gone) ends the pass and raises, without moving the cursor."""
        for name, value in (("max_streams", max_streams), ("max_trim_per_stream", max_trim_per_stream)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequest(f"{name} must be a positive integer", field=name)
        prefixes = self.stream_prefixes()
        with _redis_errors():
            raw = self.client.get(RETENTION_CURSOR_KEY)
        budget = max_streams
        progress: dict[str, _Progress] = {}
        last: tuple[str, Shard] | None = None
        for segment in _visiting_order(prefixes, _parse_cursor(raw)):
            if budget <= 0:
                break
            p = progress.setdefault(segment.stream_prefix, _Progress(segment.stream_prefix))
            try:
                visited = self._retain_segment(segment, budget, max_trim_per_stream, p)
            except StoreUnavailable:
                raise  # Redis is gone: every other prefix would wait for its timeout too
            except CoordinatorError as e:
                log.warning("retention of stream prefix %r failed: %s", segment.stream_prefix, e)
                p.error = e
                continue
            budget -= len(visited)
            if visited:
                last = (segment.stream_prefix, visited[-1])
        if last is not None:
            with _redis_errors():
                self.client.set(RETENTION_CURSOR_KEY, f"{last[0]} {last[1]}")
        return [p.report() for p in progress.values() if p.streams_visited or p.error]

    def _retain_segment(
        self, segment: _Segment, budget: int, max_trim: int, progress: _Progress
    ) -> list[Shard]:
        """Trim or delete the streams of one segment, at most ``budget`` of them; returns those visited."""
        prefix = segment.stream_prefix
        loaded = self.reader.load(prefix, [])
        if loaded.state is None:
            return []  # deleted meanwhile, or an index entry without metadata
        topology: Topology = loaded.state.topology
        versions = {v.version: v for v in topology.versions}
        candidates = [s for s in _all_shards(topology) if segment.covers(s)]
        retired = [s for s in candidates if versions[s.version].state is VersionState.RETIRED]
        existing = self._existing(prefix, retired)
        visit = [
            s for s in candidates if versions[s.version].state is not VersionState.RETIRED or s in existing
        ]
        visit = visit[:budget]
        progress.streams_visited += len(visit)
        live = [s for s in visit if versions[s.version].state is not VersionState.RETIRED]
        self._trim(prefix, live, topology.retention, max_trim, progress)
        due, waiting = _split_by_grace(
            [s for s in visit if s in existing], versions, topology.retention, loaded.now_ms
        )
        progress.waiting += waiting
        self._delete_retired(prefix, due, progress)
        return visit

    def _existing(self, prefix: str, shards: list[Shard]) -> set[Shard]:
        """The retired shards whose stream still exists: one cheap EXISTS each, not counted as work."""
        if not shards:
            return set()
        with _redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                pipe.exists(rkeys.stream_key(prefix, shard))
            return {s for s, n in zip(shards, pipe.execute(), strict=True) if int(n)}

    def _trim(
        self, prefix: str, shards: list[Shard], policy: RetentionPolicy, max_trim: int, progress: _Progress
    ) -> None:
        args = ["" if policy.max_age_ms is None else str(policy.max_age_ms)]
        args.append("" if policy.max_len is None else str(policy.max_len))
        args.append(str(max_trim))
        keys = [rkeys.stream_key(prefix, s) for s in shards]
        for key, reply in zip(keys, self._run_each("trim", keys, args), strict=True):
            acked, capped = int(reply[0]), int(reply[1])
            if acked > 0 or capped > 0:
                progress.trimmed[key] = progress.trimmed.get(key, 0) + max(acked, 0) + capped
            if capped > 0:
                progress.trimmed_by_caps[key] = progress.trimmed_by_caps.get(key, 0) + capped
                log.warning(
                    "retention cap trimmed entries regardless of consumption: stream=%s entries=%d",
                    key,
                    capped,
                )

    def _delete_retired(self, prefix: str, shards: list[Shard], progress: _Progress) -> None:
        keys = [rkeys.stream_key(prefix, s) for s in shards]
        for shard, key, reply in zip(shards, keys, self._run_each("delete_retired", keys, []), strict=True):
            status = int(reply[0])
            if status == 1:
                progress.deleted_keys.append(key)
            elif status == 0:
                group, pending, delivered, last = (text(x) for x in reply[1:5])
                progress.waiting.append(
                    f"{shard}: group {group} has not finished with it ({pending} pending, last delivered "
                    f"{delivered}, last entry {last})"
                )

    def _run_each(self, script: str, keys: list[str], args: list[str]) -> Iterator[Any]:
        """Run one script per key, pipelined in chunks (each call is atomic on its own)."""
        run = self._retention_scripts[script]
        for start in range(0, len(keys), _PIPELINE_CHUNK):
            with _redis_errors():
                replies = clients.run_scripts(
                    self.client, run, [([key], args) for key in keys[start : start + _PIPELINE_CHUNK]]
                )
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise reply
            yield from replies


def _delivered_if_nothing_pending(name: str, groups_info: list[dict[Any, Any]]) -> str | None:
    """The consumer group ``name``'s last-delivered id if nothing is pending for it; None if something
    is, or if it has no consumer group on the stream."""
    for info in groups_info:
        if text(info.get("name", b"")) == name:
            if int(info.get("pending", 0)) != 0:
                return None
            return text(info.get("last-delivered-id", "0-0"))
    return None


def _all_shards(topology: Topology) -> list[Shard]:
    return [s for v in topology.versions for s in v.shards()]


def _split_by_grace(
    shards: list[Shard], versions: Mapping[int, RoutingVersion], policy: RetentionPolicy, now_ms: int
) -> tuple[list[Shard], list[str]]:
    """Retired shards whose grace period is over, and one waiting reason per version still in it."""
    due: list[Shard] = []
    waiting: dict[int, str] = {}
    for shard in shards:
        version = versions[shard.version]
        until = (version.retired_at_ms or 0) + policy.retired_grace_ms
        if until <= now_ms:
            due.append(shard)
        else:
            waiting[version.version] = (
                f"v{version.version}: retired, its streams are kept until the grace period ends at {until} "
                f"(in {until - now_ms} ms)"
            )
    return due, list(waiting.values())


def _visiting_order(prefixes: list[str], cursor: tuple[str, Shard] | None) -> list[_Segment]:
    """Every prefix once, starting right after the cursor and wrapping around to it."""
    ordered = sorted(prefixes)
    if cursor is None:
        return [_Segment(p) for p in ordered]
    at, shard = cursor
    head = [_Segment(at, after=shard)] if at in ordered else []
    tail = [_Segment(at, upto=shard)] if at in ordered else []
    later = [_Segment(p) for p in ordered if p > at]
    earlier = [_Segment(p) for p in ordered if p < at]
    return head + later + earlier + tail


def _parse_cursor(raw: Any) -> tuple[str, Shard] | None:
    """``"<prefix> <shard>"``; anything unreadable restarts from the beginning."""
    if raw is None:
        return None
    prefix, _, shard = text(raw).partition(" ")
    try:
        return prefix, Shard.parse(shard)
    except InvalidRequest:
        return None


def _not_empty(stream_prefix: str, groups: list[str], entries: int) -> StreamPrefixNotEmpty:
    reasons = []
    if groups:
        reasons.append(f"consumer groups {', '.join(groups)}")
    if entries:
        reasons.append(f"{entries} entries in its streams and dead-letter streams")
    return StreamPrefixNotEmpty(
        f"stream prefix {stream_prefix!r} still has {' and '.join(reasons)}: delete the groups first, or "
        "force the deletion (everything in it is lost)",
        stream_prefix=stream_prefix,
        consumer_groups=groups,
        unconsumed_entries=entries,
    )
