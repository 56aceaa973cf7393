"""Listener error policies (issue 7, B): ``on_error="keep"`` (the default, unchanged) and the opt-in
``on_error="redeliver"`` with ``max_deliveries`` and ``dead_letter``. Real members on the real Redis."""

from __future__ import annotations

import logging
import re
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from consumers.listener import ErrorPolicy, Listener, ListenerConfigError, ListenerRegistry, OnError, listener
from consumers.member.policy import Decision, FailurePolicy, KeptEntries, Next
from coordinator.protocol.envelope import fields_of
from rsc_redis.keys import dead_letter_key, redeliver_key
from tests.consumers.harness import GROUP, PREFIX, Cluster, Recorder, eventually

DLQ = dead_letter_key(PREFIX, GROUP)
FAST_RETRY = {"on_error": "redeliver", "redeliver_backoff_ms": 10}


class Poison:
    """Raises for entries whose payload says ``poison`` (``times`` times each; forever if None) and
    records every call as (n, delivery, deliveries, ok)."""

    def __init__(self, times: int | None = None) -> None:
        self.times = times
        self.calls: list[tuple[int, str, int, bool]] = []
        self._failures: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, entry: Any) -> None:
        n = entry.payload["n"]
        with self._lock:
            tries_left = self.times is None or self._failures.get(n, 0) < self.times
            fail = bool(entry.payload.get("poison")) and tries_left
            if fail:
                self._failures[n] = self._failures.get(n, 0) + 1
            self.calls.append((n, entry.delivery, entry.deliveries, not fail))
        if fail:
            raise RuntimeError(f"poison {n}")

    def ns(self) -> list[int]:
        with self._lock:
            return [c[0] for c in self.calls]

    def of(self, n: int) -> list[tuple[int, str, int, bool]]:
        with self._lock:
            return [c for c in self.calls if c[0] == n]


# ------------------------------------------------------------------------------------ declarations


def test_the_default_policy_is_keep() -> None:
    item = Listener(lambda e: None, stream_prefix="orders", consumer_group="billing", name="bill")
    assert item.error_policy == ErrorPolicy() and item.error_policy.on_error is OnError.KEEP
    assert not item.error_policy.redeliver and not item.error_policy.dead_letter


def test_redeliver_options_are_validated_when_the_decorator_runs() -> None:
    registry = ListenerRegistry()

    def declare(**options: Any) -> Listener:
        decorate = listener(stream_prefix="orders", consumer_group="billing", registry=registry, **options)
        return decorate(handle)

    def handle(entry: Any) -> None: ...

    item = declare(on_error="redeliver", max_deliveries=3, dead_letter=True, redeliver_backoff_ms=50)
    assert item.error_policy == ErrorPolicy(
        on_error=OnError.REDELIVER, max_deliveries=3, dead_letter=True, redeliver_backoff_ms=50
    )
    assert declare(on_error="redeliver").error_policy.max_deliveries == 5
    assert item.with_concurrency(4).error_policy == item.error_policy  # a settings override keeps it
    refused = [
        ({"on_error": "retry"}, "on_error must be 'keep' (the default) or 'redeliver'; got 'retry'"),
        ({"on_error": "redeliver", "max_deliveries": 0}, "max_deliveries must be an integer in [1, 1000]"),
        ({"on_error": "redeliver", "max_deliveries": 1001}, "max_deliveries must be an integer"),
        ({"on_error": "redeliver", "max_deliveries": True}, "max_deliveries must be an integer"),
        ({"on_error": "redeliver", "redeliver_backoff_ms": 9}, "redeliver_backoff_ms must be an integer in"),
        ({"on_error": "redeliver", "redeliver_backoff_ms": 600_001}, "redeliver_backoff_ms must be"),
        ({"dead_letter": True}, "dead_letter=True requires on_error='redeliver'"),
        ({"on_error": "redeliver", "dead_letter": "yes"}, "dead_letter must be True or False"),
        ({"max_deliveries": 3}, "max_deliveries requires on_error='redeliver'"),
        ({"max_deliveries": 3, "redeliver_backoff_ms": 99}, "max_deliveries and redeliver_backoff_ms"),
    ]
    for options, message in refused:
        with pytest.raises(ListenerConfigError, match=re.escape("listener 'handle': " + message)):
            declare(**options)


