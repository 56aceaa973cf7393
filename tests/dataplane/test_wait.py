"""Waiting for new entries (consumers/dataplane/wait.py) against the real Redis: the fetch reports where
the group has read, a blocking XREAD from there wakes on the next append and on nothing else, and an
interrupt ends a wait whether it comes before or after the XREAD reached Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from consumers.dataplane import FenceStatus, ShardFetch
from consumers.dataplane.wait import EntryWait
from coordinator.protocol.model import Shard
from tests.dataplane.harness import Harness

V1_0, V1_1 = Shard(1, 0), Shard(1, 1)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        out["value"] = fn()
        out["took_s"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_an_empty_fetch_that_asks_reports_the_groups_last_delivered_id(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 2, 3)
    read = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, wait=True)], 10)
    assert [e.entry_id for e in read[0].entries] == ids and read[0].last_id == ""
    empty = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ids, token="0", wait=True)], 10)
    assert (empty[0].status, empty[0].acked, empty[0].entries) == (FenceStatus.OK, True, [])
    assert empty[0].last_id == ids[-1]
    # a shard nobody read yet: the group starts at 0-0 (docs/protocol.md, the groups are created at 0)
    fresh = h.plane.fetch("m1", [ShardFetch(V1_1, m1.epoch, token="0", wait=True)], 10)
    assert fresh[0].entries == [] and fresh[0].last_id == "0-0"
    # without wait an idle shard is not reported at all: no id
    plain = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, token="0")], 10)
    assert plain[0].entries == [] and plain[0].last_id == ""


def test_a_wait_from_that_id_wakes_on_the_next_append_only(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1 = h.join("m1")
    h.produce(V1_0, 2, 2)
    h.produce(V1_1, 2, 1)
    results = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch), ShardFetch(V1_1, m1.epoch)], 10)
    acks = [[e.entry_id for e in r.entries] for r in results]
    idle = h.plane.fetch(
        "m1",
        [ShardFetch(s, m1.epoch, a, token="0", wait=True) for s, a in zip((V1_0, V1_1), acks, strict=True)],
        10,
    )
    after = {h.plane.stream_key(s): r.last_id for s, r in zip((V1_0, V1_1), idle, strict=True)}
    wait = h.plane.entry_wait()
    try:
        # what the group has read already does not wake it: the wait runs to its timeout
        wait.arm()
        started = time.monotonic()
        assert wait.wait(after, 100) == []
        assert time.monotonic() - started >= 0.09
        # an append to one of the streams does
        wait.arm()
        thread, out = _in_thread(lambda: wait.wait(after, 10_000))
        time.sleep(0.05)
        h.produce(V1_1, 2, 1)
        thread.join(5)
        assert out["value"] == [h.plane.stream_key(V1_1)] and out["took_s"] < 5
    finally:
        wait.close()


@pytest.fixture
def one_stream(harness: Harness) -> Iterator[tuple[dict[str, str], EntryWait]]:
    """A group of one shard with nothing in it: the wait's streams and ids, and the wait (closed after)."""
    harness.create(shard_count=1)
    wait = harness.plane.entry_wait()
    try:
        yield {harness.plane.stream_key(V1_0): "0-0"}, wait
    finally:
        wait.close()


@pytest.mark.parametrize("when", ["blocked", "before the XREAD"])
def test_an_interrupt_ends_the_wait(one_stream: tuple[dict[str, str], EntryWait], when: str) -> None:
    after, wait = one_stream
    wait.arm()
    if when == "before the XREAD":
        assert wait.interrupt()  # armed, its CLIENT ID not known yet: ended as soon as it is
        thread, out = _in_thread(lambda: wait.wait(after, 10_000))
    else:
        thread, out = _in_thread(lambda: wait.wait(after, 10_000))
        deadline = time.monotonic() + 5
        while not wait.interrupt():  # False until its XREAD is blocked in Redis
            assert time.monotonic() < deadline
            time.sleep(0.001)
    thread.join(5)
    assert out["value"] == [] and out["took_s"] < 5
    assert not wait.interrupt()  # nothing armed: nothing to interrupt
    # the connection is still good for the next wait
    wait.arm()
    assert wait.wait(after, 50) == []


def test_an_interrupt_is_aimed_at_one_wait_only(one_stream: tuple[dict[str, str], EntryWait]) -> None:
    """An interrupt that comes after its wait ended by itself does not end the next one."""
    after, wait = one_stream
    wait.arm()
    assert wait.wait(after, 20) == []
    assert not wait.interrupt()
    wait.arm()
    started = time.monotonic()
    assert wait.wait(after, 200) == []
    assert time.monotonic() - started >= 0.19


def test_the_probe_passes_for_a_user_with_every_right(harness: Harness) -> None:
    harness.create(shard_count=1)
    EntryWait(harness.client, harness.plane._meta, harness.plane.stream_key(V1_0)).probe()


def test_a_look_overlaps_another_call_and_names_the_streams_with_news(harness: Harness) -> None:
    """``news_later``: the XREAD goes out at once on a pooled connection, another call runs meanwhile, and
    the answer names the streams with an entry after the given id; the connection goes back to the pool."""
    h = harness
    h.create(shard_count=2)
    h.join("m1")
    k0, k1 = h.plane.stream_key(V1_0), h.plane.stream_key(V1_1)
    wait = h.plane.entry_wait()
    pool = h.client.connection_pool
    try:
        first = h.produce(V1_0, 2, 1)[0]
        in_use = len(pool._in_use_connections)  # the plane's own (its hot calls keep one)
        assert wait.news_later({})() == []
        answer = wait.news_later({k0: "0-0", k1: "0-0"})
        assert h.client.ping()  # another call while the look is out
        assert answer() == [k0]
        assert wait.news_later({k0: first, k1: "0-0"})() == []  # nothing after what was seen
        h.produce(V1_1, 2, 1)
        assert wait.news_later({k0: first, k1: "0-0"})() == [k1]
        assert len(pool._in_use_connections) == in_use  # every look gave its connection back
    finally:
        wait.close()
