"""A console default for the package's log lines when the host project configured none
(docs/plugin.md, "Logging").

Django's default logging gives the root logger no handler, so without a ``LOGGING`` of the host's own an
INFO line of the package ("starting member ...", "member expired ...") goes nowhere and a member looks
hung. When Django starts, the apps call :func:`install` for their loggers (``coordinator``,
``consumers``, ``admin_ui``): each one that the host's ``LOGGING`` left alone (no level of its own and no
handler on it or above it) gets level INFO and a :class:`DefaultHandler` on stderr. ``run_member`` does the
same for the root logger, as ``celery worker`` does, so a listener's own lines show too.

A :class:`DefaultHandler` writes a record only while no other handler would (one is added later, e.g.
by ``logging.basicConfig``): nothing is printed twice. :func:`uninstall` takes every default back; the
coordinator calls it when Celery sets up its own logging (``-l`` then decides).
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The loggers given a default, and the level each had before (to give it back).
_installed: dict[str, int] = {}


class DefaultHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr, for a record that no other handler of its logger's chain takes: the nearest default
    handler of the chain writes it, the others stay silent."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter(FORMAT))

    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        if _first_default_handler(record.name) is not self:
            return False
        return bool(super().handle(record))


def _first_default_handler(name: str) -> logging.Handler | None:
    """The nearest DefaultHandler on ``name``'s chain, or None if any other handler is on it."""
    first: logging.Handler | None = None
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        for handler in logger.handlers:
            if not isinstance(handler, DefaultHandler):
                return None
            first = first or handler
        logger = logger.parent if logger.propagate else None
    return first


def install(*names: str) -> list[str]:
    """Give each of ``names`` (``""``: the root logger) level INFO and a :class:`DefaultHandler`, unless
    the host's logging configured it: a level of its own (the root: any handler) or a handler on its
    chain. Idempotent; returns the names given a default now."""
    done = []
    for name in names:
        logger = logging.getLogger(name or None)
        if name in _installed or logger.hasHandlers():
            continue
        if name and logger.level != logging.NOTSET:
            continue
        _installed[name] = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(DefaultHandler())
        done.append(name)
    return done


def uninstall() -> None:
    """Take every default back (handlers removed, levels as they were)."""
    for name, level in list(_installed.items()):
        logger = logging.getLogger(name or None)
        for handler in [h for h in logger.handlers if isinstance(h, DefaultHandler)]:
            logger.removeHandler(handler)
        logger.setLevel(level)
        del _installed[name]
