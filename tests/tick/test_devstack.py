"""`make run` (config.devstack): the demo group, the worker and beat ticking, and a clean Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from config import devstack
from config.embedded_redis import free_port
from coordinator.store import MetadataStore

from .conftest import wait_until


def test_services_run_a_worker_and_a_beat_with_its_schedule_in_the_run_dir(tmp_path: Path) -> None:
    stack = {s.name: s for s in devstack.services("127.0.0.1", 8000, tmp_path)}
    assert list(stack) == ["web", "celery-worker", "celery-beat", "demo-members", "demo-producer"]
    worker, beat = stack["celery-worker"].argv, stack["celery-beat"].argv
    assert stack["demo-members"].argv[2:4] == ("run_member", "demo")
    assert stack["demo-producer"].argv[2] == "produce_demo"
    assert worker[1:6] == ("-m", "celery", "-A", "config", "worker") and "--pool=solo" in worker
    assert beat[1:6] == ("-m", "celery", "-A", "config", "beat")
    assert beat[beat.index("--schedule") + 1] == str(tmp_path / "celerybeat-schedule")


def test_the_demo_group_is_created_once(settings: Any, redis_url: str, capsys: Any) -> None:
    settings.REDIS_URL = redis_url
    devstack._create_demo_group()
    devstack._create_demo_group()

    out = capsys.readouterr().out
    assert "created the demo group demo/demo-workers (4 shards)" in out
    assert "the demo group demo/demo-workers already exists" in out
    view = MetadataStore.from_url(redis_url).describe_group("demo", "demo-workers")
    assert view["topology"]["shard_count"] == 4
    assert view["config"]["lease_ttl_ms"] == settings.RSC_MEMBER_LEASE_TTL_MS


def _find(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in the output:\n{text}"
    return match.group(1)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker``: every process the dev stack started."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours
                pass
    return found


def test_make_run_ticks_and_ctrl_c_stops_everything(tmp_path: Path, spawn: Any) -> None:
    port = free_port()
    database_url = f"sqlite:///{tmp_path / 'db.sqlite3'}"  # unique: also marks our processes
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_"))}
    # Empty, not absent: a developer's .env must not point this test at a real Redis.
    env.update(REDIS_URL="", CELERY_BROKER_URL="", DATABASE_URL=database_url, PYTHONUNBUFFERED="1")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = [sys.executable, "-m", "config.devstack", "--addr", f"127.0.0.1:{port}"]
    stack = spawn("devstack", argv, env)

    def output() -> str:
        assert stack.process.poll() is None, stack.output()
        return stack.output()

    wait_until(
        output,
        lambda out: "web is up" in out and re.search(r"coordinator\.tasks\.tick\[\S+\] succeeded", out),
        timeout_s=45,  # five Django start-ups; slow on a loaded machine
        what="the web server up and a tick run by the worker",
    )
    out = stack.output()
    assert "DEV ONLY API tokens" in out and "RSC_MEMBER_TOKENS=dev-member-token" in out
    redis_url = _find(r"embedded Redis \(.*\) at (redis://\S+/0)", out)
    redis_port = int(_find(r"redis://127\.0\.0\.1:(\d+)/0", redis_url))
    run_dir = Path(_find(r"--schedule (\S+)/celerybeat-schedule", out))
    # The demo: its members join and handle what the demo producer sends.
    wait_until(
        output, lambda out: "consumers.demo: handled" in out, timeout_s=45, what="a demo event handled"
    )
    store = MetadataStore.from_url(redis_url)
    try:
        view = store.describe_group("demo", "demo-workers")
        assert view["topology"]["shard_count"] == 4
        assert sum(1 for m in view["members"] if m["state"] != "LEFT") >= 1
    finally:
        store.client.close()
    assert run_dir.is_dir()
    # The launcher, runserver and its reloader child, worker, beat, demo members and producer. (Redis
    # overwrites its environment with its process title; its port says whether it runs.)
    assert len(_processes_with(database_url)) >= 7
    assert _accepts(port) and _accepts(redis_port)

    stack.signal(signal.SIGINT)  # Ctrl-C: the terminal signals the launcher's process group

    assert stack.process.wait(timeout=30) == 0, stack.output()
    assert "embedded Redis stopped" in stack.output()
    assert not _accepts(port) and not _accepts(redis_port)
    assert not run_dir.exists()
    assert _processes_with(database_url) == []
