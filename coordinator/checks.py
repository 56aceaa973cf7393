"""System checks that reject coordinator timing settings that cannot work.

    rsc.E001  an RSC_*_MS setting is not a positive integer
    rsc.E002  RSC_TICK_INTERVAL_MS >= RSC_MEMBER_LEASE_TTL_MS
    rsc.E003  RSC_HEARTBEAT_INTERVAL_MS >= RSC_MEMBER_LEASE_TTL_MS
    rsc.E004  RSC_MEMBER_RETENTION_MS < RSC_MEMBER_LEASE_TTL_MS
    rsc.E005  a setting outside the range its consumer accepts (RANGES_MS, from the table in
              coordinator/conf.py); among them RSC_RETENTION_INTERVAL_MS below 1000
    rsc.E006  a count setting (COUNTS) that is not an integer in its range
    rsc.E008  RSC_TRUSTED_PROXY_HEADER is not an HTTP header name
    rsc.W001  (`check --deploy` only) an RSC_MEMBER_TOKENS / RSC_ADMIN_TOKENS entry shorter than
              MIN_TOKEN_LENGTH characters: a guessable bearer token, like `make run`'s public dev tokens

The errors run before every manage.py command (runserver, migrate, run_tick, ...) and, through
config/celery.py, when a Celery worker or beat starts; the deploy check with `manage.py check --deploy`.
A missing or weak SECRET_KEY is not a check: with DEBUG off, config/settings.py refuses to start at all
(the API server runs no checks). Projects that install the app without defining a
setting get the default of coordinator/conf.py's table (which config/settings.py reads too).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from coordinator import conf
from coordinator.conf import SETTINGS

# Derived from the settings table (coordinator/conf.py), which holds each setting's default and range;
# the group defaults' ranges there are GroupConfig's (coordinator/protocol/limits.py).
DEFAULTS_MS: dict[str, int] = {s.name: s.default for s in SETTINGS if s.check == "ms"}
RANGES_MS: dict[str, tuple[int, int, str]] = {
    s.name: (s.low, s.high, s.what)
    for s in SETTINGS
    if s.check == "ms" and s.low is not None and s.high is not None
}
# Settings that are counts: name -> (default, low, high, what).
COUNTS: dict[str, tuple[int, int, int, str]] = {
    s.name: (s.default, s.low, s.high, s.what)
    for s in SETTINGS
    if s.check == "count" and s.low is not None and s.high is not None
}


# Environment tokens compare as plain secrets: anything short enough to type from memory is guessable.
# `manage.py create_api_credential` issues 47 characters; `python -c "import secrets;
# print(secrets.token_urlsafe(32))"` gives 43.
MIN_TOKEN_LENGTH = 32


@register(Tags.security, deploy=True)
def check_api_tokens(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """rsc.W001; a module-level registration, so it exists as soon as the app imports this module."""
    current = conf.settings()
    return [
        Warning(
            f"{name}[{index}] is {len(token)} characters long: a guessable bearer token "
            f"(`make run`'s development tokens are public).",
            hint=f"Use random tokens of at least {MIN_TOKEN_LENGTH} characters, or database credentials "
            "(`manage.py create_api_credential NAME --role member|admin`), which can be deactivated.",
            id="rsc.W001",
        )
        for name in ("RSC_MEMBER_TOKENS", "RSC_ADMIN_TOKENS")
        for index, token in enumerate(getattr(current, name) or ())
        if token and len(token) < MIN_TOKEN_LENGTH
    ]


@register(Tags.security, deploy=True)
def check_unscoped_member_tokens(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """rsc.W002: environment member tokens cannot be scoped to prefixes, groups or member ids."""
    if not any(conf.settings().RSC_MEMBER_TOKENS or ()):
        return []
    return [
        Warning(
            "RSC_MEMBER_TOKENS holds member tokens that may join any group of any stream prefix.",
            hint="Issue scoped database credentials instead: `manage.py create_api_credential NAME --role "
            "member --stream-prefixes 'orders-*' --groups 'billing'` (docs/protocol.md section 13).",
            id="rsc.W002",
        )
    ]


def check_celery_broker(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """rsc.E007: Celery's broker cannot be a Redis Cluster (kombu has no cluster client)."""
    from rsc_redis.clients import is_cluster_url

    broker = getattr(settings, "CELERY_BROKER_URL", None) or ""
    if not (isinstance(broker, str) and is_cluster_url(broker)):
        return []
    return [
        Error(
            "CELERY_BROKER_URL is a Redis Cluster URL; Celery's broker (kombu) would talk to that one node.",
            hint="Point CELERY_BROKER_URL at a plain Redis (redis://...), e.g. a small separate instance "
            "(docs/cluster.md).",
            id="rsc.E007",
        )
    ]


