"""Decisions on a prefix take turns across processes while they contend (coordinator/store/turns.py):
two stores stand for two coordinator processes on one Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from coordinator.protocol.group import Heartbeat
from coordinator.store import MetadataStore, committing, turns
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create

TURN = rkeys.turn_key(PREFIX)


@pytest.fixture
def other(redis_url: str) -> Iterator[MetadataStore]:
    """A second coordinator process."""
    s = MetadataStore.from_url(redis_url)
    yield s
    s.client.close()


def _conflicts(store: MetadataStore) -> float:
    return float(store.client.hget("rsc:metrics", "cas_conflicts") or 0)


def _join(store: MetadataStore, member: str) -> None:
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=0, capacity=1))


def test_a_prefix_nobody_contends_is_decided_without_a_turn(store: MetadataStore) -> None:
    create(store)
    seen: list[bool] = []
    real_load = store.reader.load

    def load(*args: object, **kwargs: object) -> object:
        seen.append(bool(store.client.exists(TURN)))
        return real_load(*args, **kwargs)  # type: ignore[arg-type]

    store.reader.load = load  # type: ignore[method-assign]
    _join(store, "a")
    assert seen == [False]  # no turn taken: no SET, nothing left behind


def test_a_contended_prefix_waits_for_the_turn_another_process_holds(
    store: MetadataStore, other: MetadataStore
) -> None:
    create(store)
    store.committer.turns.contended(PREFIX)
    other.committer.turns.contended(PREFIX)
    events: list[str] = []
    with other.committer.turns.turn(PREFIX, 5.0):  # the other process is deciding
        assert store.client.get(TURN) is not None
        joiner = threading.Thread(target=lambda: (_join(store, "a"), events.append("joined")))
        joiner.start()
        joiner.join(0.3)
        assert joiner.is_alive() and events == []  # waits for the turn, has not even loaded
        events.append("released")
    joiner.join(10)
    assert events == ["released", "joined"]
    assert not store.client.exists(TURN)  # given back


def test_the_wait_for_a_turn_is_bounded_and_a_dead_holders_turn_expires(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store)
    store.committer.turns.contended(PREFIX)
    store.client.set(TURN, "a process that died", px=turns.TURN_TTL_MS)
    monkeypatch.setattr(committing, "DECISION_WAIT_S", 0.05)
    started = time.monotonic()
    _join(store, "a")  # past the bound it goes ahead without the turn: the compare-and-set decides
    assert time.monotonic() - started < turns.TURN_TTL_MS / 1000
    assert store.client.get(TURN) == b"a process that died"  # not its to give back
    # And the turn a process takes expires by itself, should it die holding it.
    store.client.delete(TURN)
    with store.committer.turns.turn(PREFIX, 1.0):
        assert 0 < store.client.pttl(TURN) <= turns.TURN_TTL_MS


def test_two_processes_that_contend_take_turns_and_stop_losing_races(
    store: MetadataStore, other: MetadataStore
) -> None:
    """Both have lost a race on the prefix: from then on their decisions take turns, and joins from
    both at once, many threads each, commit without a single compare-and-set conflict."""
    create(store, shard_count=8, max_members=200)
    store.committer.turns.contended(PREFIX)
    other.committer.turns.contended(PREFIX)
    before = _conflicts(store)
    errors: list[BaseException] = []

    def joins(s: MetadataStore, names: list[str]) -> None:
        try:
            for name in names:
                _join(s, name)
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=joins, args=(s, [f"{tag}{t}-{i}" for i in range(8)]))
        for s, tag in ((store, "a"), (other, "b"))
        for t in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert _conflicts(store) == before
    view = store.describe_group(PREFIX, GROUP)
    assert len(view["members"]) == 64 and view["group_epoch"] == 64
