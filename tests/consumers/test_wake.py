"""The wake-up (consumers/member/waiter.py): an idle member waits for new entries instead of polling.

Each test gives the member a polling backoff of a minute, so an entry handled in time was read because
the wait woke the member, not because a poll came round.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import pytest
import redis

from consumers.dataplane import DataPlane, redis_client
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard
from rsc_redis import acl
from tests.consumers.harness import (
    GROUP,
    PREFIX,
    Cluster,
    Recorder,
    assert_no_overlap_per_shard,
    assert_per_key_order,
    eventually,
)

SAFETY_MS = 1_000


def _runtime(**fields: Any) -> Runtime:
    """Without the wake-up an idle shard of this runtime would be read again only after a minute."""
    minute = {"idle_backoff_min_ms": 60_000, "idle_backoff_max_ms": 60_000}
    return Runtime(**{"max_concurrency": 4, "batch_size": 8, **minute, **fields})


def _commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


@pytest.mark.parametrize("ordering", ["shard", "key"])
def test_entries_appended_to_idle_shards_are_read_without_a_poll(cluster: Cluster, ordering: str) -> None:
    """One entry at a time, each to a shard that was idle, and each only once the one before was handled:
    the shard just handled goes idle again while the member waits on the others, so its wait must be
    interrupted and started again over all four (else its next entry would wait for the safety net)."""
    recorder = Recorder()
    runtime = _runtime(idle_wait_ms=60_000)  # nor would the safety net read it in time
    m = cluster.member(recorder, runtime=runtime, ordering=ordering)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)  # past the take-over: every shard idle, every ticket parked
    sent = 0
    for round_ in range(3):
        for shard in range(4):
            started = time.monotonic()
            cluster.send(cluster.key_for(shard, round_))
            sent += 1
            eventually(lambda n=sent: recorder.count() == n, timeout_s=10, what=f"entry {sent} handled")
            assert time.monotonic() - started < 10
    assert m.stats.handled == sent


def test_an_idle_member_sends_almost_nothing(cluster: Cluster) -> None:
    """With every shard idle the member's only data-plane commands are its wait (one XREAD per
    ``idle_wait_ms``) and the safety-net fetch (about as often); a poll every 100 ms would be 30 fetches
    in 3 s."""
    m = cluster.member(Recorder(), runtime=_runtime(idle_wait_ms=SAFETY_MS))
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(1.5)
    before = _commands(cluster.client)
    time.sleep(3.0)
    after = _commands(cluster.client)
    fetches = after.get("fcall", 0) - before.get("fcall", 0)
    waits = after.get("xread", 0) - before.get("xread", 0)
    assert 1 <= waits <= 8, (waits, fetches)
    assert fetches <= 8, (waits, fetches)


def test_without_the_wake_up_idle_shards_are_polled(cluster: Cluster) -> None:
    """wake_on_append=False: no XREAD at all, and entries are still read (by the poll)."""
    recorder = Recorder()
    runtime = Runtime(max_concurrency=4, wake_on_append=False, idle_backoff_min_ms=5, idle_backoff_max_ms=20)
    before = _commands(cluster.client)
    m = cluster.member(recorder, runtime=runtime)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    for shard in range(4):
        cluster.send(cluster.key_for(shard))
    eventually(lambda: recorder.count() == 4, what="every entry handled")
    assert _commands(cluster.client).get("xread", 0) == before.get("xread", 0)


def test_a_user_that_may_not_wait_polls_and_says_so_once(
    cluster: Cluster, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis user from before the wake-up (no XREAD, no CLIENT UNBLOCK): the member logs one WARNING
    and polls its idle shards; nothing is lost."""
    rules = [r for r in acl.rules_for(acl.MEMBER) if r not in ("+client|id", "+client|unblock")]
    admin = cluster.client
    admin.execute_command("ACL", "SETUSER", "old-member", *acl.setuser_args("x", ">pw", rules))
    try:
        url = redis_url.replace("redis://", "redis://old-member:pw@", 1)
        plane = DataPlane(redis_client(url), PREFIX, GROUP)
        recorder = Recorder()
        runtime = Runtime(max_concurrency=4, idle_backoff_min_ms=5, idle_backoff_max_ms=20)
        with caplog.at_level(logging.WARNING, logger="consumers.member"):
            m = cluster.member(recorder, runtime=runtime, dataplane=plane)
            eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
            for shard in range(4):
                cluster.send(cluster.key_for(shard))
            eventually(lambda: recorder.count() == 4, what="every entry handled by polling")
            time.sleep(0.2)
        warnings = [r for r in caplog.records if "cannot wait for new entries" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "docs/redis-acl.md" in warnings[0].getMessage()
    finally:
        admin.execute_command("ACL", "DELUSER", "old-member")


def test_a_wait_cut_off_falls_back_to_polling_and_waits_again(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait's connection is killed (a Redis restart, a network cut): the member's one WARNING of an
    outage and its INFO when Redis answers again; the idle shards are read at once and the member waits
    again (its idle shards are not left on the polling backoff, a minute here): an entry appended
    afterwards is read without a poll."""
    recorder = Recorder()
    m = cluster.member(recorder, runtime=_runtime(idle_wait_ms=60_000))
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")

    def blocked() -> list[int]:  # blocked in XREAD (not the look's connection, whose last command it was)
        clients = cluster.client.client_list()
        return [c["id"] for c in clients if c.get("cmd") == "xread" and "b" in c["flags"]]

    with caplog.at_level(logging.INFO, logger="consumers.member"):
        [waiting] = eventually(blocked, what="the member waits")
        cluster.client.client_kill_filter(_id=waiting)
        eventually(lambda: blocked() and blocked() != [waiting], what="the member waits again")
        for shard in range(4):
            cluster.send(cluster.key_for(shard))
        eventually(lambda: recorder.count() == 4, timeout_s=10, what="every entry handled")
    messages = [r.getMessage() for r in caplog.records]
    assert sum("Redis cannot serve the data plane (the wait for new entries" in t for t in messages) == 1
    assert sum("Redis answers the data plane again" in t for t in messages) == 1, messages
    assert not any("Traceback" in t or r.exc_info for t, r in zip(messages, caplog.records, strict=True))


def _handled_on(recorder_threads: list[tuple[int, str]]) -> set[str]:
    """The names the handling threads have now (an inline run lends the unit's name only meanwhile)."""
    by_ident = {t.ident: t.name for t in threading.enumerate()}
    return {by_ident.get(ident, "?").rsplit("-", 1)[-1] for ident, _ in recorder_threads}


def test_one_worker_member_runs_woken_batches_on_its_waiter(cluster: Cluster) -> None:
    """max_concurrency 1 (the default): the batch the waiter woke for runs on the waiter's own thread,
    with no hand-off to the shard's thread, under the shard thread's name (logs, labels), and its acks
    ride the next read."""
    seen: list[tuple[int, str]] = []
    recorder = Recorder(lambda entry: seen.append((threading.get_ident(), threading.current_thread().name)))
    m = cluster.member(recorder, runtime=_runtime(max_concurrency=1, idle_wait_ms=60_000))
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)  # every ticket parked
    for n in range(12):  # each to an idle shard: a woken read, run on the waiter, as is the read after it
        cluster.send(cluster.key_for(n % 4, n))
        eventually(lambda n=n: recorder.count() == n + 1, timeout_s=10, what=f"entry {n} handled")
    assert _handled_on(seen) == {"waiter"}
    assert all("-worker-" in name for _, name in seen)  # the unit's name while it ran
    assert {call.member for call in recorder.snapshot()} == {m.label}
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")


def test_one_worker_member_under_load_runs_its_batches_in_rounds(redis_url: str) -> None:
    """max_concurrency 1 under steady load that moves over 16 shards (each send reaches a few of them,
    so shards go idle, are found by a round's look or woken, and go busy again): each batch runs on the
    thread that read it (the waiter's, or the fetcher's for the tickets due meanwhile), round after
    round; no batch is handed to its shard's own thread and back (which cost several thread wake-ups
    per batch). Order per key holds and everything is acked."""
    cluster = Cluster(redis_url, shard_count=16)
    try:
        seen: list[tuple[int, str]] = []

        def handle(entry: Any) -> None:
            seen.append((threading.get_ident(), threading.current_thread().name))
            time.sleep(0.0003)

        recorder = Recorder(handle)
        m = cluster.member(recorder, runtime=_runtime(max_concurrency=1, idle_wait_ms=60_000))
        eventually(lambda: len(m.running_shards) == 16, what="the member runs its shards")
        time.sleep(0.3)  # every ticket parked
        keys = [[cluster.key_for(shard, n) for n in range(2)] for shard in range(16)]
        rng, sent = random.Random(28), 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            items = [(key, {"n": sent}) for shard in rng.sample(range(16), 3) for key in keys[shard]]
            cluster.producer.send_batch(PREFIX, items)
            sent += len(items)
            time.sleep(0.002)
        eventually(lambda: recorder.count() == sent, timeout_s=30, what="every entry handled")
        assert _handled_on(seen) <= {"waiter", "fetcher"}, _handled_on(seen)
        assert all("-worker-" in name for _, name in seen)  # each under its unit's name while it ran
        assert_per_key_order(recorder.snapshot())
        eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")
    finally:
        cluster.close()


def test_a_long_batch_does_not_hold_up_the_release_of_other_shards(cluster: Cluster) -> None:
    """max_concurrency 1: while one shard's handler runs long (on the thread of a round), a second member
    joins and the shards it is given are released at once (their units are told to stop and get their
    tickets back on their own threads), not after the long handler."""
    started, release = threading.Event(), threading.Event()

    def handle(entry: Any) -> None:
        if entry.payload.get("block"):
            started.set()
            release.wait(30)

    recorder = Recorder(handle)
    runtime = _runtime(max_concurrency=1, idle_wait_ms=60_000)
    first = cluster.member(recorder, runtime=runtime)
    eventually(lambda: len(first.running_shards) == 4, what="the first member runs every shard")
    time.sleep(0.3)
    try:
        cluster.send(cluster.key_for(0), block=True)
        eventually(started.is_set, timeout_s=10, what="the long handler started")
        second = cluster.member(recorder, runtime=runtime)
        moved = eventually(
            lambda: {s.index for s in second.running_shards} - {0}, timeout_s=8, what="a shard moved"
        )
        index = min(moved)
        entry_id = cluster.send(cluster.key_for(index, 1))
        eventually(
            lambda: any(c.entry_id == entry_id and c.member == second.label for c in recorder.snapshot()),
            timeout_s=8, what="the second member handles the moved shard's entry",
        )  # fmt: skip
        assert not release.is_set() and len(first.running_shards & {Shard(1, 0)}) == 1
    finally:
        release.set()
    eventually(lambda: _pending(cluster) == 0, timeout_s=20, what="every handled entry acked")
    assert_no_overlap_per_shard(recorder.snapshot())


class _RecordingPlane(DataPlane):
    """The real data plane, noting per fetch call the shards it read entries of."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads: list[set[str]] = []

    def fetch(self, member_id: str, shards: Any, count: int) -> Any:
        results = super().fetch(member_id, shards, count)
        read = {str(item.shard) for item, result in zip(shards, results, strict=True) if result.entries}
        if read:
            self.reads.append(read)
        return results


@pytest.mark.parametrize("workers", [1, 4])
def test_a_wake_reads_the_other_idle_shards_in_the_same_call(cluster: Cluster, workers: int) -> None:
    """One producer call appends to every idle shard: the wait wakes for one of them (Redis 7.0 hands a
    blocked XREAD the first stream with news), and the read it makes takes the other parked shards
    along, so all four shards' entries come in that one call, not one round later."""
    plane = _RecordingPlane(cluster.client, PREFIX, GROUP)
    recorder = Recorder()
    runtime = _runtime(max_concurrency=workers, idle_wait_ms=60_000)
    m = cluster.member(recorder, runtime=runtime, dataplane=plane)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    for round_ in range(3):
        time.sleep(0.3)  # every ticket parked
        before = len(plane.reads)
        cluster.producer.send_batch(PREFIX, [(cluster.key_for(s, round_), {"n": s}) for s in range(4)])
        eventually(lambda r=round_: recorder.count() == 4 * (r + 1), timeout_s=10, what="all four handled")
        assert plane.reads[before] == {f"v1:{s}" for s in range(4)}, plane.reads[before:]
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")


class _AckCountingPlane(DataPlane):
    """The real data plane, counting the shards a fetch call only acked: ids to ack, nothing new read."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ack_only = 0
        self.read = 0

    def fetch(self, member_id: str, shards: Any, count: int) -> Any:
        results = super().fetch(member_id, shards, count)
        for item, result in zip(shards, results, strict=True):
            self.ack_only += bool(item.ack_ids and not result.entries)
            self.read += bool(result.entries)
        return results


def test_a_drained_shard_parks_at_once_and_its_acks_ride_the_next_read(cluster: Cluster) -> None:
    """A batch shorter than batch_size read its shard to the end: its ticket parks at once, its acks
    with it, and they ride the read of the next entry (consumers/member/fetcher.py, "Drained"), not a
    call of their own that would find nothing new. Entries 5 ms apart on one shard: about one read per
    entry and next to no ack-only calls (before: one ack-only call per entry); every entry acked."""
    plane = _AckCountingPlane(cluster.client, PREFIX, GROUP)
    recorder = Recorder()
    m = cluster.member(recorder, runtime=_runtime(max_concurrency=1, idle_wait_ms=60_000), dataplane=plane)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)  # every ticket parked
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="nothing pending")
    before_ack_only, before_read = plane.ack_only, plane.read
    sent = 60
    for n in range(sent):
        cluster.send(cluster.key_for(0, n))
        time.sleep(0.005)
    eventually(lambda: recorder.count() == sent, timeout_s=10, what="every entry handled")
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")
    reads, ack_only = plane.read - before_read, plane.ack_only - before_ack_only
    assert reads >= sent // 4  # entries 5 ms apart are read in small batches, not one backlog
    assert ack_only <= reads // 4 + 1, (reads, ack_only)  # at the end, and where a read came >10 ms late


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_one_worker_member_runs_fast_straight_batches_in_rounds(cluster: Cluster, ordering: str) -> None:
    """Under "key" and "none" too: once the handler is known to be fast, a batch the waiter woke for on a
    shard with an empty window runs straight on the waiter's thread (in the one worker's place), as a
    "shard" unit's does, not on the dispatcher's or a worker's thread; order per key holds."""
    seen: list[tuple[int, str]] = []
    recorder = Recorder(lambda entry: seen.append((threading.get_ident(), threading.current_thread().name)))
    runtime = _runtime(max_concurrency=1, idle_wait_ms=60_000)
    m = cluster.member(recorder, runtime=runtime, ordering=ordering)
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    for n in range(8):  # the units learn that the handler is fast
        cluster.send(cluster.key_for(n % 4, n))
    eventually(lambda: recorder.count() == 8, timeout_s=10, what="the warm-up handled")
    time.sleep(0.3)  # every ticket parked
    del seen[:]
    for n in range(8, 20):  # each to an idle shard: a woken read, run straight on the waiter's thread
        cluster.send(cluster.key_for(n % 4, n))
        eventually(lambda n=n: recorder.count() == n + 1, timeout_s=10, what=f"entry {n} handled")
    assert _handled_on(seen) == {"waiter"}
    assert_per_key_order(recorder.snapshot())
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")


def test_wider_members_keep_a_thread_per_batch(cluster: Cluster) -> None:
    """With more than one worker slot the waiter hands batches to the shards' threads (it never runs a
    handler itself: it must stay free to wake the others)."""
    seen: list[tuple[int, str]] = []
    recorder = Recorder(lambda entry: seen.append((threading.get_ident(), threading.current_thread().name)))
    m = cluster.member(recorder, runtime=_runtime(max_concurrency=4, idle_wait_ms=60_000))
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)
    for n in range(8):
        cluster.send(cluster.key_for(n % 4, n))
    eventually(lambda: recorder.count() == 8, timeout_s=10, what="8 entries handled")
    assert "waiter" not in _handled_on(seen)


