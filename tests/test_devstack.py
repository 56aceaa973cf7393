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

    stack = {s.name: s for s in devstack.services("127.0.0.1", 8000, tmp_path, ("bill", "ship"))}
    assert stack["app-members"].argv[2:5] == ("run_member", "bill", "ship")
    assert stack["app-members"].after == "web"
    assert list(stack)[-1] == "app-members"


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
