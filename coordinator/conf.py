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

from dataclasses import fields
from typing import Any

from coordinator.protocol.commands import MAX_ENDED_MEMBERS_LIMIT, Tick
from coordinator.protocol.limits import GROUP_CONFIG_RANGES, WEEK_MS
from coordinator.protocol.model import GroupConfig
from coordinator.protocol.setting import Setting, SettingsTable

# The core's own defaults of what some settings give it: a group's configuration and a tick's retention.
_GROUP = GroupConfig()
_TICK: dict[str, Any] = {f.name: f.default for f in fields(Tick)}


def _group(field: str) -> tuple[int, int]:
    """The range GroupConfig.validated() accepts for ``field`` (coordinator/protocol/limits.py): the
    lease, heartbeat and revocation settings are the defaults of every group created without its own
    values, so a default outside it would fail every such create_group long after start-up."""
    return GROUP_CONFIG_RANGES[field]


# The table, in docs/plugin.md's order; ``help`` is that table's text (Markdown; a setting whose default
# is None is rendered "**Required.**" first). Comments: why a default or range is what it is.
SETTINGS: tuple[Setting, ...] = (
    # The stream data plane and the coordinator's metadata; None: "not configured".
    Setting(
        "REDIS_URL",
        str,
        None,
        "The Redis of the metadata store (`rsc:{prefix}:meta`) and of the streams, e.g. "
        "`redis://host:6379/0`; a Redis Cluster: `redis+cluster://host:6379/` (docs/cluster.md; then set "
        "`CELERY_BROKER_URL` to a non-cluster Redis)",
    ),
    # API credentials (coordinator/credentials.py). More of them, stored hashed: create_api_credential.
    Setting(
        "RSC_MEMBER_TOKENS",
        list,
        [],
        "Bearer tokens members may heartbeat with (environment: comma-separated); scoped database "
        "credentials: `manage.py create_api_credential NAME --role member`",
    ),
    Setting(
        "RSC_ADMIN_TOKENS",
        list,
        [],
        "Bearer tokens of the Admin API (staff users with `coordinator.manage_groups` need none)",
    ),
    Setting(
        "RSC_API_MAX_BODY_BYTES",
        int,
        64 * 1024,
        "Larger request bodies are refused with 413 before they are read",
    ),
    Setting(
        "RSC_METRICS_TOKENS",
        list,
        [],
        "Scrape-only bearer tokens for `/metrics` (admin credentials work too; docs/metrics.md)",
    ),
    # A change committed anywhere applies at once regardless (a shared generation in Redis): this is the
    # fall-back while Redis is down.
    Setting(
        "RSC_CREDENTIAL_CACHE_S",
        float,
        5.0,
        "How long a process caches database credentials while Redis (which signals changes) is down",
    ),
    # It turns itself off when MIDDLEWARE holds a class it does not know (coordinator/api/door.py).
    Setting(
        "RSC_HEARTBEAT_DOOR",
        bool,
        True,
        "Steady heartbeats answered by the heartbeat door, when your WSGI application is wrapped in it "
        "(section 3); `False`: through Django",
    ),
    # coordinator/api/throttling.py. The fastest legal heartbeat interval is 100 ms (10/s), so the
    # default floor leaves a member twice that rate plus bursts; at most one heartbeat a minute is the end.
    Setting(
        "RSC_HEARTBEAT_FLOOR_MS",
        int,
        50,
        "Per live member, one heartbeat per this many ms after the burst (429 beyond; 0: off)",
        0,
        60_000,
        "the per-member heartbeat floor",
        "count",
    ),
    Setting(
        "RSC_HEARTBEAT_BURST",
        int,
        20,
        "Heartbeats a member may send back to back before the floor applies",
        1,
        10_000,
        "the heartbeat floor's burst",
        "count",
    ),
    # Joins are shed first under load, so steady heartbeats keep every lease.
    Setting(
        "RSC_MAX_CONCURRENT_JOINS",
        int,
        4,
        "Joins running at once per API process; more get 429 `JOINS_THROTTLED` (0: no limit)",
        0,
        10_000,
        "joins at once per API process",
        "count",
    ),
    # Per credential, across every API process (coordinator/store/credential_limits.py): generous enough
    # for one credential running the largest group (max_members 10,000) twice over; the join rate above
    # what one host's API answers in joins (a crowd rejoining at once, tests/e2e's overload churners, the
    # benchmarks' forming groups never meet it). A leaked token still cannot create members without end.
    Setting(
        "RSC_CREDENTIAL_MAX_MEMBERS",
        int,
        20_000,
        "Live members one credential may have at once, over every group and API process; a join of a "
        "new member id beyond it gets 429 `CREDENTIAL_MEMBER_LIMIT_REACHED` (0: no limit)",
        0,
        1_000_000,
        "live members per credential",
        "count",
    ),
    Setting(
        "RSC_CREDENTIAL_JOIN_FLOOR_MS",
        int,
        1,
        "Per credential, one join per this many ms after the burst, over every API process (429 "
        "`CREDENTIAL_JOINS_TOO_FREQUENT` beyond; 0: off)",
        0,
        60_000,
        "the per-credential join rate",
        "count",
    ),
    Setting(
        "RSC_CREDENTIAL_JOIN_BURST",
        int,
        2_000,
        "Joins a credential may make back to back before its join rate applies",
        1,
        100_000,
        "the per-credential join burst",
        "count",
    ),
    # Counted in the default cache: per process with the default LocMemCache. config/settings.py refuses
    # a value of another form at start-up.
    Setting(
        "RSC_ADMIN_API_RATE",
        str,
        "600/min",
        "Admin API requests per credential, `<count>/<second|minute|hour|day>` (429 beyond)",
    ),
    # The reverse proxy in front of the API server (coordinator/proxy.py): the client address the admin
    # login's throttling (django-axes) counts against. Empty: REMOTE_ADDR, a direct connection's.
    Setting(
        "RSC_TRUSTED_PROXY_HEADER",
        str,
        "",
        "The header your reverse proxy puts the client's address in (`X-Forwarded-For`, `X-Real-IP`), for "
        "the admin login's lockout; empty: none is trusted, `REMOTE_ADDR` (docs/operations.md)",
    ),
    Setting(
        "RSC_TRUSTED_PROXY_COUNT",
        int,
        1,
        "Proxies in a row that append to that header: the client is that many entries from its right",
        1,
        10,
        "trusted proxies",
        "count",
    ),
    # Coordinator timing (coordinator/checks.py rejects impossible combinations at start-up).
    Setting(
        "RSC_TICK_INTERVAL_MS",
        int,
        1000,
        "How often the tick expires members whose lease ran out; below the lease",
        check="ms",
    ),
    Setting(
        "RSC_MEMBER_LEASE_TTL_MS",
        int,
        _GROUP.lease_ttl_ms,
        "New groups' lease: a member silent this long is expired and loses its shards",
        *_group("lease_ttl_ms"),
        "a group's lease_ttl_ms",
        "ms",
    ),
    Setting(
        "RSC_HEARTBEAT_INTERVAL_MS",
        int,
        _GROUP.heartbeat_interval_ms,
        "New groups' heartbeat interval, handed to members; below the lease",
        *_group("heartbeat_interval_ms"),
        "a group's heartbeat_interval_ms",
        "ms",
    ),
    Setting(
        "RSC_REVOCATION_TIMEOUT_MS",
        int,
        _GROUP.revocation_timeout_ms,
        "New groups' limit for releasing revoked shards before the member is expired",
        *_group("revocation_timeout_ms"),
        "a group's revocation_timeout_ms",
        "ms",
    ),
    # Tick.retention_ms's range (coordinator/protocol/commands.py).
    Setting(
        "RSC_MEMBER_RETENTION_MS",
        int,
        _TICK["retention_ms"],
        "How long EXPIRED / LEFT members stay visible; at least the lease",
        1,
        WEEK_MS,
        "the tick's retention_ms",
        "ms",
    ),
    Setting(
        "RSC_MAX_ENDED_MEMBERS",
        int,
        _TICK["max_ended_members"],
        "Ended members kept per group at most (the most recent)",
        0,
        MAX_ENDED_MEMBERS_LIMIT,
        "the tick's max_ended_members",
        "count",
    ),
    # Stream retention and the audit prune: its own beat task, so it never delays the tick's lease
    # expiry. A pass trims every stream it visits: more than one a second is load for nothing.
    Setting(
        "RSC_RETENTION_INTERVAL_MS",
        int,
        30000,
        "How often the retention pass trims streams and deletes retired versions' streams; at least 1000",
        1_000,
        WEEK_MS,
        "the retention pass interval",
        "ms",
    ),
    Setting(
        "RSC_RETENTION_MAX_STREAMS",
        int,
        2000,
        "Streams visited per retention pass (the next pass continues)",
        1,
        1_000_000,
        "streams visited per retention pass",
        "count",
    ),
    Setting(
        "RSC_AUDIT_RETENTION_DAYS",
        int,
        365,
        "Audit rows older than this are deleted by the retention pass and `manage.py prune_audit`",
    ),
    # Off: three INFO lines per tick every second while idle (coordinator/celery.py, QuietBeatTasks).
    Setting(
        "RSC_BEAT_TASK_LOGS",
        bool,
        False,
        "Celery's INFO lines for each run of the tick and the retention pass (received, succeeded, beat's "
        "sending due task); `False`: left out, their warnings and errors stay (section 5)",
    ),
    # The dead-letter MAC (docs/protocol.md section 14): its keys are rendered into the data plane's Redis
    # Functions library by the coordinator (rsc_redis/functions.py); members never hold them.
    Setting(
        "RSC_DEAD_LETTER_SECRET",
        str,
        "",
        "The secret of the dead-letter MAC that the coordinator renders into the data plane's Redis "
        "Functions library (docs/protocol.md section 14); `\"\"`: derived from `SECRET_KEY` (dead letters "
        "signed under a key of `SECRET_KEY_FALLBACKS` still verify). Every coordinator process must have "
        "the same",
    ),
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
