"""System checks that reject coordinator timing settings that cannot work.

    rsc.E001  an RSC_*_MS setting is not a positive integer
    rsc.E002  RSC_TICK_INTERVAL_MS >= RSC_MEMBER_LEASE_TTL_MS
    rsc.E003  RSC_HEARTBEAT_INTERVAL_MS >= RSC_MEMBER_LEASE_TTL_MS

Projects that install the app without defining a setting get the default below (the same as
config/settings.py).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

DEFAULTS_MS = {
    "RSC_TICK_INTERVAL_MS": 1000,
    "RSC_MEMBER_LEASE_TTL_MS": 10000,
    "RSC_HEARTBEAT_INTERVAL_MS": 3000,
    "RSC_REVOCATION_TIMEOUT_MS": 30000,
}


def check_rsc_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    values = {name: getattr(settings, name, default) for name, default in DEFAULTS_MS.items()}
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
        return errors  # the comparisons below would only repeat the same mistake

    tick_ms = values["RSC_TICK_INTERVAL_MS"]
    lease_ms = values["RSC_MEMBER_LEASE_TTL_MS"]
    heartbeat_ms = values["RSC_HEARTBEAT_INTERVAL_MS"]
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
    return errors


def _is_positive_int(value: object) -> bool:
    # bool is an int subclass; RSC_TICK_INTERVAL_MS = True is a mistake, not 1 ms.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
