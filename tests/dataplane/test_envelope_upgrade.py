"""An upgrade in place: a stream still holding entries in the seven-field format of before the packed
envelope, then one packed by an older producer (Redis TIME in its produced_at_ms), followed by entries
this producer packs (produced_at_ms not written: the entry id's ms; coordinator/protocol/envelope.py).
Every read of the data plane hands out all of them, in stream order, decoded alike; real Redis."""

from __future__ import annotations

import json
import time
import uuid

from consumers.dataplane import Delivery, Entry, ShardFetch
from consumers.dataplane.envelope import encode_event
from coordinator.protocol import envelope
from coordinator.protocol.model import Shard
from tests.dataplane.harness import SHORT_LEASE_MS, Harness

V1_0 = Shard(1, 0)


def old_entry(h: Harness, shard: Shard, key: str, n: int) -> tuple[str, str]:
    """XADD an entry exactly as produce.lua wrote it before the packed envelope; (entry id, event id)."""
    event_id = uuid.uuid4().hex
    fields = {
        "event_id": event_id,
        "partition_key": key.encode(),
        "routing_version": b"1",
        "produced_at_ms": b"1700000000000",
        "content_type": "application/json",
        "payload": json.dumps({"n": n}, separators=(",", ":")).encode(),
        "headers": '{"era":"old"}',
    }
    return h.client.xadd(h.stream(shard), fields).decode(), event_id


def older_packed_entry(h: Harness, shard: Shard, key: str, n: int) -> tuple[str, str]:
    """XADD an entry as an older producer's produce.lua packed it (Redis TIME in front, here a fixed one)."""
    event = encode_event(key, {"n": n}, {"era": "old"})
    value = envelope.pack(1, event.body(), 1700000000001)
    return h.client.xadd(h.stream(shard), {"envelope": value}).decode(), event.event_id


def upgraded_stream(h: Harness, key: str) -> tuple[list[str], list[str]]:
    """Three seven-field entries, one packed by an older producer, then three this producer packs, of
    ``key`` (routed to V1_0); entry ids and event ids."""
    old = [old_entry(h, V1_0, key, n) for n in range(3)]
    old.append(older_packed_entry(h, V1_0, key, 3))
    new = [h.producer.send(h.prefix, key, {"n": n}, headers={"era": "new"}) for n in range(4, 7)]
    seven = [b"event_id", b"partition_key", b"routing_version", b"produced_at_ms", b"content_type"]
    seven += [b"payload", b"headers"]
    assert [list(fields) for _, fields in h.client.xrange(h.stream(V1_0))] == [
        *3 * [seven],
        *4 * [[b"envelope"]],
    ]
    return [i for i, _ in old] + [r.entry_id for r in new], [e for _, e in old] + [r.event_id for r in new]


def check(entries: list[Entry], entry_ids: list[str], event_ids: list[str], key: str) -> None:
    assert [e.entry_id for e in entries] == entry_ids
    assert [e.event_id for e in entries] == event_ids
    assert [e.payload for e in entries] == [{"n": n} for n in range(7)]
    assert [e.headers["era"] for e in entries] == 4 * ["old"] + 3 * ["new"]
    assert {(e.partition_key, e.routing_version, e.content_type) for e in entries} == {
        (key, 1, "application/json")
    }
    old, new = entries[:4], entries[4:]
    assert [e.produced_at_ms for e in old] == [1700000000000] * 3 + [1700000000001]  # as written
    assert all(e.produced_at_ms == int(e.entry_id.split("-")[0]) for e in new)  # the entry id's ms


def test_a_fetch_hands_out_old_and_packed_entries_in_order_decoded_alike(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    key = h.key_for(V1_0, 2)
    entry_ids, event_ids = upgraded_stream(h, key)

    first = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch)], count=4)
    second = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, [e.entry_id for e in first[0].entries])], 4)

    entries = first[0].entries + second[0].entries
    check(entries, entry_ids, event_ids, key)
    assert {e.delivery for e in entries} == {Delivery.NEW}
    assert [i for i, _ in h.pending(V1_0)] == entry_ids[4:]  # the first batch was acked by the second fetch


def test_a_re_read_and_a_claim_hand_out_old_and_packed_entries_alike(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=SHORT_LEASE_MS)
    m1 = h.join("m1")
    key = h.key_for(V1_0, 1)
    entry_ids, event_ids = upgraded_stream(h, key)
    assert len(h.plane.read("m1", m1.epoch, V1_0, 10).entries) == 7  # all pending for m1 now
    check(h.plane.read_own_pending("m1", m1.epoch, V1_0, 10).entries, entry_ids, event_ids, key)

    time.sleep(SHORT_LEASE_MS / 1000 + 0.05)  # m1's lease ends: m2 takes the shard and claims m1's entries
    (report,) = h.store.tick()
    assert report.expired == ((h.group, "m1"),)
    m2 = h.join("m2")
    claimed, cursor = h.plane.claim_orphans("m2", m2.epoch, V1_0, 10)

    assert cursor == "0-0"
    check(claimed.entries, entry_ids, event_ids, key)
    assert {e.delivery for e in claimed.entries} == {Delivery.CLAIMED}
