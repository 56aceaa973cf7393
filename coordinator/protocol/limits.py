"""The ranges of a group's configuration, and the rule that ties its lease to the coordinator's tick.

Pure (no Django): GroupConfig.validated() (coordinator/protocol/model.py) checks a group's values against
GROUP_CONFIG_RANGES; the settings table (coordinator/conf.py) gives the RSC_* defaults of those values the
same ranges, so the system checks (coordinator/checks.py) and the API's serializers (and through them the
OpenAPI schema) derive theirs from here.
"""

from __future__ import annotations

from .errors import InvalidConfig

MAX_MAX_CONCURRENCY = 1024
MAX_MEMBERS_LIMIT = 10_000
# The longest a tick keeps an ended member (Tick.retention_ms), and the longest retention pass interval.
WEEK_MS = 7 * 24 * 3_600_000

# GroupConfig field -> (lowest, highest) accepted, both inclusive.
GROUP_CONFIG_RANGES: dict[str, tuple[int, int]] = {
    "max_concurrency": (1, MAX_MAX_CONCURRENCY),
    "lease_ttl_ms": (1_000, 3_600_000),
    "heartbeat_interval_ms": (100, 600_000),
    "revocation_timeout_ms": (1_000, 3_600_000),
    "max_members": (1, MAX_MEMBERS_LIMIT),
}


def require_lease_above_tick(lease_ttl_ms: int, tick_interval_ms: int) -> None:
    """docs/protocol.md section 5: the tick must run within every lease, or expiry lags a whole tick.

    Raises InvalidConfig (field ``lease_ttl_ms``) unless ``lease_ttl_ms`` exceeds the tick interval.
    """
    if lease_ttl_ms <= tick_interval_ms:
        raise InvalidConfig(
            f"lease_ttl_ms ({lease_ttl_ms}) must be above the coordinator's tick interval "
            f"(RSC_TICK_INTERVAL_MS = {tick_interval_ms})",
            field="lease_ttl_ms",
        )
