"""Argument checks of the data plane and the producer, raising :class:`consumers.errors.InvalidRequest`.

Identifiers follow docs/protocol.md section 1 (the coordinator's own patterns), so nothing a caller
passes can break the key layout or its hash tag.
"""

from __future__ import annotations

import re
from typing import Any

from consumers.errors import InvalidRequest
from coordinator.protocol.model import IDENTIFIER_RE, MEMBER_ID_RE

MAX_COUNT = 10_000
_ENTRY_ID_RE = re.compile(r"^\d+-\d+$")


def identifier(value: Any, what: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER_RE.match(value):
        raise InvalidRequest(
            f"{what} must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit; got {value!r}",
            field=what,
        )
    return value


def member_id(value: Any) -> str:
    if not isinstance(value, str) or not MEMBER_ID_RE.match(value):
        raise InvalidRequest(
            "member_id must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit; got {value!r}",
            field="member_id",
        )
    return value


def epoch(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"member_epoch must be an int; got {value!r}", field="member_epoch")
    return value


def count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InvalidRequest(f"count must be an integer in [1, {MAX_COUNT}]; got {value!r}", field="count")
    return value


def entry_id(value: Any, what: str) -> str:
    text = value.decode() if isinstance(value, bytes) else value
    if not isinstance(text, str) or not _ENTRY_ID_RE.match(text):
        raise InvalidRequest(f"{what}: a stream entry id is written '<ms>-<seq>'; got {value!r}", field=what)
    return text
