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

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from consumers.dataplane import DataPlane, DataPlaneUnavailable, library
from consumers.listener import ErrorPolicy, OnError
from consumers.member.fetcher import Fetcher
from consumers.member.pool import WorkerPool
from consumers.member.shard import ShardUnit
from consumers.member.state import ShardStart
from consumers.process import redis_client_for
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard
from rsc_redis.keys import dead_letter_key, redeliver_key
from tests.consumers.harness import Cluster, Recorder, eventually
from tests.dataplane.harness import GROUP, PREFIX, Harness, make_client
from tests.dataplane.proxy import LossyProxy, fetch_has_entries
from tests.e2e.checker import check

V1_0 = Shard(1, 0)
SMALL_BATCHES = Runtime(max_concurrency=1, batch_size=2, idle_backoff_min_ms=2, idle_backoff_max_ms=10)
DEAD_LETTER_AT_ONCE = ErrorPolicy(
    on_error=OnError.REDELIVER, max_deliveries=1, dead_letter=True, redeliver_backoff_ms=10
)


def times_delivered(h: Harness, entry_id: str) -> int:
    (row,) = h.client.xpending_range(h.stream(V1_0), GROUP, entry_id, entry_id, 1)
    return int(row["times_delivered"])


class LosingPlane(DataPlane):
    """The real data plane, except that the reply of the next ``lose`` fetches that return entries is
    "lost": the script ran in Redis (the entries are in the member's pending list, the acks it carried
    are applied), then the call raises ``DataPlaneUnavailable``. ``lose_acking`` does the same to
    fetches that carry acks; ``lose_claims``, ``lose_pending`` and ``lose_dead_letter`` do the
    same to claims and re-reads of own pending entries (that return entries) and to dead-letter calls;
    ``lose_rereads`` to re-reads of a single entry."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, PREFIX, GROUP)
        self.lose = 0
        self.lose_claims = 0
        self.lose_pending = 0
        self.lose_rereads = 0  # re-reads of one entry only (a failed entry, under "redeliver")
        self.lose_dead_letter = 0
        self.lose_acking = 0  # fetches that carry acks, whether they read entries or not
        self.lost: list[list[str]] = []
        self.acks_sent: list[list[str]] = []  # per fetch: the ack ids it carried

    def fetch(self, *call: Any) -> Any:  # (member, [ShardFetch], count)
        results = super().fetch(*call)
        acks = [i for s in call[1] for i in s.ack_ids]
        self.acks_sent.append(acks)
        results = self._lose_if("lose_acking", results, acks)
        return self._lose_if("lose", results, [e.entry_id for r in results for e in r.entries])

    def claim_orphans(self, *call: Any) -> Any:
        result, cursor = super().claim_orphans(*call)
        return self._lose_if("lose_claims", result), cursor

    def read_own_pending(self, *call: Any) -> Any:  # (member, epoch, shard, count, after)
        result = super().read_own_pending(*call)
        if call[3] == 1:
            result = self._lose_if("lose_rereads", result)
        return self._lose_if("lose_pending", result)

    def dead_letter(self, *call: Any) -> Any:  # (member, epoch, shard, entry id, error)
        return self._lose_if("lose_dead_letter", super().dead_letter(*call), [call[3]])

    def _lose_if(self, knob: str, result: Any, entry_ids: list[str] | None = None) -> Any:
        """Raise as a cut connection does if ``knob`` says so and the call concerned entries."""
        left = getattr(self, knob)
        ids = entry_ids if entry_ids is not None else [e.entry_id for e in result.entries]
        if not left or not ids:
            return result
        setattr(self, knob, left - 1)
        self.lost.append(ids)
        raise DataPlaneUnavailable(f"{knob}: shard v1:0: Redis is unreachable: connection cut (test)")


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

    def lease_deadline_ms(self, incarnation: int) -> int | None:
        return 2**62

    def clock_ms(self) -> int:
        return 0

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

    def __init__(self, *failing: str, times: int = -1) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.failing: dict[str, int] = dict.fromkeys(failing, times)
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
    started: list[tuple[ShardUnit, Host, WorkerPool, Fetcher]] = []

    def start(
        handler: Callable[[Any], Any], policy: ErrorPolicy | None = None, max_kept: int | None = None
    ) -> tuple[ShardUnit, Host]:
        host = Host("m1", m1.epoch)
        pool = WorkerPool("unit")
        pool.resize(1)
        fetcher = Fetcher(host=host, dataplane=plane, runtime=SMALL_BATCHES)
        fetcher.start()
        start = ShardStart(shard=V1_0, assignment_epoch=m1.epoch, readable=True, incarnation=1)
        unit = ShardUnit(host=host, start=start, dataplane=plane, fetcher=fetcher, pool=pool,
                         handler=handler, runtime=SMALL_BATCHES, policy=policy)  # fmt: skip
        if max_kept is not None:
            unit.failures.kept.limit = max_kept  # before the unit's thread runs
        unit.start()
        started.append((unit, host, pool, fetcher))
        return unit, host

    yield h, plane, start
    for unit, host, pool, fetcher in started:
        unit.stop(abandon=False)
        assert host.stopped.wait(10)
        fetcher.close()
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
    calls = Calls(bad)
    _, host = start(calls)
    eventually(lambda: calls.ids() == [bad, good], what="both handled once (one failed)")
    eventually(lambda: h.pending(V1_0) == [(bad, "m1")], what="the good one acked")

    plane.lose = 1
    later = h.produce(V1_0, 1, 2, start=2, together=True)  # one read sees both: the lost one
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
    calls = Calls(bad)
    start(calls)
    eventually(lambda: calls.ids() == [bad], what="handled once")
    h.produce(V1_0, 1, 3, start=1)
    eventually(lambda: len(calls.ids()) == 4, what="the new ones handled")
    assert calls.ids().count(bad) == 1


def test_a_claim_whose_reply_is_lost_is_recovered_before_the_take_over_goes_on(unit_env: Any) -> None:
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 4)
    h.client.xreadgroup(GROUP, "old", {h.stream(V1_0): ">"}, count=4)  # a previous owner's leftovers
    plane.lose_claims = 1
    calls = Calls()
    start(calls)
    eventually(lambda: calls.ids() == ids, what="every orphan handled, in order")
    eventually(lambda: not h.pending(V1_0), what="everything acked")
    assert plane.lost == [ids[:2]]
    assert [c[1] for c in calls.calls] == ["pending", "pending", "claimed", "claimed"]
    assert "old" not in h.consumers(V1_0)  # the take-over went on to the end


def test_after_a_lost_claim_the_take_over_keeps_orphans_before_later_own_entries(unit_env: Any) -> None:
    """A previous owner's interrupted take-over left it the oldest entries, and this member (same id)
    its own later ones. A claim whose reply is lost is recovered from the window that claim scanned,
    not from every own pending entry: the later orphans are still handed out before them."""
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 6)  # one key
    h.client.xreadgroup(GROUP, "old", {h.stream(V1_0): ">"}, count=4)  # orphans: ids 0-3
    h.client.xreadgroup(GROUP, "m1", {h.stream(V1_0): ">"}, count=2)  # an earlier m1 read ids 4-5
    plane.lose_claims = 1  # the first page of orphans (ids 0-1)
    calls = Calls()
    start(calls)
    eventually(lambda: len(calls.ids()) == 6, what="every entry handed out")
    eventually(lambda: not h.pending(V1_0), what="everything acked")
    assert plane.lost == [ids[:2]]
    assert calls.ids() == ids


def test_the_ack_of_a_batch_rides_in_the_fetch_of_the_next(unit_env: Any) -> None:
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 4)
    calls = Calls()
    _, host = start(calls)

    eventually(lambda: not h.pending(V1_0) and host.counts["acked"] == 4, what="everything acked")
    assert calls.ids() == ids
    assert [a for a in plane.acks_sent if a][:2] == [ids[:2], ids[2:]]  # no ack call of its own


def test_a_folded_ack_whose_reply_is_lost_is_sent_again_before_the_resync(unit_env: Any) -> None:
    """The fetch that acks batch 1 and reads batch 2 runs, then its reply is lost: the unit cannot know
    whether the ack went through. It acks again (idempotent) before it re-reads its own pending entries,
    so batch 1 is not handed out again and batch 2 is, once, in order."""
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 4)
    plane.lose_acking = 1
    calls = Calls()
    _, host = start(calls)

    eventually(lambda: len(calls.ids()) >= 4 and not h.pending(V1_0), what="everything handled and acked")
    assert plane.lost == [ids[:2]]  # the fetch carrying batch 1's ack (and reading batch 2) was lost
    assert calls.ids() == ids  # each once, in order
    assert [c[1] for c in calls.calls] == ["new", "new", "pending", "pending"]
    assert host.counts["acked"] == 4 and host.reports == []


def test_a_drained_unit_acks_what_it_handled_before_it_reports_stopped(unit_env: Any) -> None:
    """Ack-on-revoke with folded acks: the ids a draining unit handled are acked before the unit reports
    that it stopped (the member releases the shard only then); what it never handled stays pending."""
    h, _, start = unit_env
    ids = h.produce(V1_0, 1, 2)
    entered, release = threading.Event(), threading.Event()
    calls = Calls()

    def slow(entry: Any) -> None:
        calls(entry)
        if entry.entry_id == ids[0]:
            entered.set()
            release.wait(10)

    unit, host = start(slow)
    pending_at_stop: list[Any] = []
    stopped = host.unit_stopped
    host.unit_stopped = lambda u, failed: (pending_at_stop.append(h.pending(V1_0)), stopped(u, failed))
    assert entered.wait(10)
    unit.stop(abandon=False)  # revoked: finish the entry in flight, ack it, stop
    release.set()
    assert host.stopped.wait(10)
    assert calls.ids() == [ids[0]]
    assert pending_at_stop == [[(ids[1], "m1")]]  # acked before "stopped"; the rest is the next owner's
    assert host.counts["acked"] == 1


def test_an_abandoned_unit_acks_nothing(unit_env: Any) -> None:
    h, _, start = unit_env
    ids = h.produce(V1_0, 1, 2)
    entered, release = threading.Event(), threading.Event()

    def slow(entry: Any) -> None:
        if entry.entry_id == ids[0]:
            entered.set()
            release.wait(10)

    unit, host = start(slow)
    assert entered.wait(10)
    unit.stop(abandon=True)  # fenced: the coordinator already gave the shard away
    release.set()
    assert host.stopped.wait(10)
    assert h.pending(V1_0) == [(ids[0], "m1"), (ids[1], "m1")] and host.counts["acked"] == 0


def test_a_unit_stopped_in_the_middle_of_a_resync_leaves_the_rest_to_the_next_owner(unit_env: Any) -> None:
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 4)
    plane.lose = 1  # the first read (ids 0 and 1) is lost: the resync hands them out
    entered, release = threading.Event(), threading.Event()
    first = Calls()

    def slow(entry: Any) -> None:
        first(entry)
        if entry.entry_id == ids[0]:
            entered.set()
            release.wait(10)

    unit, host = start(slow)
    assert entered.wait(10)
    unit.stop(abandon=False)  # a drain (revoked, SIGTERM): finish the entry in flight, ack it, stop
    release.set()
    assert host.stopped.wait(10)
    assert first.ids() == [ids[0]]
    assert h.pending(V1_0) == [(ids[1], "m1")]  # read by the lost read, never handed out: not lost

    second = Calls()
    start(second)  # the shard's next unit (here the same member id: a rejoin)
    eventually(lambda: second.ids() == ids[1:], what="the rest, in order")
    eventually(lambda: not h.pending(V1_0), what="everything acked")


def test_a_redeliver_asked_for_during_the_take_over_is_not_taken_for_an_old_one(unit_env: Any) -> None:
    """The unit's first token comes from its first claim, before the take-over hands anything out: an
    operator's redeliver that lands after a take-over entry failed is served, not taken as the baseline."""
    h, plane, start = unit_env
    (bad,) = h.produce(V1_0, 1, 1)
    previous = plane.read("m1", h.members["m1"].epoch, V1_0, 10)  # an earlier incarnation of m1 read it
    assert [e.entry_id for e in previous.entries] == [bad]
    calls = Calls(bad, times=1)

    def handler(entry: Any) -> None:
        if not calls.ids():  # the take-over's delivery: it is about to fail, and the operator asks now
            h.client.hincrby(redeliver_key(PREFIX, GROUP), "v1:0", 1)
        calls(entry)

    start(handler)
    eventually(lambda: not h.pending(V1_0), what="the failed entry handed out again and acked")
    assert calls.calls == [(bad, "pending", 2), (bad, "pending", 3)]


