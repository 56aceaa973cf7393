"""Backlog read models: what the figures of a group's shards say, for the backlog pages, the metrics
scrape (``snapshot``) and the describe views (docs/protocol.md section 14). The actions that change
entries are in ``backlog_actions.py``, dead letters in ``dead_letters.py``.

Theory of operation
-------------------
The metadata hash knows who owns a shard; only the stream knows how far a group got in it. The figures
therefore come from Redis per shard, in three pipelined round trips whatever the shard count: ``XINFO
GROUPS`` (pending count, last-delivered id) and ``XLEN`` for every shard; ``lag``, the entries not yet
delivered, counted from the group's position by ``backlog_count.lua`` (``Scaling.count``: the rule the
autoscaling figures use too; Redis's own ``lag`` turns nil or wrong after trims); then ``XPENDING - + n``
only for the shards that have pending entries (the oldest one's id, idle time, consumer, and the highest
delivery count among the oldest ``n``). Ages are Redis ``TIME`` (read with the metadata) minus the ms
part of the entry id: the clock the ids are made from, never this host's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.describe import shard_assignment
from coordinator.protocol.model import Group, PrefixState, Shard, entry_id_key
from coordinator.protocol.resharding import undrained_shards
from rsc_redis import keys as rkeys

from .operator_scripts import load_group
from .reading import Reader
from .replies import text
from .replies import translate_redis_errors as redis_errors
from .scaling import Scaling

PENDING_SAMPLE = 100  # the oldest pending entries read per shard for the backlog's max_deliveries


@dataclass(frozen=True, slots=True)
class PrefixSnapshot:
    now_ms: int
    state: PrefixState
    backlog: dict[str, list[dict[str, Any]]]  # group -> its backlog rows
    undrained: dict[str, tuple[Shard, ...]]  # group -> old shards it has yet to drain


@dataclass(frozen=True, slots=True, kw_only=True)
class _Figures:
    """One group on one shard, as Redis reports it."""

    length: int = 0
    lag: int | None = None  # None: no count yet (backlog_count.lua fills it)
    pending: int = 0
    last_delivered_id: str = ""  # "" when the Redis consumer group is missing
    oldest_pending_id: str | None = None
    oldest_pending_idle_ms: int | None = None
    oldest_pending_consumer: str | None = None
    max_deliveries: int = 0

    @property
    def unconsumed(self) -> int:
        """Entries the group has not finished: not yet delivered plus pending."""
        return (self.lag or 0) + self.pending

    def oldest_pending_age_ms(self, now_ms: int) -> int | None:
        if self.oldest_pending_id is None:
            return None
        return max(0, now_ms - entry_id_key(self.oldest_pending_id)[0])


def _group_info(reply: Any, consumer_group: str) -> dict[str, Any] | None:
    if isinstance(reply, Exception):
        return None  # no such stream
    for info in reply:
        if text(info.get("name", b"")) == consumer_group:
            return dict(info)
    return None


class BacklogReads:
    """The backlog figures of a store's groups, read from the streams with ``client``."""

    def __init__(self, client: redis.Redis | RedisCluster, reader: Reader, scaling: Scaling) -> None:
        self.client = client
        self.reader = reader
        self.scaling = scaling

    def figures(
        self,
        stream_prefix: str,
        pairs: list[tuple[str, Shard]],
        *,
        sample: int,
        extra: list[tuple[str, tuple[Any, ...]]] | None = None,
    ) -> tuple[dict[tuple[str, Shard], _Figures], list[Any]]:
        """Figures of each (group, shard), in three round trips: XINFO GROUPS + XLEN per shard (plus the
        ``extra`` commands, whose replies are returned), the undelivered count per shard
        (``backlog_count.lua``), then XPENDING - + ``sample`` per pair with pending entries (``sample=0``:
        not read)."""
        shards = sorted({s for _, s in pairs})
        keys = {s: rkeys.stream_key(stream_prefix, s) for s in shards}
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                pipe.xinfo_groups(keys[shard])
                pipe.xlen(keys[shard])
            for method, args in extra or []:
                getattr(pipe, method)(*args)
            replies = pipe.execute(raise_on_error=False)
        extra_replies = replies[2 * len(shards) :]
        at = {shard: 2 * k for k, shard in enumerate(shards)}
        counts = self.scaling.count(stream_prefix, pairs)
        base: dict[tuple[str, Shard], _Figures] = {}
        for name, shard in pairs:
            length = replies[at[shard] + 1]
            length = 0 if isinstance(length, Exception) else int(length)
            info = _group_info(replies[at[shard]], name)
            count = counts[(name, shard)]  # lag and pending read together, in one script
            base[(name, shard)] = _Figures(
                length=length,
                lag=count.undelivered,
                pending=count.pending,
                last_delivered_id="" if info is None else text(info.get("last-delivered-id", b"0-0")),
            )
        with_pending = [p for p in pairs if base[p].pending > 0] if sample > 0 else []
        if with_pending:
            with redis_errors():
                pipe = self.client.pipeline(transaction=False)
                for name, shard in with_pending:
                    pipe.xpending_range(keys[shard], name, "-", "+", sample)
                details = pipe.execute(raise_on_error=False)
            for pair, rows in zip(with_pending, details, strict=True):
                if isinstance(rows, Exception) or not rows:
                    continue  # acked or destroyed between the two round trips
                oldest = rows[0]
                base[pair] = _Figures(
                    length=base[pair].length,
                    lag=base[pair].lag,
                    pending=base[pair].pending,
                    last_delivered_id=base[pair].last_delivered_id,
                    oldest_pending_id=text(oldest["message_id"]),
                    oldest_pending_idle_ms=int(oldest["time_since_delivered"]),
                    oldest_pending_consumer=text(oldest["consumer"]),
                    max_deliveries=max(int(r["times_delivered"]) for r in rows),
                )
        return base, extra_replies

    def rows(
        self, state: PrefixState, consumer_group: str, now_ms: int, extra: list[tuple[str, tuple[Any, ...]]]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        prefix = state.topology.stream_prefix
        group = state.groups[consumer_group]
        versions = {v.version: v.state for v in state.topology.versions}
        shards = sorted(state.topology.live_shards())
        rd_key = rkeys.redeliver_key(prefix, consumer_group)
        figures, replies = self.figures(
            prefix,
            [(consumer_group, s) for s in shards],
            sample=PENDING_SAMPLE,
            extra=[("hgetall", (rd_key,)), *extra],
        )
        tokens = {} if isinstance(replies[0], Exception) else {text(k): v for k, v in replies[0].items()}
        owners = group.owners()
        rows = []
        for shard in shards:
            f = figures[(consumer_group, shard)]
            rows.append(
                {
                    "shard": str(shard),
                    "stream_key": rkeys.stream_key(prefix, shard),
                    "version_state": versions[shard.version].value,
                    "owner": owners.get(shard),
                    "assignment": shard_assignment(group, state.topology, shard, owners).value,
                    "length": f.length,
                    "lag": f.lag,
                    "pending": f.pending,
                    "last_delivered_id": f.last_delivered_id,
                    "oldest_pending_id": f.oldest_pending_id,
                    "oldest_pending_age_ms": f.oldest_pending_age_ms(now_ms),
                    "oldest_pending_idle_ms": f.oldest_pending_idle_ms,
                    "oldest_pending_consumer": f.oldest_pending_consumer,
                    "max_deliveries": f.max_deliveries,
                    "redeliver_token": int(tokens.get(str(shard), 0)),
                }
            )
        return rows, replies[1:]

    def snapshot(self, stream_prefix: str) -> PrefixSnapshot | None:
        """Everything a metrics scrape reads of a prefix: the state (one load) and, per group, its
        backlog rows and undrained shards. None if the prefix does not exist."""
        now_ms, state = self.reader.read(stream_prefix, None)
        if state is None:
            return None
        backlog = {name: self.rows(state, name, now_ms, [])[0] for name in state.groups}
        undrained = {name: migration_undrained(state, name) for name in state.groups}
        return PrefixSnapshot(now_ms=now_ms, state=state, backlog=backlog, undrained=undrained)

    def backlog(self, stream_prefix: str, consumer_group: str) -> list[dict[str, Any]]:
        """One row per shard of the ACTIVE and DRAINING versions, in shard order (docs/protocol.md 14)."""
        now_ms, state, _group = load_group(self.reader, stream_prefix, consumer_group)
        return self.rows(state, consumer_group, now_ms, [])[0]

    def decorate_group_view(
        self, view: dict[str, Any], state: PrefixState, consumer_group: str, now_ms: int
    ) -> None:
        """Add ``backlog``, ``dead_letters`` and the migration's ``undrained`` rows to a group view."""
        prefix = state.topology.stream_prefix
        dlq_key = rkeys.dead_letter_key(prefix, consumer_group)
        rows, (dlq_length,) = self.rows(state, consumer_group, now_ms, [("xlen", (dlq_key,))])
        view["backlog"] = rows
        view["dead_letters"] = {
            "stream_key": dlq_key,
            "length": 0 if isinstance(dlq_length, Exception) else int(dlq_length),
        }
        if isinstance(view.get("migration"), dict):
            held = {str(s) for s in migration_undrained(state, consumer_group)}
            live = _live_count(state.groups[consumer_group])
            view["migration"]["undrained"] = [
                {
                    "shard": row["shard"],
                    "owner": row["owner"],
                    "live_members": live,
                    "lag": row["lag"],
                    "pending": row["pending"],
                    "oldest_pending_age_ms": row["oldest_pending_age_ms"],
                }
                for row in rows
                if row["shard"] in held
            ]

    def decorate_prefix_view(self, view: dict[str, Any], state: PrefixState, now_ms: int) -> None:
        """Add the migration's ``blocking`` rows to a prefix view: every undrained old shard of every
        group, with what holds it back (docs/operations.md tells an operator what to do about each)."""
        if not isinstance(view.get("migration"), dict):
            return
        pairs = [(name, s) for name in sorted(state.groups) for s in migration_undrained(state, name)]
        figures = self.figures(state.topology.stream_prefix, pairs, sample=1)[0] if pairs else {}
        owners = {name: g.owners() for name, g in state.groups.items()}
        live = {name: _live_count(g) for name, g in state.groups.items()}
        blocking = []
        for name, shard in pairs:
            f = figures[(name, shard)]
            blocking.append(
                {
                    "consumer_group": name,
                    "shard": str(shard),
                    "owner": owners[name].get(shard),
                    "live_members": live[name],
                    "lag": f.lag,
                    "pending": f.pending,
                    "oldest_pending_age_ms": f.oldest_pending_age_ms(now_ms),
                }
            )
        view["migration"]["blocking"] = blocking

    def unconsumed(self, state: PrefixState, consumer_group: str) -> tuple[frozenset[Shard], int]:
        """The group's undrained old shards, and the entries it has not finished on them."""
        shards = undrained_shards(state, consumer_group)
        pairs = [(consumer_group, s) for s in shards]
        figures = self.figures(state.topology.stream_prefix, pairs, sample=0)[0] if pairs else {}
        return frozenset(shards), sum(f.unconsumed for f in figures.values())


def migration_undrained(state: PrefixState, consumer_group: str) -> tuple[Shard, ...]:
    """The old shards the group has yet to drain while a migration is active; none otherwise."""
    m = state.topology.migration
    if m is None or not m.active:
        return ()
    return undrained_shards(state, consumer_group)


def _live_count(group: Group) -> int:
    return sum(1 for _ in group.live_members())
