"""The project's settings plus the e2e listener app, for the ``manage.py run_member`` processes of
tests/e2e/ (``DJANGO_SETTINGS_MODULE=tests.e2e.settings``).

The runtime's fetch-loop knobs come from ``E2E_*`` variables so a test can make batches slow (a member
then holds read-but-unacked entries when it is killed) without touching the product's settings. The
heartbeat timeout stays well below the groups' short leases (2 s): a heartbeat to a coordinator that
hangs must fail, and be retried, before the lease ends.
"""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS, env

INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2e.e2eapp"]

RSC_RUNTIME = {
    "max_concurrency": env.int("RSC_RUNTIME_MAX_CONCURRENCY", default=1),
    "batch_size": env.int("E2E_BATCH_SIZE", default=16),
    "wake_on_append": env.bool("E2E_WAKE_ON_APPEND", default=True),
    "idle_wait_ms": env.int("E2E_IDLE_WAIT_MS", default=1_000),
    "idle_backoff_min_ms": env.int("E2E_IDLE_BACKOFF_MIN_MS", default=2),
    "idle_backoff_max_ms": env.int("E2E_IDLE_BACKOFF_MAX_MS", default=50),
    "retry_backoff_max_ms": 1_000,
    "heartbeat_timeout_s": env.float("E2E_HEARTBEAT_TIMEOUT_S", default=1.0),
}
