"""Celery app, configured from Django settings prefixed ``CELERY_`` (the standard Django layout).

    celery -A config worker -l info --pool=solo      runs coordinator.tasks.tick (and any other task)
    celery -A config beat -l info -s <schedule file> sends it every RSC_TICK_INTERVAL_MS

The beat schedule is CELERY_BEAT_SCHEDULE in config/settings.py, made by coordinator.celery.beat_schedule()
(the same helper a host project's own Celery app uses: docs/plugin.md). Unlike manage.py commands, Celery
never runs Django's system checks as errors, so the worker and beat run the coordinator's own (tag
``rsc``) at start-up and refuse to start on impossible settings (coordinator.celery.connect_setting_checks).
"""

import os

from celery import Celery

from coordinator.celery import connect_setting_checks

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
connect_setting_checks()