def test_the_backoff_doubles_per_consecutive_failure_up_to_a_minute() -> None:
    policy = ErrorPolicy(on_error=OnError.REDELIVER, redeliver_backoff_ms=1_000)
    backoffs = [policy.backoff_ms(n) for n in (1, 2, 3, 6, 7, 50)]
    assert backoffs == [1_000, 2_000, 4_000, 32_000, 60_000, 60_000]
    slow = ErrorPolicy(on_error=OnError.REDELIVER, redeliver_backoff_ms=120_000)
    assert slow.backoff_ms(1) == slow.backoff_ms(3) == 120_000  # a configured backoff above the cap is kept


def test_the_failure_policy_decides_redeliver_with_a_growing_backoff_then_gives_up() -> None:
    """consumers.member.policy, without I/O: the backoff follows the consecutive failures of one entry,
    the give-up follows Redis's delivery count."""
    policy = ErrorPolicy(on_error=OnError.REDELIVER, max_deliveries=3, redeliver_backoff_ms=100)
    failures = FailurePolicy(policy)
    # An entry "a" on its deliveries 1, 2 and 3, and an entry "b" on its first.
    a1, a2, a3, b1 = (SimpleNamespace(entry_id=e[0], deliveries=int(e[1])) for e in ("a1", "a2", "a3", "b1"))
    assert failures.decide(a1) == Decision(Next.REDELIVER, 0.1)
    assert failures.decide(a2) == Decision(Next.REDELIVER, 0.2)  # the same entry again: twice the backoff
    assert failures.decide(a3) == Decision(Next.GIVE_UP)
    assert failures.decide(b1) == Decision(Next.REDELIVER, 0.1)  # another entry: a streak of its own
    with_dlq = FailurePolicy(ErrorPolicy(on_error=OnError.REDELIVER, max_deliveries=3, dead_letter=True))
    assert with_dlq.decide(a3) == Decision(Next.DEAD_LETTER)
    assert failures.stops_batch and not FailurePolicy(ErrorPolicy()).stops_batch


def test_kept_entries_are_bounded_and_pruned() -> None:
    kept = KeptEntries(limit=3)
    assert kept.add(["1-0", "2-0"]) == 0
    assert kept.add(["2-0", "3-0", "4-0", "5-0"]) == 2  # full: the newer failures are not remembered
    assert (len(kept), kept.dropped) == (3, 2) and "4-0" not in kept and "1-0" in kept
    kept.retain(["2-0", "3-0", "9-0"])  # a complete resync saw only these pending
    assert len(kept) == 2 and "1-0" not in kept
    assert kept.add(["4-0"]) == 0 and "4-0" in kept  # room again
    kept.clear()
    assert len(kept) == 0


# ------------------------------------------------------------------------------------ keep (the default)


def test_keep_leaves_a_failed_entry_pending_and_never_retries_it(cluster: Cluster) -> None:
    handler = Poison()
    m = cluster.member(handler)
    key = cluster.key_for(2)
    cluster.send(key, n=0)
    bad = cluster.send(key, n=1, poison=True)
    for n in range(2, 12):
        cluster.send(key, n=n)
    eventually(lambda: m.stats.acked == 11, what="every other entry handled and acked")
    assert handler.ns() == list(range(12))  # once each, in order, the failed one included
    assert cluster.pending("v1:2") == [(bad, m.member_id)]
    assert (m.stats.failed, m.stats.redelivered, m.stats.dead_lettered) == (1, 0, 0)
    assert cluster.client.exists(DLQ) == 0


def test_an_operator_redeliver_hands_a_kept_entry_to_its_owner_again(cluster: Cluster) -> None:
    handler = Poison(times=1)
    m = cluster.member(handler)
    key = cluster.key_for(0)
    bad = cluster.send(key, n=0, poison=True)
    eventually(lambda: m.stats.failed == 1, what="the first delivery failed")
    assert cluster.pending("v1:0") == [(bad, m.member_id)]
    cluster.client.hincrby(redeliver_key(PREFIX, GROUP), "v1:0", 1)  # what the store's redeliver does
    eventually(lambda: not cluster.pending("v1:0"), what="handled again, and acked")
    assert handler.of(0) == [(0, "new", 1, False), (0, "pending", 2, True)]


