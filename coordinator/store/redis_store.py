"""The Redis metadata store: runs protocol commands against ``rsc:{P}:meta`` atomically.

Theory of operation
-------------------
The coordinator keeps no state between requests; every command is

1. *fast path* (heartbeats only): ``fast_heartbeat.lua`` applies the per-member heartbeat floor, then
   renews a steady member's lease in one round trip and returns its cached response, or says "not
   steady";
2. *full path*: ``load.lua`` reads the documents the command needs and Redis's clock, the pure core
   (:func:`coordinator.protocol.commands.apply`) decides, and ``commit.lua`` writes the changed documents
   and derived fields only if none of the loaded documents changed meanwhile (compare-and-set on their
   revisions). On a conflict the command is re-run on fresh state, with jittered backoff.

Two coordinators racing therefore never lose an update: one commit wins, the other re-decides on the
winner's state. A rejected command (the core raises) writes nothing. A command whose outcome state is
``None`` for an existing prefix (``DeletePrefix``) commits by deleting the prefix's keys instead
(``delete_prefix.lua``, in ``retention.py``), under the same compare-and-set on the topology revision.
Stream keys and Redis consumer groups are created before the commit that makes them visible
(idempotently), so a member never gets a shard whose stream does not exist.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, islice
from operator import is_not
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import (
    ChangeShardCount,
    Command,
    CreateGroup,
    DeleteGroup,
    MemberHeartbeat,
    MemberHeartbeats,
    Outcome,
    ReportDrained,
    SetMaxConcurrency,
    Tick,
    TickReport,
    apply,
)
from coordinator.protocol.describe import (
    HeartbeatResponse,
    describe_group,
    migration_fields,
    retention_view,
    topology_view,
)
from coordinator.protocol.errors import (
    ConcurrentUpdate,
    CoordinatorError,
    GroupNotFound,
    HeartbeatTooFrequent,
    InvalidRequest,
    MetadataCorrupt,
    StreamPrefixNotFound,
)
from coordinator.protocol.group import Heartbeat, revocation_schedule_ms
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    EndReason,
    Group,
    GroupConfig,
    MemberState,
    OrderingMode,
    PrefixState,
    Shard,
    VersionState,
    validate_identifier,
)

from . import clients, codec, instruments
from .backlog import BacklogMixin
from .batching import HeartbeatBatches
from .dead_letters import DeadLetterMixin
from .replies import text, translate_redis_errors
from .retention import RetentionMixin
from .turns import Turns

log = logging.getLogger(__name__)
_LUA = Path(__file__).with_name

_V = TypeVar("_V")

START_FROM = {"latest": "$", "earliest": "0"}
# Decoded group documents a store keeps (MetadataStore._decoded): enough for the groups one API process
# serves at once; a 1,000-member group takes a few MB decoded.
DECODED_GROUPS_KEPT = 64
# The tick reads every group at least this often, whatever the tick index says (MetadataStore.tick).
FULL_TICK_INTERVAL_S = 60.0
# Index entries past their deadline tick_due.lua looks at per prefix; beyond, every group is read.
TICK_INDEX_LOOK = 1000


@dataclass(frozen=True, slots=True)
class _Loaded:
    now_ms: int
    state: PrefixState | None
    topology_rev: str
    group_revs: dict[str, str]  # every group requested, "" when absent
    group_names: list[str]  # the topology's list (all groups, loaded or not)
    raw_topology: bytes = b""
    decoded: dict[str, codec.DecodedGroup] = field(default_factory=dict)  # what each group was read from
    members_revs: dict[str, str] = field(default_factory=dict)  # gm#:<group>, "" when absent
    record_revs: dict[str, Mapping[str, bytes]] = field(default_factory=dict)  # d#:<group>:<member>
    position: tuple[int, bytes] | None = None  # the change log's (seq, token) this read is at


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreTickReport:
    stream_prefix: str
    expired: tuple[tuple[str, str], ...]
    collected: tuple[tuple[str, str], ...]
    drained: tuple[tuple[str, str], ...] = ()  # (group, shard) found drained by this tick
    retired_versions: tuple[int, ...] = ()
    error: CoordinatorError | None = None  # this prefix could not be ticked; the others were


class CredentialsChanged(Exception):
    """fast_heartbeat's script found the API credentials generation moved on since the caller cached
    them; nothing was written. Not a client error: the caller authenticates afresh."""


@dataclass(frozen=True, slots=True)
class HeartbeatFloor:
    """At most ``burst`` heartbeats of one live member back to back, then one per ``period_ms``."""

    period_ms: int
    burst: int

    def describe(self) -> str:
        return f"one heartbeat per {self.period_ms} ms (bursts of {self.burst})"


# The longest a decision waits for another of this process on the same stream prefix (_deciding_on).
DECISION_WAIT_S = 1.0


class MetadataStore(BacklogMixin, DeadLetterMixin, RetentionMixin):
    """All coordinator state operations. Thread-safe: it holds only a redis-py client (a pool)."""

    max_attempts = 64

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        # One Redis, not a cluster (where the generation key lives in another slot than the prefix's
        # keys): fast_heartbeat can check the credentials generation in its script. Asked per heartbeat.
        self.checks_credentials_in_script = not clients.is_cluster(client)
        # The lease readers start with the lease-record rule (lease_record.lua).
        lease_rule = codec.lease_record_lua() + "\n"
        self._fast = clients.HotScript(client, lease_rule + _LUA("fast_heartbeat.lua").read_text())
        log_rule = lease_rule + codec.change_log_lua() + "\n"
        self._load_script = client.register_script(log_rule + _LUA("load.lua").read_text())
        self._commit_script = client.register_script(log_rule + _LUA("commit.lua").read_text())
        self._tick_due = client.register_script(lease_rule + _LUA("tick_due.lua").read_text())
        # When this store last read every group of a prefix in a tick that succeeded (monotonic s).
        self._full_tick_at: dict[str, float] = {}
        self._delete_if_unused = client.register_script(_LUA("delete_if_unused.lua").read_text())
        # The group documents this process last read or wrote, decoded: a document that has not changed
        # since (byte for byte) is not parsed again, only its leases are applied (codec.DecodedGroup).
        # Shared by the process's threads (entries are immutable); the oldest go beyond the bound.
        self._decoded: dict[tuple[str, str], codec.DecodedGroup] = {}
        # One decision at a time per stream prefix in this process (_deciding_on); made again in a
        # forked child, whose locks could have been copied held.
        self._deciding: dict[str, threading.RLock] = {}
        self._deciding_pid = os.getpid()
        # Full-path heartbeats of a group that queue behind another decision are decided together.
        self._heartbeats = HeartbeatBatches()
        # Across processes, decisions on a prefix take turns while they contend (turns.py).
        self._turns = Turns(client)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> MetadataStore:
        options: dict[str, Any] = {
            "socket_timeout": 5,
            "socket_connect_timeout": 2,
            "health_check_interval": 30,
        }
        options.update(kwargs)
        # redis+cluster:// -> a RedisCluster (docs/cluster.md); its default command retry after a
        # connection error is fine here: a re-sent commit is recognised by its txn token.
        return cls(clients.client_from_url(url, **options))

    # ------------------------------------------------------------------------------------------ members

    def heartbeat(
        self,
        stream_prefix: str,
        consumer_group: str,
        hb: Heartbeat,
        floor: HeartbeatFloor | None = None,
        *,
        fast_tried: bool = False,
    ) -> dict[str, Any]:
        """A member heartbeat; returns the JSON-ready response (docs/protocol.md section 3).

        ``floor``: the per-member heartbeat floor (HeartbeatTooFrequent, changing nothing, when a live
        member heartbeats faster); None: no floor. ``fast_tried``: :meth:`fast_heartbeat` already ran
        for this request (floor included) and found the member not steady: go straight to the full
        path (the API's pre-DRF fast path, coordinator/api/fastpath.py)."""
        with instruments.heartbeat_timer() as path:
            if not fast_tried:
                raw = self.fast_heartbeat(stream_prefix, consumer_group, hb, floor)
                if raw is not None:
                    path["path"] = "fast"
                    return dict(codec.loads(raw))
            hb = hb.validated()
            validate_identifier(stream_prefix, "stream_prefix")
            validate_identifier(consumer_group, "consumer_group")

            def decide(heartbeats: list[Heartbeat]) -> Sequence[HeartbeatResponse | CoordinatorError]:
                return self._decide_heartbeats(stream_prefix, consumer_group, heartbeats)

            response = self._heartbeats.decide(stream_prefix, consumer_group, hb, self._deciding_on, decide)
            return codec.response_to_json(response, stream_prefix)

    def _decide_heartbeats(
        self, stream_prefix: str, consumer_group: str, heartbeats: list[Heartbeat]
    ) -> Sequence[HeartbeatResponse | CoordinatorError]:
        """One decision on full-path heartbeats of one group (batching.py): each heartbeat decides on its
        member's own lease only, so only those leases are read."""
        ids = [hb.member_id for hb in heartbeats]
        if len(heartbeats) == 1:
            hb = heartbeats[0]
            one = MemberHeartbeat(stream_prefix=stream_prefix, consumer_group=consumer_group, heartbeat=hb)
            outcome = self._execute(one, [consumer_group], lease_of=ids)
            assert isinstance(outcome.result, HeartbeatResponse)
            return [outcome.result]
        many = MemberHeartbeats(
            stream_prefix=stream_prefix, consumer_group=consumer_group, heartbeats=tuple(heartbeats)
        )
        outcome = self._execute(many, [consumer_group], lease_of=ids)
        assert isinstance(outcome.result, tuple)
        return outcome.result

    def fast_heartbeat(
        self,
        stream_prefix: str,
        consumer_group: str,
        hb: Heartbeat,
        floor: HeartbeatFloor | None,
        credentials_generation: bytes | None = None,
    ) -> bytes | None:
        """One script call: the heartbeat floor, then the steady-state fast path. Returns the stored
        response (JSON bytes, as the full path would answer it) if the member is steady, None if only
        the full path can decide. Raises HeartbeatTooFrequent (nothing changed) past the floor.

        ``credentials_generation``: the request was authenticated from credentials cached under this
        value of ``codec.CREDENTIALS_GENERATION_KEY``; the script first checks it is still the value, in
        the same atomic step, and raises CredentialsChanged (nothing changed) if not. Only where
        :attr:`checks_credentials_in_script`."""
        validate_identifier(stream_prefix, "stream_prefix")
        validate_identifier(consumer_group, "consumer_group")
        hb = hb.validated()
        if hb.member_epoch <= 0 and floor is None:
            return None
        owned = "*" if hb.owned is None else codec.owned_argument(hb.owned)
        capacity = "" if hb.capacity is None else str(hb.capacity)
        client = "" if hb.client is None else codec.client_signature(hb.client)
        owner = "*" if hb.owner is None else codec.identity_digest(hb.owner)
        period, burst = (floor.period_ms, floor.burst) if floor is not None else (0, 1)
        keys = [
            codec.meta_key(stream_prefix),
            codec.heartbeat_rate_key(stream_prefix, consumer_group, hb.member_id),
            codec.lease_records_key(stream_prefix),
            codec.lease_index_key(stream_prefix),
        ]
        args = [consumer_group, hb.member_id, hb.member_epoch, capacity, owned, client, owner, period, burst]
        if credentials_generation is not None:
            if not self.checks_credentials_in_script:
                raise ValueError("credentials_generation needs one Redis, not a cluster")
            keys.append(codec.CREDENTIALS_GENERATION_KEY)
            args.append(credentials_generation)
        with translate_redis_errors():
            fast = self._fast(keys=keys, args=args)
        if int(fast[0]) == 1:
            return bytes(fast[1])
        if int(fast[0]) == 3:
            raise CredentialsChanged("API credentials changed since they were cached")
        if int(fast[0]) == 2:
            wait_ms = int(fast[1])
            raise HeartbeatTooFrequent(
                f"member {hb.member_id!r} heartbeats faster than {floor.describe() if floor else ''}: "
                f"retry in {wait_ms} ms (send heartbeats at the group's heartbeat_interval_ms)",
                member_id=hb.member_id,
                retry_after_ms=wait_ms,
            )
        return None

    def routing(self, stream_prefix: str) -> dict[str, Any]:
        state = self._read(stream_prefix, [])[1]
        if state is None:
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
            )
        return topology_view(state.topology)

    # ------------------------------------------------------------------------------------------ admin

    def create_group(self, command: CreateGroup, start_from: str = "latest") -> dict[str, Any]:
        if start_from not in START_FROM:
            raise InvalidRequest("start_from must be 'latest' or 'earliest'", field="start_from")
        prefix, name, created = command.stream_prefix, command.consumer_group, _Created()

        def before_commit(state: PrefixState) -> None:
            self._create_consumer_groups(state, [state.groups[name]], START_FROM[start_from], created)
            # Indexed before the commit: a group the tick cannot see would never expire its members. An
            # index entry without metadata (the commit failed) is skipped by the tick and listings.
            self.client.sadd(codec.PREFIXES_KEY, prefix)

        try:
            outcome = self._execute(command, [name], before_commit=before_commit)
            assert outcome.state is not None
            with translate_redis_errors():
                # Again after the commit: a deletion of the prefix that raced this creation may have
                # removed the index entry after the first SADD (delete_prefix re-adds it if the metadata
                # exists), and a losing creator's clean-up may have removed a consumer group this one
                # found already there (BUSYGROUP) just before our commit made it ours.
                self.client.sadd(codec.PREFIXES_KEY, prefix)
                self._create_consumer_groups(
                    outcome.state, [outcome.state.groups[name]], START_FROM[start_from]
                )
        finally:
            self._remove_unused(prefix, created)
        return self.describe_group(prefix, name)

    def delete_group(self, stream_prefix: str, consumer_group: str) -> None:
        """Forget the group: its metadata, then its Redis consumer groups (offsets and pending lists), so
        a group created again with the same name starts where its ``start_from`` says, then its dead
        letters and redeliver counters. Streams stay."""
        outcome = self._execute(DeleteGroup(stream_prefix=stream_prefix, consumer_group=consumer_group), None)
        if outcome.state is None:
            return
        with translate_redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for version in outcome.state.topology.versions:
                for shard in version.shards():
                    pipe.xgroup_destroy(codec.stream_key(stream_prefix, shard), consumer_group)
            pipe.execute(raise_on_error=False)
            keys = (
                codec.dead_letter_key(stream_prefix, consumer_group),
                codec.redeliver_key(stream_prefix, consumer_group),
            )
            self.client.unlink(*keys)

    def unconsumed_totals(self, stream_prefix: str, consumer_group: str) -> dict[str, int]:
        """The group's ``lag`` (entries not yet delivered; a shard whose lag Redis cannot tell counts
        its whole length) and ``pending`` (delivered, not acknowledged), summed over the shards of the
        ACTIVE and DRAINING versions (its backlog rows). GROUP_NOT_FOUND when there is no such group."""
        return unconsumed_totals_of(self.backlog(stream_prefix, consumer_group))

    def set_max_concurrency(self, stream_prefix: str, consumer_group: str, value: int) -> dict[str, Any]:
        cmd = SetMaxConcurrency(
            stream_prefix=stream_prefix, consumer_group=consumer_group, max_concurrency=value
        )
        self._execute(cmd, [consumer_group])
        return self.describe_group(stream_prefix, consumer_group)

    def change_shard_count(
        self, stream_prefix: str, shard_count: int, ordering: OrderingMode
    ) -> dict[str, Any]:
        command = ChangeShardCount(stream_prefix=stream_prefix, shard_count=shard_count, ordering=ordering)
        created = _Created()

        def before_commit(state: PrefixState) -> None:
            # The new version's streams and consumer groups exist before any producer can route there.
            new = state.topology.active_version
            groups = list(state.groups.values())
            self._create_consumer_groups(state, groups, "0", created, only_version=new.version)

        try:
            outcome = self._execute(command, None, before_commit=before_commit)
        finally:
            # A losing change (MIGRATION_IN_PROGRESS after a rival's v2 won, say) leaves no streams of
            # its own shard count behind; nor does an attempt re-decided on a conflict.
            self._remove_unused(stream_prefix, created)
        if outcome.state is not None:
            new = outcome.state.topology.active_version
            with translate_redis_errors():  # idempotent; see create_group
                self._create_consumer_groups(
                    outcome.state, list(outcome.state.groups.values()), "0", only_version=new.version
                )
        return self.describe_prefix(stream_prefix)

    def describe_group(self, stream_prefix: str, consumer_group: str) -> dict[str, Any]:
        validate_identifier(consumer_group, "consumer_group")
        now_ms, state = self._read(stream_prefix, None)
        if state is None or consumer_group not in state.groups:
            raise GroupNotFound(
                f"group {consumer_group!r} does not exist on stream prefix {stream_prefix!r}",
                stream_prefix=stream_prefix,
                consumer_group=consumer_group,
            )
        view = describe_group(state, consumer_group, now_ms)
        view["now_ms"] = now_ms
        self._decorate_group_view(view, state, consumer_group, now_ms)
        return view

    def describe_prefix(self, stream_prefix: str) -> dict[str, Any]:
        now_ms, state = self._read(stream_prefix, None)
        if state is None:
            raise StreamPrefixNotFound(
                f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
            )
        m = state.topology.migration
        view = {
            "topology": topology_view(state.topology),
            "migration": None
            if m is None
            else {
                **migration_fields(m),
                "active": m.active,
                "drained": {
                    name: sorted((str(s) for s in g.drained), key=Shard.parse)
                    for name, g in state.groups.items()
                },
            },
            "groups": sorted(state.groups),
            "retention": retention_view(state.topology.retention),
            "now_ms": now_ms,
        }
        self._decorate_prefix_view(view, state, now_ms)
        return view

    def stream_prefixes(self) -> list[str]:
        """The prefixes of the index ``rsc:prefixes``, sorted. An entry that is not a valid identifier
        (written by hand or by a foreign client: ``bad{x}``, ``a:b``, bytes that are not UTF-8) is
        skipped and reported in one ERROR line per call: every listing, tick and retention pass goes
        through here, and one bad entry must not stop them for every other prefix. It is not removed:
        an operator should see it and find out who wrote it (``SREM rsc:prefixes <entry>``)."""
        with translate_redis_errors():
            members = self.client.smembers(codec.PREFIXES_KEY)
        names = sorted(m.decode(errors="replace") if isinstance(m, bytes) else str(m) for m in members)
        valid = [n for n in names if IDENTIFIER_RE.fullmatch(n)]
        if len(valid) != len(names):
            bad = [n for n in names if n not in valid]
            log.error(
                "skipped %d invalid entr%s of the stream prefix index %s: %s (remove with SREM)",
                len(bad),
                "y" if len(bad) == 1 else "ies",
                codec.PREFIXES_KEY,
                ", ".join(repr(n) for n in bad),
            )
        return valid

    def list_groups(self) -> list[dict[str, Any]]:
        rows = []
        for prefix in self.stream_prefixes():
            try:
                now_ms, state = self._read(prefix, None)
            except MetadataCorrupt as e:
                # One unreadable prefix must not hide every other group from operators.
                log.error("stream prefix %r skipped in the group listing: %s", prefix, e)
                continue
            if state is None:
                continue
            for name in sorted(state.groups):
                view = describe_group(state, name, now_ms)
                rows.append(
                    {
                        "stream_prefix": prefix,
                        "consumer_group": name,
                        "state": view["state"],
                        "group_epoch": view["group_epoch"],
                        "assignment_epoch": view["assignment_epoch"],
                        "members": sum(1 for m in state.groups[name].live_members()),
                        "shard_count": state.topology.active_version.shard_count,
                        "active_version": state.topology.active_version.version,
                    }
                )
        return rows

    # ------------------------------------------------------------------------------------------ tick

    def tick(self, retention_ms: int = 600_000, max_ended_members: int = 100) -> list[StoreTickReport]:
        """One tick over every stream prefix: expiry, garbage collection, drain detection, retirement.

        Prefixes are ticked independently: one that fails (unreadable metadata, a conflict storm) is
        reported in its ``StoreTickReport.error`` and does not hold back the others. Only failing to
        list the prefixes at all raises."""
        started = time.perf_counter()
        reports = []
        prefixes = self.stream_prefixes()
        for gone in set(self._full_tick_at) - set(prefixes):
            self._full_tick_at.pop(gone, None)
        for prefix in prefixes:
            # Every FULL_TICK_INTERVAL_S (since the last one that succeeded) the tick reads every group
            # of the prefix whatever the index says: a group the index would wrongly pass over (a bug, a
            # hand-edited key) is late by about that much, never stranded.
            started_prefix = time.monotonic()
            last_full = self._full_tick_at.get(prefix)
            full = last_full is None or started_prefix - last_full >= FULL_TICK_INTERVAL_S
            try:
                report = self._tick_prefix(prefix, retention_ms, max_ended_members, full=full)
                if full:
                    self._full_tick_at[prefix] = started_prefix
            except CoordinatorError as e:
                log.warning("tick of stream prefix %r failed: %s", prefix, e)
                report = StoreTickReport(stream_prefix=prefix, expired=(), collected=(), error=e)
            if report is not None:
                reports.append(report)
        expired = sum(len(r.expired) for r in reports)
        instruments.count(
            self.client, tick_runs=1, tick_seconds=time.perf_counter() - started, members_expired=expired
        )
        return reports

    def _tick_prefix(
        self, prefix: str, retention_ms: int, max_ended_members: int, *, full: bool = True
    ) -> StoreTickReport | None:
        tick = Tick(stream_prefix=prefix, retention_ms=retention_ms, max_ended_members=max_ended_members)
        groups: list[str] | None = None  # every group
        if not full:
            keys = [
                codec.meta_key(prefix),
                codec.lease_records_key(prefix),
                codec.lease_index_key(prefix),
                codec.schedule_index_key(prefix),
            ]
            with translate_redis_errors():
                _now, every, *due = self._tick_due(
                    keys=keys, args=[tick.retention_ms, tick.max_ended_members, TICK_INDEX_LOOK]
                )
            if int(every) == -1:
                return None  # no metadata
            if int(every) == 0:
                if not due:
                    return StoreTickReport(stream_prefix=prefix, expired=(), collected=())
                groups = sorted(map(text, due))
        outcome = self._execute(tick, groups)
        if outcome.state is None:
            return None
        assert isinstance(outcome.result, TickReport)
        report = outcome.result
        drained = self._observe_drained(outcome.state)
        retired = list(report.retired_versions)
        for group, shards in drained.items():
            before = {v.version for v in outcome.state.topology.versions if v.state is VersionState.RETIRED}
            cmd = ReportDrained(stream_prefix=prefix, consumer_group=group, shards=frozenset(shards))
            try:
                after = self._execute(cmd, None).state
            except GroupNotFound:
                continue  # deleted meanwhile
            assert after is not None
            retired += [
                v.version
                for v in after.topology.versions
                if v.state is VersionState.RETIRED and v.version not in before
            ]
        return StoreTickReport(
            stream_prefix=prefix,
            expired=report.expired,
            collected=report.collected,
            drained=tuple((g, str(s)) for g, ss in sorted(drained.items()) for s in sorted(ss)),
            retired_versions=tuple(sorted(set(retired))),
        )

    # ------------------------------------------------------------------------------------------ raw

    def raw_metadata(self, stream_prefix: str) -> dict[bytes, bytes]:
        """The metadata hash as stored (tests compare it byte for byte)."""
        with translate_redis_errors():
            return dict(self.client.hgetall(codec.meta_key(stream_prefix)))

    # ------------------------------------------------------------------------------------------ core

    def _read(self, stream_prefix: str, groups: list[str] | None) -> tuple[int, PrefixState | None]:
        validate_identifier(stream_prefix, "stream_prefix")
        loaded = self._load(stream_prefix, groups)
        return loaded.now_ms, loaded.state

    def _load(
        self, stream_prefix: str, groups: list[str] | None, lease_of: str | Collection[str] | None = None
    ) -> _Loaded:
        """Read the topology and ``groups`` (None: every group), each group a delta of what this store
        knows of it when it can (docs/store.md, "Delta loads"). ``lease_of``: read only the lease of
        that member (or those members), and those of the members whose records changed: the others keep
        the leases this store last saw, which only heartbeats of those members may decide on; None:
        every member's lease."""
        known = {
            name: decoded
            for (prefix, name), decoded in list(self._decoded.items())
            if prefix == stream_prefix
            and (groups is None or name in groups)
            and decoded.format == codec.GROUP_FORMAT
            and decoded.position is not None
        }
        whose = "*" if lease_of is None else lease_of if isinstance(lease_of, str) else " ".join(lease_of)
        args: list[str | bytes | int] = [whose, len(known)]
        for name, decoded in known.items():
            assert decoded.position is not None
            args += [name, decoded.position[0], decoded.position[1]]
        args += ["*"] if groups is None else groups
        with translate_redis_errors():
            keys = [codec.meta_key(stream_prefix), codec.lease_records_key(stream_prefix)]
            now_ms, topo, trev, position, rows = self._load_script(keys=keys, args=args)
        if not topo:
            return _Loaded(int(now_ms), None, "", {}, [])
        at = None if not position else (int(position[0]), bytes(position[1]))
        try:
            return self._decode_loaded(stream_prefix, int(now_ms), topo, trev, at, rows, known)
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataCorrupt(
                f"the metadata of stream prefix {stream_prefix!r} is unreadable: {e!r}"
            ) from e

    def _remember(self, stream_prefix: str, name: str, decoded: codec.DecodedGroup) -> None:
        key = (stream_prefix, name)
        self._decoded.pop(key, None)  # re-inserted last: the dict's order is the order of use
        self._decoded[key] = decoded
        while len(self._decoded) > DECODED_GROUPS_KEPT:
            with contextlib.suppress(KeyError, StopIteration, RuntimeError):  # another thread's pop
                self._decoded.pop(next(iter(self._decoded)))

    def _decode_loaded(
        self,
        stream_prefix: str,
        now_ms: int,
        topo: bytes,
        trev: Any,
        position: tuple[int, bytes] | None,
        rows: list[Any],
        known: Mapping[str, codec.DecodedGroup],
    ) -> _Loaded:
        topology, names = codec.decode_topology(topo)
        loaded: dict[str, Group] = {}
        revs: dict[str, str] = {}
        decoded_groups: dict[str, codec.DecodedGroup] = {}
        members_revs: dict[str, str] = {}
        record_revs: dict[str, Mapping[str, bytes]] = {}
        for name, doc, rev, members_rev, whole, ids, docs, doc_revs, lease_ids, leases in rows:
            name = text(name)
            revs[name] = text(rev)
            members_revs[name] = text(members_rev)
            if not doc:
                continue
            members = [text(m) for m in ids]
            lease_map = dict(zip(map(text, lease_ids), map(int, leases), strict=True))
            records: Mapping[str, bytes]
            if int(whole):
                kept = self._decoded.get((stream_prefix, name))
                records = {m: r for m, r in zip(members, docs, strict=True) if r is not None}
                member_revs: Mapping[str, bytes] = dict(zip(members, doc_revs, strict=True))  # as stored
                decoded = codec.decode_group_cached(doc, records, lease_map, kept)
            else:
                # Only what changed since the position this store knew the group at: the rest is as
                # it knows it (the very one whose position it sent, whatever another thread kept since).
                kept = known[name]
                records = _patched(kept.records, dict(zip(members, docs, strict=True)))
                gone_or_rev = zip(members, docs, doc_revs, strict=True)
                member_revs = _patched(kept.revs, {m: None if d is None else r for m, d, r in gone_or_rev})
                # Every member's lease read (a description): every member compared; else only these.
                changed = None if len(lease_map) >= len(records) else {*members, *lease_map}
                decoded = codec.decode_group_cached(
                    doc, records, lease_map, kept, leases_complete=False, changed=changed
                )
            same_revs = decoded.revs is member_revs or decoded.revs == member_revs
            if not same_revs or decoded.position != position:
                decoded = replace(decoded, revs=member_revs, position=position)
            if decoded is not kept:
                self._remember(stream_prefix, name, decoded)
            loaded[name] = decoded.group
            decoded_groups[name] = decoded
            record_revs[name] = member_revs
        return _Loaded(
            int(now_ms),
            PrefixState(topology=topology, groups=loaded),
            text(trev),
            revs,
            names,
            topo,
            decoded_groups,
            members_revs,
            record_revs,
            position,
        )

    def _execute(
        self,
        command: Command,
        groups: list[str] | None,
        before_commit: Callable[[PrefixState], None] | None = None,
        lease_of: Collection[str] | None = None,
    ) -> Outcome:
        """Load, decide, commit; re-decide on conflict. ``groups=None`` loads every group. ``lease_of``:
        the command is those members' heartbeats, which decide on no other member's lease (_load)."""
        delay_s = 0.001
        prefix = command.stream_prefix
        for _attempt in range(self.max_attempts):
            with self._deciding_on(prefix), self._turns.turn(prefix, DECISION_WAIT_S):
                loaded = self._load(prefix, groups, lease_of)
                outcome = apply(loaded.state, command, loaded.now_ms)  # raises, having written nothing
                if outcome.state is None and loaded.state is not None:
                    # The prefix is gone (DeletePrefix): delete its keys if the topology is unchanged.
                    deleted = self._commit_deletion(command, loaded.topology_rev, outcome)
                    if deleted is not None:
                        return deleted
                elif outcome.state is None or outcome.state == loaded.state:
                    return outcome
                elif before_commit is not None:
                    with translate_redis_errors():
                        before_commit(outcome.state)
                if outcome.state is not None and self._commit(prefix, loaded, outcome.state):
                    return outcome
            instruments.count(self.client, cas_conflicts=1)
            self._turns.contended(prefix)
            time.sleep(random.uniform(0, delay_s))
            delay_s = min(delay_s * 2, 0.05)
        raise ConcurrentUpdate(
            f"gave up after {self.max_attempts} conflicting attempts on stream prefix "
            f"{command.stream_prefix!r}"
        )

    @contextlib.contextmanager
    def _deciding_on(self, stream_prefix: str) -> Iterator[None]:
        """One load-decide-commit at a time per stream prefix among this process's threads.

        Two decisions on one prefix that both change the group's header (joins, leaves, epoch bumps)
        cannot both commit: the second is decided again. Under Python's GIL the threads of one process
        do not decide in parallel anyway, so letting them race only spends CPU on attempts that lose
        (at 10,000 members, ~10 ms each) and, with enough of them, ends in CONCURRENT_UPDATE. Queued
        here, they lose only to other processes. The wait is bounded (DECISION_WAIT_S): past it (a
        decision stuck on an unresponsive Redis) the attempt goes ahead unqueued, as before, so a Redis
        stall does not add up one socket timeout per queued request. Steady heartbeats (the fast path)
        never queue here."""
        if self._deciding_pid != os.getpid():  # a forked child: its only thread is this one
            self._deciding, self._deciding_pid = {}, os.getpid()
        locks = self._deciding
        # setdefault is atomic: two threads asking for a new prefix's lock at once get the same one
        lock = locks.get(stream_prefix) or locks.setdefault(stream_prefix, threading.RLock())
        queued = lock.acquire(timeout=DECISION_WAIT_S)
        try:
            yield
        finally:
            if queued:
                lock.release()

    def _commit(self, stream_prefix: str, loaded: _Loaded, new: PrefixState) -> bool:
        old = loaded.state
        old_groups: dict[str, Group] = dict(old.groups) if old else {}
        checks: list[str | bytes] = ["t#", loaded.topology_rev]
        sets: dict[str, str | bytes] = {}
        deletes: list[str] = []
        lease_sets: list[str] = []
        expiry_checks: list[str] = []
        increments: list[str] = []
        schedule: list[str] = []

        written: dict[str, codec.DecodedGroup] = {}
        names = set(loaded.group_names) - (set(loaded.group_revs) - set(new.groups)) | set(new.groups)
        topo_doc = codec.encode_topology(new.topology, sorted(names))
        topology_changed = topo_doc.encode() != loaded.raw_topology
        if topology_changed:
            sets["t"] = topo_doc
            sets["t#"] = str(int(loaded.topology_rev or 0) + 1)
            route = codec.route_field(new.topology)
            if old is None or codec.route_field(old.topology) != route:
                sets["route"] = route

        for name in sorted(set(loaded.group_revs) | set(new.groups)):
            rev = loaded.group_revs.get(name, "")
            checks += [f"g#:{name}", rev]
            before, after = old_groups.get(name), new.groups.get(name)
            if before is after and not topology_changed:
                continue
            kept = loaded.decoded.get(name)
            touched = _touched(before, after)
            header = _header_of(kept, before, after)
            # Only members' records change (a heartbeat reconciling, a revocation clock): the commit
            # checks the header and the records it replaces, so commits of different members do not
            # conflict. Anything else is group-wide: it checks that no record changed since it loaded
            # (gm#, counted up by every member-only commit) and moves the header's revision on.
            member_only = (
                not topology_changed
                and before is not None
                and after is not None
                and kept is not None
                and kept.format == codec.GROUP_FORMAT
                and kept.raw == header
                and before.members.keys() == after.members.keys()
            )
            if not member_only:
                checks += [f"gm#:{name}", loaded.members_revs.get(name, "")]
            if after is not None:
                if kept is None or kept.raw != header:
                    sets[f"g:{name}"] = header
                if not member_only:
                    sets[f"g#:{name}"] = str(int(rev or 0) + 1)
                record_revs = loaded.record_revs.get(name, {})
                decoded, rewritten = self._record_changes(kept, before, after, header, record_revs, touched)
                for mid in rewritten:
                    sets[f"d:{name}:{mid}"] = decoded.records[mid]
                    sets[f"d#:{name}:{mid}"] = decoded.revs[mid]
                    if member_only:
                        checks += [f"d#:{name}:{mid}", record_revs.get(mid, b"")]
                        if f"gm#:{name}" not in increments:
                            increments.append(f"gm#:{name}")
                written[name] = decoded
                lease_sets += self._lease_changes(name, before, after, touched, deletes, expiry_checks)
            gone = sorted(m for m in touched if after is None or m not in after.members)
            deletes += [f"{k}:{name}:{m}" for m in gone for k in ("d", "d#")]
            if after is None:
                deletes += [f"g:{name}", f"g#:{name}", f"gm#:{name}", *(f"l:{name}:{m}" for m in gone)]
            moved = _targets_moved(before, after)
            schedule += self._schedule_changes(name, kept, before, after, touched, moved)
            # The group's own derived fields (ml:, lt:, ae:, ts:) follow the member set, the header and
            # the ended members: a member-only change that ends nobody leaves them as they are.
            same_group_fields = member_only and _ends_nobody(before, after, touched)
            self._diff_derived(
                old, before, new, after, topology_changed, touched | moved, sets, deletes, same_group_fields
            )

        args: list[str | bytes] = [uuid.uuid4().hex, str(loaded.now_ms)]
        for section in (
            checks,
            [x for kv in sets.items() for x in kv],
            deletes,
            lease_sets,
            expiry_checks,
            increments,
            schedule,
        ):
            args += [str(len(section)), *section]
        with translate_redis_errors():
            reply = self._commit_script(keys=codec.commit_keys(stream_prefix), args=args)
        if int(reply[0]) not in (1, 2):
            return False
        # What this process just wrote is what it will most likely read next (the next join, the next
        # heartbeat of the same group): its leases are applied from Redis when it is read. Its records
        # are exactly Redis's at this commit's position if no other commit came between the load and
        # this one; else at the load's position, plus this commit's records (which the log lists again
        # after it, so a delta from there reads them again: harmless).
        # A load without a position knows nothing of what came before this commit (an unlogged commit of
        # a coordinator from before the log may have), so neither does its commit.
        position = loaded.position
        if int(reply[0]) == 1:
            seq, previous = int(reply[1]), reply[2]
            if position is not None and seq == position[0] + 1 and previous == position[1]:
                position = (seq, args[0].encode() if isinstance(args[0], str) else args[0])
        else:
            position = None  # a retry of a commit whose reply was lost: where it landed is unknown
        for name, decoded in written.items():
            self._remember(stream_prefix, name, replace(decoded, position=position))
        return True

    @staticmethod
    def _record_changes(
        kept: codec.DecodedGroup | None,
        before: Group | None,
        after: Group,
        header: bytes,
        record_revs: Mapping[str, bytes],
        touched: set[str],
    ) -> tuple[codec.DecodedGroup, list[str]]:
        """``after`` as stored once committed, and the members whose records the commit must write: each
        member's record is the stored one unless the command touched the member and its record differs
        (then it is encoded afresh, at the next revision); every member's is encoded when the group was
        read in format 1 (its members were in the document) or is new."""
        stored = kept if kept is not None and kept.format == codec.GROUP_FORMAT else None
        group = codec.in_document_order(after, before if stored is not None else None, touched)
        rewritten: list[str] = []
        records: Mapping[str, bytes]
        revs: Mapping[str, bytes]
        heartbeats: Mapping[str, int]
        if stored is None:
            records, revs, heartbeats = {}, {}, {}
            for mid, member in group.members.items():
                records[mid], heartbeats[mid] = codec.encode_member(member), member.last_heartbeat_ms
                revs[mid] = str(int(record_revs.get(mid) or 0) + 1).encode()
                rewritten.append(mid)
        else:
            new_records: dict[str, bytes | None] = {}
            new_revs: dict[str, bytes | None] = {}
            new_heartbeats: dict[str, int | None] = {}
            for mid in sorted(touched):
                now = group.members.get(mid)
                if now is None:  # gone
                    new_records[mid] = new_revs[mid] = new_heartbeats[mid] = None
                    continue
                record = codec.encode_member(now)
                if stored.records.get(mid) == record:
                    continue  # the same bytes: not written again
                new_records[mid], new_heartbeats[mid] = record, now.last_heartbeat_ms
                new_revs[mid] = str(int(record_revs.get(mid) or 0) + 1).encode()
                rewritten.append(mid)
            records = _patched(stored.records, new_records)
            revs = _patched(record_revs, new_revs)
            heartbeats = _patched(stored.heartbeats, new_heartbeats)
        decoded = codec.DecodedGroup(
            raw=header,
            format=codec.GROUP_FORMAT,
            group=group,
            heartbeats=heartbeats,
            records=records,
            revs=revs,
        )
        return decoded, rewritten

    @staticmethod
    def _schedule_changes(
        name: str,
        kept: codec.DecodedGroup | None,
        before: Group | None,
        after: Group | None,
        touched: set[str],
        moved: set[str],
    ) -> list[str]:
        """The schedule index entries (tag, score or "") of one group that change. An entry depends on the
        member and its target only, so only members the command touched or whose target entry changed
        (``moved``) are recomputed (every member of a group read in format 1, which has no entries yet)."""
        indexed = before if kept is not None and kept.format == codec.GROUP_FORMAT else None
        if indexed is None or after is None:
            ids = set(after.members if after is not None else ()) | set(indexed.members if indexed else ())
        else:
            ids = touched | moved
        changes: list[str] = []
        for mid in sorted(ids):
            old_at = new_at = None
            if indexed is not None and (member := indexed.members.get(mid)) is not None:
                old_at = revocation_schedule_ms(indexed, member)
            if after is not None and (member := after.members.get(mid)) is not None:
                new_at = revocation_schedule_ms(after, member)
            if old_at != new_at:
                changes += [f"{name}:{mid}", "" if new_at is None else str(new_at)]
        return changes

    @staticmethod
    def _diff_derived(
        old: PrefixState | None,
        before: Group | None,
        new: PrefixState,
        after: Group | None,
        topology_changed: bool,
        touched: set[str],
        sets: dict[str, str | bytes],
        deletes: list[str],
        same_group_fields: bool = False,
    ) -> None:
        """Write the derived fields of one group that changed; only the members in ``touched`` (those
        the command changed, and those whose target it moved) are recomputed unless something
        group-wide that every member's fields show (config, drained shards, topology) changed. An epoch
        bump alone is not such a change: it rewrites ``ae:`` and ``ge:``, which the fast path writes
        into the response it answers, so the s: and r: of a member the bump left settled stay valid
        (docs/store.md).
        ``same_group_fields``: the group's own fields cannot have changed (a member-only commit of a
        group read in format 2, which has every one of them, ending nobody): they are not recomputed."""
        group_wide = (
            topology_changed
            or before is None
            or after is None
            or (before.config, before.drained) != (after.config, after.drained)
        )
        if not group_wide:
            ids = touched
        else:
            ids = set(before.members if before else ()) | set(after.members if after else ())
        old_fields: dict[str, str] = {}
        new_fields: dict[str, str] = {}
        if not same_group_fields:
            # ml: lists the member ids: written when the member set changed (the old value is needed
            # only to delete it with the group).
            ids_changed = before is None or after is None or before.members.keys() != after.members.keys()
            if before is not None:
                old_fields = codec.group_fields(before, with_schedule=False, with_members=after is None)
            new_fields = codec.group_fields(after, with_members=ids_changed) if after else {}
        for mid in ids:
            if before is not None and old is not None and mid in before.members:
                old_fields.update(
                    codec.member_fields(before, old.topology, before.members[mid], with_response=False)
                )
            if after is not None and mid in after.members:
                new_fields.update(
                    codec.member_fields(after, new.topology, after.members[mid], with_response=True)
                )
        # s: and r: are always rewritten (r:'s key marks "computed"; a group stored by the version before
        # s: has f: instead, so a recomputed member gets its s: whatever the diff says), and ts: (a group
        # whose ts: is new has its members indexed by commit.lua); lt: on every group-wide change and
        # epoch bump, so that metadata written before it existed gets it at the group's next bump.
        epochs_moved = (
            before is None
            or after is None
            or (before.group_epoch, before.assignment_epoch) != (after.group_epoch, after.assignment_epoch)
        )
        sets.update(
            {
                k: v
                for k, v in new_fields.items()
                if k.startswith(("s:", "r:", "ts:"))
                or ((group_wide or epochs_moved) and k.startswith("lt:"))
                or old_fields.get(k) != v
            }
        )
        deletes += [k for k in old_fields if k not in new_fields]
        # The fast path answers a settled member with the group's epochs (ae:, ge:): written whenever the
        # group's fields are and with every signature, so that a group stored by a version without ge:
        # has both once it has a signature; lt: too (a member's own renewal reads its TTL there, and
        # only metadata from before lt: falls back to the f: signature, which goes with this commit).
        if after is not None and (not same_group_fields or any(k.startswith("s:") for k in new_fields)):
            name = after.consumer_group
            sets[f"ae:{name}"], sets[f"ge:{name}"] = str(after.assignment_epoch), str(after.group_epoch)
            sets[f"lt:{name}"] = str(after.config.lease_ttl_ms)
        # A recomputed member without a signature now may still have one that a coordinator of another
        # version left (also when the group goes: nothing of it may stay behind); and the f: signature
        # of the version before s: goes with the first recomputation of its member.
        group = after or before
        if group is not None:
            name = group.consumer_group
            for mid in ids:
                if f"s:{name}:{mid}" not in new_fields and f"s:{name}:{mid}" not in old_fields:
                    deletes += [f"s:{name}:{mid}", f"r:{name}:{mid}"]
                deletes.append(f"f:{name}:{mid}")

    @staticmethod
    def _lease_changes(
        name: str,
        before: Group | None,
        after: Group,
        touched: set[str],
        deletes: list[str],
        expiry_checks: list[str],
    ) -> list[str]:
        """The leases of the members the command touched (the others keep theirs: the same lease)."""
        lease_sets: list[str] = []
        previous = before.members if before else {}
        for mid in sorted(touched):
            member = after.members.get(mid)
            if member is None:
                continue
            was = previous.get(mid)
            if was is None or member.lease_deadline_ms != was.lease_deadline_ms:
                lease_sets += [f"l:{name}:{mid}", str(member.lease_deadline_ms)]
            if (
                member.state is MemberState.EXPIRED
                and member.end_reason is EndReason.LEASE_EXPIRED
                and was is not None
                and was.state.is_live
            ):
                # Decided on a lease read at load time: still ended at commit time, or it was renewed.
                expiry_checks.append(f"l:{name}:{mid}")
        gone = sorted(mid for mid in touched if mid in previous and mid not in after.members)
        deletes += [f"l:{name}:{mid}" for mid in gone]
        return lease_sets

    def _create_consumer_groups(
        self,
        state: PrefixState,
        groups: list[Group],
        start_id: str,
        created: _Created | None = None,
        only_version: int | None = None,
    ) -> None:
        """XGROUP CREATE ... MKSTREAM on every shard of the non-retired versions (or ``only_version``);
        BUSYGROUP is fine. ``created`` collects what this call created (a consumer group whose CREATE
        answered OK, a stream that did not exist just before), so that :meth:`_remove_unused` can take
        back what the committed state does not use. One MULTI: EXISTS and CREATE of a key are not split
        by another client (all keys share the prefix's hash tag, so this also works on a Cluster)."""
        prefix = state.topology.stream_prefix
        pipe = self.client.pipeline(transaction=True)
        targets: list[tuple[str, str]] = []
        for v in state.topology.versions:
            if v.state is VersionState.RETIRED or (only_version is not None and v.version != only_version):
                continue
            for shard in v.shards():
                for group in groups:
                    key = codec.stream_key(prefix, shard)
                    pipe.exists(key)
                    pipe.xgroup_create(key, group.consumer_group, id=start_id, mkstream=True)
                    targets.append((key, group.consumer_group))
        replies = pipe.execute(raise_on_error=False) if targets else []
        for (key, name), existed, reply in zip(targets, replies[0::2], replies[1::2], strict=True):
            if isinstance(reply, Exception):
                if "BUSYGROUP" not in str(reply):
                    raise reply
                continue
            if created is not None:
                created.groups.add((key, name))
                if not existed:
                    created.streams.add(key)

    def _remove_unused(self, stream_prefix: str, created: _Created) -> None:
        """Best effort, once a create_group / change_shard_count call has won, lost or failed: destroy
        the consumer groups and delete the (still empty, group-less) streams its attempts created that
        the committed metadata does not use: a loser's debris, left otherwise. What is used is read
        after the outcome, so a winner's streams and groups are never touched; a rival that commits
        later re-creates what it needs after its commit (idempotently)."""
        if not created.groups and not created.streams:
            return
        try:
            state = self._read(stream_prefix, None)[1]
        except CoordinatorError as e:
            log.warning("could not check for debris of a lost race on %r: %s", stream_prefix, e)
            return
        used_keys = (
            set()
            if state is None
            else {codec.stream_key(stream_prefix, s) for v in state.topology.versions for s in v.shards()}
        )
        used_groups = set() if state is None else set(state.groups)
        groups = sorted((k, g) for k, g in created.groups if k not in used_keys or g not in used_groups)
        streams = sorted(k for k in created.streams if k not in used_keys)
        if not groups and not streams:
            return
        try:
            with translate_redis_errors():
                pipe = self.client.pipeline(transaction=False)
                for key, name in groups:
                    pipe.xgroup_destroy(key, name)
                pipe.execute(raise_on_error=False)
                deleted = sum(int(self._delete_if_unused(keys=[k])) for k in streams)
        except CoordinatorError as e:
            log.warning("debris of a lost race on %r not removed: %s", stream_prefix, e)
            return
        log.info(
            "removed debris of a lost race on %r: %d consumer group(s), %d stream(s)",
            stream_prefix,
            len(groups),
            deleted,
        )


