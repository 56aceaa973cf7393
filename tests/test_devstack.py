"""`make run`'s pieces that need no running stack: the persistent embedded Redis's port, the data-dir
lock, the start order. The whole stack, restarted, is tests/tick/test_devstack.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from config import devstack
from config.embedded_redis import free_port


@pytest.fixture
def default_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A free port standing in for DEFAULT_REDIS_PORT (another `make run` may hold the real one)."""
    port = free_port()
    monkeypatch.setattr(devstack, "DEFAULT_REDIS_PORT", port)
    return port


def test_the_embedded_redis_starts_on_the_default_port_then_keeps_it(
    tmp_path: Path, default_port: int
) -> None:
    server = devstack.start_embedded_redis(tmp_path)
    try:
        assert server.port == default_port
        assert (tmp_path / "redis" / "port").read_text().strip() == str(default_port)
        redis.Redis.from_url(server.url).set("kept", "yes")
    finally:
        server.stop()

    server = devstack.start_embedded_redis(tmp_path)
    try:
        assert server.port == default_port
        assert redis.Redis.from_url(server.url).get("kept") == b"yes"  # the append-only file
    finally:
        server.stop()


def test_a_taken_port_falls_back_to_a_free_one_said_and_remembered(
    tmp_path: Path, default_port: int, capsys: Any
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", default_port))
        squatter.listen()
        server = devstack.start_embedded_redis(tmp_path)
        try:
            assert server.port != default_port
            out = capsys.readouterr().out
            assert (
                f"{default_port} (the default port) is taken by another program; using {server.port}" in out
            )
        finally:
            server.stop()
    fallback = server.port

    server = devstack.start_embedded_redis(tmp_path)  # the default is free again; the remembered port wins
    try:
        assert server.port == fallback
    finally:
        server.stop()


def test_a_second_stack_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    fd = devstack.lock_data_dir(tmp_path)
    try:
        with pytest.raises(devstack.DevstackError, match="another `make run` is using"):
            devstack.lock_data_dir(tmp_path)
    finally:
        import os

        os.close(fd)
    os.close(devstack.lock_data_dir(tmp_path))  # released with its descriptor


def test_members_wait_for_the_web_server_and_extra_apps_get_their_own(tmp_path: Path) -> None:
    plain = {s.name: s for s in devstack.services("127.0.0.1", 8000, tmp_path)}
    assert "app-members" not in plain
    assert plain["web"].ready_port == 8000
    assert plain["demo-members"].after == "web" and plain["demo-producer"].after == "web"
    assert plain["celery-worker"].after is None and plain["celery-beat"].after is None

    apps = devstack.services("127.0.0.1", 8000, tmp_path, ("bill", "ship"), app_dirs=(tmp_path,))
    stack = {s.name: s for s in apps}
    # Every listener of the extra apps (none named: one added by an edit runs after the restart), without
    # the demo's; restarted when the apps' code changes.
    assert stack["app-members"].argv[2:] == ("run_member", "--shutdown-timeout", "5")
    assert dict(stack["app-members"].env) == {"RSC_DEMO": "false"}
    assert stack["app-members"].watch == (tmp_path,)
    assert stack["app-members"].after == "web"
    assert list(stack)[-1] == "app-members"


def test_without_the_demo_the_rest_of_the_stack_runs(tmp_path: Path) -> None:
    """`RSC_DEMO=false make run` (issue 31: it stopped 3 s after start, `Unknown command: 'produce_demo'`)."""
    stack = [s.name for s in devstack.services("127.0.0.1", 8000, tmp_path, ("bill",), demo=False)]
    assert stack == ["web", "celery-worker", "celery-beat", "app-members"]


def _sleeper(name: str, watch: tuple[Path, ...] = (), seconds: int = 60) -> devstack.Service:
    return devstack.Service(
        name=name, argv=(sys.executable, "-c", f"import time; time.sleep({seconds})"), watch=watch
    )


def test_an_edit_of_a_watched_app_restarts_its_service_and_only_it(tmp_path: Path) -> None:
    """make run reloads the RSC_EXTRA_APPS apps' members when their code changes (issue 31 item 5); a
    watching service that exits (an edit that broke it) waits for the next change, the stack runs on."""
    app = tmp_path / "billing"
    app.mkdir()
    listeners = app / "listeners.py"
    listeners.write_text("x = 1\n")
    supervisor = devstack.Supervisor("127.0.0.1", env=dict(os.environ))
    try:
        supervisor.start_all([_sleeper("other"), _sleeper("app-members", (app,))])
        before = {s.name: p.pid for s, p in supervisor._running}
        supervisor.restart_changed()  # nothing changed
        assert {s.name: p.pid for s, p in supervisor._running} == before
        listeners.write_text("x = 2\n")
        os.utime(listeners, ns=(time.time_ns() + 10**9,) * 2)  # a new mtime even on a coarse clock
        supervisor.restart_changed()
        after = {s.name: p.pid for s, p in supervisor._running}
        assert after["other"] == before["other"] and after["app-members"] != before["app-members"]
        assert all(p.poll() is None for _, p in supervisor._running)
    finally:
        supervisor.stop_all()

    broken = devstack.Supervisor("127.0.0.1", env=dict(os.environ))
    try:
        broken.start(_sleeper("app-members", (app,), seconds=0))  # exits at once, like a broken app
        [(_, first)] = broken._running
        first.wait(timeout=30)
        assert broken.first_exited() is None  # not a reason to stop the stack
        (app / "fixed.py").write_text("")
        broken.restart_changed()
        [(_, second)] = broken._running
        assert second.pid != first.pid
    finally:
        broken.stop_all()


def test_the_web_server_is_production_s_with_reload_and_its_own_metrics_dir(tmp_path: Path) -> None:
    """make run serves the API on the server production uses (docs/benchmarks.md, "The HTTP server"):
    ``python -m config.serve`` (granian), reloading on code changes; only the web server gets
    PROMETHEUS_MULTIPROC_DIR (a member or Celery process writing there would mix its series into the
    API's /metrics)."""
    stack = {s.name: s for s in devstack.services("127.0.0.1", 8001, tmp_path)}
    argv = stack["web"].argv
    assert argv[1:3] == ("-m", "config.serve")
    assert argv[argv.index("--bind") + 1] == "127.0.0.1:8001" and "--reload" in argv
    assert dict(stack["web"].env) == {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    assert all(not s.env for name, s in stack.items() if name != "web")


def test_ctrl_c_while_a_child_starts_still_stops_that_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal that lands between fork and the supervisor's bookkeeping is held until the child is
    recorded, then raised: the shutdown that follows stops that child too (it would otherwise outlive
    `make run`)."""
    real_popen = subprocess.Popen

    def popen_then_interrupt(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C at the worst moment
        return process

    monkeypatch.setattr(devstack._Interrupts, "received", False)  # restored after the test
    previous = signal.signal(signal.SIGINT, devstack._raise_interrupt)
    monkeypatch.setattr(devstack.subprocess, "Popen", popen_then_interrupt)
    supervisor = devstack.Supervisor("127.0.0.1", env=dict(os.environ))
    service = devstack.Service(name="sleeper", argv=(sys.executable, "-c", "import time; time.sleep(60)"))
    try:
        with pytest.raises(KeyboardInterrupt):
            supervisor.start(service)
        [(_, process)] = supervisor._running
        assert process.poll() is None
        supervisor.stop_all()
        assert process.poll() is not None  # stopped, not orphaned
    finally:
        signal.signal(signal.SIGINT, previous)
        supervisor.stop_all()


def test_a_ctrl_c_that_a_library_swallowed_still_stops_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler raises KeyboardInterrupt wherever the signal lands; code that catches BaseException
    there would swallow it. The launcher checks again before it starts anything and while it waits."""
    monkeypatch.setattr(devstack._Interrupts, "received", False)
    previous = signal.signal(signal.SIGINT, devstack._raise_interrupt)
    try:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs here
        except BaseException:  # a library's over-broad clean-up
            pass
        supervisor = devstack.Supervisor("127.0.0.1", env=dict(os.environ))
        service = devstack.Service(name="sleeper", argv=(sys.executable, "-c", "import time; time.sleep(60)"))
        with pytest.raises(KeyboardInterrupt):
            supervisor.start_all([service])
        assert supervisor._running == []  # nothing was started after the Ctrl-C
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("host", "url", "allowed"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000", None),
        ("0.0.0.0", "http://127.0.0.1:8000", None),
        ("::", "http://127.0.0.1:8000", None),
        ("::1", "http://[::1]:8000", None),
        ("192.168.1.20", "http://192.168.1.20:8000", "true"),
    ],
)
def test_the_members_url_is_local_or_explicitly_allowed(
    monkeypatch: pytest.MonkeyPatch, host: str, url: str, allowed: str | None
) -> None:
    """make run's members pass their own check (consumers.E005): the loopback where the server listens
    there, else the allowance, set by the dev stack and said in its log."""
    monkeypatch.delenv("RSC_COORDINATOR_URL", raising=False)
    monkeypatch.delenv("RSC_ALLOW_INSECURE_COORDINATOR_URL", raising=False)
    monkeypatch.setattr(devstack, "log", lambda message: None)
    devstack._export_coordinator_url(host, 8000)
    assert os.environ["RSC_COORDINATOR_URL"] == url
    assert os.environ.get("RSC_ALLOW_INSECURE_COORDINATOR_URL") == allowed


def test_commands_beside_a_running_stack_read_its_settings_and_only_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config/devstack_env.py: what `make run` wrote is read while it holds its data dir's lock (a stopped
    stack's file is ignored); a variable already set wins; DEVSTACK_DIR="" reads nothing."""
    from config import devstack_env

    values = {"REDIS_URL": "redis://127.0.0.1:6390/0", "DEBUG": "true", "RSC_ADMIN_TOKENS": "dev-admin-token",
              "RSC_COORDINATOR_URL": "http://127.0.0.1:8000", "HOME": "/not/shared"}  # fmt: skip
    path = devstack_env.write(tmp_path, values)
    assert path.stat().st_mode & 0o077 == 0  # it holds tokens: the owner's alone
    assert "HOME" not in path.read_text()
    for name in values:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setenv("RSC_ADMIN_TOKENS", "mine")

    assert devstack_env.read_running(Path("/nowhere")) is None  # no stack holds the lock
    assert "REDIS_URL" not in os.environ
    fd = devstack.lock_data_dir(tmp_path)
    try:
        assert devstack_env.read_running(Path("/nowhere")) == path
        assert os.environ["REDIS_URL"] == "redis://127.0.0.1:6390/0" and os.environ["DEBUG"] == "true"
        assert os.environ["RSC_ADMIN_TOKENS"] == "mine"  # the environment wins
        monkeypatch.delenv("REDIS_URL")
        monkeypatch.setenv("DEVSTACK_DIR", "")
        assert devstack_env.read_running(Path("/nowhere")) is None and "REDIS_URL" not in os.environ
    finally:
        os.close(fd)
