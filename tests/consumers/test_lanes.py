"""consumers/member/lanes.py (pure: scripted time) and consumers/member/tasks.py (real threads)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from consumers.member.lanes import Lanes
from consumers.member.tasks import TaskPool
from tests.consumers.harness import eventually


def take_ready(lanes: Lanes) -> list[Any]:
    """Every entry that may start now, each taken (marked running), as the workers take them."""
    taken = []
    while (entry := lanes.take_one()) is not None:
        taken.append(entry)
    return taken


def _entry(n: int) -> Any:
    return SimpleNamespace(entry_id=f"{n}-0")


def test_a_lane_runs_one_entry_at_a_time_in_order_and_lanes_run_at_once() -> None:
    lanes = Lanes()
    for n, key in enumerate("aabab"):
        lanes.add(key, _entry(n))
    assert [e.entry_id for e in take_ready(lanes)] == ["0-0", "2-0"]  # the heads of a and b
    assert take_ready(lanes) == []  # both running: nothing else may start
    lanes.finished("2-0")
    assert [e.entry_id for e in take_ready(lanes)] == ["4-0"]  # b's next
    lanes.finished("0-0")
    assert [e.entry_id for e in take_ready(lanes)] == ["1-0"]
    assert len(lanes) == 3 and "3-0" in lanes and "0-0" not in lanes
    lanes.add("a", _entry(1))  # already in the window: not added twice
    assert len(lanes) == 3


def test_a_parked_lane_waits_for_its_time_and_resumes_with_the_fresh_copy() -> None:
    lanes = Lanes()
    for n, key in enumerate("aab"):
        lanes.add(key, _entry(n))
    take_ready(lanes)
    lanes.park("0-0", until=10.0)
    assert take_ready(lanes) == [] and lanes.next_due() == 10.0 and lanes.parked_count == 1
    assert lanes.take_due(9.9) == []
    lanes.finished("2-0")  # the other lane is not held up
    assert [e.entry_id for e in lanes.take_due(10.0)] == ["0-0"]
    fresh = SimpleNamespace(entry_id="0-0", deliveries=2)
    lanes.resume("0-0", fresh)
    assert lanes.parked_count == 0
    assert take_ready(lanes) == [fresh]  # the fresh copy runs first; "1-0" still waits behind it
    assert take_ready(lanes) == []
    lanes.finished("0-0")
    assert [e.entry_id for e in take_ready(lanes)] == ["1-0"]
    lanes.park("1-0", until=20.0)
    assert [e.entry_id for e in lanes.take_due(20.0)] == ["1-0"]
    lanes.resume("1-0", None)  # no longer pending: the lane moves on (and is gone)
    assert len(lanes) == 0 and lanes.next_due() is None


def test_an_entry_that_did_not_start_goes_back_to_the_head() -> None:
    lanes = Lanes()
    lanes.add("a", _entry(0))
    lanes.add("a", _entry(1))
    (head,) = take_ready(lanes)
    lanes.put_back(head.entry_id)
    assert [e.entry_id for e in take_ready(lanes)] == ["0-0"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), min_size=1, max_size=40))
def test_lanes_hand_out_each_entry_once_in_per_key_order(plan: list[tuple[str, bool]]) -> None:
    """Whatever the interleaving of finishing and parking, every entry runs (last) once, a key's entries
    in the order added, and at most one entry per key runs at a time."""
    lanes = Lanes()
    keys = {}
    for n, (key, _) in enumerate(plan):
        lanes.add(key, _entry(n))
        keys[f"{n}-0"] = key
    fail = {f"{n}-0" for n, (_, failing) in enumerate(plan) if failing}
    done: list[str] = []
    now = 0.0
    while len(lanes):
        running = take_ready(lanes) + lanes.take_due(now)
        assert len({keys[e.entry_id] for e in running}) == len(running)  # one per key
        for entry in running:
            if entry.entry_id in fail:
                fail.discard(entry.entry_id)
                lanes.park(entry.entry_id, now + 1)
            else:
                done.append(entry.entry_id)
                lanes.finished(entry.entry_id)
        now += 0.5
    assert sorted(done) == sorted(keys)
    for key in "abcd":
        mine = [e for e in done if keys[e] == key]
        assert mine == sorted(mine, key=lambda i: int(i.split("-")[0]))


def test_the_task_pool_runs_as_many_tasks_at_once_as_its_size_and_resizes() -> None:
    pool = TaskPool("t")
    gate = threading.Event()
    started: list[int] = []
    lock = threading.Lock()

    def task(n: int) -> None:
        with lock:
            started.append(n)
        gate.wait(10)

    for n in range(6):
        assert pool.submit(lambda n=n: task(n), lambda: None)
    assert pool.running == 0  # size 0: nothing runs yet
    pool.resize(2)
    eventually(lambda: pool.running == 2, what="two tasks run")
    pool.resize(4)
    eventually(lambda: pool.running == 4, what="four tasks run")
    assert sorted(started) == [0, 1, 2, 3]  # first come, first served
    assert {t.name for t in threading.enumerate() if t.name.startswith("t-worker-")} >= {"t-worker-0"}
    cancelled: list[int] = []
    pool.resize(1)
    pool.submit(lambda: None, lambda: cancelled.append(7))
    pool.shutdown()  # queued tasks are cancelled; running ones finish
    assert sorted(cancelled) == [7]
    assert not pool.submit(lambda: None, lambda: None)
    gate.set()
    eventually(lambda: pool.running == 0, what="running tasks finish")
    eventually(lambda: not [t for t in threading.enumerate() if t.name.startswith("t-worker-")],
               what="the threads end")  # fmt: skip


def test_a_claim_waits_its_turn_for_a_place_and_gives_up_after_its_time() -> None:
    """TaskPool.claim: a round's thread waits for the one place held by a task, takes it when the task
    ends (not before), gives up after its timeout while the place stays held, and never claims a place a
    queued task waits for or one of a pool shut down."""
    pool = TaskPool("c")
    pool.resize(1)
    gate, running = threading.Event(), threading.Event()

    def task() -> None:
        running.set()
        gate.wait(10)

    assert pool.submit(task, lambda: None)
    assert running.wait(5)
    assert not pool.try_claim()
    assert not pool.claim(0.05)  # held all along: gives up
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(pool.claim(5.0)))
    waiter.start()
    time.sleep(0.05)
    assert got == []  # still waiting for the place
    gate.set()  # the task ends: the place is the claim's
    waiter.join(5)
    assert got == [True]
    assert pool.running == 1
    ran = threading.Event()
    assert pool.submit(ran.set, lambda: None)  # queued behind the claimed place
    assert not pool.claim(0.05)  # a task waits for it: it comes first
    pool.unclaim()
    assert ran.wait(5)
    eventually(lambda: pool.running == 0, what="the task ended")
    pool.shutdown()
    assert not pool.claim(0.05)


class LanesMachine(RuleBasedStateMachine):
    """The window driven by any interleaving of what a unit does: entries arrive (in stream order, any
    key), heads start, finish, fail and park, come due and resume (re-read, or gone), or go back (the
    lease in doubt). After every step: at most one running entry per key, no parked key has a running
    entry, nothing is lost or duplicated, and per key entries finish in the order they arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes = Lanes()
        self.now = 0.0
        self.n = 0
        self.key_of: dict[str, str] = {}
        self.running: dict[str, Any] = {}  # entry id -> entry (taken to run)
        self.parked: set[str] = set()
        self.finished: list[str] = []

    @rule(key=st.sampled_from("abc"))
    def arrive(self, key: str) -> None:
        entry = _entry(self.n)
        self.n += 1
        self.key_of[entry.entry_id] = key
        self.lanes.add(key, entry)

    @rule(one=st.booleans())
    def start_ready(self, one: bool) -> None:
        taken = [self.lanes.take_one()] if one else take_ready(self.lanes)
        for entry in (e for e in taken if e is not None):
            assert entry.entry_id not in self.running and entry.entry_id not in self.parked
            self.running[entry.entry_id] = entry

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        if self.running:
            entry_id = data.draw(st.sampled_from(sorted(self.running)))
            del self.running[entry_id]
            self.lanes.finished(entry_id)
            self.finished.append(entry_id)

    @rule(data=st.data(), delay=st.floats(0.1, 5))
    def fail_and_park(self, data: st.DataObject, delay: float) -> None:
        if self.running:
            entry_id = data.draw(st.sampled_from(sorted(self.running)))
            del self.running[entry_id]
            self.lanes.park(entry_id, self.now + delay)
            self.parked.add(entry_id)

    @rule(data=st.data())
    def put_back(self, data: st.DataObject) -> None:
        if self.running:
            entry_id = data.draw(st.sampled_from(sorted(self.running)))
            del self.running[entry_id]
            self.lanes.put_back(entry_id)

    @rule(step=st.floats(0.1, 3), gone=st.booleans())
    def time_passes(self, step: float, gone: bool) -> None:
        self.now += step
        for entry in self.lanes.take_due(self.now):
            self.parked.discard(entry.entry_id)
            if gone:  # no longer pending (skipped by an operator): its lane moves on
                self.lanes.resume(entry.entry_id, None)
                self.finished.append(entry.entry_id)
            else:  # re-read: the fresh copy is ready first
                self.lanes.resume(entry.entry_id, SimpleNamespace(entry_id=entry.entry_id, deliveries=2))

    @invariant()
    def one_running_per_key_and_nothing_lost(self) -> None:
        keys = [self.key_of[i] for i in self.running]
        assert len(keys) == len(set(keys))
        assert not {self.key_of[i] for i in self.parked} & set(keys)
        assert len(self.lanes) == self.n - len(self.finished)
        assert len(set(self.finished)) == len(self.finished)
        assert self.lanes.parked_count == len(self.parked)
        for key in "abc":
            mine = [int(i.split("-")[0]) for i in self.finished if self.key_of[i] == key]
            assert mine == sorted(mine)


TestLanesMachine = LanesMachine.TestCase
TestLanesMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
