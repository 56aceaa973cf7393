"""Argument checks of the data plane and the producer, raising :class:`consumers.errors.InvalidRequest`.

Identifiers follow docs/protocol.md section 1 (the coordinator's own patterns), so nothing a caller
passes can break the key layout or its hash tag.
"""

from __future__ import annotations

import re
from typing import Any

from consumers.errors import InvalidRequest
from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.model import (
    MAX_ENTRY_ID_PART,
    is_entry_id,
    validate_identifier,
    validate_member_id,
)

MAX_COUNT = 10_000
# The fast path: ids joined by single spaces, each part at most 19 digits (so below 2**64 without a
# conversion; a real id's ms part has 13). A 20-digit part goes id by id, where it is compared.
_ENTRY_IDS_RE = re.compile(r"[0-9]{1,19}-[0-9]{1,19}(?: [0-9]{1,19}-[0-9]{1,19})*")


def identifier(value: Any, what: str) -> str:
    """The coordinator's own rule (one definition), raised as this package's error type."""
    try:
        return validate_identifier(value, what)
    except CoordinatorError as e:
        raise InvalidRequest(e.message, field=what) from None


def member_id(value: Any) -> str:
    try:
        return validate_member_id(value)
    except CoordinatorError as e:
        raise InvalidRequest(e.message, field="member_id") from None


def epoch(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"member_epoch must be an int; got {value!r}", field="member_epoch")
    return value


def count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InvalidRequest(f"count must be an integer in [1, {MAX_COUNT}]; got {value!r}", field="count")
    return value


def entry_ids(values: Any, what: str) -> list[str]:
    """A list of entry ids, each checked as :func:`entry_id` does. The common case (``str`` ids, all
    well formed: the ids a read returned) is checked with one regular-expression match over all of them
    joined by spaces (an id holds no space: ``n`` ids make exactly ``n - 1`` of them); anything else
    id by id, for the error."""
    ids = list(values)
    try:
        joined = " ".join(ids)
    except TypeError:  # not all str (bytes ids are allowed): one by one
        joined = ""
    if ids and joined.count(" ") == len(ids) - 1 and _ENTRY_IDS_RE.fullmatch(joined):
        return ids
    return [entry_id(value, what) for value in ids]


def entry_id(value: Any, what: str) -> str:
    """An id Redis accepts (the protocol core's :func:`is_entry_id`), as ``str`` or UTF-8 ``bytes``."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not is_entry_id(text):
        raise InvalidRequest(
            f"{what}: a stream entry id is written '<ms>-<seq>', each part at most {MAX_ENTRY_ID_PART}; "
            f"got {value!r}",
            field=what,
        )
    return text
