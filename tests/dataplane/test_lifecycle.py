"""What the data plane adds for the entry lifecycle (issue 7): delivery counts on every entry, the
shard's redeliver token on every read of new entries, and the fenced ``dead_letter`` script (the
contract's "Dead-letter entry format")."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from consumers.dataplane import DeadLetterOutcome, FenceStatus, scripts
from coordinator.protocol.model import Shard
from coordinator.store.functions import keys_from_settings
from rsc_redis.dead_letter_mac import Verdict, verify
from rsc_redis.keys import dead_letter_key, lease_records_key, meta_key, redeliver_key
from tests.dataplane.harness import Harness
from tests.dataplane.test_fencing import two_members

V1_0 = Shard(1, 0)


def redis_now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


# ------------------------------------------------------------------------------------ delivery counts


def test_every_entry_carries_its_delivery_count(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=1_000)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 3)

    assert [e.deliveries for e in h.plane.read("m1", m1.epoch, V1_0, 10).entries] == [1, 1, 1]
    again = h.plane.read_own_pending("m1", m1.epoch, V1_0, 2)  # a page: one XPENDING range call
    assert [(e.entry_id, e.deliveries) for e in again.entries] == [(ids[0], 2), (ids[1], 2)]
    rest = h.plane.read_own_pending("m1", m1.epoch, V1_0, 10, after_id=ids[0])
    assert [(e.entry_id, e.deliveries) for e in rest.entries] == [(ids[1], 3), (ids[2], 2)]
    h.client.xdel(h.stream(V1_0), ids[1])  # deleted while pending: acked and skipped, counts still line up
    remaining = h.plane.read_own_pending("m1", m1.epoch, V1_0, 10).entries
    assert [(e.entry_id, e.deliveries) for e in remaining] == [(ids[0], 3), (ids[2], 3)]

    time.sleep(1.05)  # m1's lease ends; m2 takes over its orphans
    h.store.tick()
    m2 = h.join("m2")
    claimed, _ = h.plane.claim_orphans("m2", m2.epoch, V1_0, 10)
    assert [(e.entry_id, e.deliveries) for e in claimed.entries] == [(ids[0], 4), (ids[2], 4)]
    rows = h.client.xpending_range(h.stream(V1_0), h.group, "-", "+", 10)
    assert [r["times_delivered"] for r in rows] == [4, 4]  # what Redis itself says


# ------------------------------------------------------------------------------------ redeliver token


def test_a_read_of_new_entries_returns_the_shards_redeliver_token(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    assert h.plane.read("m1", m1.epoch, V1_0, 10).redeliver_token == "0"  # never asked
    h.client.hincrby(redeliver_key(h.prefix, h.group), "v1:0", 1)  # what the store's redeliver does
    h.produce(V1_0, 2, 1)
    result = h.plane.read("m1", m1.epoch, V1_0, 10)
    assert result.redeliver_token == "1" and len(result.entries) == 1
    assert h.plane.read("m1", m1.epoch, Shard(1, 1), 10).redeliver_token == "0"  # per shard
    assert h.plane.read_own_pending("m1", m1.epoch, V1_0, 10).redeliver_token == ""  # not looked at


def test_a_claim_returns_the_shards_redeliver_token_too(harness: Harness) -> None:
    """A new owner's first claim gives it the token to start from, before it hands anything out."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    claimed, cursor = h.plane.claim_orphans("m1", m1.epoch, V1_0, 10)
    assert (claimed.entries, claimed.redeliver_token, cursor) == ([], "0", "0-0")
    h.client.hincrby(redeliver_key(h.prefix, h.group), "v1:0", 2)
    assert h.plane.claim_orphans("m1", m1.epoch, V1_0, 10)[0].redeliver_token == "2"
    fenced, _ = h.plane.claim_orphans("m1", m1.epoch + 1, V1_0, 10)
    assert (fenced.status, fenced.redeliver_token) == (FenceStatus.STALE_EPOCH, "")


