"""The producer (docs/producer.md): Kafka routing over the active version, the envelope, and never a
write to a sealed version, even with a stale cached route or while a resharding happens mid-batch."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from consumers.dataplane import DataPlane, Delivery
from consumers.errors import ErrorCode, InvalidRequest, RoutingUnstable, StreamPrefixNotFound
from consumers.producer import Producer, Route, SendResult
from coordinator.protocol.envelope import fields_of
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.protocol.routing import shard_index
from rsc_redis.keys import meta_key
from tests.dataplane.harness import Harness, make_client

V1 = [Shard(1, i) for i in range(2)]
V2 = [Shard(2, i) for i in range(3)]


def test_routing_is_shard_index_over_the_active_version(harness: Harness) -> None:
    h = harness
    h.create(shard_count=4)
    keys = [f"customer-{i}" for i in range(40)]

    results = [h.producer.send(h.prefix, key, {"i": i}) for i, key in enumerate(keys)]

    for key, r in zip(keys, results, strict=True):
        assert r.shard == Shard(1, shard_index(key, 4)) and r.routing_version == 1
        assert r.stream_key == f"rsc:{{{h.prefix}}}:v1:{r.shard.index}"
        ((_, raw),) = h.client.xrange(r.stream_key, r.entry_id, r.entry_id)
        fields = fields_of(raw)
        assert fields[b"partition_key"] == key.encode() and fields[b"event_id"] == r.event_id.encode()
    assert len({r.event_id for r in results}) == len(keys)
    assert h.producer.route(h.prefix) == Route(version=1, shard_count=4)


def test_the_envelope_round_trips_json_bytes_and_text(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    sent = [
        h.producer.send(h.prefix, "order-7", {"total": 12.5, "items": ["a", "é"]}, headers={"trace": "t-1"}),
        h.producer.send(h.prefix, b"\xff\x00key", b"\x00\xffraw"),
        h.producer.send(h.prefix, "note", "héllo", content_type="text/plain; charset=utf-8"),
        h.producer.send(h.prefix, "pre-encoded", b'{"already": "json"}', content_type="application/json"),
        h.producer.send(h.prefix, "plain-string-as-json", "just a string"),
    ]

    entries = h.plane.read("m1", m1.epoch, Shard(1, 0), 10).entries

    assert [e.entry_id for e in entries] == [s.entry_id for s in sent]
    assert [e.event_id for e in entries] == [s.event_id for s in sent]
    json_entry, bytes_entry, text_entry, pre_encoded, string_entry = entries
    assert json_entry.payload == {"total": 12.5, "items": ["a", "é"]}
    assert json_entry.content_type == "application/json" and json_entry.headers == {"trace": "t-1"}
    assert json_entry.partition_key == "order-7"
    assert bytes_entry.payload == b"\x00\xffraw" and bytes_entry.content_type == "application/octet-stream"
    assert bytes_entry.partition_key_bytes == b"\xff\x00key" and bytes_entry.headers == {}
    assert text_entry.payload == "héllo" and text_entry.content_type == "text/plain; charset=utf-8"
    assert pre_encoded.payload == {"already": "json"}
    assert string_entry.payload == "just a string"
    for e in entries:
        assert e.routing_version == 1 and e.shard == Shard(1, 0) and e.delivery == Delivery.NEW
        # produced_at_ms is Redis's clock at the append: the entry id's ms, the producer writes none
        assert e.produced_at_ms == int(e.entry_id.split("-")[0])


def test_entries_not_written_by_the_producer_are_delivered_with_defaults(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    stream = h.stream(Shard(1, 0))
    foreign = h.client.xadd(stream, {"something": "else"}).decode()
    broken = h.client.xadd(
        stream, {"content_type": "application/json", "payload": "{not json", "headers": "[1]"}
    )

    plain, bad = h.plane.read("m1", m1.epoch, Shard(1, 0), 10).entries

    assert plain.entry_id == foreign and plain.payload == b"" and plain.event_id == ""
    assert plain.content_type == "application/octet-stream" and plain.routing_version == 1
    assert plain.produced_at_ms == int(foreign.split("-")[0])
    assert bad.entry_id == broken.decode() and bad.payload == b"{not json"
    assert bad.content_type == "application/octet-stream" and bad.headers == {}


def test_a_stale_cached_route_is_refused_then_retried_on_the_new_version(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    h.producer.send(h.prefix, "warm-up", 0)  # caches v1
    assert h.producer.route(h.prefix) == Route(version=1, shard_count=2)
    h.change_shard_count(3, OrderingMode.STRICT)
    sealed = {s: h.xlen(s) for s in V1}
    calls = _count_script_calls(h)

    results = [h.producer.send(h.prefix, f"k{i}", i) for i in range(30)]

    assert {r.routing_version for r in results} == {2}
    assert all(r.shard == Shard(2, shard_index(f"k{i}", 3)) for i, r in enumerate(results))
    assert {s: h.xlen(s) for s in V1} == sealed
    assert sum(h.xlen(s) for s in V2) == 30
    assert h.producer.route(h.prefix) == Route(version=2, shard_count=3)
    assert calls() == 31  # one refused call, then one round trip per send


def test_a_batch_with_a_stale_route_is_rerouted_whole_and_keeps_per_key_order(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    h.producer.send(h.prefix, "warm-up", 0)
    h.change_shard_count(3, OrderingMode.STRICT)
    sealed = {s: h.xlen(s) for s in V1}
    items = [(f"key-{i % 7}", {"seq": i}, {"i": str(i)}) for i in range(100)]

    results = h.producer.send_batch(h.prefix, items)

    assert len(results) == 100 and {r.routing_version for r in results} == {2}
    assert {s: h.xlen(s) for s in V1} == sealed
    for (key, payload, headers), r in zip(items, results, strict=True):
        assert r.shard == Shard(2, shard_index(key, 3))
        ((_, raw),) = h.client.xrange(r.stream_key, r.entry_id, r.entry_id)
        fields = fields_of(raw)
        assert fields[b"payload"] == f'{{"seq":{payload["seq"]}}}'.encode()
        assert fields[b"headers"] == f'{{"i":"{headers["i"]}"}}'.encode()
    for k in range(7):
        ids = [r.entry_id for (key, _, _), r in zip(items, results, strict=True) if key == f"key-{k}"]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


def test_batches_racing_a_resharding_lose_nothing_and_never_write_the_sealed_version(
    harness: Harness, redis_url: str
) -> None:
    h = harness
    h.create(shard_count=2)
    producer_client = make_client(redis_url)
    producer = Producer(producer_client)
    sent: list[SendResult] = []
    batches = 0
    stop = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        nonlocal batches
        try:
            while not stop.is_set():
                sent.extend(producer.send_batch(h.prefix, [(f"k{batches}-{i}", i) for i in range(50)]))
                batches += 1
        except BaseException as e:  # reported by the main thread
            failure.append(e)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        _wait_for(lambda: batches >= 5)
        h.change_shard_count(3, OrderingMode.STRICT)
        sealed = {s: h.xlen(s) for s in V1}
        seen = batches
        _wait_for(lambda: batches >= seen + 5)
    finally:
        stop.set()
        thread.join(timeout=10)
        producer_client.close()
    assert not failure, failure

    assert {s: h.xlen(s) for s in V1} == sealed  # nothing appended after the seal committed
    stored = {}
    for shard in V1 + V2:
        for entry_id, raw in h.client.xrange(h.stream(shard)):
            fields = fields_of(raw)
            stored[fields[b"event_id"].decode()] = (shard, entry_id.decode(), int(fields[b"routing_version"]))
    assert len(stored) == len(sent) == sum(h.xlen(s) for s in V1 + V2)
    assert {r.event_id: (r.shard, r.entry_id, r.routing_version) for r in sent} == stored
    assert {r.routing_version for r in sent} == {1, 2}


def test_an_unknown_stream_prefix_is_a_typed_error(harness: Harness) -> None:
    with pytest.raises(StreamPrefixNotFound) as caught:
        harness.producer.send("nowhere", "k", 1)
    assert caught.value.code is ErrorCode.STREAM_PREFIX_NOT_FOUND and caught.value.retriable
    assert harness.client.keys("*nowhere*") == []


def test_a_prefix_that_disappears_under_a_cached_route_is_a_typed_error(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    h.producer.send(h.prefix, "k", 1)
    h.client.hdel(meta_key(h.prefix), "route")

    with pytest.raises(StreamPrefixNotFound):
        h.producer.send(h.prefix, "k", 2)
    assert h.xlen(Shard(1, 0)) == 1


def test_retries_exhausted_is_a_typed_retriable_error_that_wrote_nothing(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    producer = Producer(h.client, max_retries=0)
    producer.send(h.prefix, "warm-up", 0)
    h.change_shard_count(3, OrderingMode.STRICT)
    lengths = {s: h.xlen(s) for s in V1 + V2}

    with pytest.raises(RoutingUnstable) as caught:
        producer.send_batch(h.prefix, [("a", 1), ("b", 2)])

    assert caught.value.retriable and caught.value.details == {
        "stream_prefix": h.prefix,
        "sent": 0,
        "not_sent": 2,
    }
    assert {s: h.xlen(s) for s in V1 + V2} == lengths
    assert producer.send(h.prefix, "a", 1).routing_version == 2  # the refusal refreshed the cache


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.send("orders", "k", {1, 2}),  # not JSON-serializable
        lambda p: p.send("orders", "k", {"a": 1}, headers={"n": 1}),
        lambda p: p.send("orders", None, 1),
        lambda p: p.send("orders", "k", 12, content_type="text/plain"),
        lambda p: p.send("bad prefix", "k", 1),
        lambda p: p.send_batch("orders", [("k",)]),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(harness: Harness, call) -> None:
    harness.create(shard_count=1)
    with pytest.raises(InvalidRequest):
        call(harness.producer)
    assert harness.xlen(Shard(1, 0)) == 0


def test_an_empty_batch_sends_nothing(harness: Harness) -> None:
    assert harness.producer.send_batch("anything", []) == []


def test_a_data_plane_over_a_decoding_client_is_refused_up_front(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(InvalidRequest, match="decode_responses"):
        DataPlane(client, "orders", "billing")
    client.close()


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _count_script_calls(h: Harness):
    """A function returning how many FCALL calls Redis has served since now."""

    def fcall_calls() -> int:
        stats = h.client.info("commandstats")
        return int(stats.get("cmdstat_fcall", {}).get("calls", 0))

    start = fcall_calls()
    return lambda: fcall_calls() - start
