"""Celery tasks. Beat runs ``coordinator.tasks.tick`` every RSC_TICK_INTERVAL_MS and
``coordinator.tasks.retention`` every RSC_RETENTION_INTERVAL_MS (CELERY_BEAT_SCHEDULE in
config/settings.py); each beat expires at the next one, so a backlog is dropped rather than replayed."""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import shared_task

from coordinator import service

log = logging.getLogger(__name__)


@shared_task(name="coordinator.tasks.tick", ignore_result=True)
def tick() -> None:
    """One coordinator tick (docs/protocol.md section 5). Idempotent: concurrent or late runs are harmless.

    A retriable failure (Redis unreachable, too much contention) is a warning, not a task failure: the
    next beat is the retry, and raising would only add a traceback per beat while Redis is down. Any
    other exception is a bug and fails the task (Celery logs it); the worker keeps running either way.
    """
    _beat(service.run_tick, "tick")


@shared_task(name="coordinator.tasks.retention", ignore_result=True)
def retention() -> None:
    """One retention pass and the audit prune (coordinator.service.run_retention). Its own task, never
    part of the tick: trimming streams must not delay lease expiry. Idempotent, bounded per run.

    Failures are handled like the tick's (:func:`_beat`)."""
    _beat(service.run_retention, "retention pass")


def _beat(run: Callable[[], object], what: str) -> None:
    """One beat's work. A retriable failure is a warning: the next beat is the retry. Anything else is a
    bug and propagates: Celery fails the task and logs it."""
    try:
        run()
    except Exception as error:
        if not service.is_retriable(error):
            raise
        log.warning("%s skipped, the next beat retries: %s", what, error)
