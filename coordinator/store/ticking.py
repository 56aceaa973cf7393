"""The tick: member expiry, garbage collection, drain detection and retirement, prefix by prefix
(docs/store.md, "The tick index").

:class:`Ticker` is composed by :class:`coordinator.store.redis_store.MetadataStore`, with its Redis
client, its ``tick_due.lua`` and its :class:`~coordinator.store.retention.Retention` (drain
observation); the store's full path (``execute``) and its prefix index (``stream_prefixes``) are handed
in as callables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import Command, Outcome, ReportDrained, Tick, TickReport
from coordinator.protocol.errors import CoordinatorError, GroupNotFound
from coordinator.protocol.model import VersionState
from rsc_redis import keys as rkeys

from . import instruments
from .replies import text, translate_redis_errors
from .retention import Retention

log = logging.getLogger(__name__)

# The tick reads every group at least this often, whatever the tick index says (Ticker.tick).
FULL_TICK_INTERVAL_S = 60.0
# Fields of the members' lease records one tick looks at per prefix (sweep_lease_records.lua).
SWEEP_BATCH = 200
# Index entries past their deadline tick_due.lua looks at per prefix; beyond, every group is read.
TICK_INDEX_LOOK = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreTickReport:
    stream_prefix: str
    expired: tuple[tuple[str, str], ...]
    collected: tuple[tuple[str, str], ...]
    drained: tuple[tuple[str, str], ...] = ()  # (group, shard) found drained by this tick
    retired_versions: tuple[int, ...] = ()
    error: CoordinatorError | None = None  # this prefix could not be ticked; the others were


class Ticker:
    """Ticks every stream prefix, each on its own (``tick``), or one (``tick_prefix``)."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        tick_due_script: Any,
        sweep_script: Any,
        retention: Retention,
        *,
        execute: Callable[[Command, list[str] | None], Outcome],
        stream_prefixes: Callable[[], list[str]],
        ensure_functions: Callable[[], object] = lambda: None,
    ) -> None:
        self.client = client
        # Loads the data plane's Redis Functions library where it is missing (a new, restarted or
        # flushed node): every tick, so members heal within one (coordinator/store/functions.py).
        self.ensure_functions = ensure_functions
        self.tick_due = tick_due_script  # tick_due.lua, with the lease-record rule in front
        self.sweep = sweep_script  # sweep_lease_records.lua, the same
        # Where each prefix's sweep of the members' lease records goes on from (HSCAN cursors).
        self.sweep_cursor: dict[str, bytes] = {}
        self.retention = retention
        self.execute = execute
        self.stream_prefixes = stream_prefixes
        # When this store last read every group of a prefix in a tick that succeeded (monotonic s).
        self.full_tick_at: dict[str, float] = {}

    def tick(self, retention_ms: int = 600_000, max_ended_members: int = 100) -> list[StoreTickReport]:
        """One tick over every stream prefix: expiry, garbage collection, drain detection, retirement.

        Prefixes are ticked independently: one that fails (unreadable metadata, a conflict storm) is
        reported in its ``StoreTickReport.error`` and does not hold back the others. Only failing to
        list the prefixes at all raises. First, the data plane's library is loaded where it is missing
        (a failure to load is logged, not raised)."""
        started = time.perf_counter()
        self.ensure_functions()
        reports = []
        prefixes = self.stream_prefixes()
        for gone in set(self.full_tick_at) - set(prefixes):
            self.full_tick_at.pop(gone, None)
        for prefix in prefixes:
            # Every FULL_TICK_INTERVAL_S (since the last one that succeeded) the tick reads every group
            # of the prefix whatever the index says: a group the index would wrongly pass over (a bug, a
            # hand-edited key) is late by about that much, never stranded.
            started_prefix = time.monotonic()
            last_full = self.full_tick_at.get(prefix)
            full = last_full is None or started_prefix - last_full >= FULL_TICK_INTERVAL_S
            try:
                report = self.tick_prefix(prefix, retention_ms, max_ended_members, full=full)
                if full:
                    self.full_tick_at[prefix] = started_prefix
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

    def sweep_lease_records(self, prefix: str) -> int:
        """Delete up to SWEEP_BATCH of the prefix's lease records that do not count (sweep_lease_records.lua),
        going on from where the last sweep of the prefix stopped; the number of invalid ones deleted
        (logged: no script writes one, so a member's Redis user did)."""
        keys = [rkeys.meta_key(prefix), rkeys.lease_records_key(prefix)]
        with translate_redis_errors():
            args = [self.sweep_cursor.get(prefix, b"0"), SWEEP_BATCH]
            cursor, invalid, _past = self.sweep(keys=keys, args=args)
        self.sweep_cursor[prefix] = cursor
        if int(invalid):
            log.warning(
                "deleted %d lease record(s) of prefix %r that no script wrote (unparsable, of no live member "
                "or its live epoch, or too far ahead): a client with the members' Redis user wrote them",
                int(invalid),
                prefix,
            )
        return int(invalid)

    def tick_prefix(
        self, prefix: str, retention_ms: int, max_ended_members: int, *, full: bool = True
    ) -> StoreTickReport | None:
        """Tick one prefix: every group if ``full``, else the groups ``tick_due.lua`` says are due.
        None if the prefix has no metadata."""
        tick = Tick(stream_prefix=prefix, retention_ms=retention_ms, max_ended_members=max_ended_members)
        if full:  # the sweep only bounds the hash's size (readers ignore what does not count): not every tick
            self.sweep_lease_records(prefix)
        groups: list[str] | None = None  # every group
        if not full:
            keys = [
                rkeys.meta_key(prefix),
                rkeys.lease_records_key(prefix),
                rkeys.lease_index_key(prefix),
                rkeys.schedule_index_key(prefix),
            ]
            with translate_redis_errors():
                _now, every, *due = self.tick_due(
                    keys=keys, args=[tick.retention_ms, tick.max_ended_members, TICK_INDEX_LOOK]
                )
            if int(every) == -1:
                return None  # no metadata
            if int(every) == 0:
                if not due:
                    return StoreTickReport(stream_prefix=prefix, expired=(), collected=())
                groups = sorted(map(text, due))
        outcome = self.execute(tick, groups)
        if outcome.state is None:
            return None
        assert isinstance(outcome.result, TickReport)
        report = outcome.result
        drained = self.retention.observe_drained(outcome.state)
        retired = list(report.retired_versions)
        for group, shards in drained.items():
            before = {v.version for v in outcome.state.topology.versions if v.state is VersionState.RETIRED}
            cmd = ReportDrained(stream_prefix=prefix, consumer_group=group, shards=frozenset(shards))
            try:
                after = self.execute(cmd, None).state
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
