"""What an autoscaler needs of a consumer group, in a few numbers (docs/autoscaling.md).

Theory of operation
-------------------
A group reads many shard streams: every shard of the ACTIVE version and, during a resharding, of the
DRAINING ones it has not drained yet. Its backlog is, summed over those shards, the entries it has not
had delivered yet plus the ones delivered and not acknowledged (pending). Redis's per-stream ``lag``
cannot be summed for that: it turns nil, or wrong, once a stream is trimmed (redis/redis#13337,
#13957), and the retention pass trims all the time. So the undelivered entries are counted from the
group's own position on each stream (its last-delivered id) by ``backlog_count.lua``, which says how
and within what bound. Cost: one metadata read, then one read-only script per shard (all groups of the
prefix at once), pipelined: one round trip for the scripts whatever the shard count.

The figures of a group that does not exist (or of a prefix that does not exist) are all 0, not an
error: an autoscaler polls a group before it is created and after it is deleted, and must then scale
to its minimum (KEDA treats an error as a failed scaler).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.model import PrefixState, Shard, entry_id_key, validate_identifier
from rsc_redis import clients
from rsc_redis import keys as rkeys

from .reading import Reader
from .replies import text
from .replies import translate_redis_errors as redis_errors

# Entries counted at most on each side of a group's position per shard (backlog_count.lua): a few ms
# of Redis time in the worst case, exact whenever the group is that close to either end of the stream.
COUNT_BOUND = 1000
_PIPELINE_CHUNK = 64  # scripts per round trip


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupScaling:
    """One group's scaling figures, summed over the shards it reads."""

    stream_prefix: str
    consumer_group: str
    exists: bool = False
    undelivered: int = 0
    pending: int = 0
    shards: int = 0  # the shards it reads: the ACTIVE version's and the DRAINING ones not drained yet
    active_shards: int = 0  # the ACTIVE version's shard count (the members that can work at once)
    shards_with_backlog: int = 0
    oldest_undelivered_age_ms: int = 0  # 0: nothing undelivered
    exact: bool = True  # False: a shard's undelivered count is an estimate (backlog_count.lua)

    @property
    def backlog(self) -> int:
        return self.undelivered + self.pending

    def as_json(self) -> dict[str, Any]:
        """The JSON document of the scaling endpoint (docs/autoscaling.md lists its fields)."""
        return {
            "stream_prefix": self.stream_prefix,
            "consumer_group": self.consumer_group,
            "exists": self.exists,
            "backlog": self.backlog,
            "undelivered": self.undelivered,
            "pending": self.pending,
            "shards": self.shards,
            "active_shards": self.active_shards,
            "shards_with_backlog": self.shards_with_backlog,
            "oldest_undelivered_age_seconds": self.oldest_undelivered_age_ms / 1000,
            "exact": self.exact,
        }


@dataclass(slots=True)
class _Sum:
    undelivered: int = 0
    pending: int = 0
    with_backlog: int = 0
    oldest_ms: int | None = None  # the ms part of the oldest undelivered entry's id
    exact: bool = True

    def add(self, undelivered: int, pending: int, oldest_id: str, exact: bool) -> None:
        self.undelivered += undelivered
        self.pending += pending
        self.with_backlog += 1 if undelivered + pending else 0
        self.exact = self.exact and exact
        if oldest_id:
            ms = entry_id_key(oldest_id)[0]
            self.oldest_ms = ms if self.oldest_ms is None else min(self.oldest_ms, ms)


@dataclass(frozen=True, slots=True)
class ShardCount:
    """One group on one shard, as ``backlog_count.lua`` counts it."""

    undelivered: int
    pending: int
    oldest_undelivered_id: str  # "" when nothing is undelivered
    exact: bool


class Scaling:
    """Reads the scaling figures of a store's groups, and counts the undelivered entries of (group,
    shard) pairs for the backlog rows (backlog_reads.py): one rule for both."""

    def __init__(self, client: redis.Redis | RedisCluster, reader: Reader) -> None:
        self.client = client
        self.reader = reader
        self._script = client.register_script(Path(__file__).with_name("backlog_count.lua").read_text())

    def count(
        self, stream_prefix: str, pairs: Iterable[tuple[str, Shard]]
    ) -> dict[tuple[str, Shard], ShardCount]:
        """The count of each (group, shard) pair: one read-only script per shard, pipelined."""
        by_shard: dict[Shard, list[str]] = {}
        for name, shard in pairs:
            by_shard.setdefault(shard, []).append(name)
        shards = sorted(by_shard)
        calls = [([rkeys.stream_key(stream_prefix, s)], [str(COUNT_BOUND), *by_shard[s]]) for s in shards]
        replies: list[Any] = []
        with redis_errors():
            for start in range(0, len(calls), _PIPELINE_CHUNK):
                chunk = calls[start : start + _PIPELINE_CHUNK]
                replies += clients.run_scripts(self.client, self._script, chunk)
        counts: dict[tuple[str, Shard], ShardCount] = {}
        for shard, reply in zip(shards, replies, strict=True):
            if isinstance(reply, Exception):
                with redis_errors():
                    raise reply
            for name, (undelivered, pending, oldest, exact) in zip(by_shard[shard], reply, strict=True):
                counts[(name, shard)] = ShardCount(
                    int(undelivered), int(pending), text(oldest), int(exact) == 1
                )
        return counts

    def group(self, stream_prefix: str, consumer_group: str) -> GroupScaling:
        """One group's figures; all 0 (``exists`` false) if the group or its prefix does not exist.
        INVALID_REQUEST for a malformed identifier."""
        validate_identifier(stream_prefix, "stream_prefix")
        validate_identifier(consumer_group, "consumer_group")
        now_ms, state = self.reader.read(stream_prefix, [consumer_group])
        if state is None or consumer_group not in state.groups:
            return GroupScaling(stream_prefix=stream_prefix, consumer_group=consumer_group)
        return self.of_state(state, now_ms, [consumer_group])[consumer_group]

    def of_state(self, state: PrefixState, now_ms: int, groups: Iterable[str]) -> dict[str, GroupScaling]:
        """The figures of ``groups`` (each a group of ``state``), read from the streams now."""
        names = sorted(groups)
        reads = {name: _shards_read(state, name) for name in names}
        counts = self.count(state.topology.stream_prefix, [(n, s) for n in names for s in sorted(reads[n])])
        sums = {name: _Sum() for name in names}
        for (name, _shard), c in counts.items():
            sums[name].add(c.undelivered, c.pending, c.oldest_undelivered_id, c.exact)
        prefix = state.topology.stream_prefix
        active = state.topology.active_version.shard_count
        return {
            name: GroupScaling(
                stream_prefix=prefix,
                consumer_group=name,
                exists=True,
                undelivered=s.undelivered,
                pending=s.pending,
                shards=len(reads[name]),
                active_shards=active,
                shards_with_backlog=s.with_backlog,
                oldest_undelivered_age_ms=0 if s.oldest_ms is None else max(0, now_ms - s.oldest_ms),
                exact=s.exact,
            )
            for name, s in sums.items()
        }


def _shards_read(state: PrefixState, consumer_group: str) -> frozenset[Shard]:
    """The shards the group reads: every shard of the ACTIVE and DRAINING versions but the draining
    ones it has drained already."""
    return state.topology.live_shards() - state.groups[consumer_group].drained
