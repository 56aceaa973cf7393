"""The entry envelope: how a producer encodes an event into a stream entry, and how a consumer decodes it
back into an :class:`Entry` (docs/producer.md, "Envelope").

An entry's envelope fields (each a byte string):

=================  ==========================================================================
``event_id``       uuid4 hex, made by the producer; the same on a duplicate made by a retry
``partition_key``  the routing key, as UTF-8 bytes of a ``str`` key or the raw ``bytes`` key
``routing_version``the routing version the entry was appended to (written by the producer, checked by
                   ``produce.lua`` against the active version in the append's own function)
``produced_at_ms`` Redis's clock in ms at the append: the entry id's ms (the producer writes ``0``,
                   "not written"; older entries carry Redis ``TIME`` from ``produce.lua``)
``content_type``   ``application/json`` by default, ``application/octet-stream`` for bytes
``payload``        the encoded payload
``headers``        a JSON object of string to string
=================  ==========================================================================

The producer writes them packed into one stream field, ``envelope`` (the layout is in
:mod:`coordinator.protocol.envelope`); entries written before that have the seven as fields of their
own, and are decoded all the same.

Besides the fields, an :class:`Entry` carries how it reached the member (``delivery``: new, re-read
from its own pending list, or claimed from a previous owner) and Redis's delivery count
(``deliveries``), which the opt-in ``on_error="redeliver"`` policy compares with ``max_deliveries``.

Decoding is lenient, because one undecodable entry must not wedge a shard (there is no dead-letter
queue in the default mode): an entry not written by :class:`consumers.producer.Producer` is delivered
with defaults for what it lacks, an ``envelope`` field that does not unpack is delivered as the payload
(raw bytes, ``application/octet-stream``) and a JSON payload that does not parse is delivered as raw
bytes with content type ``application/octet-stream`` (a warning is logged for either).

Decoding is lazy, because most of it is wasted on a handler that reads one field: a read decodes, per
entry, only its id; the envelope is unpacked the first time a field is read, ``payload`` and
``headers`` parsed the first time the handler touches them, and kept (so a payload that does not parse
logs its warning then, once).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from consumers.errors import InvalidRequest
from coordinator.protocol import envelope as packed
from coordinator.protocol.model import Shard

log = logging.getLogger(__name__)

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"


class Delivery(StrEnum):
    NEW = "new"  # read for the first time (XREADGROUP '>')
    PENDING = "pending"  # re-read from the member's own pending list
    CLAIMED = "claimed"  # taken over from a previous owner's pending list


_UNSET: Any = object()


_NOT_REVOKED = threading.Event()  # an entry not handed out by a member (never set)


class Entry:
    """One delivered entry: read-only, fields decoded on demand.

    A member decodes nothing it does not need: ``entry_id`` is decoded at once (acks need it); what
    Redis returned for the entry (the packed envelope, or its flat field list) is kept as it came and
    turned into a mapping, once, when the first field is read; the other envelope fields are decoded
    when read, the payload and headers (JSON) the first time the handler touches them, and then kept. A
    handler that reads nothing costs no decoding at all.
    """

    __slots__ = (
        "_fields", "_headers", "_payload", "_raw", "deliveries", "delivery", "entry_id", "revoked", "shard"
    )  # fmt: skip

    entry_id: str
    shard: Shard
    delivery: str  # a Delivery: "new" | "pending" | "claimed"
    # Redis's delivery count, this delivery included: 1 for a new entry; for a re-read or claimed one,
    # what XPENDING says after that read (it also counts reads whose handling never started).
    deliveries: int
    # Set once the member must give the shard up (revoked, shutting down, or fenced): a long handler may
    # poll it (``entry.revoked.is_set()``, or ``entry.revoked.wait(s)`` instead of a sleep) and stop early.
    # The member sets it on the entries it hands to the handler; read it, never set it.
    revoked: threading.Event

    def __init__(self, entry_id: str, shard: Shard, raw: Any, delivery: str, deliveries: int = 1) -> None:
        self.entry_id = entry_id
        self.shard = shard
        self.delivery = delivery
        self.deliveries = deliveries
        self.revoked = _NOT_REVOKED
        # The packed envelope (bytes, from fetch.lua) or [field, value, ...] as Redis returned them.
        self._raw = raw
        self._fields: dict[bytes, Any] | None = None
        self._payload: Any = _UNSET
        self._headers: dict[str, str] | None = None

    def __repr__(self) -> str:
        return (
            f"Entry(entry_id={self.entry_id!r}, shard={self.shard}, event_id={self.event_id!r}, "
            f"delivery={self.delivery!r}, deliveries={self.deliveries})"
        )

    def _get(self, name: bytes, default: Any = None) -> Any:
        """A field's raw value; the first call maps every field, in one pass
        (:func:`coordinator.protocol.envelope.fields_of`)."""
        if self._fields is None:
            self._fields = _fields_of(self._raw, self.entry_id)
        return self._fields.get(name, default)

    @property
    def event_id(self) -> str:
        return _text(self._get(b"event_id", b""))

    @property
    def partition_key(self) -> str:
        """Decoded as UTF-8 with "surrogateescape": lossless for bytes keys (see partition_key_bytes)."""
        return _text(self._get(b"partition_key", b""))

    @property
    def partition_key_bytes(self) -> bytes:
        """The key exactly as the producer routed it (read straight from a packed envelope when nothing
        else was decoded yet: the member's per-key lanes need only it)."""
        if self._fields is None and type(self._raw) is bytes:
            key = packed.partition_key_of(self._raw)
            if key is not None:
                return key
        return self.partition_key.encode("utf-8", "surrogateescape")

    @property
    def routing_version(self) -> int:
        return _int(self._get(b"routing_version"), self.shard.version)

    @property
    def produced_at_ms(self) -> int:
        """Redis's clock in ms at the append: the entry id's ms, unless the entry carries its own (older
        entries, replayed dead letters: Redis ``TIME`` in their function). Ahead of the real time when the
        stream's last id was (docs/producer.md, "Envelope")."""
        return _int(self._get(b"produced_at_ms"), _int(self.entry_id.partition("-")[0], 0))

    @property
    def content_type(self) -> str:
        """The declared content type; ``application/octet-stream`` once a JSON payload failed to parse
        (then the payload is its raw bytes)."""
        declared = _text(self._get(b"content_type", OCTET_STREAM))
        if is_json(declared) and isinstance(self.payload, bytes):
            return OCTET_STREAM
        return declared

    @property
    def payload(self) -> Any:
        """JSON value for JSON content types, str for text/*, else bytes (decoded on first access)."""
        if self._payload is _UNSET:
            declared = _text(self._get(b"content_type", OCTET_STREAM))
            self._payload = _decode_payload(self._get(b"payload", b""), declared, self.entry_id)
        return self._payload

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = _decode_headers(self._get(b"headers"), self.entry_id)
        return self._headers


def is_json(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base == JSON or base.endswith("+json")


def is_text(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower().startswith("text/")


# ---------------------------------------------------------------------------------------------- encode


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedEvent:
    """One event, ready to be packed for ``produce.lua`` (:meth:`body`)."""

    partition_key: bytes
    event_id: str
    content_type: str
    payload: bytes
    headers: str

    def body(self) -> bytes:
        """The packed envelope of this event from its third number on
        (:func:`coordinator.protocol.envelope.pack_body`); the producer puts the routing version and
        produced_at_ms (not written: the entry id's ms) in front when it sends it."""
        return packed.pack_body(
            self.event_id.encode(),
            self.partition_key,
            self.content_type.encode(),
            self.headers.encode(),
            self.payload,
        )


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


def _compact_json() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, the same text, at about half
    the cost: ``json.dumps`` builds a new encoder (and its C encoder) on every call, this builds the C
    encoder once. It keeps no state between calls (no circular-reference markers: a value it cannot
    encode, a cycle included, goes through ``json.dumps``'s own path, which raises its own error), so one
    is shared by every thread. Where the C encoder is missing or takes other arguments (another Python),
    it is the plain encoder. Tested equal to ``json.dumps`` (tests/dataplane/test_envelope.py)."""
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or quote is None:
        return plain
    try:
        # markers, default, encoder, indent, key separator, item separator, sort_keys, skipkeys, allow_nan
        chunks = make(None, None, quote, None, ":", ",", False, False, True)
    except TypeError:
        return plain

    def dumps(value: Any) -> str:
        try:
            return "".join(chunks(value, 0))
        except (TypeError, ValueError, RecursionError):
            return plain(value)  # what json.dumps does with it: its text, or its error

    return dumps


# The payload encoding of every JSON content type (encode_event, and the producer's own fast path).
dumps_json = _compact_json()


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
            return dumps_json(payload).encode("utf-8")
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
    delivery counts in the same order (absent for new entries: each is 1). Only the ids are decoded
    here; the rest when read (:class:`Entry`)."""
    kind = str(delivery)
    if not deliveries:
        return [Entry(item[0].decode(), shard, item[1], kind) for item in raw]
    return [
        Entry(item[0].decode(), shard, item[1], kind, _int(deliveries[i] if i < len(deliveries) else 1, 1))
        for i, item in enumerate(raw)
    ]


def decode_fetched(flat: Sequence[Any], shard: Shard) -> list[Entry]:
    """Decode ``fetch.lua``'s ``[id, envelope, id, envelope, ...]`` (each envelope the packed value, or
    the entry's flat field list when it is not one packed field): new entries, delivered once."""
    kind = str(Delivery.NEW)
    return [Entry(flat[i].decode(), shard, flat[i + 1], kind) for i in range(0, len(flat), 2)]


def _fields_of(raw: Any, entry_id: str) -> dict[bytes, Any]:
    try:
        return packed.fields_of(raw)
    except packed.MalformedEnvelope:
        log.warning("entry %s: its envelope does not unpack; delivered as octet-stream bytes", entry_id)
        if not isinstance(raw, bytes):
            raw = dict(zip(raw[::2], raw[1::2], strict=False)).get(packed.FIELD, b"")
        return {b"payload": raw, b"content_type": OCTET_STREAM.encode()}


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _decode_payload(raw: Any, content_type: str, entry_id: str) -> Any:
    data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
    if is_json(content_type):
        try:
            return json.loads(data)
        except ValueError:
            log.warning("entry %s: %s payload does not parse; delivered as bytes", entry_id, content_type)
            return data
    if is_text(content_type):
        return data.decode("utf-8", "replace")
    return data


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
