"""The member's fetch (fetch.lua): acks folded into the read, many shards in one call, each fenced alone.

Against the real Redis: a refusal for one shard leaves the others' acks and reads intact, and leaves the
refused shard's stream exactly as it was.
"""

from __future__ import annotations

import time

import pytest

from consumers.dataplane import Delivery, FenceStatus, ShardFetch
from consumers.errors import InvalidRequest
from coordinator.protocol.model import Shard
from rsc_redis.keys import redeliver_key
from tests.dataplane.harness import SHORT_LEASE_MS, Harness

V1_0, V1_1, V1_2 = Shard(1, 0), Shard(1, 1), Shard(1, 2)


def test_one_call_acks_what_was_handled_and_reads_every_shard_in_order(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    ids = {s: h.produce(s, 2, 3) for s in (V1_0, V1_1)}

    first = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch), ShardFetch(V1_1, m1.epoch)], count=2)
    assert [r.status for r in first] == [FenceStatus.OK, FenceStatus.OK] and all(r.acked for r in first)
    assert [[e.entry_id for e in r.entries] for r in first] == [ids[V1_0][:2], ids[V1_1][:2]]
    assert [e.payload for e in first[0].entries] == [{"n": 0}, {"n": 1}]
    assert {e.delivery for e in first[0].entries} == {Delivery.NEW}
    assert [r.redeliver_token for r in first] == ["0", "0"]

    # the ack of the first batch rides in the read of the second
    second = h.plane.fetch(
        "m1", [ShardFetch(V1_0, m1.epoch, ids[V1_0][:2]), ShardFetch(V1_1, m1.epoch, ids[V1_1][:2])], 10
    )
    assert [[e.entry_id for e in r.entries] for r in second] == [ids[V1_0][2:], ids[V1_1][2:]]
    assert h.pending(V1_0) == [(ids[V1_0][2], "m1")] and h.pending(V1_1) == [(ids[V1_1][2], "m1")]

    # an idle shard whose token the caller knows: nothing new, the same token (not in the script's reply)
    idle = h.plane.fetch("m1", [ShardFetch(V1_1, m1.epoch, ids[V1_1][2:], token="0")], 10)
    assert [(r.status, r.acked, r.entries, r.redeliver_token) for r in idle] == [
        (FenceStatus.OK, True, [], "0")
    ]
    assert h.pending(V1_1) == []

    ack_only = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ids[V1_0][2:], read=False)], 10)
    assert ack_only[0].status is FenceStatus.OK and ack_only[0].acked and ack_only[0].entries == []
    assert h.pending(V1_0) == []


def test_a_refused_shard_does_not_fail_the_others_and_is_left_untouched(harness: Harness) -> None:
    h = harness
    h.create(shard_count=3)
    h.join("m1")
    h.join("m2")
    h.converge("m1", "m2")
    m1, m2 = h.members["m1"], h.members["m2"]
    mine, theirs = m1.shards[0], m2.shards[0]
    ids = {s: h.produce(s, 3, 2) for s in (mine, theirs)}
    assert [e.entry_id for e in h.plane.read("m2", m2.epoch, theirs, 10).entries] == ids[theirs]
    before = h.snapshot(theirs)

    results = h.plane.fetch(
        "m1",
        [ShardFetch(theirs, m1.epoch, ids[theirs]), ShardFetch(mine, m1.epoch), ShardFetch(mine, 0)],
        count=10,
    )
    assert [(r.status, r.acked) for r in results] == [
        (FenceStatus.NOT_OWNER, False),  # another member's shard: its acks are refused ...
        (FenceStatus.OK, True),  # ... and the next shard is read all the same
        (FenceStatus.STALE_EPOCH, False),  # an epoch from before the grant
    ]
    assert [e.entry_id for e in results[1].entries] == ids[mine]
    assert h.snapshot(theirs) == before  # nothing acked, nothing read, no consumer created


def test_a_fenced_member_acks_and_reads_nothing(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=SHORT_LEASE_MS)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    h.plane.read("m1", m1.epoch, V1_0, 10)
    time.sleep(SHORT_LEASE_MS / 1000 + 0.05)  # the lease ends by Redis's clock, before any tick
    before = h.snapshot(V1_0)

    (result,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ids)], 10)
    assert (result.status, result.acked, result.entries) == (FenceStatus.MEMBER_FENCED, False, [])
    assert h.snapshot(V1_0) == before


