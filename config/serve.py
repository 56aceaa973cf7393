"""The coordinator API's HTTP server: granian serving ``config.wsgi`` (docs/benchmarks.md, "The HTTP
server", says why granian).

``python -m config.serve --bind HOST:PORT [--workers N] [--threads N] [--reload]`` is the one command line
of the API wherever it runs: ``make run`` (config/devstack.py), compose.yaml, docs/production.env, the
end-to-end tests. It does what granian's command line cannot say, then becomes granian (``exec``):

* with ``PROMETHEUS_MULTIPROC_DIR`` set (an empty directory of the server's own), it empties the directory
  first, so ``/metrics`` sums only this server's workers (coordinator/metrics.py). The API's per-process
  metric is a histogram (heartbeat latency); a dead worker's counts stay in the sums, as they should, and
  there are no live gauges to drop;
* failed workers are respawned, and on SIGTERM / SIGINT workers get ``--graceful-s`` seconds to finish
  the requests in flight.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from config.extras import require

BASE_DIR = Path(__file__).resolve().parent.parent
# What --reload watches: the project's own code, not the virtual environment or the run directory.
RELOAD_PATHS = ("config", "coordinator", "consumers", "admin_ui")


def granian_argv(
    host: str,
    port: int,
    *,
    workers: int = 2,
    threads: int = 2,
    reload: bool = False,
    graceful_s: int = 30,
    python: str = sys.executable,
) -> list[str]:
    """granian's command line for the API: ``workers`` processes, each running the WSGI application on
    ``threads`` threads."""
    argv = [
        python, "-m", "granian", "--interface", "wsgi", "--host", host, "--port", str(port),
        "--workers", str(workers), "--blocking-threads", str(threads),
        "--respawn-failed-workers", "--workers-kill-timeout", str(graceful_s),
        "--log-level", "warning", "--working-dir", str(BASE_DIR),
    ]  # fmt: skip
    if reload:
        # A worker that fails to import (a typo being fixed) must not stop the server: the next save
        # reloads it, as gunicorn's --reload did.
        argv += ["--reload", "--reload-ignore-worker-failure"]
        argv += [a for path in RELOAD_PATHS for a in ("--reload-paths", str(BASE_DIR / path))]
    return [*argv, "config.wsgi:application"]


def parse(args: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m config.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--bind", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="threads per worker (default 2)")
    parser.add_argument("--reload", action="store_true", help="restart the workers on code changes")
    parser.add_argument("--graceful-s", type=int, default=30, help="seconds to finish requests on stop")
    options = parser.parse_args(args)
    if not 1 <= options.graceful_s <= 1800:  # granian's range for --workers-kill-timeout
        parser.error("--graceful-s must be 1..1800")
    return options


def main(args: Sequence[str] | None = None) -> None:
    options = parse(sys.argv[1:] if args is None else args)
    require("granian", "The API server (python -m config.serve)")
    settings_problem = refused_settings()
    if settings_problem:  # say it once, in one line, before the workers each print a traceback
        sys.exit(f"config.serve: {settings_problem}")
    host, _, port = options.bind.rpartition(":")
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        Path(directory).mkdir(parents=True, exist_ok=True)
    argv = granian_argv(
        host or "127.0.0.1",
        int(port),
        workers=options.workers,
        threads=options.threads,
        reload=options.reload,
        graceful_s=options.graceful_s,
    )
    os.execv(argv[0], argv)


def refused_settings() -> str:
    """What config/settings.py refuses (its one-line message), or "" when the settings load."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings

    from config.errors import SettingsError

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings module
    except SettingsError as exc:
        return str(exc)
    return ""


# WSGI keys a server sets for the request itself: never taken for the process's environment.
_REQUEST_KEYS = frozenset(
    {
        "REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH",
        "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "REMOTE_ADDR", "REMOTE_HOST", "REMOTE_PORT",
    }
)  # fmt: skip

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def without_process_environment(app: WSGIApp) -> WSGIApp:
    """granian starts every request's WSGI environ from a copy of its process's environment: the
    application would find DATABASE_URL, REDIS_URL and the like in ``request.META`` (and so on Django's
    error pages and in its error reports), and an ``HTTP_*`` variable would pass for a request header.
    This drops every key whose value is the process's own (request keys excepted)."""
    process = {k: v for k, v in os.environ.items() if k not in _REQUEST_KEYS}

    def stripped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        for key in process.keys() & environ.keys():  # the intersection in C, not a lookup per variable
            if environ[key] == process[key]:
                del environ[key]
        return app(environ, start_response)

    stripped.wrapped = app  # type: ignore[attr-defined]
    return stripped


def exit_with_parent(interval_s: float = 1.0) -> None:
    """Exit this process (a granian worker) once its parent is gone: the test stacks set
    ``RSC_EXIT_WITH_PARENT``, so a killed test run (whose granian main process the kernel kills with it)
    leaves no worker behind. A daemon thread that wakes once per ``interval_s``."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


if __name__ == "__main__":
    main()
