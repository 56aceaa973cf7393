"""The members' settings (``manage.py run_member``, consumers/checks.py, member ids): each once, with its
type, default and help, in the form of coordinator/protocol/setting.py. The coordinator's settings are
coordinator/conf.py's table; a member process loads neither that nor the store.

A host project defines only what it changes: ``ConsumersConfig.ready()`` sets the missing ones to their
defaults. Code reads the frozen :func:`settings`. config/settings.py (the environment) and docs/plugin.md's
table (tests/test_plugin.py) derive from the table.

No Django import at module level.
"""

from __future__ import annotations

from typing import Any

from coordinator.protocol.setting import Setting, SettingsTable

IN_PROCESS = "inprocess"  # RSC_COORDINATOR_URL: run the coordinator's store in the member process

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "RSC_COORDINATOR_URL",
        str,
        "http://127.0.0.1:8000",
        'Members: the coordinator\'s base URL, or `"inprocess"` to use the store in `REDIS_URL` directly',
    ),
    Setting("RSC_MEMBER_TOKEN", str, "", "Members: the bearer token they present"),
    # consumers/client.py: the token would travel in clear. Loopback URLs need no allowance.
    Setting(
        "RSC_ALLOW_INSECURE_COORDINATOR_URL",
        bool,
        False,
        "Members: allow a plain `http://` `RSC_COORDINATOR_URL` to another machine (the token is sent in "
        "clear; loopback and `localhost` URLs are always allowed)",
    ),
    Setting(
        "RSC_MEMBER_ID_PREFIX",
        str,
        "",
        "Members: starts every member id (for a credential scoped with `--member-id-prefix`)",
    ),
    Setting(
        "RSC_INSTANCE_ID",
        str,
        "",
        "Members: static membership: the name of the place this process runs (a pod name; "
        "`run_member --instance-id`); member i of listener L joins with instance id `<it>.<L>.<i>` and "
        "gets its shards back after a restart within one lease TTL. Empty: dynamic members",
    ),
    Setting(
        "RSC_MEMBER_METRICS_PORT",
        int,
        0,
        "Members: `run_member` serves its Prometheus metrics on this port (0: not served; docs/metrics.md)",
    ),
    Setting(
        "RSC_MEMBER_METRICS_ADDR",
        str,
        "127.0.0.1",
        "Members: the address `run_member`'s metrics listen on (`0.0.0.0`: every interface; then set a "
        "token)",
    ),
    Setting(
        "RSC_MEMBER_METRICS_TOKEN",
        str,
        "",
        "Members: if set, a scrape of `run_member`'s metrics must present it (`Authorization: Bearer`; "
        "401 otherwise)",
    ),
    # The environment sets only max_concurrency (RSC_RUNTIME_MAX_CONCURRENCY, config/settings.py).
    Setting(
        "RSC_RUNTIME",
        dict,
        {"max_concurrency": 1},
        "Members: a dict of `consumers.Runtime` fields or the dotted path of a factory; `max_concurrency` "
        "is the worker threads in one member",
    ),
    Setting(
        "RSC_LISTENER_CONCURRENCY",
        dict,
        {},
        'Members: fan-out per listener name, overriding `@listener(concurrency=...)`, e.g. `{"billing": 5}`',
    ),
    Setting(
        "RSC_SHUTDOWN_TIMEOUT_S",
        float,
        30.0,
        "Members: how long a stopping member may finish in-flight work before it leaves anyway",
    ),
)

TABLE = SettingsTable("MemberSettings", SETTINGS)
DEFAULTS: dict[str, Any] = TABLE.defaults  # name -> default
default = TABLE.default  # the default of a name (a fresh copy of a list or dict)
apply_defaults = TABLE.apply_defaults  # set the missing settings of a Django settings object


def settings() -> Any:
    """Django's settings as a frozen ``MemberSettings`` (a missing one at its default). Read anew at
    every call (nothing reads them on a hot path), so it is never stale."""
    from django.conf import settings as django_settings

    return TABLE.read(django_settings)
