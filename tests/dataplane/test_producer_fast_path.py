"""The producer's three paths share one script and one routing: the single-send fast path writes what
the batch path writes, a sealed version refuses a call whole inside Redis, and a flushed script cache is
recovered from without a blind re-send (docs/producer.md)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
import redis

from consumers.dataplane import library
from consumers.dataplane.envelope import encode_event
from consumers.errors import DataPlaneError, FunctionsNotLoaded
from consumers.producer import Producer, SendResult, _encode, _encode_items, _result
from coordinator.protocol.envelope import fields_of
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.protocol.routing import murmur2, shard_index
from coordinator.store.functions import DataPlaneFunctions, keys_from_settings
from rsc_redis.keys import meta_key, stream_key
from tests.dataplane.harness import Harness

V1 = [Shard(1, i) for i in range(4)]
V2 = [Shard(2, i) for i in range(3)]
ENVELOPE = (b"partition_key", b"routing_version", b"content_type", b"payload", b"headers")


def stored(h: Harness, stream: str, entry_id: str) -> dict[bytes, bytes]:
    """The entry's envelope fields (unpacked from its one field, ``envelope``)."""
    ((_, raw),) = h.client.xrange(stream, entry_id, entry_id)
    assert list(raw) == [b"envelope"]
    return fields_of(raw)