def test_a_failure_inside_a_resync_is_retried_there_and_needs_no_second_resync(unit_env: Any) -> None:
    """A re-read of pending entries whose reply is lost re-delivered only what was pending already: the
    resync retries that page and is then done. (Each resync is a delivery of the kept entries in Redis's
    count, so the count shows how many there were.)"""
    h, plane, start = unit_env
    (bad,) = h.produce(V1_0, 1, 1)
    calls = Calls(bad)
    start(calls)
    eventually(lambda: calls.ids() == [bad], what="handled once, failed (kept)")

    plane.lose = 1  # the next read with entries: lost, so a resync ...
    plane.lose_pending = 1  # ... whose first page is lost as well
    later = h.produce(V1_0, 1, 2, start=1, together=True)  # one read takes both (the one lost)
    eventually(lambda: calls.ids() == [bad, *later], what="the lost read's entries, after the resync")
    (last,) = h.produce(V1_0, 1, 1, start=3)  # read only once any further resync is over
    eventually(lambda: calls.ids() == [bad, *later, last], what="a newer entry handled")
    eventually(lambda: h.pending(V1_0) == [(bad, "m1")], what="all but the kept one acked")
    assert plane.lost == [later, [bad, later[0]]]
    assert times_delivered(h, bad) == 3  # its read, the lost page, the page again: one resync


