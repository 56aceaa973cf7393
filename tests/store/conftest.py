from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore
from tests.store.diff_oracle import every_commit_checked_against_the_diff  # noqa: F401 (autouse)

PREFIX, GROUP = "orders", "billing"


@pytest.fixture
def store(redis_url: str) -> Iterator[MetadataStore]:
    s = MetadataStore.from_url(redis_url)
    yield s
    s.client.close()


def create(store: MetadataStore, shard_count: int = 4, group: str = GROUP, **config: int) -> None:
    defaults = {"lease_ttl_ms": 10_000, "heartbeat_interval_ms": 1_000}
    cmd = CreateGroup(
        stream_prefix=PREFIX,
        consumer_group=group,
        shard_count=shard_count,
        config=GroupConfig(**{**defaults, **config}),
    )
    store.create_group(cmd)