def test_an_inline_batch_that_fails_goes_back_to_its_unit(cluster: Cluster) -> None:
    """A handler failure in a batch the waiter runs: the unit decides (here "redeliver": retried from the
    failed entry, in order, then handled), and nothing is lost or handled out of order."""
    calls: list[int] = []
    failed = threading.Event()
    seen: list[tuple[int, str]] = []

    def handle(entry: Any) -> None:
        calls.append(entry.payload["n"])
        seen.append((threading.get_ident(), threading.current_thread().name))
        if entry.payload["n"] == 1 and not failed.is_set():
            failed.set()
            raise RuntimeError("once")

    recorder = Recorder(handle)
    m = cluster.member(
        recorder, runtime=_runtime(max_concurrency=1, idle_wait_ms=60_000), on_error="redeliver",
        redeliver_backoff_ms=10,
    )  # fmt: skip
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)
    key = cluster.key_for(0)
    cluster.producer.send_batch(PREFIX, [(key, {"n": n}) for n in range(3)])  # one call: one woken read
    eventually(lambda: calls[-1:] == [2], timeout_s=10, what="the batch handled to its end")
    assert calls == [0, 1, 1, 2]
    assert _handled_on(seen[:2]) == {"waiter"}  # the first run was the waiter's (then the unit's)
    eventually(lambda: _pending(cluster) == 0, timeout_s=10, what="every handled entry acked")