def test_the_entries_a_unit_keeps_are_bounded(unit_env: Any) -> None:
    h, plane, start = unit_env
    bad = h.produce(V1_0, 1, 5)
    calls = Calls(*bad)
    unit, _ = start(calls, max_kept=3)
    eventually(lambda: unit.failures.kept.dropped == 2, what="every one failed; two not remembered")
    assert calls.ids() == bad
    assert len(unit.failures.kept) == 3 and all(i in unit.failures.kept for i in bad[:3])

    plane.lose = 1
    (good,) = h.produce(V1_0, 1, 1, start=5)
    eventually(lambda: calls.ids()[5:] == [bad[3], bad[4], good], what="the resync")
    # The ones not remembered are handed out again (at-least-once), in order, the remembered ones not.
    eventually(lambda: h.pending(V1_0) == [(i, "m1") for i in bad], what="the good one acked")
    assert len(unit.failures.kept) == 3


def test_a_complete_resync_forgets_kept_entries_that_are_no_longer_pending(unit_env: Any) -> None:
    h, plane, start = unit_env
    bad = h.produce(V1_0, 1, 3)
    calls = Calls(*bad)
    unit, _ = start(calls)
    eventually(lambda: len(unit.failures.kept) == 3, what="all three failed and kept")
    h.client.xack(h.stream(V1_0), GROUP, bad[0], bad[1])  # what an operator's skip does

    plane.lose = 1
    (good,) = h.produce(V1_0, 1, 1, start=3)
    eventually(lambda: calls.ids() == [*bad, good], what="the lost read's entry after the resync")
    eventually(lambda: len(unit.failures.kept) == 1, what="the skipped ones forgotten")
    assert bad[2] in unit.failures.kept


