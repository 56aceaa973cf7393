"""The project's logging (config/settings.py): plain or JSON lines on one console handler at LOG_LEVEL,
nothing of a host app swallowed, Celery's per-task chatter kept out. Each case is a fresh process, as
LOGGING is applied once at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = """
import logging, django
django.setup()
logging.getLogger("hostapp.views").info("host says hi", extra={"member_id": "m1", "shard": "v1:0"})
logging.getLogger("coordinator.service").info("member expired")
# Celery's own calls (celery/app/trace.py, celery/beat.py): the tick's per-run lines, and another task's.
from celery.app.trace import LOG_SUCCESS
context = {"id": "1", "name": "coordinator.tasks.tick", "runtime": 0.001, "return_value": None}
trace = logging.getLogger("celery.app.trace")
trace.info(LOG_SUCCESS, context, extra={"data": context})
logging.getLogger("celery.beat").info("Scheduler: Sending due task %s (%s)", "coordinator-tick",
                                      "coordinator.tasks.tick")
trace.info(LOG_SUCCESS, dict(context, name="hostapp.tasks.send_invoice"))
trace.error("Task %(name)s[%(id)s] raised unexpected: %(exc)s", dict(context, exc="boom"))
logging.getLogger("hostapp.views").debug("not at INFO")
"""


def run(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOG_", "RSC_"))}
    base.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true", **env)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=base, capture_output=True, text=True, timeout=60
    )


def test_json_lines_carry_the_records_extra_fields() -> None:
    done = run(LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert [(r["logger"], r["message"]) for r in records] == [
        ("hostapp.views", "host says hi"),
        ("coordinator.service", "member expired"),
        ("celery.app.trace", "Task hostapp.tasks.send_invoice[1] succeeded in 0.001s: None"),
        ("celery.app.trace", "Task coordinator.tasks.tick[1] raised unexpected: boom"),
    ]
    assert records[0]["level"] == "INFO" and records[0]["member_id"] == "m1" and records[0]["shard"] == "v1:0"
    assert "time" in records[0]


def test_plain_lines_keep_the_host_apps_info_and_drop_celerys_per_task_lines() -> None:
    done = run()
    assert done.returncode == 0, done.stderr
    assert "INFO hostapp.views: host says hi" in done.stderr
    assert "INFO coordinator.service: member expired" in done.stderr
    assert "coordinator.tasks.tick[1] succeeded" not in done.stderr and "Sending due task" not in done.stderr
    # Another task's lines, and the tick's errors, stay.
    assert "INFO celery.app.trace: Task hostapp.tasks.send_invoice[1] succeeded" in done.stderr
    assert "ERROR celery.app.trace: Task coordinator.tasks.tick[1] raised unexpected: boom" in done.stderr
    # RSC_BEAT_TASK_LOGS brings them back.
    again = run(RSC_BEAT_TASK_LOGS="true").stderr
    assert "coordinator.tasks.tick[1] succeeded" in again
    assert "Sending due task coordinator-tick (coordinator.tasks.tick)" in again
    assert "not at INFO" not in done.stderr
    assert "not at INFO" in run(LOG_LEVEL="DEBUG").stderr


def test_an_unknown_log_format_refuses_to_start() -> None:
    done = run(LOG_FORMAT="xml")
    assert done.returncode != 0 and "LOG_FORMAT must be 'plain' or 'json'" in done.stderr


MEMBER_SCRIPT = """
import logging, threading, django
django.setup()
from consumers.logcontext import bind
log = logging.getLogger("consumers.member.shard")
def work():
    with bind(member_id="m-1", consumer_group="billing", stream_prefix="orders"):
        log.info("member line")
        with bind(shard="v1:2"):
            log.info("shard line")
thread = threading.Thread(target=work); thread.start(); thread.join()
log.info("outside")
"""


def test_member_lines_carry_member_group_prefix_and_shard_in_json() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOG_", "RSC_"))}
    base.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true", LOG_FORMAT="json")
    done = subprocess.run(
        [sys.executable, "-c", MEMBER_SCRIPT], cwd=REPO, env=base, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    records = {
        r["message"]: r
        for r in map(json.loads, done.stderr.splitlines())
        if r["logger"].startswith("consumers")
    }
    member = {"member_id": "m-1", "consumer_group": "billing", "stream_prefix": "orders"}
    assert member.items() <= records["member line"].items() and "shard" not in records["member line"]
    assert {**member, "shard": "v1:2"}.items() <= records["shard line"].items()
    assert "member_id" not in records["outside"]
