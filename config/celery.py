"""Celery app, configured from Django settings prefixed ``CELERY_`` (the standard Django layout).

    celery -A config worker -l info --pool=solo      runs coordinator.tasks.tick (and any other task)
    celery -A config beat -l info -s <schedule file> sends it every RSC_TICK_INTERVAL_MS

The beat schedule is CELERY_BEAT_SCHEDULE in config/settings.py. Unlike manage.py commands, Celery
never runs Django's system checks as errors, so the worker and beat run the coordinator's own (tag
``rsc``) at start-up and refuse to start on impossible settings: a beat with a zero interval would spin,
one coarser than the lease would keep dead members' shards assigned.
"""

import os
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect(weak=False, dispatch_uid="rsc-checks-worker")
@signals.beat_init.connect(weak=False, dispatch_uid="rsc-checks-beat")
def refuse_impossible_settings(**kwargs: Any) -> None:
    import django
    from django.core import checks

    django.setup()  # idempotent; the Django fixup has normally done it already
    errors = [message for message in checks.run_checks(tags=["rsc"]) if message.is_serious()]
    if errors:
        # SystemExit, not an Exception: Celery's signal dispatch logs and ignores the latter.
        raise SystemExit("refusing to start, impossible settings:\n" + "\n".join(map(str, errors)))