def fcall_calls(h: Harness) -> int:
    return int(h.client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


ITEMS = [
    ("customer-1", {"order": 1, "items": ["a", "é"]}, None),
    ("customer-2", b"\x00raw", None),
    ("customer-1", "a JSON string", {"trace": "t-1"}),
    (b"\xffbytes-key", [1, 2, 3], None),
    ("customer-3", None, {"a": "b", "c": "d"}),
]


def test_the_fast_path_and_the_batch_path_write_the_same_entries(harness: Harness) -> None:
    h = harness
    h.create(shard_count=4)

    singles = [h.producer.send(h.prefix, key, payload, headers=headers) for key, payload, headers in ITEMS]
    batch = h.producer.send_batch(h.prefix, ITEMS)

    for (key, _, _), one, many in zip(ITEMS, singles, batch, strict=True):
        shard = Shard(1, shard_index(key, 4))
        assert (one.shard, one.stream_key, one.routing_version) == (shard, h.stream(shard), 1)
        assert (many.shard, many.stream_key, many.routing_version) == (shard, h.stream(shard), 1)
        a, b = stored(h, one.stream_key, one.entry_id), stored(h, many.stream_key, many.entry_id)
        assert {f: a[f] for f in ENVELOPE} == {f: b[f] for f in ENVELOPE}
        assert a[b"event_id"] == one.event_id.encode() and b[b"event_id"] == many.event_id.encode()
        # produced_at_ms not written: the entry id's ms is the time (coordinator/protocol/envelope.py)
        assert b"produced_at_ms" not in a and b"produced_at_ms" not in b
    assert len({r.event_id for r in singles + batch}) == 2 * len(ITEMS)


MORE_ITEMS = [*ITEMS, ("k", 12.5, None), ("k", {"nested": {"x": [None, True]}}, None), ("", "", None)]


def is_uuid4_hex(text: str) -> bool:
    event_id = uuid.UUID(hex=text)
    return event_id.version == 4 and event_id.variant == uuid.RFC_4122 and text == event_id.hex


def test_the_fast_encoding_is_encode_events(harness: Harness) -> None:
    for key, payload, headers in MORE_ITEMS:
        for content_type in (None, "application/json"):
            fast = _encode(key, payload, headers, content_type)
            reference = encode_event(key, payload, headers, content_type)
            reference = dataclasses.replace(reference, event_id=fast[0])
            assert fast[1:] == (murmur2(reference.partition_key) & 0x7FFFFFFF, reference.body())
            assert is_uuid4_hex(fast[0])


def test_a_batchs_encoding_is_each_items_own() -> None:
    """The batch loop (one block of random bytes for every event id, the common item inline) encodes
    each item as the single send's encoding does, but for its event id, which is a uuid4 of its own."""
    items: list[tuple[Any, ...]] = [(k, p) if h is None else (k, p, h) for k, p, h in MORE_ITEMS]
    items += [("customer-9", {"a": 1}), ["list-item", 7], (b"bytes", b"x", None)] * 3
    events = _encode_items(iter(items))  # any iterable
    assert len(events) == len(items)
    for item, (event_id, key_hash, body) in zip(items, events, strict=True):
        headers = item[2] if len(item) == 3 else None
        reference = encode_event(item[0], item[1], headers)
        reference = dataclasses.replace(reference, event_id=event_id)
        assert (key_hash, body) == (murmur2(reference.partition_key) & 0x7FFFFFFF, reference.body())
        assert is_uuid4_hex(event_id)
    assert len({e[0] for e in events}) == len(events)
    many = _encode_items([("k", 1)] * 2000)
    ids = [uuid.UUID(hex=e[0]) for e in many]
    assert (
        len(set(ids)) == 2000
        and {i.version for i in ids} == {4}
        and {i.variant for i in ids} == {uuid.RFC_4122}
    )
    # 122 random bits: every hex digit but the version's, and the variant's two bits, take many values
    digits = [{e[0][d] for e in many} for d in range(32)]
    assert digits[12] == {"4"} and digits[16] <= set("89ab") and len(digits[16]) == 4
    assert all(len(d) == 16 for i, d in enumerate(digits) if i not in (12, 16))


def test_a_result_is_made_as_the_dataclass_makes_it() -> None:
    """The batch path fills SendResult's slots itself (cheaper than the frozen dataclass's __init__):
    the same object, field by field; a field added to SendResult fails here, not silently."""
    shard = Shard(3, 2)
    made = _result("rsc:{p}:v3:2", "1-2", "e" * 32, 3, shard)
    assert made == SendResult(
        stream_key="rsc:{p}:v3:2", entry_id="1-2", event_id="e" * 32, routing_version=3, shard=shard
    )
    assert [f.name for f in dataclasses.fields(SendResult)] == [
        "stream_key",
        "entry_id",
        "event_id",
        "routing_version",
        "shard",
        "duplicate",
    ]
    assert made.duplicate is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.entry_id = "2-0"  # type: ignore[misc]


def test_one_script_call_per_single_send_and_per_batch_of_up_to_500(harness: Harness) -> None:
    h = harness
    h.create(shard_count=4)
    h.producer.send(h.prefix, "warm-up", 0)
    before = fcall_calls(h)

    h.producer.send(h.prefix, "k", 1)
    results = h.producer.send_batch(h.prefix, [(f"k{i}", i) for i in range(500)])

    assert fcall_calls(h) - before == 2
    assert {r.shard for r in results} == set(V1)  # one call, four streams


def test_large_batches_are_packed_into_calls_and_keep_input_and_per_key_order(harness: Harness) -> None:
    h = harness
    h.create(shard_count=3)
    producer = Producer(h.client)
    producer.max_entries_per_call = 7
    items = [(f"key-{i % 5}", {"seq": i}) for i in range(50)]
    producer.send(h.prefix, "warm-up", 0)
    before = fcall_calls(h)

    results = producer.send_batch(h.prefix, items)

    assert fcall_calls(h) - before == 8  # ceil(50 / 7): streams share calls, a call never exceeds 7
    for (key, payload), r in zip(items, results, strict=True):
        assert r.shard == Shard(1, shard_index(key, 3))
        assert stored(h, r.stream_key, r.entry_id)[b"payload"] == f'{{"seq":{payload["seq"]}}}'.encode()
    for k in range(5):
        ids = [r.entry_id for (key, _), r in zip(items, results, strict=True) if key == f"key-{k}"]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    assert sum(h.xlen(Shard(1, i)) for i in range(3)) == 51


def test_a_sealed_version_refuses_a_whole_call_inside_redis(harness: Harness) -> None:
    """The script itself refuses: called directly with the sealed route, several streams at once, it
    appends to none of them and returns the current route."""
    h = harness
    h.create(shard_count=4)
    h.change_shard_count(3, OrderingMode.STRICT)
    before = {s: h.xlen(s) for s in V1 + V2}
    event = ["e", b"k", "application/json", b"1", "{}"]
    keys = [meta_key(h.prefix), stream_key(h.prefix, V1[0]), stream_key(h.prefix, V1[2])]

    reply = h.client.fcall(_loaded(h), 3, *keys, "1", "4", "0", "1", *event, "2", "2", *event, *event)

    assert reply == [b"STALE_ROUTE", b"2 3 1"]
    assert {s: h.xlen(s) for s in V1 + V2} == before


def test_a_call_with_a_missing_stream_appends_to_none_of_its_streams(harness: Harness) -> None:
    h = harness
    h.create(shard_count=3)
    h.client.delete(h.stream(Shard(1, 2)))
    present = [k for k in range(40) if shard_index(f"k{k}", 3) != 2][:5]
    keys = [*present, next(k for k in range(40) if shard_index(f"k{k}", 3) == 2)]

    with pytest.raises(DataPlaneError, match="missing; nothing appended"):
        h.producer.send_batch(h.prefix, [(f"k{k}", k) for k in keys])
    with pytest.raises(DataPlaneError, match="missing; nothing appended"):
        h.producer.send(h.prefix, f"k{keys[-1]}", 1)

    assert [h.xlen(Shard(1, i)) for i in range(2)] == [0, 0]
    assert not h.client.exists(h.stream(Shard(1, 2)))  # NOMKSTREAM: the send did not create it


def test_a_stream_key_that_is_not_the_shard_it_claims_is_a_script_error(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    produce = _loaded(h)
    event = ["e", b"k", "application/json", b"1", "{}"]
    wrong = [meta_key(h.prefix), stream_key(h.prefix, Shard(1, 0)), stream_key(h.prefix, Shard(1, 1))]

    with pytest.raises(redis.ResponseError, match="is not shard 1"):
        h.client.fcall(produce, 3, *wrong, "1", "2", "1", "1", *event, "0", "1", *event)
    with pytest.raises(redis.ResponseError, match="is not shard 2"):
        h.client.fcall(produce, 2, *wrong[:2], "1", "2", "2", "1", *event)
    with pytest.raises(redis.ResponseError, match="does not match"):
        h.client.fcall(produce, 2, *wrong[:2], "1", "2", "0", "2", *event)

    assert [h.xlen(Shard(1, i)) for i in range(2)] == [0, 0]


def test_a_flushed_library_fails_every_path_with_the_command_to_run_and_appends_nothing(
    harness: Harness,
) -> None:
    """No script text from the producer: after FUNCTION FLUSH (a restarted or new Redis) a send finds its
    function missing, appends nothing and says which command loads it; once the coordinator loaded it
    again (its tick), the same producer sends."""
    h = harness
    h.create(shard_count=4)
    producer = Producer(h.client)
    producer.send(h.prefix, "warm-up", 0)
    sends = [
        (500, lambda p: [p.send(h.prefix, "k", 1)]),
        (500, lambda p: p.send_batch(h.prefix, [(f"k{i}", i) for i in range(20)])),  # one call
        (7, lambda p: p.send_batch(h.prefix, [(f"k{i}", i) for i in range(20)])),  # a pipeline of 3
    ]
    for max_entries_per_call, send in sends:
        producer.max_entries_per_call = max_entries_per_call
        h.client.function_flush()
        lengths = sum(h.xlen(s) for s in V1)
        with pytest.raises(FunctionsNotLoaded, match="redis_functions load") as raised:
            send(producer)
        assert raised.value.retriable and raised.value.code == "FUNCTIONS_NOT_LOADED"
        with pytest.raises(FunctionsNotLoaded, match=library.library().name):
            producer.require_functions()
        assert sum(h.xlen(s) for s in V1) == lengths

        DataPlaneFunctions(h.client, keys_from_settings()).ensure()  # what the tick does
        producer.require_functions()
        results = send(producer)
        assert sum(h.xlen(s) for s in V1) == lengths + len(results)  # each entry once


def test_a_script_error_is_a_typed_error_not_a_redis_one(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    h.client.delete(h.stream(Shard(1, 0)))
    h.client.set(h.stream(Shard(1, 0)), "not a stream")

    with pytest.raises(DataPlaneError):
        h.producer.send(h.prefix, "k", 1)


def _loaded(h: Harness) -> str:
    """The producer's function (loaded by the fixtures, as the coordinator does); its name."""
    name = library.function_name("produce")
    assert name == h.producer._function
    return name