def check_trusted_proxy_header(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """rsc.E008: the proxy header must be a header name (coordinator/proxy.py)."""
    from coordinator.proxy import valid_header_name

    header = conf.settings().RSC_TRUSTED_PROXY_HEADER
    if not header or (isinstance(header, str) and valid_header_name(header)):
        return []
    return [
        Error(
            f"RSC_TRUSTED_PROXY_HEADER must be an HTTP header name, got {header!r}.",
            hint="e.g. X-Forwarded-For or X-Real-IP: the header your reverse proxy sets (empty: none).",
            id="rsc.E008",
        )
    ]


def check_rsc_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    current = conf.settings()
    values = {name: getattr(current, name) for name in DEFAULTS_MS}
    errors: list[CheckMessage] = [
        Error(
            f"{name} must be a positive integer number of milliseconds, got {value!r}.",
            hint=f"Set {name} in the environment (default {DEFAULTS_MS[name]}).",
            id="rsc.E001",
        )
        for name, value in values.items()
        if not _is_positive_int(value)
    ]
    if errors:
        return errors + _bad_counts(current)  # the checks below would only repeat the same mistake
    return _out_of_range(values) + _inconsistent(values) + _bad_counts(current)


def _bad_counts(current: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, (default, low, high, what) in COUNTS.items():
        value = getattr(current, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors.append(
                Error(
                    f"{name} must be an integer between {low} and {high}, the range of {what}; "
                    f"got {value!r}.",
                    hint=f"Set {name} within [{low}, {high}] (default {default}).",
                    id="rsc.E006",
                )
            )
    return errors


def _out_of_range(values: dict[str, int]) -> list[CheckMessage]:
    return [
        Error(
            f"{name} ({values[name]}) must be between {low} and {high}, the range of {what}.",
            hint=f"Set {name} within [{low}, {high}] (default {DEFAULTS_MS[name]}).",
            id="rsc.E005",
        )
        for name, (low, high, what) in RANGES_MS.items()
        if not low <= values[name] <= high
    ]


def _inconsistent(values: dict[str, int]) -> list[CheckMessage]:
    tick_ms = values["RSC_TICK_INTERVAL_MS"]
    lease_ms = values["RSC_MEMBER_LEASE_TTL_MS"]
    heartbeat_ms = values["RSC_HEARTBEAT_INTERVAL_MS"]
    retention_ms = values["RSC_MEMBER_RETENTION_MS"]
    errors: list[CheckMessage] = []
    if tick_ms >= lease_ms:
        errors.append(
            Error(
                f"RSC_TICK_INTERVAL_MS ({tick_ms}) must be below RSC_MEMBER_LEASE_TTL_MS ({lease_ms}).",
                hint="A tick as coarse as the lease lets a dead member keep its shards for up to two "
                "lease periods. Lower the tick interval or raise the lease TTL.",
                id="rsc.E002",
            )
        )
    if heartbeat_ms >= lease_ms:
        errors.append(
            Error(
                f"RSC_HEARTBEAT_INTERVAL_MS ({heartbeat_ms}) must be below RSC_MEMBER_LEASE_TTL_MS "
                f"({lease_ms}).",
                hint="Otherwise every member expires between two of its own heartbeats. Keep the "
                "heartbeat interval at a third of the lease TTL or less.",
                id="rsc.E003",
            )
        )
    if retention_ms < lease_ms:
        errors.append(
            Error(
                f"RSC_MEMBER_RETENTION_MS ({retention_ms}) must be at least RSC_MEMBER_LEASE_TTL_MS "
                f"({lease_ms}).",
                hint="An ended member is kept this long so that operators can see why it ended and its "
                "late heartbeats are answered FENCED_MEMBER_EPOCH rather than UNKNOWN_MEMBER_ID. "
                "Keep it well above the lease TTL (default 10 minutes).",
                id="rsc.E004",
            )
        )
    return errors


def _is_positive_int(value: object) -> bool:
    # bool is an int subclass; RSC_TICK_INTERVAL_MS = True is a mistake, not 1 ms.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