_TOUCHED_EXACT_ABOVE = 64


def _touched(before: Group | None, after: Group | None) -> set[str]:
    """The members a command added, changed (another Member object) or removed; the core derives a new
    group with ``dataclasses.replace``, so every member it did not touch is the very same object."""
    if before is None or after is None:
        return {*(before.members if before else ()), *(after.members if after else ())}
    was, now = before.members, after.members
    if was.keys() == now.keys():
        # The same members (the usual case: a heartbeat, a bump): compared pairwise in C. Both in the
        # same order (the core replaces values in place), a pair is the same member; in another order
        # a pair of different members only reads as touched (never the reverse: a Member object is one
        # member's), so a result that large is computed again exactly.
        ids = set(compress(now, map(is_not, now.values(), was.values())))
        if len(ids) <= _TOUCHED_EXACT_ABOVE:
            return ids
    elif len(now) > len(was) and list(islice(now, len(was))) == list(was):
        # Members joined: the core appends them after the others, in the same order (checked), so the
        # others compare pairwise in C, exactly.
        ids = set(compress(now, map(is_not, now.values(), was.values())))
        return ids | set(islice(now, len(was), None))
    get = was.get
    ids = {m for m, member in now.items() if get(m) is not member}
    return ids | (was.keys() - now.keys())


