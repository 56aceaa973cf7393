"""Enqueue once (docs/producer.md, "Enqueue once"): a send with an idempotency key appends at most once
per key and prefix within the window, atomically in ``idempotent_produce``, across a resharding, with
bounded memory. The lost-reply cases are in tests/dataplane/test_lost_reply.py, the cluster's in
tests/cluster/test_dataplane_cluster.py, the producer's Redis user's in tests/test_redis_acl.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from consumers import idempotency
from consumers.errors import InvalidRequest, NotReplicated
from consumers.producer import Producer
from coordinator.protocol.model import OrderingMode, Shard
from rsc_redis.keys import once_key, once_previous_key
from tests.dataplane.harness import Harness

V1 = [Shard(1, i) for i in range(2)]
V2 = [Shard(2, i) for i in range(3)]


def total(h: Harness, shards: list[Shard]) -> int:
    return sum(h.xlen(s) for s in shards)


def test_a_retry_with_the_same_key_gets_the_first_append_and_appends_nothing(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)

    first = h.producer.send(h.prefix, "customer-1", {"order": 7}, idempotency_key="order-7")
    again = h.producer.send(h.prefix, "customer-1", {"order": 7}, idempotency_key="order-7")
    other = h.producer.send(h.prefix, "customer-1", {"order": 8}, idempotency_key="order-8")

    assert not first.duplicate and again.duplicate and not other.duplicate
    assert (again.entry_id, again.event_id, again.shard, again.stream_key) == (
        first.entry_id,
        first.event_id,
        first.shard,
        first.stream_key,
    )
    assert other.entry_id != first.entry_id
    assert total(h, V1) == 2


def test_the_key_is_the_prefixs_not_the_partition_keys_shard(harness: Harness) -> None:
    """Same key, another partition key (another shard): still the first append, whatever it routes to."""
    h = harness
    h.create(shard_count=2)
    a, b = h.key_for(V1[0], 2), h.key_for(V1[1], 2)

    first = h.producer.send(h.prefix, a, 1, idempotency_key=b"job")
    again = h.producer.send(h.prefix, b, 2, idempotency_key="job")  # str and bytes: the same key

    assert again.duplicate and again.shard == V1[0] == first.shard and again.entry_id == first.entry_id
    assert (h.xlen(V1[0]), h.xlen(V1[1])) == (1, 0)


def test_keys_of_different_prefixes_do_not_meet(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    other = Harness(h.client, prefix="payments")
    other.create(shard_count=1)

    mine = h.producer.send(h.prefix, "k", 1, idempotency_key="job")
    theirs = h.producer.send("payments", "k", 1, idempotency_key="job")

    assert not mine.duplicate and not theirs.duplicate
    assert (h.xlen(Shard(1, 0)), other.xlen(Shard(1, 0))) == (1, 1)


def test_a_batch_appends_each_key_once_in_input_order_and_its_retry_appends_nothing(
    harness: Harness,
) -> None:
    h = harness
    h.create(shard_count=2)
    items: list[Any] = [("k-a", {"n": 0}), ("k-b", {"n": 1}), ("k-c", {"n": 2}), ("k-d", 3), ("k-e", 4)]
    keys = ["x", "y", "x", None, "y"]

    results = h.producer.send_batch(h.prefix, items, idempotency_keys=keys)

    assert [r.duplicate for r in results] == [False, False, True, False, True]
    assert results[2].entry_id == results[0].entry_id and results[2].event_id == results[0].event_id
    assert results[4].entry_id == results[1].entry_id
    assert total(h, V1) == 3
    # The first occurrence is the one appended: item 0's payload, not item 2's.
    (_, fields), = h.client.xrange(results[0].stream_key, results[0].entry_id, results[0].entry_id)
    assert b'{"n":0}' in fields[b"envelope"]

    retried = h.producer.send_batch(h.prefix, items, idempotency_keys=keys)

    assert [r.duplicate for r in retried] == [True, True, True, False, True]  # the keyless one appends
    assert [r.entry_id for i, r in enumerate(retried) if i != 3] == [
        r.entry_id for i, r in enumerate(results) if i != 3
    ]
    assert total(h, V1) == 4


def test_a_batch_larger_than_one_call_dedups_across_its_calls(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    count = Producer.max_entries_per_call + 100
    items = [(f"k{i}", i) for i in range(count)]
    keys = [f"job-{i % (count - 50)}" for i in range(count)]  # the last 50 repeat the first 50

    results = h.producer.send_batch(h.prefix, items, idempotency_keys=keys)

    assert sum(r.duplicate for r in results) == 50
    assert [r.entry_id for r in results[-50:]] == [r.entry_id for r in results[:50]]
    assert total(h, V1) == count - 50


def test_a_retry_across_a_resharding_finds_the_first_append_in_the_sealed_version(harness: Harness) -> None:
    """The key's scope is the prefix: the retry routes to version 2, the first append is in version 1."""
    h = harness
    h.create(shard_count=2)
    first = h.producer.send(h.prefix, "customer-1", 1, idempotency_key="job-1")
    h.change_shard_count(3, OrderingMode.STRICT)
    fresh = Producer(h.client)  # another process, which reads the new route

    stale_retry = h.producer.send(h.prefix, "customer-1", 1, idempotency_key="job-1")
    fresh_retry = fresh.send(h.prefix, "customer-1", 1, idempotency_key="job-1")
    new = fresh.send(h.prefix, "customer-1", 2, idempotency_key="job-2")

    for retry in (stale_retry, fresh_retry):
        assert retry.duplicate and retry.entry_id == first.entry_id and retry.shard == first.shard
        assert retry.routing_version == 1 and retry.stream_key == first.stream_key
    assert h.producer.route(h.prefix).version == 2  # the stale producer was refused, then re-routed
    assert new.routing_version == 2
    assert (total(h, V1), total(h, V2)) == (1, 1)


