"""What `make run` shares with the commands run beside it (`manage.py consumer_groups describe ...`,
`manage.py shell`, `run_member`): the settings it chose (the embedded Redis's URL, DEBUG, the DEV ONLY
tokens, the members' coordinator URL), written to ``<data dir>/devstack.env`` while it runs.

config/settings.py reads that file (``read_running``) only while a dev stack holds the data dir's lock
(``<data dir>/lock``, config/devstack.py's ``lock_data_dir``): a stopped or crashed stack's file is
ignored, so a checkout where `make run` once ran is not left in development mode. The real environment
and ``.env`` win over it, as over every default. The data dir is ``.run/`` at the repository root, or
``DEVSTACK_DIR`` (the ``--data-dir`` of a second stack; empty: never read, as the test suite sets).

No Django import here: the settings module imports it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import environ

FILE_NAME = "devstack.env"
LOCK_NAME = "lock"
# What a command beside the stack needs to reach the same Redis, database and API as the stack's own
# processes, in development mode (DEBUG: the development SECRET_KEY) with the same DEV ONLY tokens.
SHARED = (
    "DEBUG",
    "DEVELOPMENT",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "DATABASE_URL",
    "RSC_MEMBER_TOKENS",
    "RSC_ADMIN_TOKENS",
    "RSC_MEMBER_TOKEN",
    "RSC_COORDINATOR_URL",
    "RSC_ALLOW_INSECURE_COORDINATOR_URL",
    "RSC_DEMO",
    "RSC_EXTRA_APPS",
)


def data_dir(base_dir: Path) -> Path | None:
    """The dev stack's data dir whose file the settings read: ``DEVSTACK_DIR`` (relative to the
    repository root), else ``.run``; None when DEVSTACK_DIR is set empty."""
    configured = os.environ.get("DEVSTACK_DIR")
    if configured is None:
        return base_dir / ".run"
    return (base_dir / configured) if configured else None


def is_running(directory: Path) -> bool:
    """Whether a dev stack holds ``directory``'s lock now (the kernel drops it when that process ends)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also releases a lock taken here
    return False


def read_running(base_dir: Path) -> Path | None:
    """Put the running dev stack's settings into ``os.environ`` where unset; the file read, or None."""
    directory = data_dir(base_dir)
    if directory is None or not is_running(directory):
        return None
    path = directory / FILE_NAME
    if not path.is_file():
        return None
    environ.Env.read_env(path)  # never overwrites a variable already set
    return path


def write(directory: Path, values: Mapping[str, str], names: Iterable[str] = SHARED) -> Path:
    """``<directory>/devstack.env`` with those of ``names`` that ``values`` has (owner-only: it holds
    the stack's tokens)."""
    lines = [
        "# Written by `make run` (config/devstack.py) for the commands run beside it; read by",
        "# config/settings.py only while that stack runs. Variables set in the environment or .env win.",
    ]
    lines += [f"{name}={_quoted(values[name])}" for name in names if name in values]
    path = directory / FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def _quoted(value: str) -> str:
    # read_env strips one pair of single quotes and takes what is between them as it is.
    return f"'{value}'" if "'" not in value and "\n" not in value else value