def _targets_moved(before: Group | None, after: Group | None) -> set[str]:
    """The members whose target entry differs between the two groups: a bump may move the targets of
    members the command did not touch, and their derived fields and schedule follow their target. A
    target lists only the members with shards (model.Group.target): this is in proportion to the
    shards, not to the members."""
    if before is None or after is None or before.target is after.target:
        return set()
    had, has = before.target, after.target
    return {m for m in had.keys() | has.keys() if had.get(m) != has.get(m)}


def _ends_nobody(before: Group | None, after: Group | None, touched: set[str]) -> bool:
    """No member the command touched ended (or came back): the ended members a group's ts: field counts
    are as they were."""
    if before is None or after is None:
        return False
    was, now = before.members, after.members
    return all(m in was and m in now and was[m].ended_at_ms == now[m].ended_at_ms for m in touched)


def _header_of(kept: codec.DecodedGroup | None, before: Group | None, after: Group | None) -> bytes:
    """The group document (header) of ``after``: the stored one when nothing it holds changed (most
    heartbeats change members' records only), else encoded afresh."""
    if after is None:
        return b""
    if (
        kept is not None
        and before is not None
        and kept.format == codec.GROUP_FORMAT
        and after.target is before.target
        and (after.config, after.group_epoch, after.assignment_epoch, after.drained, after.created_at_ms)
        == (before.config, before.group_epoch, before.assignment_epoch, before.drained, before.created_at_ms)
    ):
        return kept.raw
    return codec.encode_group_header(after)