def test_a_dead_letter_whose_reply_is_lost_is_copied_once(unit_env: Any) -> None:
    h, plane, start = unit_env
    bad, good = h.produce(V1_0, 1, 2)
    calls = Calls(bad)
    plane.lose_dead_letter = 1
    start(calls, DEAD_LETTER_AT_ONCE)
    eventually(lambda: calls.ids() == [bad, good], what="given up on, then the next one")
    eventually(lambda: not h.pending(V1_0), what="dead-lettered and acked")
    assert plane.lost == [[bad]]  # the script ran; its reply was lost; the retry found it done
    ((_, fields),) = h.client.xrange(dead_letter_key(PREFIX, GROUP))
    assert fields[b"dlq_source_id"] == bad.encode()


def test_redeliver_keeps_the_shard_order_across_lost_replies(unit_env: Any) -> None:
    h, plane, start = unit_env
    ids = h.produce(V1_0, 1, 6)  # one key
    calls = Calls()
    calls.failing[ids[2]] = 2  # fails twice, then succeeds
    plane.lose = 2  # the first two reads with entries
    plane.lose_pending = 1  # the first resync's first page
    plane.lose_rereads = 1  # the first re-read of the failed entry (alone)
    start(calls, ErrorPolicy(on_error=OnError.REDELIVER, max_deliveries=10, redeliver_backoff_ms=10))
    eventually(lambda: len(calls.ids()) == 8, what="every entry handled, the failed one three times")
    eventually(lambda: not h.pending(V1_0), what="everything acked")
    assert calls.ids() == [ids[0], ids[1], ids[2], ids[2], ids[2], ids[3], ids[4], ids[5]]
    assert plane.lost == [ids[:2], ids[:2], ids[2:4], ids[2:3]]


# ------------------------------------------------------------------------------------ a real member


def _sha(name: str) -> str:
    """What the proxy watches for: the function's name, which every FCALL of it carries."""
    return library.function_name(name)


