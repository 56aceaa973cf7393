"""gunicorn settings for the coordinator API: ``gunicorn -c config/gunicorn.conf.py config.wsgi``.

Only what gunicorn's command line cannot say: with ``PROMETHEUS_MULTIPROC_DIR`` set (an empty directory
of its own), every worker writes its metrics there and ``/metrics`` sums them (coordinator/metrics.py);
the directory is emptied when the server starts and a dead worker's live gauges are dropped. Bind
address, workers and threads stay on the command line (compose.yaml, docs/production.env).
"""

import os
import shutil
from pathlib import Path
from typing import Any

worker_class = "gthread"


def on_starting(server: Any) -> None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        Path(directory).mkdir(parents=True, exist_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
