"""consumers/member/lanes.py (pure: scripted time) and consumers/member/tasks.py (real threads)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.member.lanes import Lanes
from consumers.member.tasks import TaskPool
from tests.consumers.harness import eventually


def _entry(n: int) -> Any:
    return SimpleNamespace(entry_id=f"{n}-0")


def test_a_lane_runs_one_entry_at_a_time_in_order_and_lanes_run_at_once() -> None:
    lanes = Lanes()
    for n, key in enumerate("aabab"):
        lanes.add(key, _entry(n))
    assert [e.entry_id for e in lanes.take_ready()] == ["0-0", "2-0"]  # the heads of a and b
    assert lanes.take_ready() == []  # both running: nothing else may start
    lanes.finished("2-0")
    assert [e.entry_id for e in lanes.take_ready()] == ["4-0"]  # b's next
    lanes.finished("0-0")
    assert [e.entry_id for e in lanes.take_ready()] == ["1-0"]
    assert len(lanes) == 3 and "3-0" in lanes and "0-0" not in lanes
    lanes.add("a", _entry(1))  # already in the window: not added twice
    assert len(lanes) == 3


def test_a_parked_lane_waits_for_its_time_and_resumes_with_the_fresh_copy() -> None:
    lanes = Lanes()
    for n, key in enumerate("aab"):
        lanes.add(key, _entry(n))
    lanes.take_ready()
    lanes.park("0-0", until=10.0)
    assert lanes.take_ready() == [] and lanes.next_due() == 10.0 and lanes.parked_count == 1
    assert lanes.take_due(9.9) == []
    lanes.finished("2-0")  # the other lane is not held up
    assert [e.entry_id for e in lanes.take_due(10.0)] == ["0-0"]
    fresh = SimpleNamespace(entry_id="0-0", deliveries=2)
    assert lanes.resume("0-0", fresh) is fresh and lanes.parked_count == 0
    assert lanes.take_ready() == []  # the fresh copy is running; "1-0" still waits behind it
    lanes.finished("0-0")
    assert [e.entry_id for e in lanes.take_ready()] == ["1-0"]
    lanes.park("1-0", until=20.0)
    assert [e.entry_id for e in lanes.take_due(20.0)] == ["1-0"]
    assert lanes.resume("1-0", None) is None  # no longer pending: the lane moves on (and is gone)
    assert len(lanes) == 0 and lanes.next_due() is None


def test_an_entry_that_did_not_start_goes_back_to_the_head() -> None:
    lanes = Lanes()
    lanes.add("a", _entry(0))
    lanes.add("a", _entry(1))
    (head,) = lanes.take_ready()
    lanes.put_back(head.entry_id)
    assert [e.entry_id for e in lanes.take_ready()] == ["0-0"]


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
        running = lanes.take_ready() + lanes.take_due(now)
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
