"""``ordering="key"`` and ``ordering="none"`` on a real Redis (consumers/member/concurrent.py): entries of
one shard run at once, per-key order holds under "key", every entry is acked on its own, the window is
bounded, a failing key parks only its own lane, long jobs are not delivered twice, and a revoke waits
for running jobs. Every wait is a bounded poll for a condition; no sleep is an assertion."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

from consumers.listener import ListenerConfigError
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard
from rsc_redis.keys import stream_key
from tests.consumers.harness import (
    GROUP,
    PREFIX,
    Cluster,
    Recorder,
    assert_no_overlap_per_key,
    assert_per_key_order,
    eventually,
    overlapped,
)

WIDE = Runtime(max_concurrency=8, batch_size=4, idle_backoff_min_ms=2, idle_backoff_max_ms=20)


def _sleeping(seconds: float) -> Any:
    def handler(entry: Any) -> None:
        threading.Event().wait(seconds)

    return handler


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_entries_of_one_shard_run_at_once_and_each_is_acked(cluster: Cluster, ordering: str) -> None:
    keys = [cluster.key_for(0, n) for n in range(8)]  # 8 keys, all on shard v1:0
    sent = cluster.send_many(keys, per_key=6)
    recorder = Recorder(_sleeping(0.02))
    m = cluster.member(recorder, runtime=WIDE, ordering=ordering)
    eventually(lambda: recorder.handled_ns() == set(range(sent)), what="every event handled")
    calls = recorder.snapshot()
    assert overlapped(calls, lambda c: c.shard), "entries of one shard ran one at a time"
    assert {c.member for c in calls} == {m.label}  # the member's worker threads ran them
    if ordering == "key":
        assert_per_key_order(calls)
        assert_no_overlap_per_key(calls)
    assert len(calls) == sent  # each once
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")
    assert m.stats.handled == sent and m.stats.failed == 0
    labels = {"stream_prefix": PREFIX, "consumer_group": GROUP, "member_id": m.member_id}
    assert REGISTRY.get_sample_value("rsc_member_handled_total", labels) == sent
    eventually(lambda: REGISTRY.get_sample_value("rsc_member_in_flight", labels) == 0, what="window empty")


def test_ordering_is_validated_at_declaration() -> None:
    from consumers.listener import Listener

    def fn(entry: Any) -> None: ...

    for bad in ("keys", "", None, 1):
        with pytest.raises(ListenerConfigError, match="ordering must be"):
            Listener(fn, stream_prefix="p", consumer_group="g", ordering=bad)  # type: ignore[arg-type]
    with pytest.raises(ListenerConfigError, match="max_in_flight requires ordering"):
        Listener(fn, stream_prefix="p", consumer_group="g", max_in_flight=8)
    for bad_window in (0, 10_001, True, 2.5):
        with pytest.raises(ListenerConfigError, match="max_in_flight must be"):
            Listener(fn, stream_prefix="p", consumer_group="g", ordering="key", max_in_flight=bad_window)
    item = Listener(fn, stream_prefix="p", consumer_group="g", ordering="none", max_in_flight=5)
    assert (item.ordering.value, item.max_in_flight) == ("none", 5)
    assert "ordering='none', max_in_flight=5" in repr(item)
    default = Listener(fn, stream_prefix="p", consumer_group="g")
    assert (default.ordering.value, default.max_in_flight) == ("shard", 64)


def test_a_failing_key_parks_only_its_own_lane(cluster: Cluster) -> None:
    """Under "key" with on_error="redeliver", the failing entry's later entries wait (in order), the other
    keys of the same shard go on; the failing entry is retried after its backoff (no busy loop: its
    delivery count grows by one per retry) and dead-lettered after max_deliveries; then its key goes on."""
    bad, *good = [cluster.key_for(0, n) for n in range(4)]
    attempts: list[int] = []

    def handler(entry: Any) -> None:
        if entry.payload.get("fail"):
            attempts.append(entry.deliveries)
            raise RuntimeError("always")

    recorder = Recorder(handler)
    m = cluster.member(
        recorder, runtime=WIDE, ordering="key", on_error="redeliver", max_deliveries=3,
        redeliver_backoff_ms=300, dead_letter=True,
    )  # fmt: skip
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    cluster.send(bad, fail=True)
    after_bad = [cluster.send(bad) for _ in range(3)]
    eventually(lambda: m.parked_keys().get("v1:0", {}).get(bad) is not None, what="the bad key parked")
    sent_good = cluster.send_many(good, per_key=5)
    eventually(
        lambda: {c.n for c in recorder.snapshot() if c.key in good} >= set(range(4, 4 + sent_good)),
        what="the other keys of the shard handled while the bad key waits",
    )
    eventually(lambda: all(c in {r.entry_id for r in recorder.snapshot()} for c in after_bad),
               what="the bad key goes on once its entry is dead-lettered")  # fmt: skip
    assert attempts == [1, 2, 3]  # one retry per backoff, with the delivery count Redis keeps
    calls = recorder.snapshot()
    assert_per_key_order(calls)
    attempt_calls = sorted((c for c in calls if c.n == 0), key=lambda c: c.started)
    assert len(attempt_calls) == 3
    # The bad key's later entries waited for its last attempt; the other keys ran before that attempt.
    assert all(c.started >= attempt_calls[-1].ended for c in calls if c.entry_id in after_bad)
    assert max(c.ended for c in calls if c.key in good) < attempt_calls[-1].started
    assert m.stats.dead_lettered == 1
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked or dead-lettered")
    assert m.parked_keys() == {}


def test_share_mode_parks_the_failed_entry_and_lets_everything_else_flow(cluster: Cluster) -> None:
    key = cluster.key_for(1)
    tries: list[int] = []

    def handler(entry: Any) -> None:
        if entry.payload.get("fail") and entry.deliveries < 3:
            tries.append(entry.deliveries)
            raise RuntimeError("not yet")

    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering="none", on_error="redeliver",
                       redeliver_backoff_ms=200, max_deliveries=5)  # fmt: skip
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    failing = cluster.send(key, fail=True)
    later = [cluster.send(key) for _ in range(5)]  # the same key: "none" keeps no order
    eventually(lambda: {c.entry_id for c in recorder.snapshot()} >= set(later), what="the rest flows")
    eventually(lambda: any(c.entry_id == failing and c.n == 0 for c in recorder.snapshot()[-1:])
               or m.stats.redelivered >= 2, what="the failed entry redelivered")  # fmt: skip
    eventually(lambda: not any(cluster.all_pending().values()), what="handled on its third delivery")
    assert tries == [1, 2]
    assert m.stats.redelivered == 2 and m.stats.failed == 2


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_the_window_bounds_what_a_slow_key_holds(cluster: Cluster, ordering: str) -> None:
    """One key's handler blocks: the unit stops reading the shard once the window is full. Under "none"
    that is max(max_in_flight, batch_size) entries; under "key" the entries waiting behind the blocked
    one count against the entries' bound (10 times that), so the key holds up only itself until then.
    Once the handler returns everything is handled (in order under "key")."""
    gate = threading.Event()
    started = threading.Event()

    def handler(entry: Any) -> None:
        started.set()
        assert gate.wait(30)

    key = cluster.key_for(2)
    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering=ordering, max_in_flight=6)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    sent = 100
    for _ in range(sent):
        cluster.send(key)
    eventually(started.is_set, what="a handler blocked")
    held = max(6, WIDE.batch_size) * (10 if ordering == "key" else 1)
    # Give the unit every chance to read past its window: it is polled until its pending list stops growing.
    seen: list[int] = []

    def settled() -> bool:
        seen.append(len(cluster.pending("v1:2")))
        return len(seen) > 20 and seen[-1] == seen[-20]

    eventually(settled, what="the pending list settled")
    assert held - WIDE.batch_size < seen[-1] <= held
    labels = {"stream_prefix": PREFIX, "consumer_group": GROUP, "member_id": m.member_id}
    assert REGISTRY.get_sample_value("rsc_member_in_flight", labels) == seen[-1]
    gate.set()
    eventually(lambda: recorder.count() == sent, what="all handled")
    if ordering == "key":
        assert_per_key_order(recorder.snapshot())
    eventually(lambda: not cluster.pending("v1:2"), what="everything acked")


def test_a_failing_key_with_many_entries_waiting_does_not_starve_its_shard(cluster: Cluster) -> None:
    """A key that fails on every delivery (on_error="redeliver", parked between tries) has more entries
    waiting behind it than max_in_flight: the other keys of its shard are still read and handled."""
    bad = cluster.key_for(1)
    others = [cluster.key_for(1, n) for n in range(1, 4)]

    def handler(entry: Any) -> None:
        if entry.partition_key == bad:
            raise RuntimeError("always")

    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering="key", max_in_flight=8, on_error="redeliver",
                       max_deliveries=1000, redeliver_backoff_ms=200)  # fmt: skip
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    for _ in range(30):  # more than max_in_flight behind the failing one
        cluster.send(bad)
    eventually(lambda: m.parked_keys().get("v1:1", {}).get(bad) is not None, what="the bad key parked")
    sent = cluster.send_many(others, per_key=20)
    eventually(lambda: len([c for c in recorder.snapshot() if c.key in others]) == sent,
               what="the other keys of the shard handled")  # fmt: skip
    assert_per_key_order(recorder.snapshot())
    assert {c.key for c in recorder.snapshot() if c.key == bad} == {bad}
    assert all(c.n == 0 for c in recorder.snapshot() if c.key == bad)  # only its first entry was tried


@pytest.mark.parametrize("ordering", ["shard", "key", "none"])
def test_a_job_longer_than_the_lease_is_delivered_once(cluster: Cluster, ordering: str) -> None:
    """The lease is 2 s; a job takes 2.5 s while the member heartbeats: nobody else gets it, it is not
    delivered again, and the member is never fenced."""
    recorder = Recorder(_sleeping(2.5))
    m = cluster.member(recorder, runtime=WIDE, ordering=ordering)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    ids = [cluster.send(cluster.key_for(i)) for i in range(4)]
    eventually(lambda: recorder.count() == 4, timeout_s=20, what="four long jobs done")
    eventually(lambda: not any(cluster.all_pending().values()), what="acked")
    assert sorted(c.entry_id for c in recorder.snapshot()) == sorted(ids)
    assert m.stats.fenced == 0


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_a_revoke_waits_for_running_jobs_which_see_it(cluster: Cluster, ordering: str) -> None:
    """A runs a long job on v1:2 when B joins and v1:2 moves: the job sees ``entry.revoked`` set, A
    releases v1:2 only once the job returned and was acked, and B never handles that entry."""
    saw_revoked = threading.Event()
    running = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("long"):
            running.set()
            if entry.revoked.wait(20):  # a long job that stops early when its shard is being revoked
                saw_revoked.set()

    recorder = Recorder(handler)
    a = cluster.member(recorder, runtime=WIDE, ordering=ordering)
    eventually(lambda: len(a.running_shards) == 4, what="A runs all four shards")
    long_id = cluster.send(cluster.key_for(2), long=True)
    eventually(running.is_set, what="the long job runs")
    b = cluster.member(recorder, runtime=WIDE, ordering=ordering)
    eventually(lambda: cluster.stable(a, b), what="the rebalance completes")
    assert saw_revoked.is_set()
    assert [c.member for c in recorder.snapshot() if c.entry_id == long_id] == [a.label]
    assert not cluster.pending("v1:2")
    cluster.send(cluster.key_for(2))
    owner = a if "v1:2" in {str(s) for s in a.assignment} else b
    eventually(lambda: "v1:2" in recorder.by_member().get(owner.label, set()), what="the owner reads on")


@pytest.mark.parametrize("ordering", ["shard", "key"])
def test_a_job_past_the_revocation_timeout_has_its_ack_fenced_and_goes_to_the_next_owner(
    redis_url: str, ordering: str
) -> None:
    """A runs a job on v1:2 that ignores ``entry.revoked`` and outlasts the revocation timeout (1 s) after
    B joins: the tick expires A (REVOCATION_TIMEOUT) and A is fenced; the job returns after that, its
    ack is refused and counted (``rsc_member_acks_fenced``), and the entry is handled once more by v1:2's
    next owner; A rejoins, nothing stays pending."""
    cluster = Cluster(redis_url, revocation_timeout_ms=1_000)
    ticking = threading.Event()

    def tick() -> None:
        while not ticking.wait(0.1):
            cluster.store.tick()  # Celery beat's job in production

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    release = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("long") and entry.delivery == "new":
            release.wait(20)

    try:
        recorder = Recorder(handler)
        a = cluster.member(recorder, runtime=WIDE, ordering=ordering)
        eventually(lambda: len(a.running_shards) == 4, what="A runs all four shards")
        long_id = cluster.send(cluster.key_for(2), long=True)
        eventually(lambda: cluster.pending("v1:2"), what="A holds the long job")
        b = cluster.member(recorder, runtime=WIDE, ordering=ordering)
        eventually(lambda: a.stats.fenced >= 1, what="A expired past the revocation timeout, fenced")
        release.set()  # the job returns after the fence: its ack is refused
        # Handled twice: the long call (its ack refused), then once more by v1:2's next owner (B, or A
        # rejoined under the same member id), which re-reads it as pending.
        calls = eventually(lambda: (c := [c for c in recorder.snapshot() if c.entry_id == long_id])
                           and len(c) == 2 and c, what="the entry handled again")  # fmt: skip
        assert calls[0].member == a.label
        labels = {"stream_prefix": PREFIX, "consumer_group": GROUP, "member_id": a.member_id}
        eventually(lambda: REGISTRY.get_sample_value("rsc_member_acks_fenced_total", labels) == 1,
                   what="A's refused ack counted")  # fmt: skip
        eventually(lambda: cluster.stable(a, b), what="A rejoined, the group is stable")
        eventually(lambda: not any(cluster.all_pending().values()), what="nothing pending")
    finally:
        release.set()
        ticking.set()
        ticker.join(5)
        cluster.close()


def test_a_slow_key_holds_the_trim_point_until_it_is_acked(cluster: Cluster) -> None:
    """Under "key", entries of other keys after a slow one are handled and acked, but retention trims the
    shard's stream only below the slow key's pending entry; once it is acked, the stream is trimmed."""
    gate = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("slow"):
            assert gate.wait(30)

    slow_key, *others = [cluster.key_for(3, n) for n in range(3)]
    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering="key")
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    held = cluster.send(slow_key, slow=True)
    cluster.send_many(others, per_key=10)
    eventually(lambda: recorder.count() == 20, what="the other keys handled")
    eventually(lambda: cluster.pending("v1:3") == [(held, m.member_id)], what="only the slow one pending")
    stream = stream_key(PREFIX, Shard(1, 3))
    cluster.store.retention_pass()
    assert cluster.client.xlen(stream) == 21  # nothing trimmed: the first entry is still pending
    assert cluster.client.xrange(stream, count=1)[0][0].decode() == held
    gate.set()
    eventually(lambda: not cluster.pending("v1:3"), what="the slow one acked")
    cluster.store.retention_pass()
    assert cluster.client.xlen(stream) == 0  # everything acked by the group: trimmed


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_a_blocked_job_holds_up_no_other_key(cluster: Cluster, ordering: str) -> None:
    """While one job blocks a worker, entries of other keys that arrive one by one keep being handled
    by the other workers (a worker inside a long job is not counted as coming for them)."""
    gate = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("slow"):
            assert gate.wait(30)

    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering=ordering)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    cluster.send(cluster.key_for(0), slow=True)
    eventually(lambda: cluster.pending("v1:0"), what="the slow job runs")
    try:
        for n in range(1, 6):
            cluster.send(cluster.key_for(0, n))
            eventually(lambda n=n: recorder.count() == n, timeout_s=5, what=f"entry {n} handled meanwhile")
    finally:
        gate.set()
    eventually(lambda: recorder.count() == 6, what="the slow one too")


def test_handlers_that_turn_slow_are_spread_over_the_workers_at_once(cluster: Cluster) -> None:
    """The unit learnt that the handler is fast (so it runs a few entries per turn, or a batch on its own
    thread); then it turns slow: the entries taken with a slow one go back to the other workers at once
    instead of waiting behind it one after another."""
    slow = threading.Event()

    def handler(entry: Any) -> None:
        if slow.is_set():
            threading.Event().wait(0.2)

    recorder = Recorder(handler)
    m = cluster.member(recorder, runtime=WIDE, ordering="none")
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    fast = cluster.send_many([cluster.key_for(0, n) for n in range(8)], per_key=10)
    eventually(lambda: recorder.count() == fast, what="fast entries handled")
    slow.set()
    cluster.send_many([cluster.key_for(0, n) for n in range(4)], per_key=1)  # one batch of the runtime
    eventually(lambda: recorder.count() == fast + 4, what="the slow ones handled")
    late = recorder.snapshot()[fast:]
    # Run at once on several workers (overlapping), not one after another on one thread.
    assert overlapped(late, lambda c: c.shard)


STRAIGHT = Runtime(max_concurrency=8, batch_size=8, idle_backoff_min_ms=2, idle_backoff_max_ms=20)


@pytest.mark.parametrize(
    ("ordering", "on_error"), [("key", "redeliver"), ("key", "keep"), ("none", "redeliver")]
)
def test_a_fast_batch_that_fails_midway_goes_on_in_lanes(
    cluster: Cluster, ordering: str, on_error: str
) -> None:
    """Once the handler is known to be fast and the window is empty, a batch runs straight on the
    dispatcher's thread in stream order (consumers/member/concurrent.py, ``_run_straight``). An entry that
    fails there becomes its lane's head: under "redeliver" its key's later entries wait for the retry while
    the rest of the batch goes on; under "keep" it stays pending and its key goes on."""
    k1, k2, k3 = (cluster.key_for(0, n) for n in range(3))

    def handler(entry: Any) -> None:
        if entry.payload.get("fail") and (on_error == "keep" or entry.deliveries < 2):
            raise RuntimeError("not yet")

    recorder = Recorder(handler)
    retries = {"redeliver_backoff_ms": 300, "max_deliveries": 5} if on_error == "redeliver" else {}
    m = cluster.member(recorder, runtime=STRAIGHT, ordering=ordering, on_error=on_error, **retries)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    warm = cluster.send_many([k1, k2, k3], per_key=8)  # the unit learns that the handler is fast
    eventually(lambda: recorder.count() == warm, what="warm-up handled")
    eventually(lambda: not any(cluster.all_pending().values()), what="warm-up acked")
    # One append of the whole batch (one call per shard), so one read takes it all.
    items = [(k2, {"n": warm}), (k1, {"n": warm + 1, "fail": True}), (k1, {"n": warm + 2}),
             (k3, {"n": warm + 3}), (k2, {"n": warm + 4}), (k1, {"n": warm + 5})]  # fmt: skip
    ids = [r.entry_id for r in cluster.producer.send_batch(PREFIX, items)]
    failing, later_k1 = ids[1], [ids[2], ids[5]]
    others = [ids[0], ids[3], ids[4]]
    eventually(lambda: {c.entry_id for c in recorder.snapshot()} >= set(ids), what="the batch handled")
    calls = recorder.snapshot()[warm:]
    attempts = sorted((c for c in calls if c.entry_id == failing), key=lambda c: c.started)
    assert len(calls) == len(ids) + len(attempts) - 1  # each once, the failing one per attempt
    first_try = attempts[0]
    # Straight: the batch ran one entry after another (no other entry overlapped the failing one).
    alone = [c.ended <= first_try.started or c.started >= first_try.ended for c in calls if c != first_try]
    assert all(alone)
    if on_error == "keep":
        assert len(attempts) == 1
        assert all(any(c.entry_id == i for c in calls) for i in later_k1)  # its key went on
        eventually(lambda: [e for e, _ in cluster.pending("v1:0")] == [failing], what="only it pending")
        assert m.stats.failed == 1
        return
    eventually(lambda: len([c for c in recorder.snapshot() if c.entry_id == failing]) == 2, what="retried")
    calls = recorder.snapshot()[warm:]
    retry = max((c for c in calls if c.entry_id == failing), key=lambda c: c.started)
    assert retry.started - first_try.ended >= 0.25  # after its backoff, not in a busy loop
    assert all(c.ended <= retry.started for c in calls if c.entry_id in others)  # the rest went on
    if ordering == "key":
        assert all(c.started >= retry.ended for c in calls if c.entry_id in later_k1)  # its key waited
        assert_per_key_order(calls)
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")
    assert m.stats.failed == 1 and m.stats.redelivered == 1