# ------------------------------------------------------------------------------------ redeliver


def test_redeliver_retries_a_failed_entry_before_any_later_entry_of_its_shard(cluster: Cluster) -> None:
    handler = Poison(times=2)  # fails twice, then succeeds
    m = cluster.member(handler, **FAST_RETRY)
    key, other = cluster.key_for(1, 0), cluster.key_for(1, 1)  # two keys of one shard
    for n in range(8):
        cluster.send(key if n % 2 else other, n=n, poison=(n == 3))
    eventually(lambda: m.stats.acked == 8, what="everything handled and acked")
    assert handler.ns() == [0, 1, 2, 3, 3, 3, 4, 5, 6, 7]  # nothing later slipped past the failed one
    assert handler.of(3) == [(3, "new", 1, False), (3, "pending", 2, False), (3, "pending", 3, True)]
    assert (m.stats.failed, m.stats.redelivered, m.stats.dead_lettered) == (2, 2, 0)
    assert not cluster.pending("v1:1")


def test_redeliver_with_dead_letter_moves_the_entry_after_max_deliveries(cluster: Cluster) -> None:
    handler = Poison()
    m = cluster.member(handler, max_deliveries=3, dead_letter=True, **FAST_RETRY)
    key = cluster.key_for(3)
    cluster.send(key, n=0)
    bad = cluster.send(key, n=1, poison=True)
    later = [cluster.send(key, n=n) for n in range(2, 6)]
    eventually(lambda: m.stats.acked == 5 and m.stats.dead_lettered == 1, what="dead-lettered, rest handled")

    assert handler.of(1) == [(1, "new", 1, False), (1, "pending", 2, False), (1, "pending", 3, False)]
    assert handler.ns() == [0, 1, 1, 1, 2, 3, 4, 5]  # the later entries waited for the give-up
    assert not cluster.pending("v1:3")
    ((_, raw),) = cluster.client.xrange(DLQ)
    fields = fields_of(raw)  # the entry's packed envelope, unpacked, and the dlq_* fields
    assert fields[b"dlq_source_shard"] == b"v1:3" and fields[b"dlq_source_id"] == bad.encode()
    assert fields[b"dlq_deliveries"] == b"3" and fields[b"dlq_error"] == b"RuntimeError: poison 1"
    assert fields[b"dlq_member_id"] == m.member_id.encode()
    assert fields[b"partition_key"] == key.encode() and fields[b"payload"] == b'{"n":1,"poison":true}'
    assert (m.stats.failed, m.stats.redelivered) == (3, 2)
    assert later == sorted(later)


def test_redeliver_without_dead_letter_gives_up_leaves_the_entry_pending_and_says_so_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    handler = Poison()
    with caplog.at_level(logging.ERROR, logger="consumers.member"):
        m = cluster.member(handler, max_deliveries=2, **FAST_RETRY)
        key = cluster.key_for(0)
        bad = cluster.send(key, n=0, poison=True)
        for n in range(1, 4):
            cluster.send(key, n=n)
        eventually(lambda: m.stats.acked == 3, what="the later entries handled")
        cluster.send(key, n=4)  # the shard goes on, and the given-up entry is not tried again
        eventually(lambda: m.stats.acked == 4, what="a newer entry handled")
    assert handler.ns() == [0, 0, 1, 2, 3, 4]
    assert cluster.pending("v1:0") == [(bad, m.member_id)]
    assert cluster.client.exists(DLQ) == 0
    gave_up = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert len(gave_up) == 1
    assert f"entry {bad}" in gave_up[0]
    assert "gave up after 2 deliveries; it stays pending: skip it or fix the handler" in gave_up[0]


