"""Decoding entries (consumers/dataplane/envelope.py): fields parsed once, the payload when touched; the
packed envelope (coordinator/protocol/envelope.py) as this producer writes it (produced_at_ms not
written: the entry id's ms) and as older producers wrote it (Redis TIME in it), and the seven-field
entries written before it."""

from __future__ import annotations

import enum
import json
import logging
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.dataplane import Delivery, Entry
from consumers.dataplane.envelope import decode_entries, decode_fetched, dumps_json, encode_event
from consumers.errors import InvalidRequest
from coordinator.protocol import envelope
from coordinator.protocol.model import Shard

V2_3 = Shard(2, 3)
FIELDS = tuple(name.decode() for name in envelope.FIELD_NAMES)  # the envelope's fields, in order


def raw_entry(entry_id: bytes, **fields: bytes) -> list[object]:
    return [entry_id, [x for kv in fields.items() for x in (kv[0].encode(), kv[1])]]


@pytest.mark.parametrize(
    ("produced_at_ms", "head", "decoded_at_ms"),
    [
        # this producer's: the entry id's ms is the time (the id below is 1700000000000-5)
        (envelope.NOT_WRITTEN, b"2 0 ", 1700000000000),
        # an older producer's: produce.lua put Redis TIME in front
        (1700000000001, b"2 1700000000001 ", 1700000000001),
    ],
)
def test_an_encoded_event_packs_and_decodes_back_to_what_was_sent(
    produced_at_ms: int, head: bytes, decoded_at_ms: int
) -> None:
    event = encode_event("k-1", {"a": [1, 2]}, headers={"trace": "t"})
    value = envelope.pack(2, event.body(), produced_at_ms)  # what produce.lua appends
    assert value.startswith(head + b"32 3 16 13\n" + event.event_id.encode() + b"k-1")
    fetched = decode_fetched([b"1700000000000-5", value], V2_3)  # fetch.lua: the value alone
    read = decode_entries([[b"1700000000000-5", [b"envelope", value]]], V2_3, Delivery.PENDING, [b"3"])
    for entry in (*fetched, *read):
        assert entry.entry_id == "1700000000000-5" and entry.shard == V2_3
        assert (entry.event_id, entry.partition_key, entry.partition_key_bytes) == (
            event.event_id,
            "k-1",
            b"k-1",
        )
        assert (entry.routing_version, entry.produced_at_ms) == (2, decoded_at_ms)
        assert (entry.content_type, entry.payload, entry.headers) == (
            "application/json",
            {"a": [1, 2]},
            {"trace": "t"},
        )
    assert (fetched[0].delivery, fetched[0].deliveries) == ("new", 1)
    assert (read[0].delivery, read[0].deliveries) == ("pending", 3)


def test_what_this_producer_writes_is_still_six_numbers_that_an_older_reader_decodes() -> None:
    """A member of an older version (a rolling upgrade) reads new entries by the same rule: six decimal
    numbers, a newline, the five strings. It reads produced_at_ms 0 as it is; every other field, and so
    the partition key that per-key lanes read alone, is where it always was."""
    event = encode_event(b"a b\n", b"x", {"k": "v"}, "text/plain")
    value = envelope.pack(5, event.body())
    line, _, _ = value.partition(b"\n")
    numbers = line.split(b" ")
    assert len(numbers) == 6 and all(n.isdigit() for n in numbers) and numbers[:2] == [b"5", b"0"]
    assert envelope.partition_key_of(value) == b"a b\n"
    fields = envelope.unpack(value)
    assert b"produced_at_ms" not in fields  # not written: readers of this version take the entry id's
    assert fields == {
        b"event_id": event.event_id.encode(),
        b"partition_key": b"a b\n",
        b"routing_version": b"5",
        b"content_type": b"text/plain",
        b"payload": b"x",
        b"headers": b'{"k":"v"}',
    }
    assert envelope.fields_of([b"envelope", value])[b"routing_version"] == b"5"


def test_packed_fields_may_hold_spaces_newlines_and_any_bytes() -> None:
    event = encode_event(b"a b\n\x00\xff", b"\n1 2 3\n\x00", {"k y": "v\nw"}, "text/plain; charset=utf-8")
    value = envelope.pack(7, event.body(), 12)
    assert envelope.unpack(value) == {
        b"event_id": event.event_id.encode(),
        b"partition_key": b"a b\n\x00\xff",
        b"routing_version": b"7",
        b"produced_at_ms": b"12",
        b"content_type": b"text/plain; charset=utf-8",
        b"payload": b"\n1 2 3\n\x00",
        b"headers": event.headers.encode(),
    }
    (entry,) = decode_fetched([b"12-0", value], V2_3)
    assert (entry.partition_key_bytes, entry.payload, entry.headers) == (
        b"a b\n\x00\xff",
        "\n1 2 3\n\x00",
        {"k y": "v\nw"},
    )


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"no newline at all",
        b"1 2 3 4 5\nfive numbers, not six",
        b"1 2 3 4 5 6 7\nseven numbers",
        b"1 2 x 0 0 0\nnot a number",
        b"1 2 -1 0 0 0\na sign",
        b"1 2 30 0 0 0\nshorter than 30",
    ],
)
def test_a_value_that_is_not_a_packed_envelope_is_refused_by_unpack(value: bytes) -> None:
    with pytest.raises(envelope.MalformedEnvelope):
        envelope.unpack(value)
    assert envelope.partition_key_of(value) is None