def test_a_revoking_or_held_back_shard_takes_its_acks_but_reads_nothing(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    ids = {s: h.produce(s, 2, 2) for s in (V1_0, V1_1)}
    for s in (V1_0, V1_1):
        assert len(h.plane.read("m1", m1.epoch, s, 1).entries) == 1
    h.join("m2")
    m1 = h.heartbeat("m1", release_revoked=False)  # learns of the revocation, has not released yet
    (revoked,) = m1.revoking
    (kept,) = m1.shards

    results = h.plane.fetch(
        "m1", [ShardFetch(revoked, m1.epoch, ids[revoked][:1]), ShardFetch(kept, m1.epoch, ids[kept][:1])], 10
    )
    assert [(r.status, r.acked) for r in results] == [(FenceStatus.NOT_OWNER, True), (FenceStatus.OK, True)]
    assert results[0].entries == [] and [e.entry_id for e in results[1].entries] == ids[kept][1:]
    assert h.pending(revoked) == []  # acked: the member finishes what it read before it releases
    assert h.xlen(revoked) == 2 and h.plane.read("m2", h.heartbeat("m2").epoch, revoked, 10).status is (
        FenceStatus.NOT_OWNER
    )  # the unread entry waits for the next owner


def test_a_shard_held_back_by_strict_ordering_takes_acks_and_is_not_read(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    h.change_shard_count(2)
    m1 = h.heartbeat("m1")
    held = next(s for s, readable in m1.readable.items() if not readable)
    h.producer.send(h.prefix, h.key_for(held, 2), {"n": 0})
    before = h.snapshot(held)

    (result,) = h.plane.fetch("m1", [ShardFetch(held, m1.epoch)], 10)
    assert (result.status, result.acked) == (FenceStatus.NOT_READABLE, True)
    assert h.snapshot(held) == before


def test_a_redeliver_request_shows_in_the_fetched_token(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    h.client.hincrby(redeliver_key(h.prefix, h.group), str(V1_0), 1)
    (result,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch)], 10)
    assert result.redeliver_token == "1"


def test_fetch_checks_its_arguments(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    assert h.plane.fetch("m1", [], 10) == []
    with pytest.raises(InvalidRequest):
        h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ["not-an-id"])], 10)
    # every id is checked, however they are checked together: a space inside one, an empty one, a
    # newline, another type, digits that are not ASCII
    for bad in (["1-0 2-0"], ["1-0", "", "2-0 3-0"], ["1-0\n"], ["1-0", 7], ["\u0661-0"], ["1-0", "2-0 "],
                [b"\xff-0"]):  # fmt: skip
        with pytest.raises(InvalidRequest):
            h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, bad)], 10)
    # a part above 2**64 - 1 is refused before the call (Redis would fail the script midway, after
    # the acks of the shards before it), however many digits it has
    for bad in ([f"{2**64}-0"], ["1-0", f"0-{2**64}"], ["1-0", "9" * 30 + "-1"]):
        with pytest.raises(InvalidRequest, match="at most"):
            h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, bad)], 10)
    top = f"{2**64 - 1}-{2**64 - 1}"
    (largest,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, [top], read=False)], 10)
    assert largest.ok  # the largest id Redis accepts is accepted (nothing pending: nothing acked)
    before = h.snapshot(V1_0)
    (acked,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ["1-0", b"2-0", "3-0"], read=False)], 10)
    assert acked.ok and acked.acked and h.snapshot(V1_0) == before  # well formed (bytes too); none pending
    with pytest.raises(InvalidRequest):
        h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, "1-0")], 10)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        h.plane.fetch("m1", [V1_0], 10)  # type: ignore[list-item]
    (unknown,) = h.plane.fetch("m1", [ShardFetch(V1_2, m1.epoch)], 10)  # a shard nobody owns
    assert (unknown.status, unknown.acked) == (FenceStatus.NOT_OWNER, False)


def test_a_fetch_acks_more_ids_than_one_redis_call_takes(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    key = h.key_for(V1_0, 1)
    ids = [r.entry_id for r in h.producer.send_batch(h.prefix, [(key, {"n": i}) for i in range(1200)])]
    read = [e.entry_id for e in h.plane.read("m1", m1.epoch, V1_0, 1200).entries]
    assert read == ids

    (result,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ids)], 10)
    assert (result.status, result.acked, result.entries) == (FenceStatus.OK, True, [])
    assert h.pending(V1_0) == []
