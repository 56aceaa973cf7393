"""Fixtures for the tick tests: the store pointed at a private Redis, scripted members, log capture.

Every test here runs against a real Redis the suite started itself (tests/conftest.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, Shard
from coordinator.store import MetadataStore, get_store, reset_store
from tests.polling import wait_until
from tests.store.diff_oracle import every_commit_checked_against_the_diff  # noqa: F401 (autouse)

from .processes import Child

PREFIX, GROUP = "orders", "billing"
# Short enough that a test waits about a second for a lease to end.
SHORT_LEASE = GroupConfig(lease_ttl_ms=1000, heartbeat_interval_ms=200)

T = TypeVar("T")


@pytest.fixture
def store(settings: Any, redis_url: str) -> Iterator[MetadataStore]:
    """The process's store (coordinator.store.get_store, as the task uses it) on the session Redis."""
    settings.REDIS_URL = redis_url
    reset_store()
    yield get_store()
    reset_store()


@pytest.fixture
def coordinator_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog at INFO for the `coordinator` loggers (they propagate to the root logger)."""
    caplog.set_level(logging.INFO, logger="coordinator")
    yield caplog


@pytest.fixture
def spawn(tmp_path: Any) -> Iterator[Callable[[str, list[str], dict[str, str]], Child]]:
    """Start child processes; teardown stops every one (SIGTERM, then SIGKILL), whatever the test did."""
    started: list[Child] = []

    def start(name: str, argv: list[str], env: dict[str, str]) -> Child:
        child = Child(argv, env, tmp_path / f"{name}.log")
        started.append(child)
        return child

    try:
        yield start
    finally:
        for child in reversed(started):
            child.stop()


def create_group(store: MetadataStore, group: str = GROUP, config: GroupConfig = SHORT_LEASE) -> None:
    store.create_group(CreateGroup(stream_prefix=PREFIX, consumer_group=group, shard_count=4, config=config))


class Member:
    """A scripted member: heartbeats with its current epoch and reports exactly the shards it holds, so
    revocations are acknowledged at once (like a well-behaved runtime)."""

    def __init__(self, store: MetadataStore, member_id: str, group: str = GROUP) -> None:
        self.store, self.member_id, self.group = store, member_id, group
        self.epoch = 0
        self.owned: frozenset[Shard] = frozenset()
        self.response: dict[str, Any] = {}

    def heartbeat(self) -> dict[str, Any]:
        hb = Heartbeat(
            member_id=self.member_id,
            member_epoch=self.epoch,
            owned=self.owned if self.epoch > 0 else None,
            capacity=1 if self.epoch == 0 else None,
        )
        self.response = self.store.heartbeat(PREFIX, self.group, hb)
        self.epoch = self.response["member_epoch"]
        self.owned = frozenset(Shard.parse(s["shard"]) for s in self.response["shards"])
        return self.response

    @property
    def shards(self) -> set[str]:
        return {str(s) for s in self.owned}


def member_view(store: MetadataStore, member_id: str, group: str = GROUP) -> dict[str, Any]:
    view = store.describe_group(PREFIX, group)
    return next(m for m in view["members"] if m["member_id"] == member_id)


def wait_for_lease_end(
    store: MetadataStore, member_id: str, keep_alive: tuple[Member, ...] = (), group: str = GROUP
) -> None:
    """Wait until ``member_id``'s lease has ended by Redis's clock, heartbeating ``keep_alive`` meanwhile."""

    def probe() -> int:
        for member in keep_alive:
            member.heartbeat()
        return int(member_view(store, member_id, group)["lease_remaining_ms"])

    wait_until(probe, lambda left: left == 0, timeout_s=10, what=f"end of {member_id}'s lease")
