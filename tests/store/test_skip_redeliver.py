"""Operator actions on one shard: skip pending entries, ask the owner to redeliver; real Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.protocol import envelope
from coordinator.protocol.errors import (
    EntryNotPending,
    GroupNotFound,
    InvalidRequest,
    ShardNotFound,
)
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_backlog import join, produce, read, stream_state


def old_and_recent_pending(store: MetadataStore) -> tuple[list[str], list[str]]:
    """v1:0 of a 1-shard prefix: 3 entries from 1970 and 2 new ones, all pending for member a."""
    create(store, shard_count=1)
    join(store, "a")
    key = rkeys.stream_key(PREFIX, Shard.parse("v1:0"))
    old = [store.client.xadd(key, {"n": str(i)}, id=f"{1000 + i}-0").decode() for i in range(3)]
    recent = produce(store, "v1:0", 2, 1)
    read(store, "v1:0", "a", 10)
    return old, recent


def test_skip_by_ids_acks_exactly_those_and_returns_their_fields(store: MetadataStore) -> None:
    create(store, shard_count=2)
    join(store, "a")
    ids = produce(store, "v1:1", 3, 2)
    read(store, "v1:1", "a", 2)
    read(store, "v1:1", "ghost", 1)
    read(store, "v1:1", "a", 10, after="0")  # a's entries delivered twice now

    result = store.skip_entries(PREFIX, GROUP, "v1:1", entry_ids=[ids[2], ids[0]])

    assert result["shard"] == "v1:1"
    skipped = {s["id"]: s for s in result["skipped"]}
    assert [s["id"] for s in result["skipped"]] == [ids[2], ids[0]]
    assert (skipped[ids[0]]["consumer"], skipped[ids[0]]["deliveries"]) == ("a", 2)
    assert (skipped[ids[2]]["consumer"], skipped[ids[2]]["deliveries"]) == ("ghost", 1)
    fields = skipped[ids[0]]["fields"]
    assert list(fields) == [name.decode() for name in envelope.FIELD_NAMES]  # decoded, in order
    # not written by the producer: shown as the entry id's ms, the time Redis appended it
    assert fields["produced_at_ms"] == ids[0].split("-")[0]
    assert json.loads(fields["payload"]) == {"n": 0}
    assert (fields["routing_version"], fields["headers"]) == ("1", "{}")
    length, _groups, pending = stream_state(store, "v1:1")
    assert (length, pending) == (3, [(ids[1].encode(), b"a")])  # acked, not deleted; ids[1] untouched


def test_skip_refuses_all_when_one_id_is_not_pending(store: MetadataStore) -> None:
    create(store, shard_count=1)
    join(store, "a")
    ids = produce(store, "v1:0", 4, 1)
    read(store, "v1:0", "a", 2)
    store.client.xack(rkeys.stream_key(PREFIX, Shard.parse("v1:0")), GROUP, ids[1])
    before = stream_state(store, "v1:0")

    with pytest.raises(EntryNotPending) as refused:
        store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=[ids[0], ids[1], ids[3], "1-1"])

    assert refused.value.details["entry_ids"] == [ids[1], ids[3], "1-1"]  # acked, never read, never existed
    assert refused.value.details["shard"] == "v1:0"
    assert stream_state(store, "v1:0") == before


def test_skip_older_than_takes_the_oldest_pending_up_to_the_limit(store: MetadataStore) -> None:
    old, recent = old_and_recent_pending(store)

    first = store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=3_600_000, limit=2)
    assert [s["id"] for s in first["skipped"]] == old[:2]
    assert first["skipped"][0]["fields"] == {"n": "0"}
    rest = store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=3_600_000)
    assert [s["id"] for s in rest["skipped"]] == old[2:]  # recent entries are younger than an hour
    assert store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=3_600_000)["skipped"] == []
    everything = store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=0)
    assert [s["id"] for s in everything["skipped"]] == recent
    assert stream_state(store, "v1:0")[2] == []


def test_skip_returns_an_entry_trimmed_while_pending_with_no_fields(store: MetadataStore) -> None:
    create(store, shard_count=1)
    join(store, "a")
    ids = produce(store, "v1:0", 2, 1)
    read(store, "v1:0", "a", 2)
    store.client.xdel(rkeys.stream_key(PREFIX, Shard.parse("v1:0")), ids[0])
    result = store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=ids)
    assert [(s["id"], s["fields"] == {}) for s in result["skipped"]] == [(ids[0], True), (ids[1], False)]


def test_skipped_field_values_are_decoded_and_cut_for_people(store: MetadataStore) -> None:
    create(store, shard_count=1)
    join(store, "a")
    key = rkeys.stream_key(PREFIX, Shard.parse("v1:0"))
    entry_id = store.client.xadd(key, {"payload": b"\xff" + b"x" * 5000}).decode()
    read(store, "v1:0", "a", 1)
    (skipped,) = store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=[entry_id])["skipped"]
    assert skipped["fields"]["payload"] == "\ufffd" + "x" * 4095


@pytest.mark.parametrize(
    ("shard", "kwargs", "error", "field"),
    [
        ("v1", {"entry_ids": ["1-0"]}, InvalidRequest, "shard"),
        ("v1:01", {"entry_ids": ["1-0"]}, InvalidRequest, "shard"),
        ("v1:4", {"entry_ids": ["1-0"]}, ShardNotFound, "shard"),
        ("v2:0", {"entry_ids": ["1-0"]}, ShardNotFound, "shard"),
        ("v1:0", {"entry_ids": ["abc"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["1-2-3"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": [" 1-0"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["\u0663-0"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["18446744073709551616-0"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": []}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["1-0"] * 2 + [f"{i}-0" for i in range(1000)]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["1-0", "2-0"], "limit": 1}, InvalidRequest, "entry_ids"),
        ("v1:0", {}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["1-0"], "older_than_ms": 0}, InvalidRequest, "entry_ids"),
        ("v1:0", {"older_than_ms": -1}, InvalidRequest, "older_than_ms"),
        ("v1:0", {"older_than_ms": 31_536_000_001}, InvalidRequest, "older_than_ms"),
        ("v1:0", {"older_than_ms": True}, InvalidRequest, "older_than_ms"),
        ("v1:0", {"older_than_ms": 0, "limit": 0}, InvalidRequest, "limit"),
        ("v1:0", {"older_than_ms": 0, "limit": 1001}, InvalidRequest, "limit"),
    ],
)
def test_bad_skips_are_refused_and_change_nothing(
    store: MetadataStore, shard: str, kwargs: dict[str, Any], error: type[Exception], field: str
) -> None:
    create(store, shard_count=4)
    join(store, "a")
    produce(store, "v1:0", 2, 4)
    read(store, "v1:0", "a", 2)
    before = stream_state(store, "v1:0"), store.raw_metadata(PREFIX)
    with pytest.raises(error) as refused:
        store.skip_entries(PREFIX, GROUP, shard, **kwargs)
    assert type(refused.value) is error and refused.value.details.get("field") == field
    assert (stream_state(store, "v1:0"), store.raw_metadata(PREFIX)) == before


def test_skip_and_redeliver_refuse_a_retired_shard_and_a_missing_group(store: MetadataStore) -> None:
    create(store, shard_count=2)
    store.change_shard_count(PREFIX, 3, OrderingMode.STRICT)
    store.tick()  # v1 drained at once (empty) and retired
    with pytest.raises(ShardNotFound):
        store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=0)
    with pytest.raises(ShardNotFound):
        store.redeliver(PREFIX, GROUP, "v1:0")
    with pytest.raises(GroupNotFound):
        store.skip_entries(PREFIX, "audit", "v2:0", older_than_ms=0)
    with pytest.raises(GroupNotFound):
        store.redeliver(PREFIX, "audit", "v2:0")
    assert not store.client.exists(rkeys.redeliver_key(PREFIX, GROUP), rkeys.redeliver_key(PREFIX, "audit"))


def test_skip_refuses_when_the_redis_consumer_group_is_gone(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.client.xgroup_destroy(rkeys.stream_key(PREFIX, Shard.parse("v1:0")), GROUP)
    with pytest.raises(GroupNotFound):
        store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=0)


def test_redeliver_bumps_the_shards_token_and_names_the_owner(store: MetadataStore) -> None:
    create(store, shard_count=2)
    assert store.redeliver(PREFIX, GROUP, "v1:1") == {"shard": "v1:1", "redeliver_token": 1, "owner": None}
    join(store, "a")
    assert store.redeliver(PREFIX, GROUP, "v1:1") == {"shard": "v1:1", "redeliver_token": 2, "owner": "a"}
    assert store.redeliver(PREFIX, GROUP, "v1:0")["redeliver_token"] == 1
    assert store.client.hgetall(rkeys.redeliver_key(PREFIX, GROUP)) == {b"v1:1": b"2", b"v1:0": b"1"}
    assert [r["redeliver_token"] for r in store.backlog(PREFIX, GROUP)] == [1, 2]
    with pytest.raises(InvalidRequest):
        store.redeliver(PREFIX, GROUP, "1:0")
    with pytest.raises(ShardNotFound):
        store.redeliver(PREFIX, GROUP, "v1:2")
    assert store.client.hgetall(rkeys.redeliver_key(PREFIX, GROUP)) == {b"v1:1": b"2", b"v1:0": b"1"}


def test_an_id_written_with_leading_zeros_is_the_same_entry_and_is_skipped_once(store: MetadataStore) -> None:
    """Redis reads ``05-0`` as ``5-0``: ids are validated into that canonical form, so one entry listed
    twice is acknowledged and audited once, under the id Redis reports."""
    create(store, shard_count=1)
    join(store, "a")
    ids = produce(store, "v1:0", 2, 1)
    read(store, "v1:0", "a", 2)
    result = store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=["000" + ids[0], ids[0]])
    assert [s["id"] for s in result["skipped"]] == [ids[0]]


# ------------------------------------------------------------------------------------------ what a skip takes


def test_pending_entries_lists_what_the_same_skip_takes_and_changes_nothing(store: MetadataStore) -> None:
    old, recent = old_and_recent_pending(store)
    now_ms = store.describe_prefix(PREFIX)["now_ms"]
    before = stream_state(store, "v1:0"), store.raw_metadata(PREFIX)

    listed = store.pending_entries(PREFIX, GROUP, "v1:0", older_than_ms=3_600_000, limit=2)

    assert (stream_state(store, "v1:0"), store.raw_metadata(PREFIX)) == before
    assert (listed["shard"], listed["not_pending"]) == ("v1:0", [])
    assert [e["id"] for e in listed["entries"]] == old[:2]
    first = listed["entries"][0]
    assert (first["consumer"], first["deliveries"], first["fields"]) == ("a", 1, {"n": "0"})
    assert first["age_ms"] >= now_ms - 1000 and first["idle_ms"] >= 0
    skipped = store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=3_600_000, limit=2)["skipped"]
    assert [s["id"] for s in skipped] == [e["id"] for e in listed["entries"]]
    assert [s["fields"] for s in skipped] == [e["fields"] for e in listed["entries"]]
    # With neither ids nor an age: the oldest pending entries, up to the limit.
    assert [e["id"] for e in store.pending_entries(PREFIX, GROUP, "v1:0")["entries"]] == [old[2], *recent]
    assert [e["id"] for e in store.pending_entries(PREFIX, GROUP, "v1:0", limit=1)["entries"]] == [old[2]]


def test_pending_entries_by_id_names_the_ids_a_skip_would_refuse(store: MetadataStore) -> None:
    create(store, shard_count=1)
    join(store, "a")
    ids = produce(store, "v1:0", 3, 1)
    read(store, "v1:0", "a", 2)
    listed = store.pending_entries(PREFIX, GROUP, "v1:0", entry_ids=[ids[2], ids[0], "1-1"])
    assert [e["id"] for e in listed["entries"]] == [ids[0]]
    assert listed["not_pending"] == [ids[2], "1-1"]
    with pytest.raises(EntryNotPending) as refused:
        store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=[ids[2], ids[0], "1-1"])
    assert refused.value.details["entry_ids"] == listed["not_pending"]


def test_pending_entries_shows_a_trimmed_entry_without_fields_and_cuts_long_values(
    store: MetadataStore,
) -> None:
    create(store, shard_count=1)
    join(store, "a")
    key = rkeys.stream_key(PREFIX, Shard.parse("v1:0"))
    gone = store.client.xadd(key, {"n": "0"}).decode()
    big = store.client.xadd(key, {"payload": "é" * 100_000}).decode()
    read(store, "v1:0", "a", 2)
    store.client.xdel(key, gone)
    entries = {e["id"]: e for e in store.pending_entries(PREFIX, GROUP, "v1:0")["entries"]}
    assert entries[gone]["fields"] is None
    assert entries[big]["fields"] == {"payload": "é" * 4096}
    skipped = {s["id"]: s for s in store.skip_entries(PREFIX, GROUP, "v1:0", older_than_ms=0)["skipped"]}
    assert (skipped[gone]["fields"], skipped[big]["fields"]) == ({}, {"payload": "é" * 4096})


def test_pending_entries_of_a_shard_without_a_consumer_group_finds_nothing_pending(
    store: MetadataStore,
) -> None:
    """A shard the group was released from has no consumer group: nothing is pending there (a skip is
    refused)."""
    create(store, shard_count=1)
    store.client.xgroup_destroy(rkeys.stream_key(PREFIX, Shard.parse("v1:0")), GROUP)
    assert store.pending_entries(PREFIX, GROUP, "v1:0", entry_ids=["1-0"]) == {
        "shard": "v1:0",
        "entries": [],
        "not_pending": ["1-0"],
    }
    assert store.pending_entries(PREFIX, GROUP, "v1:0")["entries"] == []


@pytest.mark.parametrize(
    ("shard", "kwargs", "error", "field"),
    [
        ("v1:9", {}, ShardNotFound, "shard"),
        ("v1", {}, InvalidRequest, "shard"),
        ("v1:0", {"entry_ids": ["1-0"], "older_than_ms": 0}, InvalidRequest, "entry_ids"),
        ("v1:0", {"entry_ids": ["x"]}, InvalidRequest, "entry_ids"),
        ("v1:0", {"older_than_ms": -1}, InvalidRequest, "older_than_ms"),
        ("v1:0", {"limit": 0}, InvalidRequest, "limit"),
    ],
)
def test_pending_entries_refuses_what_a_skip_refuses(
    store: MetadataStore, shard: str, kwargs: dict[str, Any], error: type[Exception], field: str
) -> None:
    create(store, shard_count=2)
    with pytest.raises(error) as refused:
        store.pending_entries(PREFIX, GROUP, shard, **kwargs)
    assert type(refused.value) is error and refused.value.details.get("field") == field
    with pytest.raises(GroupNotFound):
        store.pending_entries(PREFIX, "nobody", "v1:0")
