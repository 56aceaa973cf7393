"""config/serve.py: the API's one command line (granian serving config.wsgi)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from config import serve


def test_granian_serves_the_project_wsgi_application_with_respawn_and_a_graceful_stop() -> None:
    argv = serve.granian_argv("127.0.0.1", 8123, workers=3, threads=5, graceful_s=7, python="py")
    assert argv[:3] == ["py", "-m", "granian"] and argv[-1] == "config.wsgi:application"
    flags = dict(itertools.pairwise(argv))
    assert flags["--interface"] == "wsgi" and flags["--port"] == "8123" and flags["--host"] == "127.0.0.1"
    assert flags["--workers"] == "3" and flags["--blocking-threads"] == "5"
    assert flags["--workers-kill-timeout"] == "7" and "--respawn-failed-workers" in argv
    assert "--reload" not in argv


def test_reload_watches_the_projects_code_only() -> None:
    argv = serve.granian_argv("127.0.0.1", 8000, reload=True)
    watched = [argv[i + 1] for i, a in enumerate(argv) if a == "--reload-paths"]
    assert "--reload" in argv
    assert sorted(Path(p).name for p in watched) == sorted(serve.RELOAD_PATHS)
    assert all(Path(p).is_dir() for p in watched)


def test_main_empties_the_metrics_directory_then_becomes_granian(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "histogram_12345.db").write_bytes(b"a dead worker's file")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics))
    execs: list[tuple[str, list[str]]] = []

    def fake_execv(path: str, argv: list[str]) -> Any:
        execs.append((path, argv))

    monkeypatch.setattr(os, "execv", fake_execv)
    serve.main(["--bind", "0.0.0.0:9000", "--workers", "1", "--threads", "2"])
    assert metrics.is_dir() and list(metrics.iterdir()) == []
    [(path, argv)] = execs
    assert (
        path == argv[0]
        and argv[argv.index("--port") + 1] == "9000"
        and argv[argv.index("--host") + 1] == "0.0.0.0"
    )


def test_the_process_environment_never_reaches_the_application(monkeypatch: pytest.MonkeyPatch) -> None:
    """granian copies its environment into every request's environ; the wrapper drops it (secrets in
    request.META would show on error pages; an HTTP_* variable would pose as a header)."""
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db/x")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("SERVER_NAME", "from-the-environment")
    seen: list[dict[str, Any]] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(dict(environ))
        return [b""]

    wrapped = serve.without_process_environment(app)
    environ = {
        **os.environ,  # what granian hands the application: its environment, then the request's keys
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "SERVER_NAME": "from-the-environment",  # a request key: kept even when equal
        "HTTP_HOST": "example.com",
        "HTTP_PROXY": "from-a-real-header",  # a value the request sent: kept
    }
    wrapped(environ, lambda *a: None)
    [got] = seen
    assert "DATABASE_URL" not in got and "PATH" not in got
    assert got["HTTP_PROXY"] == "from-a-real-header" and got["HTTP_HOST"] == "example.com"
    assert got["SERVER_NAME"] == "from-the-environment" and got["REQUEST_METHOD"] == "GET"


def test_a_worker_exits_once_its_parent_is_gone() -> None:
    child = (
        "import time; from config.serve import exit_with_parent; exit_with_parent(0.05); "
        "print('watching', flush=True); time.sleep(60)"
    )
    parent = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}]); print(p.pid, flush=True); time.sleep(60)"
    )
    outer = subprocess.Popen(
        [sys.executable, "-c", parent], cwd=serve.BASE_DIR, stdout=subprocess.PIPE, text=True
    )
    assert outer.stdout is not None
    worker = int(outer.stdout.readline())
    assert outer.stdout.readline().strip() == "watching"  # the worker is up and watching (its stdout is ours)
    os.kill(worker, 0)  # alive
    outer.kill()
    outer.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(worker, 9)
    raise AssertionError("the worker outlived its parent")
