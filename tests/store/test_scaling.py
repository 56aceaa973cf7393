"""The autoscaling figures (coordinator/store/scaling.py, backlog_count.lua) against a real Redis: each
is compared with the backlog counted the slow way (tests/backlog_truth.py), after reads, acks, trims
(where Redis's own lag is nil or wrong) and across a resharding."""

from __future__ import annotations

import pytest

from coordinator.protocol.model import OrderingMode, Shard
from coordinator.store import MetadataStore, scaling
from rsc_redis import keys as rkeys
from tests.backlog_truth import true_backlog

from .conftest import GROUP, PREFIX, create
from .test_backlog import ack, produce, read


def assert_true(store: MetadataStore, group: str = GROUP) -> scaling.GroupScaling:
    now_ms, state = store.reader.read(PREFIX, None)
    assert state is not None
    figures = store.scaling.group(PREFIX, group)
    truth = true_backlog(store.client, state, group)
    assert (figures.undelivered, figures.pending, figures.shards_with_backlog) == (
        truth.undelivered,
        truth.pending,
        truth.shards_with_backlog,
    )
    assert figures.backlog == truth.backlog
    assert figures.exact
    if truth.oldest_undelivered_ms is None:
        assert figures.oldest_undelivered_age_ms == 0
    else:  # read a moment after `now_ms`: Redis's clock has moved on by a little
        assert figures.oldest_undelivered_age_ms >= now_ms - truth.oldest_undelivered_ms
    return figures


def test_a_group_or_prefix_that_does_not_exist_has_zero_figures(store: MetadataStore) -> None:
    for prefix, group in ((PREFIX, GROUP), ("nowhere", GROUP)):
        figures = store.scaling.group(prefix, group)
        assert not figures.exists
        assert figures.as_json()["backlog"] == figures.shards == figures.shards_with_backlog == 0
    create(store)
    assert not store.scaling.group(PREFIX, "other").exists


def test_undelivered_and_pending_over_the_shards_with_reads_and_acks(store: MetadataStore) -> None:
    create(store, shard_count=4)
    empty = assert_true(store)
    assert (empty.exists, empty.shards, empty.active_shards, empty.backlog) == (True, 4, 4, 0)
    produce(store, "v1:0", 5, 4)
    produce(store, "v1:2", 3, 4)
    figures = assert_true(store)
    assert (figures.undelivered, figures.shards_with_backlog) == (8, 2)
    ids = read(store, "v1:0", "c", 4)
    ack(store, "v1:0", ids[:3])
    figures = assert_true(store)
    assert (figures.undelivered, figures.pending) == (4, 1)
    read(store, "v1:2", "c", 3)
    ack(store, "v1:2", read(store, "v1:2", "c", 3, after="0"))
    figures = assert_true(store)
    assert figures.shards_with_backlog == 1


def test_exact_after_trims_where_redis_lag_is_not(store: MetadataStore) -> None:
    create(store, shard_count=2)
    key = rkeys.stream_key(PREFIX, Shard.parse("v1:0"))
    ids = produce(store, "v1:0", 10, 2)
    ack(store, "v1:0", read(store, "v1:0", "c", 4))
    store.retention_pass()  # the acked floor: the 4 handled entries go
    assert store.client.xlen(key) == 6
    assert assert_true(store).undelivered == 6
    # A cap trims entries the group never read (documented data loss): they are no backlog any more.
    # What the max_len cap does (trim.lua), at a length below its smallest setting.
    store.client.xtrim(key, maxlen=3, approximate=False)
    assert store.client.xlen(key) == 3
    assert assert_true(store).undelivered == 3
    read(store, "v1:0", "c", 1)  # where Redis 7.0's entries-read counter goes wrong (redis#13957)
    figures = assert_true(store)
    assert (figures.undelivered, figures.pending) == (2, 1)
    assert ids[-1] == read(store, "v1:0", "c", 5)[-1]
    assert assert_true(store).undelivered == 0


@pytest.mark.parametrize("delivered", [2, 9])
def test_the_count_inside_a_stream_is_exact_from_either_end_within_the_bound(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch, delivered: int
) -> None:
    monkeypatch.setattr(scaling, "COUNT_BOUND", 4)
    create(store, shard_count=1)
    produce(store, "v1:0", 12, 1)
    ack(store, "v1:0", read(store, "v1:0", "c", delivered))  # nothing trimmed: the position is inside
    assert assert_true(store).undelivered == 12 - delivered


def test_beyond_the_bound_on_both_sides_the_figure_is_marked_inexact_and_kept_in_range(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scaling, "COUNT_BOUND", 3)
    create(store, shard_count=1)
    produce(store, "v1:0", 10, 1)
    ack(store, "v1:0", read(store, "v1:0", "c", 5))
    figures = store.scaling.group(PREFIX, GROUP)
    assert not figures.exact
    assert 3 <= figures.undelivered <= 10 - 3


def test_a_resharding_counts_the_draining_shards_until_drained(store: MetadataStore) -> None:
    create(store, shard_count=2)
    produce(store, "v1:1", 4, 2)
    store.change_shard_count(PREFIX, 3, OrderingMode.RELAXED)
    produce(store, "v2:0", 2, 3)
    figures = assert_true(store)
    assert (figures.shards, figures.active_shards, figures.undelivered) == (5, 3, 6)
    ack(store, "v1:1", read(store, "v1:1", "c", 10))
    assert assert_true(store).undelivered == 2
