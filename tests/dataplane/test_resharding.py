"""Resharding in the data plane (docs/protocol.md section 8): new shards of a strict migration are
assigned but not readable until the old shards their keys may come from are drained."""

from __future__ import annotations

from consumers.dataplane import FenceStatus
from coordinator.protocol.model import OrderingMode, Shard
from tests.dataplane.harness import Harness

OLD = [Shard(1, 0), Shard(1, 1)]
NEW = [Shard(2, i) for i in range(4)]


def drain(h: Harness, member: str, shard: Shard) -> list[str]:
    """Read and ack everything of ``shard``; returns the entry ids."""
    view = h.members[member]
    result = h.plane.read(member, view.epoch, shard, 1_000)
    assert result.status is FenceStatus.OK
    ids = [e.entry_id for e in result.entries]
    assert h.plane.ack(member, view.epoch, shard, ids) is FenceStatus.OK
    return ids


def test_strict_new_shards_are_not_readable_until_the_old_ones_drain(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    h.join("m1")
    before = {s: h.produce(s, 2, 2) for s in OLD}
    h.change_shard_count(4, OrderingMode.STRICT)
    after = {s: h.produce(s, 4, 1, start=10) for s in NEW}  # the producer's cached route was v1
    h.converge("m1")
    m1 = h.members["m1"]
    assert m1.shards == OLD + NEW
    assert {s: m1.readable[s] for s in NEW} == dict.fromkeys(NEW, False)

    for s in NEW:
        snapshot = h.snapshot(s)
        assert h.plane.read("m1", m1.epoch, s, 10).status is FenceStatus.NOT_READABLE
        assert h.plane.claim_orphans("m1", m1.epoch, s, 10)[0].status is FenceStatus.NOT_READABLE
        assert h.plane.ack("m1", m1.epoch, s, []) is FenceStatus.OK  # acks are not held back
        assert h.snapshot(s) == snapshot

    # v1:0 drains; gcd(2, 4) = 2, so v2:0 and v2:2 (and only they) become readable
    assert drain(h, "m1", OLD[0]) == before[OLD[0]]
    (report,) = h.store.tick()
    assert report.drained == ((h.group, "v1:0"),)
    readable = {s: h.plane.read("m1", m1.epoch, s, 10) for s in NEW}
    assert {s: r.status for s, r in readable.items()} == {
        NEW[0]: FenceStatus.OK,
        NEW[1]: FenceStatus.NOT_READABLE,
        NEW[2]: FenceStatus.OK,
        NEW[3]: FenceStatus.NOT_READABLE,
    }
    assert [e.entry_id for e in readable[NEW[0]].entries] == after[NEW[0]]
    # the drained shard is revoked through the ordinary path
    m1 = h.heartbeat("m1", release_revoked=False)
    assert m1.revoking == {OLD[0]}
    assert h.plane.read("m1", m1.epoch, OLD[0], 10).status is FenceStatus.NOT_OWNER
    h.converge("m1")
    m1 = h.members["m1"]

    assert drain(h, "m1", OLD[1]) == before[OLD[1]]
    (report,) = h.store.tick()
    assert report.drained == ((h.group, "v1:1"),) and report.retired_versions == (1,)
    h.converge("m1")
    m1 = h.members["m1"]
    assert h.members["m1"].shards == NEW and all(m1.readable.values())
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, NEW[3], 10).entries] == after[NEW[3]]
    assert {s: h.xlen(s) for s in OLD} == {s: 2 for s in OLD}  # nothing was appended after the seal


def test_relaxed_new_shards_are_readable_at_once(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    h.join("m1")
    h.produce(OLD[0], 2, 1)
    h.change_shard_count(4, OrderingMode.RELAXED)
    ids = h.produce(NEW[1], 4, 1)
    h.converge("m1")
    m1 = h.members["m1"]
    assert all(m1.readable.values())
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, NEW[1], 10).entries] == ids
