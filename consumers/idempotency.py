"""Enqueue once: the producer's idempotency keys (docs/producer.md, "Enqueue once").

A send with an ``idempotency_key`` goes through the ``idempotent_produce`` function
(``rsc_redis/dataplane/idempotent_produce.lua``) instead of ``produce``: in the same call that appends,
it looks the key up in the stream prefix's two generations of keys (``rsc:{P}:once`` and
``rsc:{P}:once:prev``, keys of the prefix's hash tag, so one Redis Cluster slot with its streams) and,
when the key was appended less than the window ago, appends nothing and answers the first append's
entry id, shard and event id. So a retry after a lost reply (a timeout, a cut connection: the outcome
unknown) gets the first id back instead of a second entry.

This module holds what is not the producer's calls: the argument checks, the split of a batch into the
first occurrence of each key (a batch that names one key twice appends it once, in input order: the
later items get the first one's result), the reading of a duplicate's record, and the detection of
Redis 8.6's ``XADD IDMP``, which this version does not use (docs/producer.md says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from consumers.dataplane import scripts
from consumers.errors import InvalidRequest
from rsc_redis import functions

__all__ = [
    "DEFAULT_MAX_KEYS",
    "DEFAULT_WINDOW_MS",
    "MAX_KEY_BYTES",
    "Record",
    "first_occurrences",
    "idempotency_key",
    "max_keys",
    "parse_record",
    "server_has_xadd_idmp",
    "window_ms",
    "xadd_idmp_in",
]

# docs/producer.md, "Enqueue once": how long a key is remembered, and how many keys a prefix holds.
DEFAULT_WINDOW_MS = 600_000
MIN_WINDOW_MS, MAX_WINDOW_MS = 1_000, 86_400_000
DEFAULT_MAX_KEYS = 100_000
MIN_MAX_KEYS, MAX_MAX_KEYS = 1_000, 10_000_000
MAX_KEY_BYTES = 256

# The first Redis whose XADD takes IDMP (Redis Open Source 8.6.0).
XADD_IDMP_SINCE = (8, 6, 0)

# A duplicate's record as idempotent_produce.lua keeps it: (routing version, shard index, entry id,
# event id) of the first append.
Record = tuple[int, int, str, str]


def idempotency_key(value: Any) -> bytes:
    """The key as sent: a ``str`` (its UTF-8) or ``bytes``, 1 to :data:`MAX_KEY_BYTES` bytes."""
    raw = value.encode() if isinstance(value, str) else value
    if not isinstance(raw, bytes) or not 1 <= len(raw) <= MAX_KEY_BYTES:
        raise InvalidRequest(
            f"idempotency_key must be a non-empty str or bytes of at most {MAX_KEY_BYTES} bytes; "
            f"got {value!r:.80}",
            field="idempotency_key",
        )
    return raw


def window_ms(value: Any) -> int:
    return _int_in(value, MIN_WINDOW_MS, MAX_WINDOW_MS, "idempotency_window_ms")


def max_keys(value: Any) -> int:
    return _int_in(value, MIN_MAX_KEYS, MAX_MAX_KEYS, "idempotency_max_keys")


def _int_in(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{what} must be an int in [{low}, {high}]; got {value!r}", field=what)
    return value


def first_occurrences(keys: Sequence[bytes | None]) -> tuple[list[int], list[tuple[int, int]]]:
    """The positions to send (each key's first occurrence, and every position without a key), and
    ``(later position, first position)`` for each repeat of a key within the batch."""
    first: dict[bytes, int] = {}
    send: list[int] = []
    repeats: list[tuple[int, int]] = []
    for position, key in enumerate(keys):
        if key is None:
            send.append(position)
            continue
        earlier = first.setdefault(key, position)
        if earlier == position:
            send.append(position)
        else:
            repeats.append((position, earlier))
    return send, repeats


def parse_record(raw: Any) -> Record:
    """``"<routing version> <shard index> <entry id> <event id>"`` (idempotent_produce.lua)."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    version, index, entry_id, event_id = text.split(" ")
    return int(version), int(index), entry_id, event_id


# ------------------------------------------------------------------------------------ XADD IDMP (8.6)


def xadd_idmp_in(hello: Mapping[Any, Any]) -> bool:
    """Whether the server that answered ``HELLO`` with ``hello`` has ``XADD IDMP``: Redis (not a fork
    that reports another ``server``) 8.6.0 or later."""
    fields = {_text(k): v for k, v in hello.items()}
    if _text(fields.get("server", "")) != "redis":
        return False
    try:
        version = tuple(int(p) for p in _text(fields.get("version", "")).split(".")[:3])
    except ValueError:
        return False
    return version >= XADD_IDMP_SINCE


def server_has_xadd_idmp(client: Any) -> bool:
    """``HELLO`` (no protocol switch; the producer's Redis user has it) on every primary of ``client``:
    True only if all of them have ``XADD IDMP``. Detection only: no send uses it (docs/producer.md,
    "Enqueue once", "Redis 8.6's XADD IDMP")."""
    with scripts.translate_redis_errors("asking Redis for its version"):
        replies = [node.execute_command("HELLO") for _, node in functions.primaries(client)]  # type: ignore[no-untyped-call]
    return all(xadd_idmp_in(_as_mapping(r)) for r in replies)


def _as_mapping(reply: Any) -> Mapping[Any, Any]:
    """``HELLO``'s reply: a map (RESP3) or a flat list of names and values (RESP2)."""
    if isinstance(reply, Mapping):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