def _pending(cluster: Cluster) -> int:
    return sum(
        int(g["pending"])
        for key in cluster.client.scan_iter(f"rsc:{{{PREFIX}}}:v*")
        if cluster.client.type(key) == b"stream"
        for g in cluster.client.xinfo_groups(key)
        if g["name"] in (GROUP, GROUP.encode())
    )


def test_a_busy_shard_does_not_keep_the_waiter_from_the_others(cluster: Cluster) -> None:
    """One worker, shard 0 kept busy by a producer: the waiter runs its batches round after round. An
    entry on another, idle shard is still read and handled at once (each round looks for news on the
    parked streams), not once shard 0 goes quiet (nor by a poll or the safety net: a minute)."""

    def handle(entry: Any) -> None:
        time.sleep(0.005)

    recorder = Recorder(handle)
    m = cluster.member(recorder, runtime=_runtime(max_concurrency=1, idle_wait_ms=60_000))
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    time.sleep(0.3)
    busy, stop = cluster.key_for(0), threading.Event()

    def feed() -> None:
        while not stop.is_set():
            cluster.producer.send_batch(PREFIX, [(busy, {"n": -1})] * 8)
            time.sleep(0.001)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        eventually(lambda: recorder.count() > 50, timeout_s=10, what="shard 0 busy")
        entry_id = cluster.send(cluster.key_for(2))
        started = time.monotonic()
        eventually(
            lambda: entry_id in {c.entry_id for c in recorder.snapshot()}, timeout_s=10,
            what="the idle shard's entry handled while shard 0 stays busy",
        )  # fmt: skip
        # A round takes a batch of 8 entries (40 ms of handler): the next round's look finds it. Without
        # the look it waits for shard 0 to go quiet, which this producer never lets happen.
        assert time.monotonic() - started < 2.0
        assert feeder.is_alive()
    finally:
        stop.set()
        feeder.join(5)
