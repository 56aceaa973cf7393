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

from dataclasses import dataclass, make_dataclass
from typing import Any, Literal

from coordinator.protocol.commands import MAX_ENDED_MEMBERS_LIMIT
from coordinator.protocol.limits import GROUP_CONFIG_RANGES

WEEK_MS = 7 * 24 * 3_600_000


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its name, type, default, accepted range (inclusive; None: unbounded) and help.

    ``check`` names the system check that validates it (coordinator/checks.py): ``"ms"`` a positive
    integer of milliseconds (rsc.E001, and rsc.E005 for its range), ``"count"`` an integer in its range
    (rsc.E006); None: not range-checked. ``what`` is what the range is the range of, for the messages.
    """

    name: str
    type: type
    default: Any
    help: str
    low: int | None = None
    high: int | None = None
    what: str = ""
    check: Literal["ms", "count"] | None = None


def _group(field: str) -> tuple[int, int]:
    """The range GroupConfig.validated() accepts for ``field`` (coordinator/protocol/limits.py): the
    lease, heartbeat and revocation settings are the defaults of every group created without its own
    values, so a default outside it would fail every such create_group long after start-up."""
    return GROUP_CONFIG_RANGES[field]


# The table. Lists and dicts are copied before they are set (default()), so a host mutating its setting
# cannot change the default of another process's settings (tests configure several in one interpreter).
SETTINGS: tuple[Setting, ...] = (
    # The stream data plane and the coordinator's metadata (required: None means "not configured").
    Setting("REDIS_URL", str, None, "The Redis (or redis+cluster://) URL of streams and metadata."),
    # API credentials (coordinator/credentials.py): bearer tokens, comma-separated in the environment.
    Setting("RSC_MEMBER_TOKENS", list, [], "Bearer tokens of the member API."),
    Setting("RSC_ADMIN_TOKENS", list, [], "Bearer tokens of the admin API."),
    Setting("RSC_API_MAX_BODY_BYTES", int, 64 * 1024, "Largest API request body accepted."),
    Setting("RSC_METRICS_TOKENS", list, [], "Scrape-only bearer tokens for /metrics."),
    Setting("RSC_CREDENTIAL_CACHE_S", float, 5.0, "Seconds a database credential lookup is cached."),
    # coordinator/api/throttling.py: 0 turns the floor off; at most one heartbeat a minute is the end.
    Setting(
        "RSC_HEARTBEAT_FLOOR_MS",
        int,
        50,
        "Least time between two heartbeats of one member (0: off).",
        0,
        60_000,
        "the per-member heartbeat floor",
        "count",
    ),
    Setting(
        "RSC_HEARTBEAT_BURST",
        int,
        20,
        "Heartbeats a member may send back to back before the floor.",
        1,
        10_000,
        "the heartbeat floor's burst",
        "count",
    ),
    Setting("RSC_HEARTBEAT_DOOR", bool, True, "Answer plain heartbeats on the fast path."),
    Setting(
        "RSC_MAX_CONCURRENT_JOINS",
        int,
        4,
        "Joins at once per API process (0: no limit).",
        0,
        10_000,
        "joins at once per API process",
        "count",
    ),
    Setting("RSC_ADMIN_API_RATE", str, "600/min", "Admin API requests per credential and period."),
    # Coordinator timing (coordinator/checks.py rejects impossible combinations at start-up).
    Setting("RSC_TICK_INTERVAL_MS", int, 1000, "Period of the coordinator's tick.", check="ms"),
    Setting(
        "RSC_MEMBER_LEASE_TTL_MS",
        int,
        10000,
        "Default lease of a group's members.",
        *_group("lease_ttl_ms"),
        "a group's lease_ttl_ms",
        "ms",
    ),
    Setting(
        "RSC_HEARTBEAT_INTERVAL_MS",
        int,
        3000,
        "Default heartbeat interval of a group's members.",
        *_group("heartbeat_interval_ms"),
        "a group's heartbeat_interval_ms",
        "ms",
    ),
    Setting(
        "RSC_REVOCATION_TIMEOUT_MS",
        int,
        30000,
        "Default time a member has to give up revoked shards.",
        *_group("revocation_timeout_ms"),
        "a group's revocation_timeout_ms",
        "ms",
    ),
    # Tick.retention_ms's range (coordinator/protocol/commands.py).
    Setting(
        "RSC_MEMBER_RETENTION_MS",
        int,
        600000,
        "How long an ended member is kept.",
        1,
        WEEK_MS,
        "the tick's retention_ms",
        "ms",
    ),
    Setting(
        "RSC_MAX_ENDED_MEMBERS",
        int,
        100,
        "Ended members kept per group.",
        0,
        MAX_ENDED_MEMBERS_LIMIT,
        "the tick's max_ended_members",
        "count",
    ),
    # Stream retention and the audit prune. A retention pass trims every stream it visits: more than
    # one a second is load for nothing.
    Setting(
        "RSC_RETENTION_INTERVAL_MS",
        int,
        30000,
        "Period of the stream retention pass.",
        1_000,
        WEEK_MS,
        "the retention pass interval",
        "ms",
    ),
    Setting(
        "RSC_RETENTION_MAX_STREAMS",
        int,
        2000,
        "Streams visited per retention pass.",
        1,
        1_000_000,
        "streams visited per retention pass",
        "count",
    ),
    Setting("RSC_AUDIT_RETENTION_DAYS", int, 365, "Days an audit row is kept."),
    # The dead-letter MAC (docs/protocol.md section 14): its keys are rendered into the data plane's Redis
    # Functions library by the coordinator. "": derived from SECRET_KEY (SECRET_KEY_FALLBACKS verify).
    Setting("RSC_DEAD_LETTER_SECRET", str, "", "Secret of the dead-letter MAC (empty: from SECRET_KEY)."),
    # Members (manage.py run_member).
    Setting("RSC_COORDINATOR_URL", str, "http://127.0.0.1:8000", "The coordinator's API, or inprocess."),
    Setting("RSC_MEMBER_TOKEN", str, "", "The bearer token members present."),
    Setting("RSC_MEMBER_ID_PREFIX", str, "", "Starts every member id this process makes."),
    Setting("RSC_MEMBER_METRICS_PORT", int, 0, "Port of a member's /metrics (0: none)."),
    Setting("RSC_RUNTIME", dict, {"max_concurrency": 1}, "The member runtime's options."),
    Setting("RSC_LISTENER_CONCURRENCY", dict, {}, "Listener name -> its worker threads."),
    Setting("RSC_SHUTDOWN_TIMEOUT_S", float, 30.0, "Seconds a member waits for its work at shutdown."),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# name -> default.
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


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


# The typed, frozen view of the settings: one attribute per entry of SETTINGS.
Settings = make_dataclass("Settings", [(s.name, s.type) for s in SETTINGS], frozen=True, slots=True)
_current: Any = None


def settings() -> Any:
    """Django's settings as a frozen ``Settings`` (a missing one at its default), built once and rebuilt
    after Django's ``setting_changed`` (sent by ``override_settings`` and pytest-django's ``settings``
    fixture), so code reads ``conf.settings().RSC_TICK_INTERVAL_MS`` instead of ``getattr`` with a
    default of its own."""
    global _current
    current = _current
    if current is None:
        from django.conf import settings as django_settings
        from django.test.signals import setting_changed

        setting_changed.connect(_reset, dispatch_uid="coordinator.conf.settings")
        current = Settings(**{s.name: getattr(django_settings, s.name, default(s.name)) for s in SETTINGS})
        _current = current
    return current


def _reset(**kwargs: Any) -> None:
    global _current
    if kwargs.get("setting") in DEFAULTS:
        _current = None
