"""config/serve.py: the API's one command line (granian serving config.wsgi)."""

from __future__ import annotations

import itertools
import os
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
