"""The group-config limits (coordinator/protocol/limits.py) and the lease > tick rule at every entry point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coordinator import operations
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import InvalidConfig, InvalidRequest
from coordinator.protocol.limits import GROUP_CONFIG_RANGES, require_lease_above_tick
from coordinator.protocol.model import GroupConfig
from coordinator.store import get_store, reset_store
from tests.api.helpers import redis_snapshot

ADMIN = operations.Actor(username="ops", source="command", is_admin=True)


def test_the_lease_must_exceed_the_tick() -> None:
    require_lease_above_tick(1_001, 1_000)
    for lease in (999, 1_000):
        with pytest.raises(InvalidConfig) as refused:
            require_lease_above_tick(lease, 1_000)
        assert refused.value.details.get("field") == "lease_ttl_ms"


@pytest.mark.parametrize("name", sorted(GROUP_CONFIG_RANGES))
def test_group_config_accepts_exactly_its_ranges(name: str) -> None:
    low, high = GROUP_CONFIG_RANGES[name]
    # heartbeat < lease is its own rule: keep the other field out of the way at the bounds.
    other = {"lease_ttl_ms": 3_600_000} if name == "heartbeat_interval_ms" else {"heartbeat_interval_ms": 100}
    for value in (low, high):
        GroupConfig(**{**other, name: value}).validated()
    for value in (low - 1, high + 1):
        with pytest.raises(InvalidRequest):
            GroupConfig(**{**other, name: value}).validated()


@pytest.fixture
def store(settings: Any, redis_url: str, db: None) -> Iterator[Any]:
    settings.REDIS_URL = redis_url
    reset_store()
    yield get_store()
    reset_store()


def test_operations_create_group_refuses_a_lease_not_above_the_tick(settings: Any, store: Any) -> None:
    settings.RSC_TICK_INTERVAL_MS = 5_000
    command = CreateGroup(
        stream_prefix="orders",
        consumer_group="billing",
        shard_count=2,
        config=GroupConfig(lease_ttl_ms=5_000, heartbeat_interval_ms=1_000),
    )
    before = redis_snapshot(store.client)
    with pytest.raises(InvalidConfig) as refused:
        operations.create_group(ADMIN, command)
    assert refused.value.details.get("field") == "lease_ttl_ms"
    assert redis_snapshot(store.client) == before
    settings.RSC_TICK_INTERVAL_MS = 4_999
    operations.create_group(ADMIN, command)
