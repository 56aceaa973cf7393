"""Decisions on one stream prefix queue within a process (Committer.deciding_on, in
coordinator/store/committing.py): a second thread's join loads only after the first thread's decision
committed, so it never loses a compare-and-set to its own process; and the wait is bounded, so a
decision that hangs does not hold the others back longer than DECISION_WAIT_S."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from coordinator.protocol.group import Heartbeat
from coordinator.store import MetadataStore, committing

from .conftest import GROUP, PREFIX, create


def _conflicts(store: MetadataStore) -> float:
    return float(store.client.hget("rsc:metrics", "cas_conflicts") or 0)


def _blocking_first_decision(
    monkeypatch: pytest.MonkeyPatch, events: list[str]
) -> tuple[threading.Event, threading.Event]:
    """The first decision (core ``apply``) stops until ``release`` is set; ``entered`` says it got there."""
    entered, release = threading.Event(), threading.Event()
    real_apply = committing.apply
    calls = [0]

    def apply(state: Any, command: Any, now_ms: int) -> Any:
        calls[0] += 1
        name = command.heartbeat.member_id
        events.append(f"decide {name}")
        if calls[0] == 1:
            entered.set()
            assert release.wait(10)
        return real_apply(state, command, now_ms)

    monkeypatch.setattr(committing, "apply", apply)
    return entered, release


def _join(store: MetadataStore, name: str, events: list[str]) -> None:
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=name, member_epoch=0, capacity=1))
    events.append(f"joined {name}")


def test_a_second_decision_waits_for_the_first_and_loses_no_race(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store)
    events: list[str] = []
    entered, release = _blocking_first_decision(monkeypatch, events)
    before = _conflicts(store)
    first = threading.Thread(target=_join, args=(store, "a", events))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=_join, args=(store, "b", events))
    second.start()
    second.join(0.3)
    assert second.is_alive() and events == ["decide a"]  # b has not even decided: it waits
    release.set()
    first.join(10)
    second.join(10)
    assert events == ["decide a", "joined a", "decide b", "joined b"]
    assert _conflicts(store) == before  # b decided on a's commit: nothing to decide again


def test_the_wait_is_bounded(store: MetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
    create(store)
    monkeypatch.setattr(committing, "DECISION_WAIT_S", 0.05)
    events: list[str] = []
    entered, release = _blocking_first_decision(monkeypatch, events)
    first = threading.Thread(target=_join, args=(store, "a", events))
    first.start()
    assert entered.wait(10)
    try:
        _join(store, "b", events)  # past the bound it goes ahead, unqueued, and commits
        assert events == ["decide a", "decide b", "joined b"]
    finally:
        release.set()
        first.join(10)
    # a lost the race to b's commit, decided again on it and joined
    assert events == ["decide a", "decide b", "joined b", "decide a", "joined a"]
    assert {m["member_id"] for m in store.describe_group(PREFIX, GROUP)["members"]} == {"a", "b"}
