"""Taking over a shard: what a previous owner read but never acked is claimed by the new owner before it
reads new entries, and the previous owner's Redis consumer is deleted once nothing is pending for it."""

from __future__ import annotations

import time

from consumers.dataplane import Delivery, FenceStatus
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from tests.dataplane.harness import SHORT_LEASE_MS, Harness

V1_0 = Shard(1, 0)


def test_the_new_owner_claims_an_expired_members_orphans_then_reads_and_deletes_the_ghost(
    harness: Harness,
) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=SHORT_LEASE_MS)
    m1 = h.join("m1")
    old = h.produce(V1_0, 1, 3)
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, V1_0, 10).entries] == old
    assert h.plane.ack("m1", m1.epoch, V1_0, old[:1]) is FenceStatus.OK
    time.sleep(SHORT_LEASE_MS / 1000 + 0.05)
    (report,) = h.store.tick()
    assert report.expired == ((h.group, "m1"),)
    m2 = h.join("m2")
    assert m2.shards == [V1_0]
    new = h.produce(V1_0, 1, 2, start=3)
    m2 = h.heartbeat("m2")  # renews its short lease: the rest of the test has a full second

    # m1's consumer still has entries pending: it is not a ghost yet
    assert h.plane.delete_ghost_consumers("m2", m2.epoch, V1_0) == 0
    assert h.consumers(V1_0) == {"m1": 2}

    claimed, cursor = h.plane.claim_orphans("m2", m2.epoch, V1_0, 10)
    assert claimed.status is FenceStatus.OK and cursor == "0-0"
    assert [e.entry_id for e in claimed.entries] == old[1:]
    assert [e.payload for e in claimed.entries] == [{"n": 1}, {"n": 2}]
    assert {e.delivery for e in claimed.entries} == {Delivery.CLAIMED}
    assert h.pending(V1_0) == [(i, "m2") for i in old[1:]]
    # the zombie can no longer ack what it read
    assert h.plane.ack("m1", m1.epoch, V1_0, old[1:]) is FenceStatus.MEMBER_FENCED

    fresh = h.plane.read("m2", m2.epoch, V1_0, 10)
    assert [e.entry_id for e in fresh.entries] == new
    again, cursor = h.plane.claim_orphans("m2", m2.epoch, V1_0, 10)
    assert again.entries == [] and cursor == "0-0"  # its own pending entries are not re-claimed
    assert h.plane.ack("m2", m2.epoch, V1_0, old[1:] + new) is FenceStatus.OK

    assert h.plane.delete_ghost_consumers("m2", m2.epoch, V1_0) == 1
    assert h.consumers(V1_0) == {"m2": 0}
    assert h.plane.delete_ghost_consumers("m2", m2.epoch, V1_0) == 0


def test_claim_orphans_pages_with_a_cursor_and_leaves_the_claimers_own_entries(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    orphans = h.produce(V1_0, 1, 3)
    assert len(h.plane.read("m1", m1.epoch, V1_0, 10).entries) == 3
    h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id="m1", member_epoch=-1))  # leaves, unacked
    m2 = h.join("m2")
    own = h.produce(V1_0, 1, 1, start=3)
    assert [e.entry_id for e in h.plane.read("m2", m2.epoch, V1_0, 10).entries] == own
    deliveries_before = {r["message_id"]: r["times_delivered"] for r in _pel(h)}

    pages, cursor = [], "0-0"
    while True:
        result, cursor = h.plane.claim_orphans("m2", m2.epoch, V1_0, 1, start_id=cursor)
        assert result.status is FenceStatus.OK
        pages.append([e.entry_id for e in result.entries])
        if cursor == "0-0":
            break
    # the fourth page scans the claimer's own entry (empty, not the end); the fifth finds nothing
    assert pages == [[orphans[0]], [orphans[1]], [orphans[2]], [], []]
    assert h.pending(V1_0) == [(i, "m2") for i in orphans + own]
    own_row = next(r for r in _pel(h) if r["message_id"].decode() == own[0])
    assert own_row["times_delivered"] == deliveries_before[own_row["message_id"]]


def test_read_own_pending_pages_and_drops_entries_deleted_from_the_stream(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 5)
    assert len(h.plane.read("m1", m1.epoch, V1_0, 10).entries) == 5
    h.client.xdel(h.stream(V1_0), ids[1], ids[2])

    first = h.plane.read_own_pending("m1", m1.epoch, V1_0, 2)
    second = h.plane.read_own_pending("m1", m1.epoch, V1_0, 2, after_id=first.entries[-1].entry_id)
    third = h.plane.read_own_pending("m1", m1.epoch, V1_0, 2, after_id=second.entries[-1].entry_id)

    assert [e.entry_id for e in first.entries] == [ids[0], ids[3]]
    assert [e.entry_id for e in second.entries] == [ids[4]]
    assert third.status is FenceStatus.OK and third.entries == []
    assert {e.delivery for e in first.entries + second.entries} == {Delivery.PENDING}
    assert first.entries[0].payload == {"n": 0}
    assert h.pending(V1_0) == [(ids[0], "m1"), (ids[3], "m1"), (ids[4], "m1")]


def test_a_page_of_deleted_pending_entries_does_not_end_the_scan(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 5)
    assert len(h.plane.read("m1", m1.epoch, V1_0, 10).entries) == 5
    h.client.xdel(h.stream(V1_0), *ids[:4])

    result = h.plane.read_own_pending("m1", m1.epoch, V1_0, 2)

    assert [e.entry_id for e in result.entries] == ids[4:]
    assert h.pending(V1_0) == [(ids[4], "m1")]


def _pel(h: Harness) -> list[dict]:
    return h.client.xpending_range(h.stream(V1_0), h.group, "-", "+", 100)