def test_the_partition_key_alone_reads_what_unpack_reads() -> None:
    """The per-key lanes read only the key (consumers/member/concurrent.py); it is the key unpack finds,
    for any bytes, and an entry decoded either way gives the same."""
    for key in (b"", b"k", b"a b\n\x00\xff", "ключ".encode()):
        body = encode_event(key, b"\n1 2\n", None, None).body()
        for value in (envelope.pack(3, body), envelope.pack(3, body, 9)):  # this producer's, an older one's
            assert envelope.partition_key_of(value) == envelope.unpack(value)[b"partition_key"] == key
            (lean,) = decode_fetched([b"1-0", value], V2_3)
            (full,) = decode_fetched([b"1-0", value], V2_3)
            assert full.event_id  # every field mapped first: the slow way
            assert lean.partition_key_bytes == full.partition_key_bytes == key


def test_an_envelope_that_does_not_unpack_is_delivered_as_bytes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="consumers.dataplane.envelope"):
        fetched, read = (
            *decode_fetched([b"7-0", b"garbage\n"], V2_3),
            *decode_entries([[b"7-1", [b"envelope", b"garbage\n"]]], V2_3, Delivery.NEW),
        )
        assert caplog.records == []  # nothing unpacked yet
        for entry in (fetched, read):
            assert (entry.payload, entry.content_type, entry.event_id) == (
                b"garbage\n",
                "application/octet-stream",
                "",
            )
    assert [r.getMessage() for r in caplog.records] == [
        "entry 7-0: its envelope does not unpack; delivered as octet-stream bytes",
        "entry 7-1: its envelope does not unpack; delivered as octet-stream bytes",
    ]


def test_an_entry_in_the_seven_field_format_of_before_the_packed_envelope_still_decodes() -> None:
    """Entries appended before the upgrade stay in their streams: they decode to the same Entry."""
    event = encode_event("k-1", {"a": [1, 2]}, headers={"trace": "t"})
    raw = raw_entry(
        b"1700000000000-5",
        event_id=event.event_id.encode(),
        partition_key=event.partition_key,
        routing_version=b"2",
        produced_at_ms=b"1700000000001",
        content_type=event.content_type.encode(),
        payload=event.payload,
        headers=event.headers.encode(),
    )
    (fetched,) = decode_fetched(raw, V2_3)  # fetch.lua returns such an entry's field list
    (entry,) = decode_entries([raw], V2_3, Delivery.PENDING, [b"3"])
    assert isinstance(entry, Entry) and isinstance(fetched, Entry)
    assert [getattr(fetched, f) for f in FIELDS] == [getattr(entry, f) for f in FIELDS]
    assert (entry.entry_id, entry.shard, entry.delivery, entry.deliveries) == (
        "1700000000000-5",
        V2_3,
        "pending",
        3,
    )
    assert (entry.event_id, entry.partition_key, entry.partition_key_bytes) == (event.event_id, "k-1", b"k-1")
    assert (entry.routing_version, entry.produced_at_ms) == (2, 1700000000001)
    assert (entry.content_type, entry.payload, entry.headers) == (
        "application/json",
        {"a": [1, 2]},
        {"trace": "t"},
    )


def test_the_payload_is_decoded_when_the_handler_touches_it_and_only_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = raw_entry(b"5-0", content_type=b"application/json", payload=b"{not json", headers=b"[1]")
    with caplog.at_level(logging.WARNING, logger="consumers.dataplane.envelope"):
        (entry,) = decode_entries([raw], V2_3, Delivery.NEW)
        assert entry.entry_id == "5-0" and caplog.records == []  # nothing parsed yet
        assert entry.payload == b"{not json" and entry.payload is entry.payload
        assert entry.content_type == "application/octet-stream"  # as before: delivered as raw bytes
        assert [r.getMessage() for r in caplog.records] == [
            "entry 5-0: application/json payload does not parse; delivered as bytes"
        ]
        assert entry.headers == {}  # not a JSON object: ignored, with a warning, when first read
    assert len(caplog.records) == 2


def test_an_entry_written_another_way_gets_defaults() -> None:
    (entry,) = decode_entries([raw_entry(b"1234-0", payload=b"\x00\xff")], V2_3, Delivery.CLAIMED, [b"2"])
    assert (entry.event_id, entry.partition_key, entry.routing_version, entry.produced_at_ms) == (
        "",
        "",
        2,
        1234,
    )
    assert (entry.content_type, entry.payload, entry.headers) == ("application/octet-stream", b"\x00\xff", {})
    assert entry.delivery == Delivery.CLAIMED and entry.deliveries == 2
    text = decode_entries(
        [raw_entry(b"1-0", content_type=b"text/plain", payload="é".encode())], V2_3, Delivery.NEW
    )
    assert text[0].payload == "é"


def reference_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none(), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_the_payload_json_is_json_dumps_text(value: Any) -> None:
    """dumps_json (one C encoder for every call) writes exactly what json.dumps writes."""
    assert dumps_json(value) == reference_json(value)


class Colour(enum.IntEnum):
    RED = 1


class Tag(str):
    pass


def test_the_payload_json_is_json_dumps_text_and_errors_for_the_odd_values() -> None:
    for value in (math.nan, -math.inf, Colour.RED, {Colour.RED: Tag("x")}, "\u2028\x7f\x00\ud800", 1e16):
        assert dumps_json(value) == reference_json(value)
    cycle: list[Any] = []
    cycle.append(cycle)
    odd_values = (({1, 2}, TypeError), (object(), TypeError), (cycle, ValueError), ({(1,): 2}, TypeError))
    for odd, error in odd_values:
        with pytest.raises(error) as ours:
            dumps_json(odd)
        with pytest.raises(error) as theirs:
            reference_json(odd)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(InvalidRequest):  # the producer's encoding refuses what json.dumps refuses
        encode_event("k", {1, 2})
