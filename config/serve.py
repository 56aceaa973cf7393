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
from collections.abc import Sequence
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
# What --reload watches: the project's own code, not the virtual environment or the run directory.
RELOAD_PATHS = ("config", "coordinator", "consumers", "admin_ui")


def granian_argv(
    host: str,
    port: int,
    *,
    workers: int = 2,
    threads: int = 4,
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
        argv += ["--reload", *(a for path in RELOAD_PATHS for a in ("--reload-paths", str(BASE_DIR / path)))]
    return [*argv, "config.wsgi:application"]


def parse(args: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m config.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--bind", default="127.0.0.1:8000", help="HOST:PORT (default 127.0.0.1:8000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (default 4)")
    parser.add_argument("--reload", action="store_true", help="restart the workers on code changes")
    parser.add_argument("--graceful-s", type=int, default=30, help="seconds to finish requests on stop")
    return parser.parse_args(args)


def main(args: Sequence[str] | None = None) -> None:
    options = parse(sys.argv[1:] if args is None else args)
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


if __name__ == "__main__":
    main()