def test_a_key_is_forgotten_after_the_window(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    window_ms = idempotency.MIN_WINDOW_MS
    producer = Producer(h.client, idempotency_window_ms=window_ms)

    first = producer.send(h.prefix, "k", 1, idempotency_key="job")
    within = producer.send(h.prefix, "k", 1, idempotency_key="job")
    # Both generations expire on their own, at most two windows after the current one opened.
    assert 0 < h.client.pttl(once_key(h.prefix)) <= 2 * window_ms
    time.sleep(window_ms / 1000 + 0.05)
    after = producer.send(h.prefix, "k", 1, idempotency_key="job")
    again = producer.send(h.prefix, "k", 1, idempotency_key="job")

    assert within.duplicate and within.entry_id == first.entry_id
    assert not after.duplicate and after.entry_id != first.entry_id
    assert again.duplicate and again.entry_id == after.entry_id
    assert h.xlen(Shard(1, 0)) == 2
    # The window-old generation was closed into the previous one: the current one holds the new key.
    assert set(h.client.hkeys(once_key(h.prefix))) == {b"", b"job"}
    assert h.client.hget(once_key(h.prefix), "").split()[1] == b"1"  # one record written to it
    assert 0 < h.client.pttl(once_previous_key(h.prefix)) <= 2 * window_ms


def test_a_key_in_the_previous_generation_still_counts_within_the_window(harness: Harness) -> None:
    """A generation closes a window after it opened; the keys it took late are still young then, and a
    retry finds them in the previous generation."""
    h = harness
    h.create(shard_count=1)
    window_ms = 2_000
    producer = Producer(h.client, idempotency_window_ms=window_ms)
    producer.send(h.prefix, "k", 1, idempotency_key="early")  # opens the generation
    time.sleep(0.75 * window_ms / 1000)
    late = producer.send(h.prefix, "k", 2, idempotency_key="late")
    time.sleep(0.3 * window_ms / 1000)
    producer.send(h.prefix, "k", 3, idempotency_key="next")  # the generation is a window old: closed

    assert h.client.hexists(once_previous_key(h.prefix), "late")
    assert not h.client.hexists(once_key(h.prefix), "late")
    retried = producer.send(h.prefix, "k", 2, idempotency_key="late")
    assert retried.duplicate and retried.entry_id == late.entry_id
    assert h.xlen(Shard(1, 0)) == 3


def test_concurrent_retries_of_one_key_append_it_once(harness: Harness) -> None:
    """Several producers (threads, each with its own producer) send the same key at once: the look-up
    and the append are one function call, so exactly one appends and all get its entry."""
    h = harness
    h.create(shard_count=2)
    producers = [Producer(h.client) for _ in range(8)]
    start = threading.Barrier(len(producers))
    results: list[Any] = []

    def send(producer: Producer) -> None:
        start.wait()
        results.append(producer.send(h.prefix, "customer-1", {"job": 1}, idempotency_key="job-1"))

    threads = [threading.Thread(target=send, args=(p,)) for p in producers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    assert len(results) == len(producers)
    assert len({r.entry_id for r in results}) == 1 and sum(not r.duplicate for r in results) == 1
    assert total(h, V1) == 1


def test_memory_is_capped_and_past_the_cap_the_oldest_keys_are_forgotten(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    cap = idempotency.MIN_MAX_KEYS
    producer = Producer(h.client, idempotency_max_keys=cap)
    batch = 100
    sent = 3 * cap

    for start in range(0, sent, batch):
        producer.send_batch(
            h.prefix,
            [("k", i) for i in range(start, start + batch)],
            idempotency_keys=[f"job-{i}" for i in range(start, start + batch)],
        )
        held = h.client.hlen(once_key(h.prefix)) + h.client.hlen(once_previous_key(h.prefix))
        assert held <= cap + 2 * batch + 2  # the cap, plus the call that closes a generation

    assert h.xlen(Shard(1, 0)) == sent
    recent = producer.send_batch(
        h.prefix, [("k", 0)] * (cap // 2), idempotency_keys=[f"job-{i}" for i in range(sent - cap // 2, sent)]
    )
    oldest = producer.send(h.prefix, "k", 0, idempotency_key="job-0")
    assert all(r.duplicate for r in recent)  # the last cap / 2 keys are always remembered
    assert not oldest.duplicate  # forgotten early, inside the window: appended again
    assert h.xlen(Shard(1, 0)) == sent + 1


def test_keyless_and_keyed_sends_mix_and_the_plain_path_writes_no_idempotency_state(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)

    h.producer.send(h.prefix, "k", 1)
    h.producer.send_batch(h.prefix, [("k", 1), ("j", 2)])
    assert not h.client.exists(once_key(h.prefix), once_previous_key(h.prefix))
    keyless = h.producer.send_batch(h.prefix, [("k", 1), ("j", 2)], idempotency_keys=[None, None])

    assert not any(r.duplicate for r in keyless)
    assert not h.client.exists(once_key(h.prefix))  # nothing to remember
    assert total(h, V1) == 5


def test_a_lingering_producers_keyed_send_does_not_linger_and_is_deduplicated(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    producer = Producer(h.client, linger_ms=1000)

    started = time.monotonic()
    first = producer.send(h.prefix, "k", 1, idempotency_key="job")
    again = producer.send(h.prefix, "k", 1, idempotency_key="job")

    assert time.monotonic() - started < 1.0  # neither waited out the 1 s window
    assert again.duplicate and again.entry_id == first.entry_id
    assert h.xlen(Shard(1, 0)) == 1


def test_a_replicated_send_not_acknowledged_is_appended_and_its_retry_appends_nothing(
    harness: Harness,
) -> None:
    """No replica: NotReplicated (appended, not known to survive a failover); the retry with the same key
    answers the same entry instead of appending it again."""
    h = harness
    h.create(shard_count=1)
    producer = Producer(h.client, durability="replicated", replication_timeout_ms=1)

    with pytest.raises(NotReplicated) as caught:
        producer.send_batch(h.prefix, [("k", 1), ("k", 2)], idempotency_keys=["a", "a"])
    first, repeat = caught.value.results
    assert not first.duplicate and repeat.duplicate and repeat.entry_id == first.entry_id
    retried = producer.send(h.prefix, "k", 1, idempotency_key="a", durability="primary")

    assert retried.duplicate and retried.entry_id == first.entry_id
    assert h.xlen(Shard(1, 0)) == 1


def test_deleting_the_prefix_deletes_its_idempotency_keys(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    producer = Producer(h.client, idempotency_window_ms=idempotency.MIN_WINDOW_MS)
    producer.send(h.prefix, "k", 1, idempotency_key="job")
    time.sleep(idempotency.MIN_WINDOW_MS / 1000 + 0.05)
    producer.send(h.prefix, "k", 1, idempotency_key="job-2")  # both generations exist now
    assert h.client.exists(once_key(h.prefix), once_previous_key(h.prefix)) == 2

    h.store.delete_prefix(h.prefix, force=True)

    assert h.client.exists(once_key(h.prefix), once_previous_key(h.prefix)) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda p, prefix: p.send(prefix, "k", 1, idempotency_key=""),
        lambda p, prefix: p.send(prefix, "k", 1, idempotency_key="x" * (idempotency.MAX_KEY_BYTES + 1)),
        lambda p, prefix: p.send(prefix, "k", 1, idempotency_key=7),
        lambda p, prefix: p.send_batch(prefix, [("k", 1), ("j", 2)], idempotency_keys=["a"]),
        lambda p, prefix: p.send_batch(prefix, [("k", 1)], idempotency_keys="a"),
        lambda p, prefix: p.send_batch(prefix, [("k", 1), ("j", 2)], idempotency_keys=["a", b""]),
        lambda p, prefix: p.send(prefix, "k", 1, idempotency_key="a", durability="sometimes"),
    ],
)
def test_bad_idempotency_arguments_are_refused_before_anything_is_written(harness: Harness, call) -> None:
    h = harness
    h.create(shard_count=1)

    with pytest.raises(InvalidRequest):
        call(h.producer, h.prefix)

    assert h.xlen(Shard(1, 0)) == 0 and not h.client.exists(once_key(h.prefix))


@pytest.mark.parametrize(
    "settings",
    [
        {"idempotency_window_ms": idempotency.MIN_WINDOW_MS - 1},
        {"idempotency_window_ms": idempotency.MAX_WINDOW_MS + 1},
        {"idempotency_window_ms": 1.5e6},
        {"idempotency_max_keys": idempotency.MIN_MAX_KEYS - 1},
        {"idempotency_max_keys": True},
    ],
)
def test_out_of_range_window_and_cap_are_refused(harness: Harness, settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        Producer(harness.client, **settings)


def test_xadd_idmp_is_detected_from_hello_and_this_redis_has_none(harness: Harness) -> None:
    assert idempotency.server_has_xadd_idmp(harness.client) is False  # the Redis 7 the tests run
    assert idempotency.xadd_idmp_in({b"server": b"redis", b"version": b"8.6.0"})
    assert idempotency.xadd_idmp_in({"server": "redis", "version": "9.0.1"})
    assert not idempotency.xadd_idmp_in({b"server": b"redis", b"version": b"8.4.2"})
    assert not idempotency.xadd_idmp_in({b"server": b"valkey", b"version": b"9.0.0"})
    assert not idempotency.xadd_idmp_in({b"server": b"redis", b"version": b"unknown"})
