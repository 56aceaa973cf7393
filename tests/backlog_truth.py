"""The true backlog of a consumer group, counted the slow way: every entry of every shard the group
reads, compared one by one with the group's last-delivered id (tests only; the product counts it in
coordinator/store/backlog_count.lua, within a bound)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.protocol.model import PrefixState, entry_id_key
from rsc_redis import keys as rkeys


@dataclass(frozen=True, slots=True)
class Truth:
    undelivered: int
    pending: int
    shards_with_backlog: int
    oldest_undelivered_ms: int | None  # the ms part of the oldest undelivered entry's id

    @property
    def backlog(self) -> int:
        return self.undelivered + self.pending


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def true_backlog(client: Any, state: PrefixState, consumer_group: str) -> Truth:
    prefix = state.topology.stream_prefix
    shards = state.topology.live_shards() - state.groups[consumer_group].drained
    undelivered = pending = with_backlog = 0
    oldest: int | None = None
    for shard in shards:
        key = rkeys.stream_key(prefix, shard)
        groups = client.xinfo_groups(key) if client.exists(key) else []
        info = next((g for g in groups if _text(g["name"]) == consumer_group), None)
        last = entry_id_key(_text(info["last-delivered-id"])) if info else (0, 0)
        newer = [_text(i) for i, _ in client.xrange(key, "-", "+") if entry_id_key(_text(i)) > last]
        waiting = int(info["pending"]) if info else 0
        undelivered += len(newer)
        pending += waiting
        with_backlog += 1 if newer or waiting else 0
        if newer:
            first = entry_id_key(newer[0])[0]
            oldest = first if oldest is None else min(oldest, first)
    return Truth(undelivered, pending, with_backlog, oldest)
