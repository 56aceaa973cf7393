"""The packed entry envelope: one stream field, ``envelope``, that holds every envelope field of an event
(docs/producer.md, "Envelope"). Shared knowledge of the producer, the data plane and the store's
dead-letter and operator views, so it lives here, with no I/O.

Why one field: a member's reads run inside a Lua script (the fence), and Redis converts every string of
every entry into a Lua value and back. Seven fields were fifteen strings and two tables per entry;
one field is three strings (id, name, value), and ``fetch.lua`` returns just two (id, value). That
conversion was most of what a fenced read cost Redis beyond a plain ``XREADGROUP`` (docs/benchmarks.md).

Layout of the value (bytes)::

    <routing_version> <produced_at_ms> <len event_id> <len partition_key> <len content_type> <len headers>\n
    <event_id><partition_key><content_type><headers><payload>

one line of six decimal numbers separated by single spaces, a newline, then the five byte strings back
to back (the payload is the rest, so it needs no length). The producer writes the whole value
(:func:`pack`: :func:`head`, then :func:`pack_body`) and ``produce.lua`` appends it as it came, after
checking the routing version the producer used (the first number) against the active one, in the same
function.

``produced_at_ms`` is ``0`` in what this producer writes: **not written**, the time is the entry id's
milliseconds, Redis's clock at the append (the entry id is made from it), so Lua builds no string per
entry. Values written before carry Redis ``TIME`` in ms there (``produce.lua`` used to put the first
two numbers in front, inside Redis), and so do dead letters replayed by ``replay_dead_letter.lua``: a
reader takes a non-zero number as it is and reads a ``0`` as "the entry id's ms"
(:func:`unpack` leaves the field out then). A reader of an older version reads ``0`` as it is (only its
``produced_at_ms`` is off; every other field decodes), which is why the number stays in the line.

Entries written before this layout have seven fields of their own (``event_id``, ``partition_key``,
``routing_version``, ``produced_at_ms``, ``content_type``, ``payload``, ``headers``) and are still read:
:func:`fields_of` maps either layout to those seven names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIELD = b"envelope"  # the stream field that holds the packed envelope
# produced_at_ms as the producer writes it: not written, the entry id's ms is the time (module docstring).
NOT_WRITTEN = 0
FIELD_NAMES = (
    b"event_id",
    b"partition_key",
    b"routing_version",
    b"produced_at_ms",
    b"content_type",
    b"payload",
    b"headers",
)


class MalformedEnvelope(ValueError):
    """An ``envelope`` value that does not follow the layout in this module's docstring."""


def pack_body(
    event_id: bytes, partition_key: bytes, content_type: bytes, headers: bytes, payload: bytes
) -> bytes:
    """The value from its third number on: what the producer encodes once per event, before it knows the
    routing version it will be appended to (a refused call is sent again to a newer one)."""
    return b"%d %d %d %d\n%b%b%b%b%b" % (
        len(event_id),
        len(partition_key),
        len(content_type),
        len(headers),
        event_id,
        partition_key,
        content_type,
        headers,
        payload,
    )


def head(routing_version: int, produced_at_ms: int = NOT_WRITTEN) -> bytes:
    """The value's first two numbers, each followed by its space: ``b"<routing_version> 0 "`` as the
    producer writes it (produced_at_ms :data:`NOT_WRITTEN`)."""
    return b"%d %d " % (routing_version, produced_at_ms)


def pack(routing_version: int, body: bytes, produced_at_ms: int = NOT_WRITTEN) -> bytes:
    """The whole value, as the producer writes it (``produced_at_ms`` left :data:`NOT_WRITTEN`: the entry
    id's ms). Given a time, it is the value an older producer's ``produce.lua`` wrote (for tests)."""
    return head(routing_version, produced_at_ms) + body


def partition_key_of(value: bytes) -> bytes | None:
    """The partition key of a packed value, without unpacking the rest (a member's per-key lanes need
    only it); None when ``value`` is not a packed envelope (:func:`unpack` says why)."""
    head, newline, body = value.partition(b"\n")
    parts = head.split(b" ")
    if not newline or len(parts) != 6 or not (parts[2].isdigit() and parts[3].isdigit()):
        return None
    e, k = int(parts[2]), int(parts[3])
    return body[e : e + k] if e + k <= len(body) else None


def unpack(value: bytes) -> dict[bytes, bytes]:
    """The envelope fields of a packed value, by name: the seven, less ``produced_at_ms`` when it was not
    written (then the entry id's ms is the time); :class:`MalformedEnvelope` if it is not one."""
    head, newline, body = value.partition(b"\n")
    parts = head.split(b" ")
    if not newline or len(parts) != 6 or not all(p.isdigit() for p in parts):
        raise MalformedEnvelope(f"not a packed envelope: {value[:80]!r}")
    routing_version, produced_at_ms = parts[0], parts[1]
    e, k, c, h = (int(p) for p in parts[2:])
    if e + k + c + h > len(body):
        raise MalformedEnvelope(f"packed envelope shorter than its lengths: {value[:80]!r}")
    k += e
    c += k
    h += c
    fields = {
        b"event_id": body[:e],
        b"partition_key": body[e:k],
        b"routing_version": routing_version,
        b"produced_at_ms": produced_at_ms,
        b"content_type": body[k:c],
        b"payload": body[h:],
        b"headers": body[c:h],
    }
    if int(produced_at_ms) == NOT_WRITTEN:
        del fields[b"produced_at_ms"]  # the entry id's ms is the time (module docstring)
    return fields


def fields_of(raw: Any) -> dict[bytes, Any]:
    """An entry's fields by name, from what Redis returned for it: the packed value itself (``bytes``, as
    ``fetch.lua`` returns an entry whose only field is ``envelope``), the flat ``[name, value, ...]``
    list, or a mapping of names to values. An ``envelope`` field is unpacked into the seven fields, in
    its place; other fields (an old seven-field entry's, a dead letter's ``dlq_*``) are kept as they
    are; a name seen twice keeps the later value. :class:`MalformedEnvelope` if the envelope does not
    unpack."""
    if isinstance(raw, bytes):
        return unpack(raw)
    pairs = raw.items() if isinstance(raw, Mapping) else zip(raw[::2], raw[1::2], strict=False)
    fields: dict[bytes, Any] = {}
    for name, value in pairs:
        if name == FIELD:
            fields.update(unpack(value))
        else:
            fields[name] = value
    return fields
