"""Fencing the data plane (docs/protocol.md section 7): who may read and ack which shard, at which epoch.

Each scenario drives the coordinator through the real store, then checks that Redis itself enforces its
decision: a refused call returns a status and leaves the stream exactly as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from consumers.dataplane import DataPlane, Delivery, FenceStatus, scripts
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from rsc_redis.keys import meta_key
from tests.dataplane.harness import SHORT_LEASE_MS, Harness

V1_0, V1_1 = Shard(1, 0), Shard(1, 1)


def two_members(h: Harness) -> tuple[Shard, Shard]:
    """m1 and m2, converged on two shards; returns (m1's shard, m2's shard)."""
    h.create(shard_count=2)
    h.join("m1")
    h.join("m2")
    h.converge("m1", "m2")
    (mine,), (theirs,) = h.members["m1"].shards, h.members["m2"].shards
    return mine, theirs


def test_the_owner_reads_new_entries_in_order_and_acks_them(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    assert m1.shards == [V1_0, V1_1] and all(m1.readable.values())
    ids = h.produce(V1_0, 2, 3)

    first = h.plane.read("m1", m1.epoch, V1_0, count=2)
    rest = h.plane.read("m1", m1.epoch, V1_0, count=10)
    nothing = h.plane.read("m1", m1.epoch, V1_0, count=10)

    assert first.status is FenceStatus.OK and first.ok
    assert [e.entry_id for e in first.entries + rest.entries] == ids
    assert [e.payload for e in first.entries + rest.entries] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert {e.delivery for e in first.entries} == {Delivery.NEW} and first.entries[0].delivery == "new"
    assert nothing.status is FenceStatus.OK and nothing.entries == []
    assert h.pending(V1_0) == [(i, "m1") for i in ids]

    assert h.plane.ack("m1", m1.epoch, V1_0, ids[:2]) is FenceStatus.OK
    assert h.pending(V1_0) == [(ids[2], "m1")]
    assert h.plane.ack("m1", m1.epoch, V1_0, [ids[2]]) is FenceStatus.OK
    assert h.pending(V1_0) == []


def test_a_live_non_owner_is_refused_and_reads_nothing(harness: Harness) -> None:
    h = harness
    mine, _ = two_members(h)
    ids = h.produce(mine, 2, 2)
    m1, m2 = h.members["m1"], h.members["m2"]
    assert h.plane.read("m1", m1.epoch, mine, 1).entries[0].entry_id == ids[0]
    pel_before = h.pending(mine)

    refused = h.plane.read("m2", m2.epoch, mine, 10)

    assert refused.status is FenceStatus.NOT_OWNER and refused.entries == []
    assert h.plane.ack("m2", m2.epoch, mine, [ids[0]]) is FenceStatus.NOT_OWNER
    assert h.pending(mine) == pel_before == [(ids[0], "m1")]
    assert h.consumers(mine) == {"m1": 1}  # m2 did not even become a Redis consumer of the shard
    # the entry m2 could not read is still there for the owner
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, mine, 10).entries] == ids[1:]


def test_unknown_and_departed_members_are_fenced(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    h.produce(V1_0, 1, 1)
    assert h.plane.read("stranger", 1, V1_0, 10).status is FenceStatus.MEMBER_FENCED

    h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id="m1", member_epoch=-1))  # leave

    assert h.plane.read("m1", m1.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    assert h.plane.ack("m1", m1.epoch, V1_0, []) is FenceStatus.MEMBER_FENCED
    assert h.pending(V1_0) == []


def test_an_epoch_outside_grant_and_member_epoch_is_refused(harness: Harness) -> None:
    """``grant <= epoch <= member_epoch``: older than the grant is stale, above the member's is future."""
    h = harness
    old_shard, freed = two_members(h)
    old_grant = h.members["m1"].grants[old_shard]
    h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id="m2", member_epoch=-1))  # m2 leaves
    m1 = h.heartbeat("m1")
    new_grant = m1.grants[freed]
    assert m1.grants[old_shard] == old_grant < new_grant == m1.epoch
    ids = h.produce(freed, 2, 1)

    def read(shard: Shard, epoch: int) -> FenceStatus:
        return h.plane.read("m1", epoch, shard, 10).status

    # the old shard: any epoch from its grant up to the member's
    assert [read(old_shard, e) for e in range(old_grant, m1.epoch + 1)] == [FenceStatus.OK] * (
        m1.epoch - old_grant + 1
    )
    assert read(old_shard, old_grant - 1) is FenceStatus.STALE_EPOCH
    assert read(old_shard, m1.epoch + 1) is FenceStatus.STALE_EPOCH  # from the future
    # the shard granted at the new epoch: the previous epoch predates it
    assert read(freed, new_grant - 1) is FenceStatus.STALE_EPOCH
    assert h.plane.ack("m1", new_grant - 1, freed, ids) is FenceStatus.STALE_EPOCH
    assert h.pending(freed) == []
    assert [e.entry_id for e in h.plane.read("m1", new_grant, freed, 10).entries] == ids
    assert h.plane.ack("m1", m1.epoch + 1, freed, ids) is FenceStatus.STALE_EPOCH
    assert h.pending(freed) == [(ids[0], "m1")]


