"""Child processes for the tick tests: real Celery workers, beats and manage.py commands."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def child_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a child: the private Redis as store and (database 1) as broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        REDIS_URL=redis_url,
        CELERY_BROKER_URL=redis_url.rsplit("/", 1)[0] + "/1",
        LOG_LEVEL="INFO",
        # Nothing here needs the database; without this, Django would create db.sqlite3 in the repo.
        DATABASE_URL="sqlite:///:memory:",
    )
    env.update(extra)
    return env


class Child:
    """A child process in its own process group, its output in a file (read it with .output())."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM the group, SIGKILL it if it lingers; returns the exit code."""
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait()
        self.signal(signal.SIGKILL)  # anything the process left behind in its group
        return self.process.returncode


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", *args]


WORKER_ARGS = ("worker", "-l", "info", "--pool=solo", "--without-gossip", "--without-mingle",
               "--without-heartbeat")  # fmt: skip


def manage(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), *args]
