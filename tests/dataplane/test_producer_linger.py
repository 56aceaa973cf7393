"""The producer's opt-in linger window (docs/producer.md, "Linger"): concurrent senders share one
script call, each still gets its own result or its own error. Calls are counted by the private test
Redis itself (INFO commandstats), not by a mock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from consumers.dataplane import library, redis_client
from consumers.errors import DataPlaneUnavailable, InvalidRequest, StreamPrefixNotFound
from consumers.producer import Producer, SendResult
from coordinator.protocol.envelope import fields_of
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.protocol.routing import shard_index
from tests.dataplane.harness import Harness
from tests.dataplane.proxy import LossyProxy

LONG_LINGER_MS = 1000  # an upper bound: every window here closes when it is full, not on time


def fcall_calls(h: Harness) -> int:
    return int(h.client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


def lingering(h: Harness, senders: int) -> Producer:
    """A lingering producer whose window closes exactly when ``senders`` sends are in it."""
    producer = Producer(h.client, linger_ms=LONG_LINGER_MS)
    producer.max_entries_per_call = senders
    return producer


def run_concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread, all released at once; returns each one's result or exception."""
    outcomes: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = calls[i]()
        except Exception as e:
            outcomes[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_concurrent_senders_share_one_script_call_and_get_their_own_results(harness: Harness) -> None:
    h = harness
    h.create(shard_count=4)
    producer = lingering(h, senders=8)
    producer.route(h.prefix)
    before = fcall_calls(h)

    results = run_concurrently(
        [lambda i=i: producer.send(h.prefix, f"customer-{i}", {"n": i}) for i in range(8)]
    )

    assert fcall_calls(h) - before == 1  # eight senders, four streams, one call
    assert all(isinstance(r, SendResult) for r in results), results
    for i, r in enumerate(results):
        assert r.shard == Shard(1, shard_index(f"customer-{i}", 4)) and r.routing_version == 1
        ((_, raw),) = h.client.xrange(r.stream_key, r.entry_id, r.entry_id)
        fields = fields_of(raw)
        assert fields[b"payload"] == f'{{"n":{i}}}'.encode() and fields[b"event_id"] == r.event_id.encode()
    assert sum(h.xlen(Shard(1, i)) for i in range(4)) == 8


def test_errors_are_per_sender(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    producer = lingering(h, senders=3)

    good, unknown, other_good, bad = run_concurrently(
        [
            lambda: producer.send(h.prefix, "a", 1),
            lambda: producer.send("nowhere", "b", 2),  # same window, a prefix that does not exist
            lambda: producer.send(h.prefix, "c", 3),
            lambda: producer.send(h.prefix, "d", {1, 2}),  # refused before it joins a window
        ]
    )

    assert isinstance(good, SendResult) and isinstance(other_good, SendResult)
    assert isinstance(unknown, StreamPrefixNotFound) and unknown.details == {"stream_prefix": "nowhere"}
    assert isinstance(bad, InvalidRequest)
    assert h.xlen(Shard(1, 0)) + h.xlen(Shard(1, 1)) == 2


def test_a_window_sent_to_a_sealed_version_is_rerouted_whole(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    producer = lingering(h, senders=6)
    producer.route(h.prefix)  # caches v1
    h.change_shard_count(3, OrderingMode.STRICT)
    sealed = [h.xlen(Shard(1, i)) for i in range(2)]
    before = fcall_calls(h)

    results = run_concurrently([lambda i=i: producer.send(h.prefix, f"k{i}", i) for i in range(6)])

    assert fcall_calls(h) - before == 2  # refused once (nothing appended), then appended in one call
    assert [h.xlen(Shard(1, i)) for i in range(2)] == sealed
    assert {r.routing_version for r in results} == {2}
    assert [r.shard for r in results] == [Shard(2, shard_index(f"k{i}", 3)) for i in range(6)]


def test_a_lone_sender_waits_at_most_the_linger_window(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    producer = Producer(h.client, linger_ms=5)

    results = [producer.send(h.prefix, "k", i) for i in range(3)]

    assert [r.shard for r in results] == [Shard(1, 0)] * 3 and h.xlen(Shard(1, 0)) == 3


@pytest.mark.parametrize("linger_ms", [0, -1, 1001, True, "5"])
def test_an_impossible_linger_is_refused(harness: Harness, linger_ms: Any) -> None:
    with pytest.raises(InvalidRequest, match="linger_ms"):
        Producer(harness.client, linger_ms=linger_ms)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[LossyProxy]:
    port = urlparse(redis_url).port
    assert port is not None
    with LossyProxy(port) as p:
        yield p


def test_a_lost_reply_leaves_every_sender_of_the_window_unsure_and_nothing_is_resent(
    harness: Harness, proxy: LossyProxy
) -> None:
    h = harness
    h.create(shard_count=2)
    client = redis_client(proxy.url)
    producer = Producer(client, linger_ms=LONG_LINGER_MS)
    producer.max_entries_per_call = 4
    producer.route(h.prefix)
    proxy.lose_replies(library.function_name("produce"), times=1)

    outcomes = run_concurrently([lambda i=i: producer.send(h.prefix, f"k{i}", i) for i in range(4)])

    assert all(isinstance(o, DataPlaneUnavailable) for o in outcomes), outcomes
    assert proxy.calls_seen == 1  # one call for the window, not re-sent
    assert h.xlen(Shard(1, 0)) + h.xlen(Shard(1, 1)) == 4  # it ran once: appended, and unknown to them
    client.close()
