"""Nothing stranded (issue 7, A): after a call whose outcome is unknown, or when an operator asks for a
redelivery, a shard unit re-reads its own pending entries, in order, before it reads anything new.

Two levels, both against the real Redis:

* one :class:`ShardUnit` driven by a minimal host, over a data plane whose chosen reads "lose their
  reply" (the script really ran in Redis, then the call raises ``DataPlaneUnavailable`` exactly as a
  cut connection does);
* a whole member whose data-plane connection goes through :class:`tests.dataplane.proxy.LossyProxy`,
  which forwards read scripts to Redis and cuts the connection before their replies arrive.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from consumers.dataplane import DataPlane, DataPlaneUnavailable, scripts
from consumers.listener import ErrorPolicy
from consumers.member.pool import WorkerPool
from consumers.member.shard import ShardUnit
from consumers.member.state import ShardStart
from consumers.process import redis_client_for
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard
from coordinator.store.codec import redeliver_key
from tests.consumers.harness import Cluster, Recorder, eventually
from tests.dataplane.harness import GROUP, PREFIX, Harness, make_client
from tests.dataplane.proxy import LossyProxy, has_entries
from tests.e2e.checker import check

V1_0 = Shard(1, 0)
SMALL_BATCHES = Runtime(max_concurrency=1, batch_size=2, idle_backoff_min_ms=2, idle_backoff_max_ms=10)


class LosingPlane(DataPlane):
    """The real data plane, except that the reply of the next ``lose`` reads that return entries is
    "lost": the script ran in Redis (the entries are in the member's pending list), then the call
    raises ``DataPlaneUnavailable``."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, PREFIX, GROUP)
        self.lose = 0
        self.lost: list[list[str]] = []

    def read(self, member_id: str, member_epoch: int, shard: Shard, count: int) -> Any:
        result = super().read(member_id, member_epoch, shard, count)
        if self.lose and result.entries:
            self.lose -= 1
            self.lost.append([e.entry_id for e in result.entries])
            raise DataPlaneUnavailable("read of shard v1:0: Redis is unreachable: connection cut (test)")
        return result


class Host:
    """The member side of a unit, reduced to what a unit asks of it (consumers.member.shard.UnitHost)."""

    label = "unit"

    def __init__(self, member_id: str, epoch: int) -> None:
        self.member_id = member_id
        self.epoch = epoch
        self.counts: Counter[str] = Counter()
        self.reports: list[str] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def epoch_for(self, incarnation: int) -> int | None:
        return self.epoch

    def lease_valid(self, incarnation: int) -> bool:
        return True

    def report_member_fenced(self, incarnation: int) -> None:
        self.reports.append("MEMBER_FENCED")

    def report_not_owner(self, shard: Shard, incarnation: int) -> None:
        self.reports.append("NOT_OWNER")

    def report_stale_epoch(self, incarnation: int) -> None:
        self.reports.append("STALE_EPOCH")

    def record(self, **counts: int) -> None:
        with self._lock:
            self.counts.update(counts)

    def unit_stopped(self, unit: ShardUnit, failed: bool) -> None:
        self.reports.append("FAILED" if failed else "STOPPED")
        self.stopped.set()


class Calls:
    """The handler: records (entry id, delivery, deliveries) per call; raises for ids in ``failing``
    (each as many times as its count says, forever if negative)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.failing: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, entry: Any) -> None:
        with self._lock:
            self.calls.append((entry.entry_id, entry.delivery, entry.deliveries))
            left = self.failing.get(entry.entry_id, 0)
            if left:
                self.failing[entry.entry_id] = left - 1
        if left:
            raise RuntimeError(f"handler failure on {entry.entry_id} (test)")

    def ids(self) -> list[str]:
        with self._lock:
            return [c[0] for c in self.calls]


@pytest.fixture
def unit_env(redis_url: str) -> Iterator[tuple[Harness, LosingPlane, Callable[..., tuple[ShardUnit, Host]]]]:
    client = make_client(redis_url)
    h = Harness(client)
    h.create(shard_count=1, lease_ttl_ms=60_000)
    m1 = h.join("m1")
    plane = LosingPlane(client)
    started: list[tuple[ShardUnit, Host, WorkerPool]] = []

    def start(handler: Callable[[Any], Any], policy: ErrorPolicy | None = None) -> tuple[ShardUnit, Host]:
        host = Host("m1", m1.epoch)
        pool = WorkerPool("unit")
        pool.resize(1)
        start = ShardStart(shard=V1_0, assignment_epoch=m1.epoch, readable=True, incarnation=1)
        unit = ShardUnit(host=host, start=start, dataplane=plane, pool=pool, handler=handler,
                         runtime=SMALL_BATCHES, policy=policy)  # fmt: skip
        unit.start()
        started.append((unit, host, pool))
        return unit, host

    yield h, plane, start
    for unit, host, pool in started:
        unit.stop(abandon=False)
        assert host.stopped.wait(10)
        pool.shutdown()
    client.close()


def test_after_a_lost_read_reply_the_unit_handles_its_own_pending_entries_first(unit_env: Any) -> None:
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 6)  # one key: per-key order is stream order
    plane.lose = 1
    calls = Calls()
    _, host = start(calls)

    eventually(lambda: len(calls.ids()) >= 6, what="every entry handled")
    eventually(lambda: not h.pending(V1_0), what="everything acked")
    assert plane.lost == [ids[:2]]  # the first read ran; its reply was lost
    assert calls.ids() == ids  # in order, each once
    assert [c[1] for c in calls.calls[:2]] == ["pending", "pending"]  # recovered from the pending list
    assert host.reports == [] and host.counts["acked"] == 6


def test_a_resync_does_not_hand_out_again_an_entry_left_pending_by_the_keep_policy(unit_env: Any) -> None:
    h, plane, start = unit_env
    bad, good = h.produce(V1_0, 1, 2)
    calls = Calls()
    calls.failing[bad] = -1
    _, host = start(calls)
    eventually(lambda: calls.ids() == [bad, good], what="both handled once (one failed)")
    eventually(lambda: h.pending(V1_0) == [(bad, "m1")], what="the good one acked")

    plane.lose = 1
    later = h.produce(V1_0, 1, 2, start=2)
    eventually(lambda: calls.ids() == [bad, good, *later], what="the later ones handled after the resync")
    eventually(lambda: h.pending(V1_0) == [(bad, "m1")], what="the later ones acked")
    assert plane.lost == [later]
    assert host.counts["failed"] == 1 and host.counts["redelivered"] == 0


def test_a_changed_redeliver_token_hands_out_the_pending_entries_again_before_new_ones(unit_env: Any) -> None:
    h, _, start = unit_env
    (bad,) = h.produce(V1_0, 1, 1)
    calls = Calls()
    calls.failing[bad] = 1  # fails once ("keep": it stays pending)
    start(calls)
    eventually(lambda: calls.ids() == [bad], what="handled once, failed")
    assert h.pending(V1_0) == [(bad, "m1")]

    # What the store's redeliver does, together with a new entry, so that one read sees both.
    pipe = h.client.pipeline(transaction=True)
    pipe.hincrby(redeliver_key(PREFIX, GROUP), "v1:0", 1)
    pipe.xadd(h.stream(V1_0), {"partition_key": "k", "content_type": "application/json", "payload": "{}"})
    _, new = pipe.execute()

    eventually(lambda: len(calls.ids()) == 3, what="the pending entry again, then the new one")
    assert calls.calls[1:] == [(bad, "pending", 2), (new.decode(), "new", 1)]
    eventually(lambda: not h.pending(V1_0), what="both acked")


def test_the_redeliver_token_a_unit_starts_with_is_not_a_request(unit_env: Any) -> None:
    h, _, start = unit_env
    h.client.hincrby(redeliver_key(PREFIX, GROUP), "v1:0", 5)  # older requests, before this unit
    (bad,) = h.produce(V1_0, 1, 1)
    calls = Calls()
    calls.failing[bad] = -1
    start(calls)
    eventually(lambda: calls.ids() == [bad], what="handled once")
    h.produce(V1_0, 1, 3, start=1)
    eventually(lambda: len(calls.ids()) == 4, what="the new ones handled")
    assert calls.ids().count(bad) == 1


# ------------------------------------------------------------------------------------ a real member


def _sha(name: str) -> str:
    return hashlib.sha1(scripts.script_text(name).encode()).hexdigest()


def test_a_member_whose_read_replies_are_cut_strands_nothing_and_keeps_per_key_order(redis_url: str) -> None:
    """The member's data-plane connection goes through the proxy, which forwards read scripts to Redis
    and cuts the connection before three of their replies (with entries) reach the member."""
    cluster = Cluster(redis_url)
    port = urlparse(redis_url).port
    assert port is not None
    for name in scripts.FENCED_SCRIPTS:  # loaded up front: every call through the proxy is one EVALSHA
        cluster.client.script_load(scripts.script_text(name))
    try:
        with LossyProxy(port) as proxy:
            proxy.lose_replies(_sha("read_new"), times=3, when=has_entries)
            client = redis_client_for(proxy.url)
            recorder = Recorder()
            m = cluster.member(recorder, client=client)
            keys = [cluster.key_for(i % 4, i // 4) for i in range(8)]  # two keys per shard
            sent: list[tuple[str, int]] = []
            for _ in range(12):
                for key in keys:
                    n = len(sent)
                    cluster.send(key, n=n)
                    sent.append((key, n))
                threading.Event().wait(0.01)  # spread over many reads
            eventually(lambda: recorder.handled_ns() == set(range(len(sent))), what="every event handled")
            assert proxy.cuts == 3
            eventually(lambda: not any(cluster.all_pending().values()), what="nothing left pending")
            m.stop(5.0)
            assert m.wait(10.0)
            client.close()
        produced = [
            {"event_id": str(n), "partition_key": key, "routing_version": 1, "seq": n} for key, n in sent
        ]
        handled = [
            {"event_id": str(c.n), "partition_key": c.key, "routing_version": 1, "shard": c.shard, "seq": c.n,
             "member_id": c.member, "start_ns": int(c.started * 1e9), "end_ns": int(c.ended * 1e9)}
            for c in recorder.snapshot()
        ]  # fmt: skip
        report = check(produced, handled)
        assert (report.lost, report.out_of_order, report.overlaps) == ([], [], []), report.summary()
        assert m.stats.failed == 0
    finally:
        cluster.close()