@pytest.mark.parametrize(("script", "extra"), [("read_new", [10]), ("claim", [10, "0-0"])])
def test_reads_refuse_a_redeliver_key_of_another_group(
    harness: Harness, script: str, extra: list[Any]
) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    registered = scripts.function(h.client, script)
    with pytest.raises(redis.ResponseError, match="is not the redeliver key of group billing"):
        registered(
            keys=[
                meta_key(h.prefix),
                h.stream(V1_0),
                redeliver_key(h.prefix, "other"),
                lease_records_key(h.prefix),
            ],
            args=[h.group, "m1", m1.epoch, "v1:0", *extra],
        )


@pytest.mark.parametrize(
    ("script", "extra"), [("read_new", [10]), ("ack", ["1-0"]), ("read_pending", [10, "0-0"])]
)
def test_fenced_scripts_refuse_a_last_key_that_is_not_the_lease_renewal_key(
    harness: Harness, script: str, extra: list[Any]
) -> None:
    """The fence reads the member's own lease renewal from the last key: another prefix's (or any other)
    key there is refused before anything is read or written."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    registered = scripts.function(h.client, script)
    keys = [meta_key(h.prefix), h.stream(V1_0)]
    if script == "read_new":
        keys.append(redeliver_key(h.prefix, h.group))
    for wrong in (lease_records_key("other"), redeliver_key(h.prefix, h.group)):
        with pytest.raises(redis.ResponseError, match="is not the lease-renewal key of"):
            registered(keys=[*keys, wrong], args=[h.group, "m1", m1.epoch, "v1:0", *extra])


# ------------------------------------------------------------------------------------ dead letters


def test_dead_letter_copies_the_entry_with_its_provenance_and_acks_it_atomically(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    h.plane.read("m1", m1.epoch, V1_0, 10)
    h.plane.read_own_pending("m1", m1.epoch, V1_0, 1)  # the first entry is now on its 2nd delivery
    ((_, source_fields),) = h.client.xrange(h.stream(V1_0), ids[0], ids[0])
    before_ms = redis_now_ms(h.client)

    result = h.plane.dead_letter("m1", m1.epoch, V1_0, ids[0], "ValueError: " + "x" * 2_000)

    assert result.ok and result.dead_lettered and result.outcome is DeadLetterOutcome.DEAD_LETTERED
    assert result.deliveries == 2
    dlq = dead_letter_key(h.prefix, h.group)
    ((dlq_id, fields),) = h.client.xrange(dlq)
    assert result.dead_letter_id == dlq_id.decode()
    names = [k.decode() for k in fields]
    assert names == [k.decode() for k in source_fields] + [
        "dlq_source_shard",
        "dlq_source_id",
        "dlq_deliveries",
        "dlq_error",
        "dlq_member_id",
        "dlq_at_ms",
        "dlq_mac",
    ]
    assert {k: v for k, v in fields.items() if not k.startswith(b"dlq_")} == source_fields
    # Signed with the keys the coordinator rendered into the library (rsc_redis/dead_letter_mac.py).
    assert verify(keys_from_settings(), dlq, fields) is Verdict.SIGNED
    flat = [item for name, value in fields.items() if name != b"dlq_mac" for item in (name, value)]
    assert fields[b"dlq_mac"].decode() == keys_from_settings()[0].mac(dlq, flat)
    assert fields[b"dlq_source_shard"] == b"v1:0" and fields[b"dlq_source_id"] == ids[0].encode()
    assert fields[b"dlq_deliveries"] == b"2" and fields[b"dlq_member_id"] == b"m1"
    assert fields[b"dlq_error"] == ("ValueError: " + "x" * 2_000)[:1_000].encode()
    assert before_ms <= int(fields[b"dlq_at_ms"]) <= redis_now_ms(h.client)
    assert h.pending(V1_0) == [(ids[1], "m1")]  # acked with the copy; the other one untouched

    # Again (a call re-sent after a lost reply, say): not pending any more, nothing more happens.
    again = h.plane.dead_letter("m1", m1.epoch, V1_0, ids[0], "ValueError: x")
    assert again.ok and again.outcome is DeadLetterOutcome.NOT_PENDING and not again.dead_lettered
    assert h.client.xlen(dlq) == 1


def test_a_fenced_dead_letter_changes_nothing(harness: Harness) -> None:
    h = harness
    mine, theirs = two_members(h)
    m1, m2 = h.members["m1"], h.members["m2"]
    (entry_id,) = h.produce(mine, 2, 1)
    h.plane.read("m1", m1.epoch, mine, 10)
    before = h.snapshot(mine)

    refusals = {
        "not the owner": h.plane.dead_letter("m2", m2.epoch, mine, entry_id, "E: x"),
        "an epoch from the future": h.plane.dead_letter("m1", m1.epoch + 1, mine, entry_id, "E: x"),
        "an epoch from before the shard was m1's": h.plane.dead_letter("m1", -5, mine, entry_id, "E: x"),
        "not a member": h.plane.dead_letter("ghost", 1, mine, entry_id, "E: x"),
    }

    assert {what: r.status for what, r in refusals.items()} == {
        "not the owner": FenceStatus.NOT_OWNER,
        "an epoch from the future": FenceStatus.STALE_EPOCH,
        "an epoch from before the shard was m1's": FenceStatus.STALE_EPOCH,
        "not a member": FenceStatus.MEMBER_FENCED,
    }
    assert all(not r.dead_lettered and r.outcome is None for r in refusals.values())
    assert h.snapshot(mine) == before
    assert h.client.exists(dead_letter_key(h.prefix, h.group)) == 0
    assert h.pending(mine) == [(entry_id, "m1")]
    assert theirs != mine


def test_dead_letter_of_an_entry_pending_for_another_consumer_does_nothing(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    (entry_id,) = h.produce(V1_0, 1, 1)
    h.client.xreadgroup(h.group, "previous-owner", {h.stream(V1_0): ">"})
    result = h.plane.dead_letter("m1", m1.epoch, V1_0, entry_id, "E: x")
    assert result.ok and result.outcome is DeadLetterOutcome.NOT_PENDING
    assert h.pending(V1_0) == [(entry_id, "previous-owner")]
    assert h.client.exists(dead_letter_key(h.prefix, h.group)) == 0


def test_dead_letter_of_a_pending_entry_deleted_from_the_stream_acks_it_and_copies_nothing(
    harness: Harness,
) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    (entry_id,) = h.produce(V1_0, 1, 1)
    h.plane.read("m1", m1.epoch, V1_0, 10)
    h.client.xdel(h.stream(V1_0), entry_id)
    result = h.plane.dead_letter("m1", m1.epoch, V1_0, entry_id, "E: x")
    assert result.ok and result.outcome is DeadLetterOutcome.GONE
    assert h.pending(V1_0) == []
    assert h.client.exists(dead_letter_key(h.prefix, h.group)) == 0


def test_the_owner_may_dead_letter_on_a_shard_it_is_releasing(harness: Harness) -> None:
    """Fenced like an ack: a member finishes what it read before it releases a revoked shard."""
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    ids = {shard: h.produce(shard, 2, 1)[0] for shard in (V1_0, Shard(1, 1))}
    for shard in ids:
        h.plane.read("m1", m1.epoch, shard, 10)
    h.join("m2")
    m1 = h.heartbeat("m1", release_revoked=False)
    (releasing,) = m1.revoking
    assert h.plane.read("m1", m1.epoch, releasing, 10).status is FenceStatus.NOT_OWNER
    result = h.plane.dead_letter("m1", m1.epoch, releasing, ids[releasing], "E: x")
    assert result.dead_lettered and h.pending(releasing) == []


def test_dead_letter_refuses_a_dead_letter_key_of_another_group(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    (entry_id,) = h.produce(V1_0, 1, 1)
    h.plane.read("m1", m1.epoch, V1_0, 10)
    script = scripts.function(h.client, "dead_letter")
    with pytest.raises(redis.ResponseError, match="is not the dead-letter key"):
        script(
            keys=[
                meta_key(h.prefix),
                h.stream(V1_0),
                dead_letter_key(h.prefix, "other"),
                lease_records_key(h.prefix),
            ],
            args=[h.group, "m1", m1.epoch, "v1:0", entry_id, "E: x"],
        )
    assert h.pending(V1_0) == [(entry_id, "m1")]
