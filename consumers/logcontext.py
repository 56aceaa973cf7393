"""Member log lines carry their member: ``member_id``, ``consumer_group``, ``stream_prefix`` and, inside a
shard's work, ``shard`` (docs/consumers.md, "Logs").

The member runtime sets the context in each thread it runs (:func:`bind`); :class:`MemberContextFilter`
copies it onto every log record of that thread, so a JSON formatter (``LOG_FORMAT=json``) writes them as
keys. Records logged outside any member get none of them (a JSON line carries no empty keys).
config/settings.py installs the filter on its console handler; a
host project adds it to its own handlers::

    "filters": {"rsc_member": {"()": "consumers.logcontext.MemberContextFilter"}},
    "handlers": {"console": {..., "filters": ["rsc_member"]}},
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FIELDS = ("member_id", "consumer_group", "stream_prefix", "shard")
_context: ContextVar[dict[str, str] | None] = ContextVar("rsc_member_log_context", default=None)


@contextmanager
def bind(**fields: str) -> Iterator[None]:
    """Add ``fields`` (of :data:`FIELDS`) to this thread's member context while inside."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields: {sorted(unknown)}")
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def bound(target: Callable[[], None], **fields: str) -> Callable[[], None]:
    """``target`` run inside :func:`bind` (a thread's target: contexts do not cross into new threads)."""

    def run() -> None:
        with bind(**fields):
            target()

    return run


def current() -> dict[str, str]:
    return dict(_context.get() or {})


class MemberContextFilter(logging.Filter):
    """Adds the thread's member context to each record (an ``extra=`` of the call wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in (_context.get() or {}).items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True
