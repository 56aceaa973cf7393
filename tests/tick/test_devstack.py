"""`make run` (config.devstack): the demo group, the worker and beat ticking, the members after the web
server, the README's listener through RSC_EXTRA_APPS, a clean Ctrl-C, and a restart that keeps the
groups and the Redis port."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from config import devstack
from config.embedded_redis import free_port
from consumers.producer import Producer
from coordinator.models import AuditEntry
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore

from .conftest import wait_until
from .processes import REPO


def test_services_run_a_worker_and_a_beat_with_its_schedule_in_the_run_dir(tmp_path: Path) -> None:
    stack = {s.name: s for s in devstack.services("127.0.0.1", 8000, tmp_path)}
    assert list(stack) == ["web", "celery-worker", "celery-beat", "demo-members", "demo-producer"]
    worker, beat = stack["celery-worker"].argv, stack["celery-beat"].argv
    assert stack["demo-members"].argv[2:4] == ("run_member", "demo")
    assert stack["demo-producer"].argv[2] == "produce_demo"
    assert worker[1:6] == ("-m", "celery", "-A", "config", "worker") and "--pool=solo" in worker
    assert beat[1:6] == ("-m", "celery", "-A", "config", "beat")
    assert beat[beat.index("--schedule") + 1] == str(tmp_path / "celerybeat-schedule")


def test_the_demo_group_is_created_once_through_the_operations_layer(
    settings: Any, redis_url: str, capsys: Any, db: None
) -> None:
    settings.REDIS_URL = redis_url
    devstack._create_demo_group()
    devstack._create_demo_group()

    out = capsys.readouterr().out
    assert "created the demo group demo/demo-workers (4 shards)" in out
    assert "the demo group demo/demo-workers already exists" in out
    view = MetadataStore.from_url(redis_url).describe_group("demo", "demo-workers")
    assert view["topology"]["shard_count"] == 4
    assert view["config"]["lease_ttl_ms"] == settings.RSC_MEMBER_LEASE_TTL_MS
    # Audited as a management command's change; the second call only read, so it wrote no row.
    (entry,) = AuditEntry.objects.all()
    assert (entry.source, entry.action, entry.outcome) == ("command", "create_group", "ok")
    assert (entry.stream_prefix, entry.consumer_group) == ("demo", "demo-workers")
    assert entry.username.startswith(f"command:{devstack.DEVSTACK_COMMAND}:")
    assert entry.details["shard_count"] == 4


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


def _get(port: int, path: str, token: str = "") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


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


def _readme_block(language: str, after: str) -> str:
    """The first ```language block of the README after the text ``after``."""
    readme = (REPO / "README.md").read_text()
    start = readme.index(after)
    match = re.search(rf"```{language}\n(.*?)```", readme[start:], re.S)
    assert match is not None, f"no {language} block after {after!r} in README.md"
    return match.group(1)


def _post_readme_curl(port: int) -> tuple[int, Any]:
    """The README's curl that creates orders/billing, run as written (only the port is ours)."""
    command = _readme_block("sh", "## Using it").strip().replace("localhost:8000", f"127.0.0.1:{port}")
    assert command.startswith("curl -X POST") and "dev-admin-token" in command
    if shutil.which("curl"):
        done = subprocess.run(
            ["bash", "-c", command + " -s -o /dev/stderr -w '%{http_code}'"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return int(done.stdout), json.loads(done.stderr)
    body = json.loads(_find(r"-d '(\{.*\})'", command))  # no curl here: the same request
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": "Bearer dev-admin-token", "Content-Type": "application/json"}
    connection.request("POST", "/api/v1/admin/groups", body=json.dumps(body), headers=headers)
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def _readme_producer(data_dir: Path, apps: Path) -> subprocess.CompletedProcess[str]:
    """The README's producer snippet as written, in `manage.py shell` beside the stack in ``data_dir``:
    no REDIS_URL, DEBUG or token in the environment, only where the stack is (the default .run/ needs
    not even that) and where the user's app is importable from (the README's is at the repository root)."""
    snippet = _readme_block("python", "Produce an order")
    assert "redis_client(settings.REDIS_URL)" in snippet
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_", "DJANGO_"))}
    for name in ("REDIS_URL", "DEBUG", "DEVELOPMENT", "SECRET_KEY", "DATABASE_URL"):
        env.pop(name, None)
    env.update(DEVSTACK_DIR=str(data_dir), PYTHONPATH=str(apps))
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", snippet], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def _acked_entries(redis_url: str, prefix: str, group: str) -> tuple[int, int]:
    """(entries the consumer group has read, entries pending) over every stream of ``prefix``."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        read = pending = 0
        for key in client.scan_iter(match=f"rsc:{{{prefix}}}:v*"):
            if client.type(key) != "stream":
                continue
            for info in client.xinfo_groups(key):
                if info["name"] == group:
                    read += info.get("entries-read") or 0
                    pending += info["pending"]
        return read, pending
    finally:
        client.close()


def _wait_for_a_tick(redis_url: str) -> None:
    """A member of a probe group with a one-second lease, never heard of again: only the tick, from
    Celery beat through the worker, can expire it. (Celery's per-task log lines are off.)"""
    store = MetadataStore.from_url(redis_url)
    try:
        config = GroupConfig(lease_ttl_ms=1000, heartbeat_interval_ms=200)
        store.create_group(
            CreateGroup(stream_prefix="tick-probe", consumer_group="probe", shard_count=1, config=config)
        )
        hello = Heartbeat(member_id="m1", member_epoch=0, owned=None, capacity=1)
        store.heartbeat("tick-probe", "probe", hello)

        def state() -> str:
            return str(store.describe_group("tick-probe", "probe")["members"][0]["state"])

        wait_until(state, lambda s: s == "EXPIRED", timeout_s=30, what="the probe member expired by a tick")
    finally:
        store.client.close()


def test_make_run_persists_its_groups_keeps_its_port_and_runs_the_readme_listener(
    tmp_path: Path, spawn: Any
) -> None:
    # The README's listener, verbatim, in an app of the user's own, added with RSC_EXTRA_APPS.
    app = tmp_path / "apps" / "billing"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "listeners.py").write_text(_readme_block("python", "`billing/listeners.py`"))
    port = free_port()
    data_dir = tmp_path / "run"
    remembered_port = free_port()
    (data_dir / "redis").mkdir(parents=True)
    (data_dir / "redis" / "port").write_text(f"{remembered_port}\n")  # as a previous run left it
    database_url = f"sqlite:///{tmp_path / 'db.sqlite3'}"  # unique: also marks our processes
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_"))}
    # Empty, not absent: a developer's .env must not point this test at a real Redis.
    env.update(REDIS_URL="", CELERY_BROKER_URL="", DATABASE_URL=database_url, PYTHONUNBUFFERED="1")
    env.update(RSC_EXTRA_APPS="billing", PYTHONPATH=str(tmp_path / "apps"))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = [
        sys.executable,
        "-m",
        "config.devstack",
        "--addr",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
    ]
    stack = spawn("devstack", argv, env)

    def output() -> str:
        assert stack.process.poll() is None, stack.output()
        return stack.output()

    wait_until(
        output,
        lambda out: "starting app-members" in out,
        timeout_s=60,  # Django start-ups; slow on a loaded machine
        what="the web server up and the members started",
    )
    out = stack.output()
    assert "DEV ONLY API tokens" in out and "RSC_MEMBER_TOKENS=dev-member-token" in out
    redis_url = _find(r"embedded Redis \(.*\) at (redis://\S+/0)", out)
    redis_port = int(_find(r"redis://127\.0\.0\.1:(\d+)/0", redis_url))
    assert f"persisted in {data_dir / 'redis'}" in out
    assert redis_port == remembered_port  # not the default 6390: a developer's `make run` may hold it
    run_dir = Path(_find(r"--schedule (\S+)/celerybeat-schedule", out))
    _wait_for_a_tick(redis_url)
    # The members start once the web server answers: no refused connection to report.
    web_up = out.index("web is up")
    assert web_up < out.index("starting demo-members") and web_up < out.index("starting app-members")
    assert "running listeners bill" in out

    # The operator pages' static files come from the web server (granian, DEBUG on), and /metrics
    # sums its workers (the dev admin token may scrape).
    assert _get(port, "/static/admin/css/base.css")[0] == 200
    status, metrics = _get(port, "/metrics", token="dev-admin-token")
    assert status == 200 and b"rsc_" in metrics, metrics[:300]

    # The README's curl creates the group; the README's listener's three members take it.
    status, body = _post_readme_curl(port)
    assert status == 201, body
    wait_until(
        output, lambda out: "consumers.demo: handled" in out, timeout_s=45, what="a demo event handled"
    )
    producer_client = redis.Redis.from_url(redis_url)
    producer = Producer(producer_client)
    for i in range(12):
        producer.send("orders", f"customer-{i}", {"order": i})
    producer_client.close()
    wait_until(
        lambda: _acked_entries(redis_url, "orders", "billing"),
        lambda counts: counts == (12, 0),
        timeout_s=60,
        what="the README listener's members reading and acking 12 entries",
    )
    # The README's producer snippet, pasted into a `manage.py shell` beside the stack (its settings,
    # REDIS_URL included, from the stack's devstack.env: nothing set here), and the README listener's
    # log line for it (issue 31: the listener's body was `...` and the snippet had no client).
    produced = _readme_producer(data_dir, tmp_path / "apps")
    assert produced.returncode == 0 and "SendResult(" in produced.stdout, produced.stderr
    wait_until(
        output,
        lambda out: "billing.listeners: billed {'order': 1001, 'cents': 1250} for customer-42" in out,
        timeout_s=45,
        what="the README listener logging the README producer's order",
    )
    # An edit of the app restarts its members, which then run the new code (issue 31 item 5).
    listeners = app / "listeners.py"
    listeners.write_text(listeners.read_text().replace('"billed ', '"charged '))
    wait_until(
        output, lambda out: "app-members: " in out and "changed; restarting it" in out, timeout_s=30,
        what="the app's members restarted after the edit",
    )  # fmt: skip
    wait_until(
        lambda: (_readme_producer(data_dir, tmp_path / "apps"), output())[1],
        lambda out: "billing.listeners: charged {'order': 1001" in out,
        timeout_s=90,
        what="the edited listener handling the next order",
    )
    store = MetadataStore.from_url(redis_url)
    try:
        assert store.describe_group("demo", "demo-workers")["topology"]["shard_count"] == 4
        # All three join (one may have read all 12 before the others' joins landed).
        wait_until(
            lambda: store.describe_group("orders", "billing")["members"],
            lambda members: sum(1 for m in members if m["state"] not in ("LEFT", "EXPIRED")) == 3,
            timeout_s=30,
            what="the README listener's three members in the group",
        )
    finally:
        store.client.close()
    assert run_dir.is_dir()
    # The launcher, granian and its workers, worker, beat, demo members and producer, the
    # app's members. (Redis overwrites its environment with its process title; its port says it runs.)
    assert len(_processes_with(database_url)) >= 8
    assert _accepts(port) and _accepts(redis_port)
    assert "Connection refused" not in stack.output() and "COORDINATOR_UNREACHABLE" not in stack.output()

    stack.signal(signal.SIGINT)  # Ctrl-C: the terminal signals the launcher's process group

    assert stack.process.wait(timeout=30) == 0, stack.output()
    assert "embedded Redis stopped" in stack.output()
    assert "Unexpected exit from worker" not in stack.output()  # issue 31: granian's, at every stop
    # The members were stopped first and left through the web server, which still answered.
    assert "COORDINATOR_UNREACHABLE" not in stack.output() and "could not leave" not in stack.output()
    assert not _accepts(port) and not _accepts(redis_port)
    assert not run_dir.exists()
    assert _processes_with(database_url) == []

    # Again: the same port, and the groups are still there (the append-only file in the data dir).
    again = spawn("devstack-again", argv, env)
    wait_until(
        again.output,
        lambda out: (
            "the demo group demo/demo-workers already exists" in out or again.process.poll() is not None
        ),
        timeout_s=60,
        what="the second run's set-up",
    )
    assert again.process.poll() is None, again.output()
    assert _find(r"embedded Redis \(.*\) at (redis://\S+/0)", again.output()) == redis_url
    store = MetadataStore.from_url(redis_url)
    try:
        assert store.describe_group("orders", "billing")["topology"]["shard_count"] == 8
    finally:
        store.client.close()
    again.signal(signal.SIGINT)
    assert again.process.wait(timeout=30) == 0, again.output()
    assert _processes_with(database_url) == []


def test_without_the_demo_the_stack_runs_on_and_manage_py_beside_it_needs_no_variable(
    tmp_path: Path, spawn: Any
) -> None:
    """`RSC_DEMO=false make run` runs web, worker and beat and keeps running (issue 31: it stopped 3 s after
    start); `manage.py consumer_groups ...` beside it works with none of REDIS_URL, DEBUG or the tokens
    set (it reads the stack's devstack.env while the stack runs), and says in one line what to set once
    the stack is gone. Ctrl-C stops it without granian's "Unexpected exit from worker"."""
    port = free_port()
    data_dir = tmp_path / "run"
    database_url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_"))}
    base.pop("DJANGO_SETTINGS_MODULE", None)
    for name in ("REDIS_URL", "DEBUG", "DEVELOPMENT", "SECRET_KEY", "DATABASE_URL", "DEVSTACK_DIR"):
        base.pop(name, None)
    env = {**base, "REDIS_URL": "", "CELERY_BROKER_URL": "", "DATABASE_URL": database_url}
    env.update(PYTHONUNBUFFERED="1", RSC_DEMO="false")
    argv = [sys.executable, "-m", "config.devstack", "--addr", f"127.0.0.1:{port}"]
    stack = spawn("devstack", [*argv, "--data-dir", str(data_dir)], env)

    def output() -> str:
        assert stack.process.poll() is None, stack.output()
        return stack.output()

    wait_until(output, lambda out: "web is up" in out, timeout_s=90, what="the web server up")
    out = stack.output()
    assert "RSC_DEMO is off: no demo group, demo members or demo producer" in out
    assert "starting demo-members" not in out and "starting demo-producer" not in out
    assert f"DEVSTACK_DIR={data_dir} .venv/bin/python manage.py consumer_groups list" in out

    # Beside it: only where its settings are (the default .run/ needs not even that).
    beside = {**base, "DEVSTACK_DIR": str(data_dir)}

    def manage(*args: str, environment: dict[str, str] = beside) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=environment,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    created = manage("consumer_groups", "create", "orders", "billing", "--shards", "2")
    assert created.returncode == 0, created.stderr
    described = manage("consumer_groups", "describe", "orders", "billing")
    assert described.returncode == 0 and "v1:1" in described.stdout, described.stderr
    status, body = _get(port, "/api/v1/admin/groups", token="dev-admin-token")  # the same Redis, tokens
    assert status == 200 and b'"billing"' in body, body

    time.sleep(5)  # the demo-less stack keeps running (it stopped 3 s after start)
    assert stack.process.poll() is None, stack.output()
    stack.signal(signal.SIGINT)
    assert stack.process.wait(timeout=30) == 0, stack.output()
    assert "Unexpected exit from worker" not in stack.output(), stack.output()
    assert not (data_dir / "devstack.env").exists()

    # The stack is gone: one line saying what to set, no traceback.
    after = manage("consumer_groups", "list")
    assert after.returncode == 1 and "Traceback" not in after.stderr, after.stderr
    assert after.stderr.startswith("manage.py: SECRET_KEY is not set, and DEBUG is off"), after.stderr
    gone = manage("consumer_groups", "list", environment={**beside, "DEBUG": "true", "REDIS_URL": ""})
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1, gone.stderr
    assert "STORE_UNAVAILABLE: REDIS_URL is not set" in gone.stderr
