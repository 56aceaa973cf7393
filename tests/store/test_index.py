"""One bad entry in the stream prefix index ``rsc:prefixes`` is skipped and reported
once per listing or tick (an ERROR line naming it), never fatal to the group listing, the tick or the
retention pass. Against a real Redis (tests/conftest.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from coordinator.protocol.group import Heartbeat
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create

BAD_ENTRIES = ["bad{x}", "a:b", "", " spaced", "x" * 65, "-dash"]


@pytest.fixture
def store_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog at INFO for the `coordinator` loggers (they propagate to the root logger)."""
    caplog.set_level(logging.INFO, logger="coordinator")
    yield caplog


def index_errors(logs: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in logs.records
        if r.levelno == logging.ERROR and "stream prefix index" in r.getMessage()
    ]


@pytest.fixture
def polluted(store: MetadataStore) -> MetadataStore:
    create(store, shard_count=2)
    store.client.sadd(rkeys.PREFIXES_KEY, *[e for e in BAD_ENTRIES if e], b"\xff\xfe")
    return store


def test_the_listing_skips_bad_entries_and_reports_them_once(
    polluted: MetadataStore, store_logs: pytest.LogCaptureFixture
) -> None:
    assert polluted.stream_prefixes() == [PREFIX]
    store_logs.clear()
    rows = polluted.list_groups()
    assert [(r["stream_prefix"], r["consumer_group"]) for r in rows] == [(PREFIX, GROUP)]
    (line,) = index_errors(store_logs)
    for entry in ("'bad{x}'", "'a:b'", "' spaced'", "'-dash'"):
        assert entry in line
    assert "skipped 6 invalid entries" in line
    # Reported, not repaired: the entries stay for an operator to look at.
    assert polluted.client.sismember(rkeys.PREFIXES_KEY, "bad{x}")


def test_the_tick_skips_bad_entries_and_still_expires_members(
    polluted: MetadataStore, store_logs: pytest.LogCaptureFixture
) -> None:
    polluted.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=1))
    store_logs.clear()
    reports = polluted.tick(retention_ms=0)
    assert [(r.stream_prefix, r.error) for r in reports] == [(PREFIX, None)]
    assert len(index_errors(store_logs)) == 1


def test_the_retention_pass_skips_bad_entries(
    polluted: MetadataStore, store_logs: pytest.LogCaptureFixture
) -> None:
    store_logs.clear()
    reports = polluted.retention_pass(max_streams=100)
    assert all(r.error is None for r in reports)
    assert {r.stream_prefix for r in reports} <= {PREFIX}
    assert len(index_errors(store_logs)) == 1


def test_a_clean_index_logs_nothing(store: MetadataStore, store_logs: pytest.LogCaptureFixture) -> None:
    create(store)
    store.list_groups()
    store.tick()
    assert index_errors(store_logs) == []
