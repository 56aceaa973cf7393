"""A data-plane test harness over a real, private Redis (tests/conftest.py's ``redis_url``).

The coordinator side is driven through the real :class:`MetadataStore` (create group, heartbeats,
shard-count changes, ticks), exactly as the coordinator would; the data plane and the producer are then
checked against what the store committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from consumers.dataplane import DataPlane
from consumers.producer import Producer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, OrderingMode, Shard
from coordinator.protocol.routing import shard_index
from coordinator.store.redis_store import MetadataStore
from rsc_redis.keys import meta_key, stream_key

PREFIX = "orders"
GROUP = "billing"
SHORT_LEASE_MS = 1_000  # the smallest lease_ttl_ms a group accepts


def make_client(url: str) -> redis.Redis:
    """No client-side retries: a test of an outage must see the outage, not redis-py's backoff."""
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))


@dataclass
class MemberView:
    """What a member knows from its last heartbeat response."""

    member_id: str
    epoch: int
    grants: dict[Shard, int] = field(default_factory=dict)  # shard -> shard assignment epoch
    readable: dict[Shard, bool] = field(default_factory=dict)
    revoking: set[Shard] = field(default_factory=set)
    state: str = ""

    @property
    def shards(self) -> list[Shard]:
        return sorted(self.grants)


class Harness:
    def __init__(self, client: redis.Redis, prefix: str = PREFIX, group: str = GROUP) -> None:
        self.client = client
        self.prefix = prefix
        self.group = group
        self.store = MetadataStore(client)
        self.plane = DataPlane(client, prefix, group)
        self.producer = Producer(client)
        self.members: dict[str, MemberView] = {}

    # -- coordinator side -------------------------------------------------------------------------

    def create(self, shard_count: int = 2, lease_ttl_ms: int = 10_000) -> None:
        config = GroupConfig(lease_ttl_ms=lease_ttl_ms, heartbeat_interval_ms=min(3_000, lease_ttl_ms // 2))
        command = CreateGroup(
            stream_prefix=self.prefix, consumer_group=self.group, shard_count=shard_count, config=config
        )
        self.store.create_group(command)

    def join(self, member_id: str) -> MemberView:
        return self._heartbeat(Heartbeat(member_id=member_id, member_epoch=0, capacity=1))

    def heartbeat(self, member_id: str, *, release_revoked: bool = True) -> MemberView:
        """A heartbeat at the member's epoch; ``release_revoked`` acknowledges its pending revocations."""
        view = self.members[member_id]
        owned = frozenset(view.grants) if release_revoked else None
        return self._heartbeat(Heartbeat(member_id=member_id, member_epoch=view.epoch, owned=owned))

    def converge(self, *member_ids: str) -> None:
        """Heartbeat (acknowledging revocations) until no member's view changes."""
        for _ in range(10):
            before = {m: (self.members[m].epoch, dict(self.members[m].grants)) for m in member_ids}
            for m in member_ids:
                self.heartbeat(m)
            if before == {m: (self.members[m].epoch, dict(self.members[m].grants)) for m in member_ids}:
                return
        raise AssertionError("the group did not converge")

    def change_shard_count(self, shard_count: int, ordering: OrderingMode = OrderingMode.STRICT) -> None:
        self.store.change_shard_count(self.prefix, shard_count, ordering)

    def _heartbeat(self, hb: Heartbeat) -> MemberView:
        r = self.store.heartbeat(self.prefix, self.group, hb)
        view = MemberView(
            member_id=hb.member_id,
            epoch=r["member_epoch"],
            grants={Shard.parse(s["shard"]): s["assignment_epoch"] for s in r["shards"]},
            readable={Shard.parse(s["shard"]): s["readable"] for s in r["shards"]},
            revoking={Shard.parse(s) for s in r["revoking"]},
            state=r["member_state"],
        )
        self.members[hb.member_id] = view
        return view

    # -- streams ----------------------------------------------------------------------------------

    def key_for(self, shard: Shard, shard_count: int, n: int = 0) -> str:
        """The n-th key (k0, k1, ...) that routes to ``shard`` among ``shard_count`` shards."""
        found = -1
        for i in range(100_000):
            key = f"k{i}"
            if shard_index(key, shard_count) == shard.index:
                found += 1
                if found == n:
                    return key
        raise AssertionError(f"no key for {shard}")

    def produce(
        self, shard: Shard, shard_count: int, n: int, start: int = 0, *, together: bool = False
    ) -> list[str]:
        """Append ``n`` events to ``shard`` (of the active version); returns their entry ids.
        ``together``: in one script call, so that a read sees all of them or none."""
        key = self.key_for(shard, shard_count)
        if together:
            results = self.producer.send_batch(self.prefix, [(key, {"n": start + i}) for i in range(n)])
        else:
            results = [self.producer.send(self.prefix, key, {"n": start + i}) for i in range(n)]
        assert {r.shard for r in results} == {shard}
        return [r.entry_id for r in results]

    def stream(self, shard: Shard) -> str:
        return stream_key(self.prefix, shard)

    def xlen(self, shard: Shard) -> int:
        return int(self.client.xlen(self.stream(shard)))

    def pending(self, shard: Shard) -> list[tuple[str, str]]:
        """[(entry id, consumer)] of the group's pending list on ``shard``."""
        rows = self.client.xpending_range(self.stream(shard), self.group, "-", "+", 10_000)
        return [(r["message_id"].decode(), r["consumer"].decode()) for r in rows]

    def consumers(self, shard: Shard) -> dict[str, int]:
        """Redis consumer name -> its pending count."""
        rows = self.client.xinfo_consumers(self.stream(shard), self.group)
        return {r["name"].decode(): int(r["pending"]) for r in rows}

    def snapshot(self, shard: Shard) -> Any:
        """Everything Redis knows about the stream (entries, groups, consumers, pending lists with their
        delivery times and counts) plus the metadata hash: equal snapshots mean nothing was touched."""
        return (
            self.client.xinfo_stream(self.stream(shard), full=True),
            self.client.hgetall(meta_key(self.prefix)),
        )