def test_a_member_whose_lease_ended_is_fenced_before_any_tick_and_after_it(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=SHORT_LEASE_MS)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, V1_0, 1).entries] == ids[:1]

    time.sleep(SHORT_LEASE_MS / 1000 + 0.05)
    # No tick has run: the coordinator still lists m1 as live, but Redis's clock says its lease ended.
    assert h.store.describe_group(h.prefix, h.group)["members"][0]["state"] == "STABLE"
    before = h.snapshot(V1_0)

    assert h.plane.read("m1", m1.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    assert h.plane.ack("m1", m1.epoch, V1_0, ids[:1]) is FenceStatus.MEMBER_FENCED
    assert h.plane.read_own_pending("m1", m1.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    assert h.snapshot(V1_0) == before
    assert h.pending(V1_0) == [(ids[0], "m1")]

    (report,) = h.store.tick()
    assert report.expired == ((h.group, "m1"),)
    assert h.plane.read("m1", m1.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    assert h.plane.ack("m1", m1.epoch, V1_0, ids[:1]) is FenceStatus.MEMBER_FENCED
    assert h.pending(V1_0) == [(ids[0], "m1")]


def test_a_revoking_shard_refuses_reads_and_claims_but_accepts_acks(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    ids = {s: h.produce(s, 2, 2) for s in (V1_0, V1_1)}
    for s in (V1_0, V1_1):
        assert len(h.plane.read("m1", m1.epoch, s, 1).entries) == 1
    h.join("m2")
    m1 = h.heartbeat("m1", release_revoked=False)  # learns of the revocation, has not released yet
    (revoked,) = m1.revoking
    assert m1.state == "UNREVOKED_SHARDS" and revoked not in m1.grants

    assert h.plane.read("m1", m1.epoch, revoked, 10).status is FenceStatus.NOT_OWNER
    assert h.plane.claim_orphans("m1", m1.epoch, revoked, 10)[0].status is FenceStatus.NOT_OWNER
    assert h.pending(revoked) == [(ids[revoked][0], "m1")]
    assert h.plane.ack("m1", m1.epoch, revoked, [ids[revoked][0]]) is FenceStatus.OK
    assert h.pending(revoked) == []
    # not granted to m2 before m1 released it
    m2 = h.heartbeat("m2")
    assert revoked not in m2.grants
    assert h.plane.read("m2", m2.epoch, revoked, 10).status is FenceStatus.NOT_OWNER

    h.heartbeat("m1")  # releases it
    m2 = h.heartbeat("m2")
    assert revoked in m2.grants
    assert h.plane.ack("m1", m1.epoch, revoked, [ids[revoked][1]]) is FenceStatus.NOT_OWNER
    assert [e.entry_id for e in h.plane.read("m2", m2.epoch, revoked, 10).entries] == ids[revoked][1:]


# ------------------------------------------------------------------------------------------------------
# Every script fences before it touches the stream.

Op = Callable[[DataPlane, str, int, Shard, list[str]], Any]
OPERATIONS: dict[str, Op] = {
    "read": lambda p, m, e, s, ids: p.read(m, e, s, 10).status,
    "read_own_pending": lambda p, m, e, s, ids: p.read_own_pending(m, e, s, 10).status,
    "claim_orphans": lambda p, m, e, s, ids: p.claim_orphans(m, e, s, 10)[0].status,
    "ack": lambda p, m, e, s, ids: p.ack(m, e, s, ids),
    "delete_ghost_consumers": lambda p, m, e, s, ids: p.delete_ghost_consumers(m, e, s),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize(
    ("caller", "expected"),
    [
        ("stranger", FenceStatus.MEMBER_FENCED),
        ("other-member", FenceStatus.NOT_OWNER),
        ("stale-epoch", FenceStatus.STALE_EPOCH),
        ("future-epoch", FenceStatus.STALE_EPOCH),
    ],
)
def test_a_refused_call_leaves_the_stream_untouched(
    harness: Harness, operation: str, caller: str, expected: FenceStatus
) -> None:
    h = harness
    mine, _ = two_members(h)
    m1, m2 = h.members["m1"], h.members["m2"]
    # The shard has read-but-unacked entries, unread entries, an orphan of a previous owner and a ghost.
    h.produce(mine, 2, 4)
    h.client.xreadgroup(h.group, "previous-owner", {h.stream(mine): ">"}, count=1)
    h.client.xgroup_createconsumer(h.stream(mine), h.group, "ghost")
    pending_ids = [e.entry_id for e in h.plane.read("m1", m1.epoch, mine, 2).entries]
    member, epoch = {
        "stranger": ("stranger", m1.epoch),
        "other-member": ("m2", m2.epoch),
        "stale-epoch": ("m1", m1.grants[mine] - 1),
        "future-epoch": ("m1", m1.epoch + 1),
    }[caller]
    before = h.snapshot(mine)
    time.sleep(0.002)  # so that a touched consumer would show a different seen-time

    outcome = OPERATIONS[operation](h.plane, member, epoch, mine, pending_ids)

    assert outcome == (0 if operation == "delete_ghost_consumers" else expected)
    assert h.snapshot(mine) == before


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_the_same_call_by_the_owner_does_touch_the_stream(harness: Harness, operation: str) -> None:
    """The control of the test above: its snapshot comparison would notice each operation."""
    h = harness
    mine, _ = two_members(h)
    m1 = h.members["m1"]
    h.produce(mine, 2, 4)
    h.client.xreadgroup(h.group, "previous-owner", {h.stream(mine): ">"}, count=1)
    h.client.xgroup_createconsumer(h.stream(mine), h.group, "ghost")
    pending_ids = [e.entry_id for e in h.plane.read("m1", m1.epoch, mine, 2).entries]
    before = h.snapshot(mine)
    time.sleep(0.002)

    outcome = OPERATIONS[operation](h.plane, "m1", m1.epoch, mine, pending_ids)

    assert outcome == (1 if operation == "delete_ghost_consumers" else FenceStatus.OK)
    assert h.snapshot(mine) != before


def test_fencing_is_per_group_and_each_group_reads_every_entry(harness: Harness) -> None:
    """Two groups on one prefix: one Redis consumer group each, and a member of one is a stranger to the
    other."""
    h = harness
    h.create(shard_count=1)
    shipping = Harness(h.client, group="shipping")
    shipping.create(shard_count=1)
    billing_member, shipping_member = h.join("m1"), shipping.join("s1")
    ids = h.produce(V1_0, 1, 2)

    assert h.plane.read("s1", shipping_member.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    assert [e.entry_id for e in h.plane.read("m1", billing_member.epoch, V1_0, 10).entries] == ids
    assert [e.entry_id for e in shipping.plane.read("s1", shipping_member.epoch, V1_0, 10).entries] == ids
    assert h.pending(V1_0) == [(i, "m1") for i in ids]
    assert shipping.pending(V1_0) == [(i, "s1") for i in ids]


@pytest.mark.parametrize("script", ["read_new", "ack"])
def test_a_script_refuses_a_stream_key_that_is_not_the_shards(harness: Harness, script: str) -> None:
    """Defence in depth: the fence reads o:<group>:<shard>, so the stream it acts on must be that shard's."""
    h = harness
    mine, theirs = two_members(h)
    m1 = h.members["m1"]
    before = h.snapshot(theirs)
    registered = scripts.function(h.client, script)

    with pytest.raises(redis.ResponseError, match="is not the key of shard"):
        registered(keys=[meta_key(h.prefix), h.stream(theirs)], args=[h.group, "m1", m1.epoch, str(mine), 1])
    assert h.snapshot(theirs) == before
