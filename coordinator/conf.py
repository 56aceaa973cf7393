"""Every setting the installed apps (``coordinator``, ``consumers``, ``admin_ui``) read, with its default.

A host project that installs the package defines only what it wants to change: when Django starts,
``CoordinatorConfig.ready()`` calls :func:`apply_defaults`, which sets each missing setting to the default
here (the pattern of django-appconf), so code may read ``settings.RSC_TICK_INTERVAL_MS`` directly.
A setting the host defines is never touched. This project's own ``config/settings.py`` reads the same
names from the environment with the same defaults (tests/test_plugin.py holds the three in step: this
table, config/settings.py and the table in docs/plugin.md).

No Django import at module level: ``coordinator.celery.beat_schedule()`` reads these defaults from a host's
settings module, before Django is configured.
"""

from __future__ import annotations

from typing import Any

# name -> default. Lists and dicts are copied before they are set, so a host mutating its setting cannot
# change the default of another process's settings (tests configure several in one interpreter).
DEFAULTS: dict[str, Any] = {
    # The stream data plane and the coordinator's metadata (required: None means "not configured").
    "REDIS_URL": None,
    # API credentials (coordinator/api/auth.py): bearer tokens, comma-separated in the environment.
    "RSC_MEMBER_TOKENS": [],
    "RSC_ADMIN_TOKENS": [],
    "RSC_API_MAX_BODY_BYTES": 64 * 1024,
    # Scrape-only bearer tokens for /metrics (coordinator/metrics.py); admin credentials work too.
    "RSC_METRICS_TOKENS": [],
    "RSC_CREDENTIAL_CACHE_S": 5.0,
    "RSC_HEARTBEAT_FLOOR_MS": 50,
    "RSC_HEARTBEAT_BURST": 20,
    "RSC_HEARTBEAT_DOOR": True,
    "RSC_MAX_CONCURRENT_JOINS": 4,
    "RSC_ADMIN_API_RATE": "600/min",
    # Coordinator timing (coordinator/checks.py rejects impossible combinations at start-up).
    "RSC_TICK_INTERVAL_MS": 1000,
    "RSC_MEMBER_LEASE_TTL_MS": 10000,
    "RSC_HEARTBEAT_INTERVAL_MS": 3000,
    "RSC_REVOCATION_TIMEOUT_MS": 30000,
    "RSC_MEMBER_RETENTION_MS": 600000,
    "RSC_MAX_ENDED_MEMBERS": 100,
    # Stream retention and the audit prune.
    "RSC_RETENTION_INTERVAL_MS": 30000,
    "RSC_RETENTION_MAX_STREAMS": 2000,
    "RSC_AUDIT_RETENTION_DAYS": 365,
    # Members (manage.py run_member).
    "RSC_COORDINATOR_URL": "http://127.0.0.1:8000",
    "RSC_MEMBER_TOKEN": "",
    "RSC_MEMBER_ID_PREFIX": "",
    "RSC_MEMBER_METRICS_PORT": 0,
    "RSC_RUNTIME": {"max_concurrency": 1},
    "RSC_LISTENER_CONCURRENCY": {},
    "RSC_SHUTDOWN_TIMEOUT_S": 30.0,
}


def default(name: str) -> Any:
    """The default of ``name`` (a fresh copy of a list or dict)."""
    value = DEFAULTS[name]
    return type(value)(value) if isinstance(value, list | dict) else value


def apply_defaults(settings: Any) -> list[str]:
    """Set every setting of DEFAULTS that ``settings`` lacks to its default; return the names set.

    Idempotent: a second call finds them all present and sets nothing.
    """
    missing = [name for name in DEFAULTS if not hasattr(settings, name)]
    for name in missing:
        setattr(settings, name, default(name))
    return missing
