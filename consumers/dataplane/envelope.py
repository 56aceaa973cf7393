"""The entry envelope: how a producer encodes an event into stream-entry fields, and how a consumer
decodes them back into an :class:`Entry` (docs/producer.md, "Envelope").

Fields of every entry (all Redis strings):

=================  ==========================================================================
``event_id``       uuid4 hex, made by the producer; the same on a duplicate made by a retry
``partition_key``  the routing key, as UTF-8 bytes of a ``str`` key or the raw ``bytes`` key
``routing_version``the routing version the entry was appended to (set by ``produce.lua``)
``produced_at_ms`` Redis ``TIME`` in ms when it was appended (set by ``produce.lua``)
``content_type``   ``application/json`` by default, ``application/octet-stream`` for bytes
``payload``        the encoded payload
``headers``        a JSON object of string to string
=================  ==========================================================================

Besides the fields, an :class:`Entry` carries how it reached the member (``delivery``: new, re-read
from its own pending list, or claimed from a previous owner) and Redis's delivery count
(``deliveries``), which the opt-in ``on_error="redeliver"`` policy compares with ``max_deliveries``.

Decoding is lenient, because one undecodable entry must not wedge a shard (there is no dead-letter
queue in the default mode): an entry not written by :class:`consumers.producer.Producer` is delivered
with defaults for what it lacks, and a JSON payload that does not parse is delivered as raw bytes with
content type ``application/octet-stream`` (a warning is logged).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from consumers.errors import InvalidRequest
from coordinator.protocol.model import Shard

log = logging.getLogger(__name__)

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"


class Delivery(StrEnum):
    NEW = "new"  # read for the first time (XREADGROUP '>')
    PENDING = "pending"  # re-read from the member's own pending list
    CLAIMED = "claimed"  # taken over from a previous owner's pending list


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    entry_id: str
    shard: Shard
    event_id: str
    # Decoded as UTF-8 with "surrogateescape": lossless for bytes keys (see partition_key_bytes).
    partition_key: str
    routing_version: int
    produced_at_ms: int
    content_type: str
    payload: Any  # JSON value for JSON content types, str for text/*, else bytes
    headers: dict[str, str]
    delivery: str  # a Delivery: "new" | "pending" | "claimed"
    # Redis's delivery count, this delivery included: 1 for a new entry; for a re-read or claimed one,
    # what XPENDING says after that read (it also counts reads whose handling never started).
    deliveries: int = 1

    @property
    def partition_key_bytes(self) -> bytes:
        """The key exactly as the producer routed it."""
        return self.partition_key.encode("utf-8", "surrogateescape")


def is_json(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base == JSON or base.endswith("+json")


def is_text(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower().startswith("text/")


# ---------------------------------------------------------------------------------------------- encode


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedEvent:
    """One event, ready for ``produce.lua`` (which adds ``routing_version`` and ``produced_at_ms``)."""

    partition_key: bytes
    event_id: str
    content_type: str
    payload: bytes
    headers: str

    def script_args(self) -> list[bytes | str]:
        return [self.event_id, self.partition_key, self.content_type, self.payload, self.headers]


def encode_event(
    partition_key: str | bytes,
    payload: Any,
    headers: Mapping[str, str] | None = None,
    content_type: str | None = None,
) -> EncodedEvent:
    """Encode one event. ``content_type=None`` picks ``application/octet-stream`` for bytes payloads
    and ``application/json`` (``json.dumps``) for anything else.

    With an explicit content type: bytes are written as they are (already encoded); a JSON content type
    serializes anything else with ``json.dumps`` (a ``str`` becomes a JSON string); any other content
    type takes ``str`` (written as UTF-8) or bytes only.
    """
    return EncodedEvent(
        partition_key=_key_bytes(partition_key),
        event_id=uuid.uuid4().hex,
        content_type=content_type or (OCTET_STREAM if _is_bytes(payload) else JSON),
        payload=_payload_bytes(payload, content_type),
        headers=_headers_json(headers),
    )


def _is_bytes(value: Any) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


def _key_bytes(partition_key: str | bytes) -> bytes:
    if isinstance(partition_key, str):
        return partition_key.encode("utf-8")
    if _is_bytes(partition_key):
        return bytes(partition_key)
    raise InvalidRequest(f"partition_key must be str or bytes; got {type(partition_key).__name__}")


def _payload_bytes(payload: Any, content_type: str | None) -> bytes:
    if _is_bytes(payload):
        return bytes(payload)
    if content_type is None or is_json(content_type):
        try:
            return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise InvalidRequest(f"payload is not JSON-serializable: {e}") from e
    if isinstance(payload, str):
        return payload.encode("utf-8")
    raise InvalidRequest(
        f"a {content_type!r} payload must be str or bytes; got {type(payload).__name__} "
        "(only JSON content types serialize other values)"
    )


def _headers_json(headers: Mapping[str, str] | None) -> str:
    if headers is None:
        return "{}"
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise InvalidRequest("headers must be a mapping of str to str")
    return json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False, sort_keys=True)


# ---------------------------------------------------------------------------------------------- decode


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def decode_entries(
    raw: Sequence[Any], shard: Shard, delivery: Delivery, deliveries: Sequence[Any] = ()
) -> list[Entry]:
    """Decode ``[[id, [field, value, ...]], ...]`` as returned by the scripts; ``deliveries`` holds the
    delivery counts in the same order (absent for new entries: each is 1)."""
    if not deliveries:
        return [decode_entry(item[0], item[1], shard, delivery) for item in raw]
    return [
        decode_entry(item[0], item[1], shard, delivery, _int(deliveries[i] if i < len(deliveries) else 1, 1))
        for i, item in enumerate(raw)
    ]


def decode_entry(
    entry_id: Any, flat_fields: Sequence[Any], shard: Shard, delivery: Delivery, deliveries: int = 1
) -> Entry:
    fields = {_text(flat_fields[i]): flat_fields[i + 1] for i in range(0, len(flat_fields) - 1, 2)}
    eid = _text(entry_id)
    content_type = _text(fields.get("content_type", OCTET_STREAM))
    payload, content_type = _decode_payload(fields.get("payload", b""), content_type, eid)
    return Entry(
        entry_id=eid,
        shard=shard,
        event_id=_text(fields.get("event_id", "")),
        partition_key=_text(fields.get("partition_key", "")),
        routing_version=_int(fields.get("routing_version"), shard.version),
        produced_at_ms=_int(fields.get("produced_at_ms"), _int(eid.partition("-")[0], 0)),
        content_type=content_type,
        payload=payload,
        headers=_decode_headers(fields.get("headers"), eid),
        delivery=delivery,
        deliveries=deliveries,
    )


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _decode_payload(raw: Any, content_type: str, entry_id: str) -> tuple[Any, str]:
    data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
    if is_json(content_type):
        try:
            return json.loads(data), content_type
        except ValueError:
            log.warning("entry %s: %s payload does not parse; delivered as bytes", entry_id, content_type)
            return data, OCTET_STREAM
    if is_text(content_type):
        return data.decode("utf-8", "replace"), content_type
    return data, content_type


def _decode_headers(raw: Any, entry_id: str) -> dict[str, str]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        log.warning("entry %s: headers are not a JSON object; ignored", entry_id)
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
