"""A seeded random walk through joins, leaves, heartbeats, shard-count changes, drains and ticks, checking
after every step that what Redis lets members do matches what the coordinator told them (invariant 1 of
docs/protocol.md section 11 as the data plane enforces it: no shard is readable by two members)."""

from __future__ import annotations

import random

import pytest

from consumers.dataplane import FenceStatus
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import OrderingMode, Shard
from tests.dataplane.harness import Harness


def probe(h: Harness, member: str, epoch: int, shard: Shard) -> FenceStatus:
    """May ``member`` read ``shard``? A claim of an empty pending list answers without side effects."""
    return h.plane.claim_orphans(member, epoch, shard, 1)[0].status


def all_shards(h: Harness) -> list[Shard]:
    topology = h.store.describe_prefix(h.prefix)["topology"]
    return [Shard(v["version"], i) for v in topology["versions"] for i in range(v["shard_count"])]


def drain_everything_readable(h: Harness, member: str) -> None:
    view = h.members[member]
    for shard in view.shards:
        result = h.plane.read(member, view.epoch, shard, 1_000)
        if result.ok:
            assert (
                h.plane.ack(member, view.epoch, shard, [e.entry_id for e in result.entries]) is FenceStatus.OK
            )


def check(h: Harness, live: set[str]) -> None:
    readers: dict[Shard, list[str]] = {}
    for member in sorted(live):
        view = h.members[member]
        for shard in all_shards(h):
            status = probe(h, member, view.epoch, shard)
            if status is FenceStatus.OK:
                readers.setdefault(shard, []).append(member)
            if shard in view.grants and view.readable[shard]:
                assert status is FenceStatus.OK, (member, shard, status)
            elif shard in view.grants:
                assert status in (FenceStatus.OK, FenceStatus.NOT_READABLE), (member, shard, status)
            else:
                assert status is FenceStatus.NOT_OWNER, (member, shard, status)
        for shard in view.revoking:
            assert h.plane.ack(member, view.epoch, shard, []) is FenceStatus.OK
    assert all(len(m) == 1 for m in readers.values()), readers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_walk_keeps_the_data_plane_consistent_with_the_coordinator(
    harness: Harness, seed: int
) -> None:
    h = harness
    rng = random.Random(seed)
    h.create(shard_count=3)
    live: set[str] = set()
    left: set[str] = set()
    next_id = 0
    for _step in range(60):
        action = rng.choice(
            ["join", "join", "leave", "heartbeat", "heartbeat", "heartbeat", "reshard", "drain"]
        )
        if action == "join" and len(live) >= 4:
            action = "heartbeat"
        if action == "join" or not live:
            member = f"m{next_id}"
            next_id += 1
            h.join(member)
            live.add(member)
        elif action == "leave":
            member = rng.choice(sorted(live))
            h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id=member, member_epoch=-1))
            live.discard(member)
            left.add(member)
        elif action == "heartbeat":
            h.heartbeat(rng.choice(sorted(live)), release_revoked=rng.random() < 0.7)
        elif action == "reshard":
            migration = h.store.describe_prefix(h.prefix)["migration"]
            if migration is None or not migration["active"]:
                count = h.producer.route(h.prefix).shard_count
                h.producer.forget_route(h.prefix)
                h.change_shard_count(rng.choice([c for c in (2, 3, 4, 6) if c != count]), OrderingMode.STRICT)
        else:
            drain_everything_readable(h, rng.choice(sorted(live)))
            h.store.tick()
        h.producer.send(h.prefix, f"key-{rng.randrange(20)}", {"step": _step})
        check(h, live)
        for member in left:
            old = h.members[member]
            assert all(probe(h, member, old.epoch, s) is FenceStatus.MEMBER_FENCED for s in old.shards)