def test_a_stop_interrupts_the_redeliver_backoff_and_the_entry_stays_pending(cluster: Cluster) -> None:
    handler = Poison()
    m = cluster.member(handler, on_error="redeliver", redeliver_backoff_ms=600_000)
    key = cluster.key_for(2)
    bad = cluster.send(key, n=0, poison=True)
    cluster.send(key, n=1)
    eventually(lambda: m.stats.failed == 1, what="the first delivery failed")
    m.stop(30.0)
    assert m.wait(10.0)  # not ten minutes
    assert handler.ns() == [0]
    assert cluster.pending("v1:2")[0] == (bad, m.member_id)


def test_redelivery_counts_survive_a_restart_of_the_member(cluster: Cluster) -> None:
    """The delivery count lives in Redis: a new owner continues it, it does not start over."""
    first = Poison()
    a = cluster.member(first, on_error="redeliver", max_deliveries=3, redeliver_backoff_ms=600_000)
    key = cluster.key_for(1)
    cluster.send(key, n=0, poison=True)
    eventually(lambda: a.stats.failed == 1, what="A's delivery failed")
    a.stop(10.0)
    assert a.wait(10.0)
    second = Recorder(Poison())
    b = cluster.member(second, max_deliveries=3, dead_letter=True, **FAST_RETRY)
    eventually(lambda: b.stats.dead_lettered == 1, what="B gave up on it")
    ((_, fields),) = cluster.client.xrange(DLQ)
    assert fields[b"dlq_deliveries"] == b"3"
    assert len(second.snapshot()) == 2  # deliveries 2 (claimed) and 3: the count went on from A's


def test_the_backoff_has_a_maximum_and_a_jitter_and_both_are_validated() -> None:
    def handle(entry: Any) -> None: ...

    def declare(**options: Any) -> Listener:
        return Listener(handle, stream_prefix="orders", consumer_group="billing", **options)

    policy = declare(on_error="redeliver", redeliver_backoff_ms=100, redeliver_backoff_max_ms=500,
                     redeliver_jitter=0.5).error_policy  # fmt: skip
    assert [policy.backoff_ms(n) for n in (1, 2, 3, 4, 10)] == [100, 200, 400, 500, 500]
    # The jitter shortens a pause by up to its share: the caller draws the number in [0, 1).
    assert [policy.backoff_ms(3, jitter) for jitter in (0.0, 0.5, 0.999)] == [400, 300, 201]
    assert declare(on_error="redeliver").error_policy.backoff_ms(2, 0.9) == 2_000  # no jitter unless asked
    refused = [
        ({"on_error": "redeliver", "redeliver_backoff_ms": 100, "redeliver_backoff_max_ms": 99},
         "redeliver_backoff_max_ms must be an integer in [100, 3600000]"),
        ({"on_error": "redeliver", "redeliver_backoff_max_ms": 3_600_001},
         "redeliver_backoff_max_ms must be"),
        ({"on_error": "redeliver", "redeliver_jitter": 1.5}, "redeliver_jitter must be a number in [0, 1]"),
        ({"on_error": "redeliver", "redeliver_jitter": True}, "redeliver_jitter must be a number in [0, 1]"),
        ({"redeliver_jitter": 0.1}, "redeliver_jitter requires on_error='redeliver'"),
        ({"redeliver_backoff_max_ms": 1000}, "redeliver_backoff_max_ms requires on_error='redeliver'"),
    ]  # fmt: skip
    for options, message in refused:
        with pytest.raises(ListenerConfigError, match=re.escape("listener 'handle': " + message)):
            declare(**options)


def test_units_that_run_many_entries_take_the_backoff_from_the_delivery_count() -> None:
    """Entries of one shard fail in any interleaving under ordering "key" / "none": the n-th delivery's
    failure waits the n-th backoff, whatever failed in between."""
    policy = FailurePolicy(
        ErrorPolicy(on_error=OnError.REDELIVER, redeliver_backoff_ms=100, max_deliveries=9)
    )
    a1 = SimpleNamespace(entry_id="1-0", deliveries=1)
    b1 = SimpleNamespace(entry_id="2-0", deliveries=1)
    a2 = SimpleNamespace(entry_id="1-0", deliveries=2)
    assert [policy.decide(e, by_deliveries=True).backoff_s for e in (a1, b1, a2)] == [0.1, 0.1, 0.2]
