"""The Redis metadata store: runs protocol commands against ``rsc:{P}:meta`` atomically.

Theory of operation
-------------------
The coordinator keeps no state between requests; every command is

1. *fast path* (heartbeats only): ``fast_heartbeat.lua`` applies the per-member heartbeat floor, then
   renews a steady member's lease in one round trip and returns its cached response, or says "not
   steady";
2. *full path* (committing.py): ``load.lua`` reads the documents the command needs and Redis's clock,
   the pure core (:func:`coordinator.protocol.commands.apply`) decides, and ``commit.lua`` writes the
   changed documents and derived fields only if none of the loaded documents changed meanwhile
   (compare-and-set on their revisions). On a conflict the command is re-run on fresh state, with
   jittered backoff.

Two coordinators racing therefore never lose an update: one commit wins, the other re-decides on the
winner's state. A rejected command (the core raises) writes nothing. Stream keys and Redis consumer
groups are created before the commit that makes them visible (idempotently), so a member never gets a
shard whose stream does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import (
    ChangeShardCount,
    CreateGroup,
    DeleteGroup,
    MemberHeartbeat,
    MemberHeartbeats,
    SetMaxConcurrency,
)
from coordinator.protocol.describe import (
    HeartbeatResponse,
    describe_group,
    migration_fields,
    retention_view,
    topology_view,
)
from coordinator.protocol.errors import (
    CoordinatorError,
    GroupNotFound,
    HeartbeatTooFrequent,
    InvalidRequest,
    MetadataCorrupt,
    StreamPrefixNotFound,
)
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    MAX_ENTRY_IDS,
    GroupConfig,
    OrderingMode,
    PrefixState,
    RetentionPolicy,
    Shard,
    validate_identifier,
)
from rsc_redis import clients, lua
from rsc_redis import keys as rkeys
from rsc_redis.dead_letter_mac import MacKeys

from . import codec, instruments
from .backlog_actions import BacklogActions
from .backlog_reads import BacklogReads, PrefixSnapshot
from .batching import HeartbeatBatches
from .committing import Committer, Created
from .credential_limits import CredentialLimits
from .dead_letters import DeadLetters
from .functions import DataPlaneFunctions
from .operator_scripts import OperatorScripts
from .parked_reports import ParkedReports
from .reading import Loaded, Reader
from .replies import translate_redis_errors
from .retention import DEFAULT_MAX_STREAMS, DEFAULT_MAX_TRIM_PER_STREAM, Retention, RetentionReport
from .scaling import Scaling
from .static_membership import leases_to_read
from .ticking import StoreTickReport, Ticker
from .turns import Turns

log = logging.getLogger(__name__)
_LUA = Path(__file__).with_name

START_FROM = {"latest": "$", "earliest": "0"}


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


class MetadataStore:
    """All coordinator state operations. Thread-safe: it holds only a redis-py client (a pool).

    It answers heartbeats and the operators' commands, and composes the parts of docs/store.md ("The
    store's parts"): ``reader``, ``committer`` (the full path), ``backlog_reads``, ``backlog_actions``,
    ``dead_letter_ops``, ``retention`` and ``ticker``; the public operations of the last five are
    reached through the thin methods at the end of this class.

    ``functions`` loads the data plane's Redis Functions library and verifies dead letters
    (coordinator/store/functions.py); ``dead_letter_keys`` are its MAC keys, signing keys first (None:
    from the Django settings, on first use)."""

    def __init__(
        self, client: redis.Redis | RedisCluster, *, dead_letter_keys: Sequence[MacKeys] | None = None
    ) -> None:
        self.client = client
        self.functions = DataPlaneFunctions(client, dead_letter_keys)
        # One Redis, not a cluster (where the generation key lives in another slot than the prefix's
        # keys): fast_heartbeat can check the credentials generation in its script. Asked per heartbeat.
        self.checks_credentials_in_script = not clients.is_cluster(client)
        # The lease readers start with the lease-record rule (lease_record.lua).
        lease_rule = lua.lease_record_lua() + "\n"
        self._fast = clients.HotScript(client, lease_rule + _LUA("fast_heartbeat.lua").read_text())
        log_rule = lease_rule + codec.change_log_lua() + "\n"
        self.reader = Reader(client, client.register_script(log_rule + _LUA("load.lua").read_text()))
        # The full path (committing.py); a prefix's deletion is committed by the retention part.
        self.committer = Committer(
            client,
            self.reader,
            client.register_script(log_rule + _LUA("commit.lua").read_text()),
            Turns(client),
            commit_deletion=lambda command, rev, outcome: self.retention.commit_deletion(
                command, rev, outcome
            ),
        )
        # Full-path heartbeats of a group that queue behind another decision are decided together.
        self._heartbeats = HeartbeatBatches()
        # The parts (docs/store.md); the store's own operations they use are handed in as callables.
        scripts = OperatorScripts(client)
        self.scaling = Scaling(client, self.reader)  # autoscaling figures (docs/autoscaling.md)
        self.parked = ParkedReports(client)  # the keys members report parked (parked_reports.py)
        self.backlog_reads = BacklogReads(client, self.reader, self.scaling)
        self.backlog_actions = BacklogActions(
            client,
            self.reader,
            scripts,
            self.backlog_reads,
            execute=lambda command, groups: self.committer.execute(command, groups),
            describe_prefix=lambda prefix: self.describe_prefix(prefix),
        )
        self.dead_letter_ops = DeadLetters(client, self.reader, scripts, self.functions)
        # Joins per API credential: a rate and a cap on live members, across every API process.
        self.credential_limits = CredentialLimits(client)
        self.retention = Retention(
            client,
            self.reader,
            execute=lambda command, groups: self.committer.execute(command, groups),
            describe_prefix=lambda prefix: self.describe_prefix(prefix),
            stream_prefixes=lambda: self.stream_prefixes(),
        )
        self.ticker = Ticker(
            client,
            client.register_script(lease_rule + _LUA("tick_due.lua").read_text()),
            client.register_script(lease_rule + _LUA("sweep_lease_records.lua").read_text()),
            self.retention,
            execute=lambda command, groups: self.committer.execute(command, groups),
            stream_prefixes=lambda: self.stream_prefixes(),
            ensure_functions=lambda: self.functions.ensure_quietly("tick"),
        )

    @classmethod
    def from_url(
        cls, url: str, *, dead_letter_keys: Sequence[MacKeys] | None = None, **kwargs: Any
    ) -> MetadataStore:
        options: dict[str, Any] = {
            "socket_timeout": 5,
            "socket_connect_timeout": 2,
            "health_check_interval": 30,
        }
        options.update(kwargs)
        # redis+cluster:// -> a RedisCluster (docs/cluster.md); its default command retry after a
        # connection error is fine here: a re-sent commit is recognised by its txn token.
        return cls(clients.client_from_url(url, **options), dead_letter_keys=dead_letter_keys)

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

            response = self._heartbeats.decide(
                stream_prefix, consumer_group, hb, self.committer.deciding_on, decide
            )
            return codec.response_to_json(response, stream_prefix)

    def _decide_heartbeats(
        self, stream_prefix: str, consumer_group: str, heartbeats: list[Heartbeat]
    ) -> Sequence[HeartbeatResponse | CoordinatorError]:
        """One decision on full-path heartbeats of one group (batching.py): each heartbeat decides on its
        member's own lease only, so only those leases are read (every lease for a static member's join:
        static_membership.py)."""
        ids = leases_to_read(heartbeats)
        if len(heartbeats) == 1:
            hb = heartbeats[0]
            one = MemberHeartbeat(stream_prefix=stream_prefix, consumer_group=consumer_group, heartbeat=hb)
            outcome = self.committer.execute(one, [consumer_group], lease_of=ids)
            assert isinstance(outcome.result, HeartbeatResponse)
            return [outcome.result]
        many = MemberHeartbeats(
            stream_prefix=stream_prefix, consumer_group=consumer_group, heartbeats=tuple(heartbeats)
        )
        outcome = self.committer.execute(many, [consumer_group], lease_of=ids)
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
        value of ``rkeys.CREDENTIALS_GENERATION_KEY``; the script first checks it is still the value, in
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
            rkeys.meta_key(stream_prefix),
            rkeys.heartbeat_rate_key(stream_prefix, consumer_group, hb.member_id),
            rkeys.lease_records_key(stream_prefix),
            rkeys.lease_index_key(stream_prefix),
        ]
        args = [consumer_group, hb.member_id, hb.member_epoch, capacity, owned, client, owner, period, burst]
        if credentials_generation is not None:
            if not self.checks_credentials_in_script:
                raise ValueError("credentials_generation needs one Redis, not a cluster")
            keys.append(rkeys.CREDENTIALS_GENERATION_KEY)
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
        prefix, name, created = command.stream_prefix, command.consumer_group, Created()

        def before_commit(state: PrefixState) -> None:
            self.committer.create_consumer_groups(
                state, [state.groups[name]], START_FROM[start_from], created
            )
            # Indexed before the commit: a group the tick cannot see would never expire its members. An
            # index entry without metadata (the commit failed) is skipped by the tick and listings.
            self.client.sadd(rkeys.PREFIXES_KEY, prefix)

        try:
            outcome = self.committer.execute(command, [name], before_commit=before_commit)
            assert outcome.state is not None
            with translate_redis_errors():
                # Again after the commit: a deletion of the prefix that raced this creation may have
                # removed the index entry after the first SADD (delete_prefix re-adds it if the metadata
                # exists), and a losing creator's clean-up may have removed a consumer group this one
                # found already there (BUSYGROUP) just before our commit made it ours.
                self.client.sadd(rkeys.PREFIXES_KEY, prefix)
                self.committer.create_consumer_groups(
                    outcome.state, [outcome.state.groups[name]], START_FROM[start_from]
                )
        finally:
            self.committer.remove_unused(prefix, created)
        return self.describe_group(prefix, name)

    def delete_group(self, stream_prefix: str, consumer_group: str) -> None:
        """Forget the group: its metadata, then its Redis consumer groups (offsets and pending lists), so
        a group created again with the same name starts where its ``start_from`` says, then its dead
        letters and redeliver counters. Streams stay."""
        outcome = self.committer.execute(
            DeleteGroup(stream_prefix=stream_prefix, consumer_group=consumer_group), None
        )
        if outcome.state is None:
            return
        with translate_redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for version in outcome.state.topology.versions:
                for shard in version.shards():
                    pipe.xgroup_destroy(rkeys.stream_key(stream_prefix, shard), consumer_group)
            pipe.execute(raise_on_error=False)
            keys = (
                rkeys.dead_letter_key(stream_prefix, consumer_group),
                rkeys.redeliver_key(stream_prefix, consumer_group),
            )
            self.client.unlink(*keys)

    def unconsumed_totals(self, stream_prefix: str, consumer_group: str) -> dict[str, int]:
        """The group's ``lag`` (entries not yet delivered, counted from its positions: backlog_count.lua)
        and ``pending`` (delivered, not acknowledged), summed over the shards of the
        ACTIVE and DRAINING versions (its backlog rows). GROUP_NOT_FOUND when there is no such group."""
        return unconsumed_totals_of(self.backlog(stream_prefix, consumer_group))

    def set_max_concurrency(self, stream_prefix: str, consumer_group: str, value: int) -> dict[str, Any]:
        cmd = SetMaxConcurrency(
            stream_prefix=stream_prefix, consumer_group=consumer_group, max_concurrency=value
        )
        self.committer.execute(cmd, [consumer_group])
        return self.describe_group(stream_prefix, consumer_group)

    def change_shard_count(
        self, stream_prefix: str, shard_count: int, ordering: OrderingMode
    ) -> dict[str, Any]:
        command = ChangeShardCount(stream_prefix=stream_prefix, shard_count=shard_count, ordering=ordering)
        created = Created()

        def before_commit(state: PrefixState) -> None:
            # The new version's streams and consumer groups exist before any producer can route there.
            new = state.topology.active_version
            groups = list(state.groups.values())
            self.committer.create_consumer_groups(state, groups, "0", created, only_version=new.version)

        try:
            outcome = self.committer.execute(command, None, before_commit=before_commit)
        finally:
            # A losing change (MIGRATION_IN_PROGRESS after a rival's v2 won, say) leaves no streams of
            # its own shard count behind; nor does an attempt re-decided on a conflict.
            self.committer.remove_unused(stream_prefix, created)
        if outcome.state is not None:
            new = outcome.state.topology.active_version
            with translate_redis_errors():  # idempotent; see create_group
                self.committer.create_consumer_groups(
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
        self.backlog_reads.decorate_group_view(view, state, consumer_group, now_ms)
        live = [m.member_id for m in state.groups[consumer_group].live_members()]
        with translate_redis_errors():
            view["parked_keys"] = self.parked.for_group(stream_prefix, consumer_group, live)
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
        self.backlog_reads.decorate_prefix_view(view, state, now_ms)
        return view

    def stream_prefixes(self) -> list[str]:
        """The prefixes of the index ``rsc:prefixes``, sorted. An entry that is not a valid identifier
        (written by hand or by a foreign client: ``bad{x}``, ``a:b``, bytes that are not UTF-8) is
        skipped and reported in one ERROR line per call: every listing, tick and retention pass goes
        through here, and one bad entry must not stop them for every other prefix. It is not removed:
        an operator should see it and find out who wrote it (``SREM rsc:prefixes <entry>``)."""
        with translate_redis_errors():
            members = self.client.smembers(rkeys.PREFIXES_KEY)
        names = sorted(m.decode(errors="replace") if isinstance(m, bytes) else str(m) for m in members)
        valid = [n for n in names if IDENTIFIER_RE.fullmatch(n)]
        if len(valid) != len(names):
            bad = [n for n in names if n not in valid]
            log.error(
                "skipped %d invalid entr%s of the stream prefix index %s: %s (remove with SREM)",
                len(bad),
                "y" if len(bad) == 1 else "ies",
                rkeys.PREFIXES_KEY,
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

    # ------------------------------------------------------------------------------- the parts' operations

    def snapshot(self, stream_prefix: str) -> PrefixSnapshot | None:
        return self.backlog_reads.snapshot(stream_prefix)

    def backlog(self, stream_prefix: str, consumer_group: str) -> list[dict[str, Any]]:
        return self.backlog_reads.backlog(stream_prefix, consumer_group)

    def skip_entries(
        self,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        *,
        entry_ids: list[str] | None = None,
        older_than_ms: int | None = None,
        limit: int = MAX_ENTRY_IDS,
    ) -> dict[str, Any]:
        return self.backlog_actions.skip_entries(
            stream_prefix,
            consumer_group,
            shard,
            entry_ids=entry_ids,
            older_than_ms=older_than_ms,
            limit=limit,
        )

    def pending_entries(
        self,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        *,
        entry_ids: list[str] | None = None,
        older_than_ms: int | None = None,
        limit: int = MAX_ENTRY_IDS,
    ) -> dict[str, Any]:
        return self.backlog_actions.pending_entries(
            stream_prefix,
            consumer_group,
            shard,
            entry_ids=entry_ids,
            older_than_ms=older_than_ms,
            limit=limit,
        )

    def redeliver(self, stream_prefix: str, consumer_group: str, shard: str) -> dict[str, Any]:
        return self.backlog_actions.redeliver(stream_prefix, consumer_group, shard)

    def unconsumed_for_release(self, stream_prefix: str, consumer_group: str) -> int:
        return self.backlog_actions.unconsumed_for_release(stream_prefix, consumer_group)

    def release_drain(
        self, stream_prefix: str, consumer_group: str, *, confirm_unconsumed: int
    ) -> dict[str, Any]:
        return self.backlog_actions.release_drain(
            stream_prefix, consumer_group, confirm_unconsumed=confirm_unconsumed
        )

    def dead_letters(
        self, stream_prefix: str, consumer_group: str, *, after: str = "-", count: int = 50
    ) -> dict[str, Any]:
        return self.dead_letter_ops.page(stream_prefix, consumer_group, after=after, count=count)

    def dead_letter(self, stream_prefix: str, consumer_group: str, dlq_id: str) -> dict[str, Any]:
        return self.dead_letter_ops.one(stream_prefix, consumer_group, dlq_id)

    def replay_dead_letters(
        self, stream_prefix: str, consumer_group: str, ids: list[str], *, accept_unsigned: bool = False
    ) -> dict[str, Any]:
        return self.dead_letter_ops.replay(
            stream_prefix, consumer_group, ids, accept_unsigned=accept_unsigned
        )

    def purge_dead_letters(
        self, stream_prefix: str, consumer_group: str, ids: list[str] | None
    ) -> dict[str, Any]:
        return self.dead_letter_ops.purge(stream_prefix, consumer_group, ids)

    def set_retention(self, stream_prefix: str, policy: RetentionPolicy) -> dict[str, Any]:
        return self.retention.set_retention(stream_prefix, policy)

    def prefix_usage(self, stream_prefix: str) -> dict[str, Any]:
        return self.retention.prefix_usage(stream_prefix)

    def delete_prefix(self, stream_prefix: str, *, force: bool = False) -> dict[str, Any]:
        return self.retention.delete_prefix(stream_prefix, force=force)

    def retention_pass(
        self,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_trim_per_stream: int = DEFAULT_MAX_TRIM_PER_STREAM,
    ) -> list[RetentionReport]:
        return self.retention.retention_pass(max_streams=max_streams, max_trim_per_stream=max_trim_per_stream)

    def tick(self, retention_ms: int = 600_000, max_ended_members: int = 100) -> list[StoreTickReport]:
        return self.ticker.tick(retention_ms, max_ended_members)

    # ------------------------------------------------------------------------------------------ raw

    def raw_metadata(self, stream_prefix: str) -> dict[bytes, bytes]:
        """The metadata hash as stored (tests compare it byte for byte)."""
        with translate_redis_errors():
            return dict(self.client.hgetall(rkeys.meta_key(stream_prefix)))

    # ------------------------------------------------------------------------------------------ core

    def _read(self, stream_prefix: str, groups: list[str] | None) -> tuple[int, PrefixState | None]:
        return self.reader.read(stream_prefix, groups)

    def _load(
        self, stream_prefix: str, groups: list[str] | None, lease_of: str | Collection[str] | None = None
    ) -> Loaded:
        return self.reader.load(stream_prefix, groups, lease_of)


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