def run_with_cut_read_replies(redis_url: str, handler: Callable[[Any], Any], **options: Any) -> Recorder:
    """One member whose data-plane connection goes through the proxy, which forwards read scripts to
    Redis and cuts the connection before three of their replies (with entries) reach the member. 96
    events or more (until the third cut) over 8 keys, two per shard; returns once every one was
    handled, nothing is pending and the member has stopped. Asserts the checker finds nothing lost,
    out of order or overlapping."""
    cluster = Cluster(redis_url)
    port = urlparse(redis_url).port
    assert port is not None
    recorder = Recorder(handler)
    try:
        with LossyProxy(port) as proxy:
            proxy.lose_replies(_sha("fetch"), times=3, when=fetch_has_entries)
            client = redis_client_for(proxy.url)
            m = cluster.member(recorder, client=client, **options)
            keys = [cluster.key_for(i % 4, i // 4) for i in range(8)]  # two keys per shard
            sent: list[tuple[str, int]] = []
            # 12 rounds at least, and on until the third cut: a fast member may read everything left
            # in the retry after an early cut, and a cut needs a read that has entries.
            deadline = time.monotonic() + 20
            while len(sent) < 96 or (proxy.cuts < 3 and time.monotonic() < deadline):
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
        assert (report.lost, report.overlaps) == ([], []), report.summary()
        if options.get("ordering") != "none":  # "none" keeps no order, by definition
            assert report.out_of_order == [], report.summary()
        return recorder
    finally:
        cluster.close()


@pytest.mark.parametrize("ordering", ["shard", "key", "none"])
def test_a_member_whose_read_replies_are_cut_strands_nothing_and_keeps_per_key_order(
    redis_url: str, ordering: str
) -> None:
    # Under "key" / "none" a slow handler keeps entries running while a resync re-reads the pending list:
    # it must leave them out (they would run twice otherwise).
    slow = ordering != "shard"
    recorder = run_with_cut_read_replies(
        redis_url, lambda entry: slow and threading.Event().wait(0.01), ordering=ordering,
        runtime=Runtime(max_concurrency=4, batch_size=4, idle_backoff_min_ms=2, idle_backoff_max_ms=20),
    )  # fmt: skip
    # Each once (every event was handled): a resync hands out only what was never handled.
    assert len(recorder.snapshot()) == len(recorder.handled_ns()) >= 96


def test_under_redeliver_cut_read_replies_keep_every_shard_in_order(redis_url: str) -> None:
    """on_error="redeliver": every fourth event fails its first delivery. Per shard, the handler sees
    entries in stream order, a failed one again right after itself and before anything later."""

    def fail_first_delivery(entry: Any) -> None:
        if entry.payload["n"] % 4 == 0 and entry.deliveries == 1 and entry.delivery == "new":
            raise RuntimeError("first delivery fails (test)")

    recorder = run_with_cut_read_replies(
        redis_url, fail_first_delivery, on_error="redeliver", redeliver_backoff_ms=10
    )
    assert len(recorder.snapshot()) > len(recorder.handled_ns())  # failures happened, handed out again
    for shard in {c.shard for c in recorder.snapshot()}:
        ids = [c.entry_id for c in sorted(recorder.snapshot(), key=lambda c: c.started) if c.shard == shard]
        distinct = [i for i, previous in zip(ids, [None, *ids], strict=False) if i != previous]
        assert [_id(i) for i in distinct] == sorted({_id(i) for i in ids}), f"shard {shard}: {ids}"


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_under_redeliver_cut_read_replies_strand_nothing_with_many_entries_at_once(
    redis_url: str, ordering: str
) -> None:
    """The same with ``ordering="key"`` (per-key order of first handlings: the checker) and ``"none"``:
    the failed entries are handed out again, the rest flows, nothing is lost or left pending."""

    def fail_first_delivery(entry: Any) -> None:
        threading.Event().wait(0.005)
        if entry.payload["n"] % 4 == 0 and entry.deliveries == 1 and entry.delivery == "new":
            raise RuntimeError("first delivery fails (test)")

    recorder = run_with_cut_read_replies(
        redis_url, fail_first_delivery, on_error="redeliver", redeliver_backoff_ms=10, ordering=ordering,
        runtime=Runtime(max_concurrency=4, batch_size=4, idle_backoff_min_ms=2, idle_backoff_max_ms=20),
    )  # fmt: skip
    assert len(recorder.snapshot()) > len(recorder.handled_ns())  # failures happened, handed out again


def _id(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)