def _patched(kept: Mapping[str, _V], changes: Mapping[str, _V | None]) -> Mapping[str, _V]:
    """What a kept group maps its members to (records, revisions, last heartbeats), with ``changes``
    applied (None: the member is gone): ``kept`` itself when nothing changed. These maps are looked up
    and compared, never iterated for their order (the members' order comes from the documents:
    codec.in_document_order, codec.decode_group_cached), so an added member is simply added: keeping
    them in key order cost a sort of every member at every join."""
    if not changes:
        return kept
    out = dict(kept)
    for mid, value in changes.items():
        if value is None:
            out.pop(mid, None)
        else:
            out[mid] = value
    return out


@dataclass(slots=True)
class _Created:
    """What one create_group / change_shard_count call created in Redis before its commit(s)."""

    streams: set[str] = field(default_factory=set)  # stream keys
    groups: set[tuple[str, str]] = field(default_factory=set)  # (stream key, consumer group)


def unconsumed_totals_of(rows: list[dict[str, Any]]) -> dict[str, int]:
    """``{"lag", "pending"}`` summed over backlog rows (:meth:`MetadataStore.unconsumed_totals`)."""
    lag = sum(r["length"] if r["lag"] is None else r["lag"] for r in rows)
    return {"lag": int(lag), "pending": int(sum(r["pending"] for r in rows))}


def default_config_from_settings(settings: Any) -> GroupConfig:
    """Group defaults from Django settings (``RSC_*``), for groups created without explicit values."""
    return GroupConfig(
        lease_ttl_ms=settings.RSC_MEMBER_LEASE_TTL_MS,
        heartbeat_interval_ms=settings.RSC_HEARTBEAT_INTERVAL_MS,
        revocation_timeout_ms=settings.RSC_REVOCATION_TIMEOUT_MS,
    )
