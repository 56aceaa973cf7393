"""Dead letters written by hand in the tests, signed as the data plane's ``dead_letter`` function signs
them (rsc_redis/dead_letter_mac.py, with this session's keys: coordinator/store/functions.py), so that
the coordinator treats them as the function's (docs/protocol.md section 14)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.store.functions import keys_from_settings
from rsc_redis.dead_letter_mac import FIELD


def signed(dead_letter_key: str, fields: Mapping[Any, Any]) -> dict[Any, Any]:
    """``fields`` (in order) followed by ``dlq_mac``, their MAC under ``dead_letter_key``."""
    flat = [_bytes(item) for name, value in fields.items() for item in (name, value)]
    return {**fields, FIELD: keys_from_settings()[0].mac(dead_letter_key, flat)}


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
