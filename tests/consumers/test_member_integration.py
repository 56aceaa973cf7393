"""Members end to end on a real Redis: real store (in-process coordinator client), real data plane, real
producer. Every wait is a bounded poll for a condition; no sleep is an assertion."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import REGISTRY

from consumers.dataplane import DataPlane, DataPlaneUnavailable
from consumers.member.member import Member
from consumers.member.state import Phase
from tests.consumers.harness import (
    FAST,
    GROUP,
    PREFIX,
    Cluster,
    Recorder,
    assert_no_overlap_per_shard,
    assert_per_key_order,
    eventually,
)


def test_one_member_consumes_everything_in_per_shard_order_and_acks_it(cluster: Cluster) -> None:
    keys = [cluster.key_for(i % 4, i // 4) for i in range(12)]  # 3 keys per shard
    sent = cluster.send_many(keys, per_key=15)
    recorder = Recorder()
    m = cluster.member(recorder)
    eventually(lambda: recorder.handled_ns() == set(range(sent)), what="every event handled")
    more = cluster.send_many(keys, per_key=5)  # new entries after the take-over are read too
    eventually(lambda: recorder.handled_ns() == set(range(sent + more)), what="the later events handled")
    calls = recorder.snapshot()
    assert_per_key_order(calls)
    assert_no_overlap_per_shard(calls)
    for shard in {c.shard for c in calls}:  # per shard, in stream (entry id) order
        ids = [c.entry_id for c in sorted(calls, key=lambda c: c.started) if c.shard == shard]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    assert {c.shard for c in calls} == {"v1:0", "v1:1", "v1:2", "v1:3"}
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")
    assert m.stats.failed == 0
    assert m.phase is Phase.MEMBER
    assert cluster.member_view(m.member_id)["capacity"] == 4
    # Its series: a count per handled entry (added per batch) and one latency observation per call.
    labels = {"stream_prefix": PREFIX, "consumer_group": GROUP, "member_id": m.member_id}
    handled = sent + more
    assert REGISTRY.get_sample_value("rsc_member_handled_total", labels) == handled
    assert REGISTRY.get_sample_value("rsc_member_failed_total", labels) == 0  # present from the start
    assert REGISTRY.get_sample_value("rsc_member_handler_seconds_count", labels) == handled


def test_two_members_split_the_shards_and_hand_over_without_overlap(cluster: Cluster) -> None:
    def slowish(entry: Any) -> None:
        threading.Event().wait(0.002)  # long enough for a revocation to find work in flight

    recorder = Recorder(slowish)
    keys = [cluster.key_for(i % 4, i // 4) for i in range(8)]
    a = cluster.member(recorder)
    eventually(lambda: len(a.running_shards) == 4, what="A runs all four shards")
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        while not stop.is_set() and sent[0] < 2_000:
            sent[0] += cluster.send_many(keys, per_key=1)
            stop.wait(0.002)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        eventually(lambda: len(recorder.by_member().get(a.label, ())) == 4, what="A busy on every shard")
        b = cluster.member(recorder)
        eventually(lambda: cluster.stable(a, b) and len(b.assignment) == 2, what="A and B split 2/2")
        assert a.assignment.isdisjoint(b.assignment)
        eventually(lambda: b.label in recorder.by_member(), what="B handles entries")
    finally:
        stop.set()
        producer.join(5)
    eventually(lambda: recorder.handled_ns() >= set(range(sent[0])), what="every event handled")
    calls = recorder.snapshot()
    assert_no_overlap_per_shard(calls)
    assert_per_key_order(calls)
    by_member = recorder.by_member()
    assert by_member[a.label] == {"v1:0", "v1:1", "v1:2", "v1:3"}  # A had them all before B came
    assert by_member[b.label] == {str(s) for s in b.assignment}
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")


def test_a_member_whose_shards_do_not_move_keeps_consuming_while_the_rebalance_waits(
    cluster: Cluster,
) -> None:
    """A owns v1:0..3; B joins; the sticky assignor keeps v1:0, v1:1 on A and moves v1:2, v1:3 to B.
    An entry of v1:2 blocks its handler, so the revocation (and the rebalance) cannot complete; A's
    other shards are consumed meanwhile."""
    gate = threading.Event()
    blocked = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("block"):
            blocked.set()
            assert gate.wait(30)

    recorder = Recorder(handler)
    a = cluster.member(recorder)
    eventually(lambda: len(a.running_shards) == 4, what="A runs all four shards")
    cluster.send(cluster.key_for(2), block=True)
    eventually(blocked.is_set, what="A's handler blocked on v1:2")
    b = cluster.member(recorder)
    eventually(lambda: cluster.member_view(a.member_id)["revoking"] == ["v1:2", "v1:3"], what="revoking")
    eventually(lambda: "v1:3" not in {str(s) for s in a.running_shards}, what="v1:3 released")
    before = recorder.count()
    kept = [cluster.key_for(0), cluster.key_for(1)]
    sent_during = cluster.send_many(kept, per_key=10)
    eventually(lambda: recorder.count() >= before + sent_during, what="A consumes v1:0 and v1:1")
    # The rebalance is still waiting for A's in-flight entry on v1:2: B has not got it.
    assert "v1:2" not in {str(s) for s in b.assignment}
    assert cluster.member_view(a.member_id)["state"] == "UNREVOKED_SHARDS"
    assert {c.shard for c in recorder.snapshot()[before:]} == {"v1:0", "v1:1"}
    gate.set()
    eventually(lambda: cluster.stable(a, b), what="the rebalance completes")
    assert {str(s) for s in b.assignment} == {"v1:2", "v1:3"}
    assert {str(s) for s in a.assignment} == {"v1:0", "v1:1"}
    cluster.send(cluster.key_for(2))
    eventually(lambda: "v1:2" in recorder.by_member().get(b.label, set()), what="B consumes v1:2")
    assert_no_overlap_per_shard(recorder.snapshot())
    eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")


def test_a_handler_exception_leaves_the_entry_pending_and_the_member_goes_on(cluster: Cluster) -> None:
    def handler(entry: Any) -> None:
        if entry.payload.get("fail"):
            raise RuntimeError("boom")

    recorder = Recorder(handler)
    m = cluster.member(recorder)
    key = cluster.key_for(1)
    cluster.send(key)
    bad = cluster.send(key, fail=True)
    cluster.send(key)
    eventually(lambda: recorder.count() == 3, what="all three handled (one raised)")
    eventually(lambda: m.stats.acked == 2, what="the two good ones acked")
    assert m.stats.failed == 1
    assert cluster.pending("v1:1") == [(bad, m.member_id)]
    cluster.send(key)  # the member (and the shard) go on
    eventually(lambda: recorder.count() == 4 and m.stats.acked == 3, what="the next entry handled")
    assert m.phase is Phase.MEMBER
    assert "v1:1" in {str(s) for s in m.running_shards}
    assert cluster.pending("v1:1") == [(bad, m.member_id)]


def test_graceful_stop_finishes_in_flight_work_acks_it_and_leaves(cluster: Cluster) -> None:
    gate = threading.Event()
    blocked = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("block"):
            blocked.set()
            assert gate.wait(30)

    recorder = Recorder(handler)
    m = cluster.member(recorder)
    key = cluster.key_for(0)
    in_flight = cluster.send(key, block=True)
    eventually(blocked.is_set, what="the handler is busy")
    later = [cluster.send(key) for _ in range(3)]  # sent while the handler is busy: never handled
    m.stop(10.0)
    eventually(lambda: m.phase is Phase.DRAINING and m.running_shards == {_shard("v1:0")}, what="draining")
    assert not m.finished  # it waits for the handler
    gate.set()
    assert m.wait(10.0)
    assert m.phase is Phase.LEFT
    view = cluster.member_view(m.member_id)
    assert view["state"] == "LEFT"
    pending_ids = {i for i, _ in cluster.pending("v1:0")}
    assert in_flight not in pending_ids  # handled, then acked before leaving
    assert {c.entry_id for c in recorder.snapshot()} == {in_flight}
    assert pending_ids <= set(later)  # whatever was read and not handled waits for the next owner


def test_the_next_owner_takes_over_what_a_stopped_member_read_but_did_not_handle(cluster: Cluster) -> None:
    gate = threading.Event()
    blocked = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("block"):
            blocked.set()
            assert gate.wait(30)

    first = Recorder(handler)
    key = cluster.key_for(3)
    cluster.send(key, block=True)
    rest = [cluster.send(key) for _ in range(3)]
    a = cluster.member(first)  # its first read takes all four (batch size 4)
    eventually(lambda: blocked.is_set() and len(cluster.pending("v1:3")) == 4, what="A busy with its batch")
    a.stop(10.0)
    gate.set()
    assert a.wait(10.0)
    left_over = {i for i, _ in cluster.pending("v1:3")}
    assert left_over == set(rest)  # read in A's batch, never handled
    second = Recorder()
    b = cluster.member(second)
    eventually(lambda: {c.entry_id for c in second.snapshot()} >= left_over, what="B claims them")
    eventually(lambda: not cluster.pending("v1:3"), what="B acked them")
    assert [c.entry_id for c in second.snapshot() if c.shard == "v1:3"] == rest  # in stream order
    assert b.stats.failed == 0


def test_a_fenced_member_drops_everything_rejoins_with_epoch_0_and_goes_on(cluster: Cluster) -> None:
    from consumers.client import StoreCoordinatorClient
    from consumers.member.state import HeartbeatRequest

    recorder = Recorder()
    m = cluster.member(recorder)
    eventually(lambda: len(m.running_shards) == 4, what="running")
    epoch = m.member_epoch
    # An impostor joins with the same member id: the coordinator fences the live incarnation.
    StoreCoordinatorClient(cluster.store).heartbeat(
        "orders", "billing", HeartbeatRequest(member_id=m.member_id, member_epoch=0, capacity=1)
    )
    eventually(lambda: m.stats.fenced == 1, what="the member noticed")
    eventually(lambda: m.phase is Phase.MEMBER and len(m.running_shards) == 4, what="rejoined")
    assert m.member_epoch > epoch
    cluster.send(cluster.key_for(2))
    eventually(lambda: recorder.count() == 1, what="consuming again")


def test_coordinator_outage_shorter_than_the_lease_does_not_stop_consumption(cluster: Cluster) -> None:
    flaky = Flaky(cluster)
    recorder = Recorder()
    m = cluster.member(recorder, coordinator=flaky)
    eventually(lambda: cluster.stable(m), what="joined")
    epoch = m.member_epoch
    flaky.down.set()
    eventually(lambda: m.stats.heartbeat_failures >= 3, what="heartbeats failing")
    sent = cluster.send_many([cluster.key_for(i) for i in range(4)], per_key=5)
    eventually(lambda: recorder.count() == sent, what="consumed during the outage")
    flaky.down.clear()
    ok = m.stats.heartbeats
    eventually(lambda: m.stats.heartbeats > ok + 1, what="heartbeats again")
    assert m.member_epoch == epoch  # never fenced: the lease held
    assert m.stats.fenced == 0


class NoRenewalPlane(DataPlane):
    """The real data plane, whose lease renewals never get through (``DataPlaneUnavailable``)."""

    def renew_lease(self, member_id: str, member_epoch: int) -> Any:
        raise DataPlaneUnavailable("lease renewal in 'orders': Redis is unreachable (test)")


@contextmanager
def joined_behind_a_flaky_coordinator(
    redis_url: str, *, renewals: bool = True
) -> Iterator[tuple[Cluster, Flaky, Recorder, Member]]:
    """One member of a group with a 1 s lease (heartbeats every 100 ms), joined and stable, whose
    coordinator client can be switched to "unreachable"; without ``renewals`` its own lease renewals
    in Redis never get through either."""
    cluster = Cluster(redis_url, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    try:
        flaky = Flaky(cluster)
        recorder = Recorder()
        plane = None if renewals else NoRenewalPlane(cluster.client, PREFIX, GROUP)
        m = cluster.member(recorder, coordinator=flaky, dataplane=plane)
        eventually(lambda: cluster.stable(m), what="joined")
        yield cluster, flaky, recorder, m
    finally:
        cluster.close()


def test_through_an_outage_longer_than_the_lease_the_member_renews_in_redis_and_keeps_consuming(
    redis_url: str,
) -> None:
    with joined_behind_a_flaky_coordinator(redis_url) as (cluster, flaky, recorder, m):
        epoch = m.member_epoch
        flaky.down.set()
        for n in range(8):  # four lease TTLs with no heartbeat answered, an entry every half TTL
            cluster.send(cluster.key_for(n % 4), n=n)
            time.sleep(0.5)
        eventually(lambda: recorder.handled_ns() == set(range(8)), what="every entry handled")
        assert m.stats.lease_renewals >= 4 and m.stats.fenced == 0
        labels = {"stream_prefix": PREFIX, "consumer_group": GROUP, "member_id": m.member_id}
        assert REGISTRY.get_sample_value("rsc_member_lease_renewals_total", labels) >= 4  # type: ignore[operator]
        view = cluster.member_view(m.member_id)
        assert (view["state"], view["member_epoch"]) == ("STABLE", epoch) and view["lease_remaining_ms"] > 0
        flaky.down.clear()
        heartbeats = m.stats.heartbeats
        eventually(lambda: m.stats.heartbeats > heartbeats + 2, what="heartbeats answered again")
        assert (m.member_epoch, m.stats.fenced) == (epoch, 0)


def test_an_outage_longer_than_a_lease_it_cannot_renew_is_fenced_by_the_data_plane_and_recovers(
    redis_url: str,
) -> None:
    with joined_behind_a_flaky_coordinator(redis_url, renewals=False) as (cluster, flaky, recorder, m):
        flaky.down.set()
        # Its lease ends by Redis's clock: the data plane refuses its reads, it drops every shard.
        eventually(lambda: m.phase is Phase.JOINING and not m.running_shards, what="fenced by the data plane")
        assert m.stats.fenced >= 1 and m.stats.lease_renewals == 0
        flaky.down.clear()
        eventually(lambda: cluster.stable(m), what="rejoined")
        cluster.send(cluster.key_for(0))
        eventually(lambda: recorder.count() == 1, what="consuming again")


def test_worker_count_follows_the_groups_max_concurrency(cluster: Cluster) -> None:
    m = cluster.member(Recorder())
    eventually(lambda: m.concurrency == 4 and m.pool.size == 4, what="4 workers")
    cluster.store.set_max_concurrency("orders", "billing", 2)
    eventually(lambda: m.concurrency == 2 and m.pool.size == 2, what="2 workers")
    assert cluster.member_view(m.member_id)["effective_concurrency"] == 2
    assert FAST.max_concurrency == 4


class Flaky:
    """The in-process coordinator client, switchable to "unreachable"."""

    def __init__(self, cluster: Cluster) -> None:
        from consumers.client import StoreCoordinatorClient

        self.inner = StoreCoordinatorClient(cluster.store)
        self.down = threading.Event()  # requests fail before reaching the coordinator
        self.lose = threading.Event()  # requests are applied, their responses lost

    def heartbeat(self, stream_prefix: str, consumer_group: str, request: Any) -> dict[str, Any]:
        from consumers.client import CoordinatorUnreachable

        if self.down.is_set():
            raise CoordinatorUnreachable("connection refused (test)")
        body = self.inner.heartbeat(stream_prefix, consumer_group, request)
        if self.lose.is_set():
            raise CoordinatorUnreachable("read timed out (test)")
        return body

    def close(self) -> None:
        pass


def _shard(name: str) -> Any:
    from coordinator.protocol.model import Shard

    return Shard.parse(name)


def test_a_strict_shard_count_change_drains_the_old_version_before_the_new_one_is_read(
    redis_url: str,
) -> None:
    """2 -> 4 shards, strict: the member keeps draining v1 while it already holds v2 (held back: the data
    plane says NOT_READABLE); the tick sees v1 drained, v1's shards are revoked, v2 becomes readable.
    Per key, everything sent before the change is handled before anything sent after it."""
    from coordinator.protocol.model import OrderingMode

    cluster = Cluster(redis_url, shard_count=2)
    try:
        recorder = Recorder(lambda entry: threading.Event().wait(0.001))
        m = cluster.member(recorder)
        eventually(lambda: cluster.stable(m), what="joined")
        keys = [f"key-{i}" for i in range(8)]
        before = cluster.send_many(keys, per_key=20)
        cluster.store.change_shard_count("orders", 4, OrderingMode.STRICT)
        cluster.shard_count = 4
        after = cluster.send_many(keys, per_key=5)  # routed to v2 by the producer's refreshed route
        # Until a tick sees v1 drained, the member holds both versions; v2 is assigned but held back.
        eventually(lambda: len(m.assignment) == 6 and len(m.running_shards) == 6, what="v1 and v2 held")
        held_back = {str(s) for s, grant in m.grants.items() if not grant.readable}
        assert held_back == {"v2:0", "v2:1", "v2:2", "v2:3"}

        def settled() -> bool:
            cluster.store.tick()  # the coordinator's periodic tick (Celery beat in production)
            return {str(s) for s in m.assignment} == {"v2:0", "v2:1", "v2:2", "v2:3"} and cluster.stable(m)

        eventually(settled, what="v1 drained and retired; the member runs v2 only")
        eventually(lambda: recorder.handled_ns() == set(range(before + after)), what="everything handled")
        calls = recorder.snapshot()
        assert_per_key_order(calls)
        assert {c.shard[:2] for c in calls} == {"v1", "v2"}
        for key in keys:  # strict: a key's old entries all come before its new ones
            olds = [c.started for c in calls if c.key == key and c.shard.startswith("v1:")]
            news = [c.started for c in calls if c.key == key and c.shard.startswith("v2:")]
            assert max(olds) < min(news), key
    finally:
        cluster.close()


def test_a_member_that_may_have_lost_its_lease_handles_nothing_more_until_it_knows(redis_url: str) -> None:
    """A batch of four on one shard; the first handler call outlives the lease while the coordinator is
    unreachable (and the member's own renewals in Redis fail). The other three are not handled by this
    incarnation: the member waits, the data plane says it is fenced, it rejoins (same member id) and
    only then re-reads them from its pending list (with the first one, if its ack came too late)."""
    cluster = Cluster(redis_url, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    try:
        flaky = Flaky(cluster)
        gate = threading.Event()
        fences_at_call: list[tuple[int, int]] = []
        holder: list[Any] = []

        def handler(entry: Any) -> None:
            fences_at_call.append((entry.payload["n"], holder[0].stats.fenced))
            if entry.payload.get("block"):
                assert gate.wait(30)

        key = cluster.key_for(0)
        cluster.send(key, block=True)
        for _ in range(3):
            cluster.send(key)
        recorder = Recorder(handler)
        # Its own renewals in Redis do not get through either: nothing tells it the lease holds.
        plane = NoRenewalPlane(cluster.client, PREFIX, GROUP)
        m = cluster.member(recorder, coordinator=flaky, dataplane=plane, start=False)
        holder.append(m)
        m.start()
        eventually(lambda: fences_at_call == [(0, 0)], what="the first entry is being handled")
        flaky.down.set()
        eventually(lambda: not m.lease_valid(1), what="the lease may have ended")
        gate.set()
        eventually(lambda: m.phase is Phase.JOINING, what="fenced by the data plane")
        assert fences_at_call == [(0, 0)]  # nothing more was handled by the zombie incarnation
        flaky.down.clear()
        eventually(lambda: {n for n, _ in fences_at_call[1:]} >= {1, 2, 3}, what="re-read after the rejoin")
        eventually(lambda: not cluster.pending("v1:0"), what="acked by the new incarnation")
        # Entry 0 may come again too: its ack may have been refused (at-least-once).
        assert [n for n, _ in fences_at_call[1:] if n] == [1, 2, 3]
        assert {fenced for _, fenced in fences_at_call[1:]} == {1}
    finally:
        cluster.close()


def test_a_batch_paused_for_a_lapsed_lease_resumes_in_order_once_the_lease_is_renewed(redis_url: str) -> None:
    """Heartbeats reach the coordinator (which keeps renewing the lease) but their responses are lost,
    and its own renewals in Redis fail, so the member cannot know its lease holds: it stops handling
    after the entry in flight. Once a response arrives again, the rest of the batch is handled, in
    order, by the same incarnation."""
    cluster = Cluster(redis_url, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    try:
        flaky = Flaky(cluster)
        gate = threading.Event()
        seen: list[int] = []

        def handler(entry: Any) -> None:
            seen.append(entry.payload["n"])
            if entry.payload.get("block"):
                assert gate.wait(30)

        key = cluster.key_for(0)
        cluster.send(key, block=True)
        for _ in range(3):
            cluster.send(key)
        # Its own renewals in Redis do not get through either: nothing tells it the lease holds.
        plane = NoRenewalPlane(cluster.client, PREFIX, GROUP)
        m = cluster.member(Recorder(handler), coordinator=flaky, dataplane=plane)
        eventually(lambda: seen == [0], what="the first entry is being handled")
        flaky.lose.set()
        eventually(lambda: not m.lease_valid(1), what="the lease may have ended, as far as the member knows")
        gate.set()
        eventually(lambda: m.stats.acked == 1, what="the handled entry acked (the real lease holds)")
        assert seen == [0]  # the rest waits
        assert m.phase is Phase.MEMBER
        flaky.lose.clear()
        eventually(lambda: seen == [0, 1, 2, 3] and m.stats.acked == 4, what="the rest, in order")
        assert m.stats.fenced == 0
        assert not cluster.pending("v1:0")
    finally:
        cluster.close()
