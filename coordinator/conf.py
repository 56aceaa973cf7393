"""The coordinator's settings: each once, with its type, default, range and help (the form of
coordinator/protocol/setting.py; the members' settings are consumers/conf.py's table).

A host project that installs the package defines only what it wants to change: when Django starts,
``CoordinatorConfig.ready()`` calls :func:`apply_defaults`, which sets each missing setting to the default
here (the pattern of django-appconf). A setting the host defines is never touched. Code reads the typed,
frozen :func:`settings` (``conf.settings().RSC_TICK_INTERVAL_MS``), never ``getattr`` with a default of its
own. The system checks (coordinator/checks.py), this project's config/settings.py (each setting from the
environment variable of its name, typed by the table) and docs/plugin.md's table (tests/test_plugin.py)
derive from the table.

No Django import at module level: ``coordinator.celery.beat_schedule()`` reads these defaults from a host's
settings module, before Django is configured.
"""

from __future__ import annotations

from typing import Any

from coordinator.protocol.commands import MAX_ENDED_MEMBERS_LIMIT
from coordinator.protocol.limits import GROUP_CONFIG_RANGES, WEEK_MS
from coordinator.protocol.setting import Setting, SettingsTable


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
    # API credentials (coordinator/api/auth.py): bearer tokens, comma-separated in the environment.
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
)

TABLE = SettingsTable("Settings", SETTINGS)
BY_NAME: dict[str, Setting] = TABLE.by_name
DEFAULTS: dict[str, Any] = TABLE.defaults  # name -> default
default = TABLE.default  # the default of a name (a fresh copy of a list or dict)
apply_defaults = TABLE.apply_defaults  # set the missing settings of a Django settings object
Settings = TABLE.values  # the typed, frozen view: one attribute per setting

# The view of Django's settings, and the settings object it was read from (Django's LazySettings holds
# one; override_settings puts another in its place and back).
_current: Any = None
_read_from: object = None
_django: Any = None


def settings() -> Any:
    """Django's settings as a frozen ``Settings`` (a missing one at its default), built once and built
    again when they change, so code reads ``conf.settings().RSC_TICK_INTERVAL_MS`` instead of ``getattr``
    with a default of its own (the heartbeat path reads it, so it is not built per call).

    Changed means: Django's ``setting_changed`` for one of these names (sent by ``override_settings``
    and pytest-django's ``settings`` fixture), or another settings object in Django's place
    (``override_settings`` again, and also the fixture's ``del settings.NAME``, which sends no signal).
    A plain ``setattr`` on ``django.conf.settings`` is neither: tests change settings through the
    fixture or ``override_settings``.
    """
    global _current, _read_from, _django
    current = _current
    if current is None or _django._wrapped is not _read_from:
        if _django is None:
            from django.conf import settings as django_settings
            from django.test.signals import setting_changed

            setting_changed.connect(_reset, dispatch_uid="coordinator.conf.settings")
            _django = django_settings
        current = TABLE.read(_django)  # loads Django's settings first, if need be
        _current, _read_from = current, _django._wrapped
    return current


def _reset(**kwargs: Any) -> None:
    global _current
    if kwargs.get("setting") in DEFAULTS:
        _current = None
