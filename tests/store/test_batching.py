"""Heartbeats decided together (coordinator/store/batching.py, docs/store.md): the full-path heartbeats
of a group that queue in one process behind another decision on their prefix are decided in one load,
one core run and one commit, and each is answered exactly as if decided alone, in queue order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from coordinator.protocol.commands import MemberHeartbeat, MemberHeartbeats
from coordinator.protocol.errors import CoordinatorError, GroupNotFound, UnknownMemberId
from coordinator.protocol.group import Heartbeat
from coordinator.store import MetadataStore, committing
from coordinator.store.batching import HeartbeatBatches

from .conftest import GROUP, PREFIX, create


def _decisions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The commands the core decides, in order."""
    seen: list[Any] = []
    real_apply = committing.apply

    def apply(state: Any, command: Any, now_ms: int) -> Any:
        seen.append(command)
        return real_apply(state, command, now_ms)

    monkeypatch.setattr(committing, "apply", apply)
    return seen


def _queued(store: MetadataStore) -> int:
    return sum(len(q) for q in store._heartbeats._queued.values())


def _behind_a_held_turn(store: MetadataStore, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread while this thread holds the prefix's turn, one queued after the
    other (in list order); then let them go. Returns each call's result or exception, in order."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with store.committer.deciding_on(PREFIX):
        for i, t in enumerate(threads):
            t.start()
            deadline = time.monotonic() + 10
            while _queued(store) < i + 1:  # queued in this order
                assert time.monotonic() < deadline
                time.sleep(0.001)
    for t in threads:
        t.join(30)
    return results


def _hb(store: MetadataStore, member: str, epoch: int, **kw: Any) -> Callable[[], dict[str, Any]]:
    return lambda: store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=epoch, **kw))


def _view(store: MetadataStore, group: str) -> dict[str, Any]:
    """The group as operators see it, without what depends on the clock or its name."""
    view = store.describe_group(PREFIX, group)
    for m in view["members"]:
        for k in ("lease_remaining_ms", "last_heartbeat_ms", "joined_at_ms", "revocation_deadline_ms"):
            m.pop(k, None)
    for k in ("consumer_group", "dead_letters", "now_ms"):
        view.pop(k, None)
    return view


def test_joins_queued_behind_a_decision_are_decided_in_one_and_answered_as_one_by_one(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, shard_count=4)
    create(store, shard_count=4, group="alone")
    names = [f"m{i}" for i in range(10)]
    decided = _decisions(monkeypatch)
    batched = _behind_a_held_turn(store, [_hb(store, m, 0, capacity=1) for m in names])
    assert [type(c) for c in decided] == [MemberHeartbeats]
    assert [hb.member_id for hb in decided[0].heartbeats] == names

    one_by_one = [
        store.heartbeat(PREFIX, "alone", Heartbeat(member_id=m, member_epoch=0, capacity=1)) for m in names
    ]
    assert batched == one_by_one  # each answered as of right after its own join: epochs 1..10
    assert [r["member_epoch"] for r in batched] == list(range(1, 11))
    assert _view(store, GROUP) == _view(store, "alone")


def test_a_refused_heartbeat_changes_nothing_and_the_rest_of_its_batch_commits(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, shard_count=2)
    a = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="a", member_epoch=0, capacity=1))
    decided = _decisions(monkeypatch)
    results = _behind_a_held_turn(
        store,
        [
            _hb(store, "b", 0, capacity=1),
            _hb(store, "ghost", 3),  # unknown: refused, nothing of it written
            _hb(store, "a", a["member_epoch"], capacity=2),  # not steady: it learns to give b a shard
            _hb(store, "a", a["member_epoch"] + 5),  # from the future: fenced, nothing written
        ],
    )
    assert [type(c) for c in decided] == [MemberHeartbeats]
    assert results[0]["member_state"] == "UNRELEASED_SHARDS"
    assert isinstance(results[1], UnknownMemberId)
    assert results[2]["member_state"] == "UNREVOKED_SHARDS" and len(results[2]["revoking"]) == 1
    assert isinstance(results[3], CoordinatorError) and results[3].code == "FENCED_MEMBER_EPOCH"
    members = {m["member_id"] for m in store.describe_group(PREFIX, GROUP)["members"]}
    assert members == {"a", "b"}


def test_a_decision_that_fails_settles_every_heartbeat_of_its_batch_with_the_error(
    store: MetadataStore,
) -> None:
    create(store, shard_count=2)

    def join_nowhere(i: int) -> Callable[[], Any]:
        hb = Heartbeat(member_id=f"x{i}", member_epoch=0, capacity=1)
        return lambda: store.heartbeat(PREFIX, "nope", hb)

    results = _behind_a_held_turn(store, [join_nowhere(i) for i in range(3)])
    assert all(isinstance(r, GroupNotFound) for r in results), results


def test_a_heartbeat_decided_alone_stays_one_command(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, shard_count=2)
    decided = _decisions(monkeypatch)
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="a", member_epoch=0, capacity=1))
    assert [type(c) for c in decided] == [MemberHeartbeat]


def test_a_batch_is_at_most_max_batch_heartbeats_and_every_ticket_is_decided() -> None:
    """The queue alone, with a decision function that records its batches (no store needed)."""
    batches = HeartbeatBatches(max_batch=3)
    turn_lock = threading.RLock()
    seen: list[list[str]] = []

    class Turn:
        def __init__(self, _prefix: str) -> None:
            pass

        def __enter__(self) -> None:
            turn_lock.acquire()

        def __exit__(self, *exc: object) -> None:
            turn_lock.release()

    def decide(hbs: list[Heartbeat]) -> list[Any]:
        seen.append([hb.member_id for hb in hbs])
        return [UnknownMemberId("nobody", member_id=hb.member_id) for hb in hbs]

    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            batches.decide(PREFIX, GROUP, Heartbeat(member_id=name, member_epoch=1), Turn, decide)
        except UnknownMemberId as e:
            results[name] = e.details["member_id"]

    names = [f"m{i}" for i in range(8)]
    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    with turn_lock:
        for i, t in enumerate(threads):
            t.start()
            while sum(len(q) for q in batches._queued.values()) < i + 1:
                time.sleep(0.001)
    for t in threads:
        t.join(10)
    assert results == {n: n for n in names}  # each thread got its own answer
    assert [len(b) for b in seen] == [3, 3, 2] and [n for b in seen for n in b] == names
