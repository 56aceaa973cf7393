"""Decoding entries (consumers/dataplane/envelope.py): fields parsed once, the payload when touched."""

from __future__ import annotations

import logging

import pytest

from consumers.dataplane import Delivery, Entry
from consumers.dataplane.envelope import decode_entries, encode_event
from coordinator.protocol.model import Shard

V2_3 = Shard(2, 3)


def raw_entry(entry_id: bytes, **fields: bytes) -> list[object]:
    return [entry_id, [x for kv in fields.items() for x in (kv[0].encode(), kv[1])]]


def test_an_encoded_event_decodes_back_to_what_was_sent() -> None:
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
    (entry,) = decode_entries([raw], V2_3, Delivery.PENDING, [b"3"])
    assert isinstance(entry, Entry)
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
