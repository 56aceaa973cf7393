"""The coordinator's periodic work on a host project's own Celery app.

In the host's ``settings.py`` (any name the host's Celery app reads with ``namespace="CELERY"``)::

    from coordinator.celery import beat_schedule

    CELERY_BEAT_SCHEDULE = {**beat_schedule(), "my-own-task": {...}}

or in the host's ``celery.py``, after ``app.config_from_object(...)``::

    app.conf.beat_schedule = {**app.conf.beat_schedule, **beat_schedule()}
    connect_setting_checks()

The tasks (``coordinator.tasks.tick`` and ``coordinator.tasks.retention``) are ``@shared_task``s in
``coordinator/tasks.py``: ``app.autodiscover_tasks()`` finds them like any installed app's tasks.

Why every beat expires at the next one: a beat not run within one interval is dropped instead of piling
up while the worker is busy or down; the next beat does the same work. The expiry is an absolute time
from beat's clock, checked against the worker's: keep their hosts NTP-synced to well within one
interval, or the worker discards every beat (then run ``manage.py run_tick`` instead).

This module imports neither Django's models nor the tasks, so a settings module may import it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

from coordinator import conf

TICK_TASK = "coordinator.tasks.tick"
RETENTION_TASK = "coordinator.tasks.retention"


def beat_schedule(
    *, tick_interval_ms: int | None = None, retention_interval_ms: int | None = None
) -> dict[str, dict[str, Any]]:
    """Celery beat entries ``coordinator-tick`` and ``coordinator-retention``.

    An interval left out is ``RSC_TICK_INTERVAL_MS`` / ``RSC_RETENTION_INTERVAL_MS`` from Django's
    settings (called from the host's celery.py), or its default (1000 / 30000 ms) when called from the
    settings module itself: there, pass your own values if you change them.
    """
    tick_ms = tick_interval_ms if tick_interval_ms is not None else _setting("RSC_TICK_INTERVAL_MS")
    retention_ms = (
        retention_interval_ms if retention_interval_ms is not None else _setting("RSC_RETENTION_INTERVAL_MS")
    )
    return {
        # The tick (coordinator.service.run_tick): expires members whose lease has run out.
        "coordinator-tick": _entry(TICK_TASK, tick_ms),
        # The retention pass (coordinator.service.run_retention): trims streams, prunes the audit.
        "coordinator-retention": _entry(RETENTION_TASK, retention_ms),
    }


def _entry(task: str, interval_ms: int) -> dict[str, Any]:
    # Not validated here: an impossible interval (0, say) is the system check's to report (rsc.E001),
    # with the setting's name, when the worker or beat starts (connect_setting_checks).
    seconds = interval_ms / 1000
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


def _setting(name: str) -> Any:
    """Django's setting when settings can be loaded, else the table's default. Called from the settings
    module itself (still being imported), loading them would cache a half-made module: then the default."""
    from django.conf import settings

    if not settings.configured:
        module_name = os.environ.get("DJANGO_SETTINGS_MODULE")
        if not module_name or _importing(module_name):
            return conf.default(name)
    return getattr(conf.settings(), name)


def _importing(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def connect_setting_checks() -> None:
    """Make the host's Celery worker and beat refuse to start on impossible coordinator settings.

    Celery never runs Django's system checks as errors; this runs those tagged ``rsc`` when a worker
    or beat starts and exits with the messages if any is serious: a beat with a zero interval would
    spin, one coarser than the lease would keep dead members' shards assigned. Idempotent
    (``dispatch_uid``).
    """
    from celery import signals

    quiet_beat_task_logs()
    signals.worker_init.connect(_refuse_impossible_settings, weak=False, dispatch_uid="rsc-checks-worker")
    signals.beat_init.connect(_refuse_impossible_settings, weak=False, dispatch_uid="rsc-checks-beat")


def _refuse_impossible_settings(**kwargs: Any) -> None:
    import django
    from django.core import checks

    django.setup()  # idempotent; Celery's Django fixup has normally done it already
    errors = [message for message in checks.run_checks(tags=["rsc"]) if message.is_serious()]
    if errors:
        message = "refusing to start, impossible settings:\n" + "\n".join(map(str, errors))
        # Logged, and written to the real stderr as well: beat swallows the SystemExit's message (it
        # exits 1 without printing it), and Celery may have redirected sys.stderr into a logger that
        # (with CELERY_WORKER_HIJACK_ROOT_LOGGER off) reaches no handler yet.
        logging.getLogger(__name__).critical("%s", message)
        print(message, file=sys.__stderr__, flush=True)
        # SystemExit, not an Exception: Celery's signal dispatch logs and ignores the latter.
        raise SystemExit(message)


# --- logging: Celery's per-run lines of the two beat tasks ----------------------------------------------

# Where Celery logs a task's runs at INFO: "Task <name>[<id>] received" (the worker's strategy),
# "... succeeded in ..." (the tracer), "Scheduler: Sending due task <entry> (<name>)" (beat), "Discarding
# revoked task: <name>[<id>]" (an expired beat, the request). Failures are WARNING or ERROR there.
BEAT_TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat", "celery.worker.request")
_BEAT_TASK = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in (TICK_TASK, RETENTION_TASK)) + r")\b")


class QuietBeatTasks(logging.Filter):
    """Drops Celery's INFO (and DEBUG) lines about the tick and the retention pass, three per tick every
    second while idle, unless ``RSC_BEAT_TASK_LOGS``; their warnings and errors, and every other task's
    lines, pass. What a tick changes, it logs itself (coordinator.service)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or not _BEAT_TASK.search(record.getMessage()):
            return True
        return _beat_task_logs()


def _beat_task_logs() -> bool:
    try:
        return bool(_setting("RSC_BEAT_TASK_LOGS"))
    except Exception:  # settings that cannot be loaded here: the default, and never an error from a filter
        return bool(conf.default("RSC_BEAT_TASK_LOGS"))


def quiet_beat_task_logs() -> None:
    """Install :class:`QuietBeatTasks` on Celery's loggers, and hand the package's default logging
    (consumers/logdefaults.py) over to Celery once it sets up its own. Idempotent; called when the
    coordinator app is ready and by :func:`connect_setting_checks`."""
    from celery import signals

    for name in BEAT_TASK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietBeatTasks) for f in logger.filters):
            logger.addFilter(QuietBeatTasks())
    signals.after_setup_logger.connect(_celery_logging_set_up, weak=False, dispatch_uid="rsc-logdefaults")


def _celery_logging_set_up(**kwargs: Any) -> None:
    """Celery configured the root logger (worker or beat, ``-l LEVEL``): the package's loggers follow it."""
    from consumers import logdefaults

    logdefaults.uninstall()
