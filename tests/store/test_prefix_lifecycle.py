"""Deleting stream prefixes and groups, the retention policy's storage, the ended-member cap and the named
blockers of a migration, against a real Redis.

A refused deletion must change nothing: the metadata hash is compared byte for byte, and every key of
the prefix is still there with the same content.
"""

from __future__ import annotations

import time

import orjson
import pytest

from coordinator.protocol.commands import DeletePrefix, apply
from coordinator.protocol.errors import (
    InvalidIdentifier,
    InvalidRequest,
    MigrationInProgress,
    StreamPrefixNotEmpty,
    StreamPrefixNotFound,
)
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import OrderingMode, RetentionPolicy, Shard
from coordinator.store import MetadataStore, codec
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create


def snapshot(store: MetadataStore) -> dict[bytes, object]:
    """Every key of the prefix with its full content, and the prefix index."""
    keys = sorted(store.client.keys(f"rsc:{{{PREFIX}}}:*"))
    content: dict[bytes, object] = {b"rsc:prefixes": sorted(store.client.smembers(rkeys.PREFIXES_KEY))}
    for key in keys:
        kind = store.client.type(key)
        if kind == b"hash":
            content[key] = store.client.hgetall(key)
        elif kind == b"stream":
            content[key] = (store.client.xrange(key), store.client.xinfo_groups(key))
        else:
            content[key] = kind
    return content


def prefix_keys(store: MetadataStore) -> list[bytes]:
    return sorted(store.client.keys(f"rsc:{{{PREFIX}}}:*"))


def stream(index: int, version: int = 1) -> str:
    return rkeys.stream_key(PREFIX, Shard(version=version, index=index))


def add_dead_letter_and_redeliver(store: MetadataStore, group: str = GROUP) -> None:
    store.client.xadd(rkeys.dead_letter_key(PREFIX, group), {"payload": "x", "dlq_source_shard": "v1:0"})
    store.client.hincrby(rkeys.redeliver_key(PREFIX, group), "v1:0", 1)


# ------------------------------------------------------------------------------------------ delete_prefix


def test_deleting_a_prefix_with_groups_is_refused_and_changes_nothing(store: MetadataStore) -> None:
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    store.client.xadd(stream(0), {"n": "1"})
    add_dead_letter_and_redeliver(store)
    before = snapshot(store)
    usage = store.prefix_usage(PREFIX)
    assert usage == {"groups": ["audit", GROUP], "unconsumed_entries": 2, "streams": 2}

    with pytest.raises(StreamPrefixNotEmpty) as refused:
        store.delete_prefix(PREFIX)

    assert refused.value.details == {
        "stream_prefix": PREFIX,
        "consumer_groups": ["audit", GROUP],
        "unconsumed_entries": 2,
    }
    assert "consumer groups audit, billing and 2 entries" in refused.value.message
    assert snapshot(store) == before
    assert store.raw_metadata(PREFIX) == before[rkeys.meta_key(PREFIX).encode()]


def test_a_prefix_without_groups_but_with_entries_is_refused_too(store: MetadataStore) -> None:
    create(store, shard_count=2)
    store.client.xadd(stream(1), {"n": "1"})
    store.client.xadd(stream(1), {"n": "2"})
    store.delete_group(PREFIX, GROUP)
    before = snapshot(store)
    with pytest.raises(StreamPrefixNotEmpty) as refused:
        store.delete_prefix(PREFIX, force=False)
    assert refused.value.details == {"stream_prefix": PREFIX, "consumer_groups": [], "unconsumed_entries": 2}
    assert snapshot(store) == before


def test_forced_deletion_removes_every_key_of_the_prefix_and_its_index_entry(store: MetadataStore) -> None:
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    store.change_shard_count(PREFIX, 3, OrderingMode.STRICT)
    store.client.xadd(stream(0), {"n": "1"})
    add_dead_letter_and_redeliver(store)
    add_dead_letter_and_redeliver(store, "audit")
    other = rkeys.stream_key("other", Shard(version=1, index=0))
    store.client.xadd(other, {"n": "1"})  # another prefix: untouched

    # meta + 2 + 3 streams + 2 dead-letter streams + 2 redeliver hashes
    assert store.delete_prefix(PREFIX, force=True) == {"deleted_keys": 10}

    assert prefix_keys(store) == []
    assert PREFIX.encode() not in store.client.smembers(rkeys.PREFIXES_KEY)
    assert store.client.exists(other) == 1
    with pytest.raises(StreamPrefixNotFound):
        store.describe_prefix(PREFIX)
    with pytest.raises(StreamPrefixNotFound):
        store.delete_prefix(PREFIX, force=True)
    assert store.tick() == []


def test_an_empty_prefix_is_deleted_without_force_and_can_be_created_again(store: MetadataStore) -> None:
    create(store, shard_count=2)
    store.delete_group(PREFIX, GROUP)
    assert store.prefix_usage(PREFIX) == {"groups": [], "unconsumed_entries": 0, "streams": 2}
    assert store.delete_prefix(PREFIX) == {"deleted_keys": 3}
    assert prefix_keys(store) == []
    create(store, shard_count=5)  # a new prefix under the old name: fresh topology and index entry
    view = store.describe_prefix(PREFIX)
    assert (view["topology"]["shard_count"], [v["version"] for v in view["topology"]["versions"]]) == (5, [1])
    assert PREFIX.encode() in store.client.smembers(rkeys.PREFIXES_KEY)


def test_entries_appended_after_the_count_stop_an_unforced_deletion_atomically(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script counts again: an append that raced prefix_usage is not deleted silently."""
    create(store, shard_count=1)
    store.delete_group(PREFIX, GROUP)
    real_usage = store.retention.prefix_usage

    def usage_then_append(prefix: str) -> dict[str, object]:
        result = real_usage(prefix)
        store.client.xadd(stream(0), {"n": "late"})
        return result

    monkeypatch.setattr(store.retention, "prefix_usage", usage_then_append)
    before_meta = store.raw_metadata(PREFIX)
    with pytest.raises(StreamPrefixNotEmpty) as refused:
        store.delete_prefix(PREFIX)
    assert refused.value.details["unconsumed_entries"] == 1
    assert store.raw_metadata(PREFIX) == before_meta
    assert store.client.xlen(stream(0)) == 1


def test_a_deletion_decided_on_an_old_topology_is_a_conflict_and_deletes_nothing(
    store: MetadataStore,
) -> None:
    create(store, shard_count=1)
    store.delete_group(PREFIX, GROUP)
    loaded = store._load(PREFIX, None)
    command = DeletePrefix(stream_prefix=PREFIX)
    outcome = apply(loaded.state, command, loaded.now_ms)
    create(store, shard_count=1, group="late")  # the topology changes after the decision
    before = snapshot(store)
    assert store.retention.commit_deletion(command, loaded.topology_rev, outcome) is None
    assert snapshot(store) == before


def test_force_must_be_a_boolean_and_the_prefix_an_identifier(store: MetadataStore) -> None:
    create(store, shard_count=1)
    with pytest.raises(InvalidRequest):
        store.delete_prefix(PREFIX, force="true")  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifier):
        store.delete_prefix("a}b", force=True)
    with pytest.raises(InvalidIdentifier):
        store.prefix_usage("")


# ------------------------------------------------------------------------------------------ delete_group


def test_deleting_a_group_deletes_its_dead_letters_and_redeliver_counters_only(store: MetadataStore) -> None:
    create(store, shard_count=1)
    create(store, shard_count=1, group="audit")
    add_dead_letter_and_redeliver(store)
    add_dead_letter_and_redeliver(store, "audit")
    store.delete_group(PREFIX, GROUP)
    assert store.client.exists(rkeys.dead_letter_key(PREFIX, GROUP), rkeys.redeliver_key(PREFIX, GROUP)) == 0
    assert (
        store.client.exists(rkeys.dead_letter_key(PREFIX, "audit"), rkeys.redeliver_key(PREFIX, "audit")) == 2
    )


# ------------------------------------------------------------------------------------------ retention policy


def test_the_policy_is_stored_in_the_topology_document(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.set_retention(PREFIX, RetentionPolicy(max_len=5_000))
    doc = orjson.loads(store.raw_metadata(PREFIX)[b"t"])
    assert doc["retention"] == {"mode": "acked", "max_age_ms": None, "max_len": 5_000, "retired_grace_ms": 0}
    revision = store.raw_metadata(PREFIX)[b"t#"]
    store.set_retention(PREFIX, RetentionPolicy(max_len=5_000))  # unchanged: nothing written
    assert store.raw_metadata(PREFIX)[b"t#"] == revision


def test_a_topology_document_from_before_retention_reads_as_the_default_policy(store: MetadataStore) -> None:
    create(store, shard_count=1)
    doc = orjson.loads(store.raw_metadata(PREFIX)[b"t"])
    del doc["retention"]
    store.client.hset(rkeys.meta_key(PREFIX), "t", orjson.dumps(doc))
    assert store.describe_prefix(PREFIX)["retention"]["max_len"] is None
    topology, groups = codec.decode_topology(orjson.dumps(doc))
    assert (topology.retention, groups) == (RetentionPolicy(), [GROUP])
    # Other commands keep working on it, and the next topology change writes the policy.
    store.change_shard_count(PREFIX, 2, OrderingMode.STRICT)
    assert "retention" in orjson.loads(store.raw_metadata(PREFIX)[b"t"])


def test_set_retention_on_a_missing_prefix_is_not_found(store: MetadataStore) -> None:
    with pytest.raises(StreamPrefixNotFound):
        store.set_retention(PREFIX, RetentionPolicy())


# ---------------------------------------------------------------------------------- tick and migration


def test_the_tick_caps_ended_members_per_group(store: MetadataStore) -> None:
    create(store, shard_count=1)
    for i in range(5):
        store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=f"m{i}", member_epoch=0, capacity=1))
        store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=f"m{i}", member_epoch=-1))
        time.sleep(0.003)  # distinct end times (Redis's clock, ms): "most recently ended" is then defined
    reports = store.tick(max_ended_members=2)
    assert [r.collected for r in reports] == [((GROUP, "m0"), (GROUP, "m1"), (GROUP, "m2"))]
    members = store.describe_group(PREFIX, GROUP)["members"]
    assert [m["member_id"] for m in members] == ["m3", "m4"]
    assert not any(k.startswith(b"l:billing:m0") for k in store.raw_metadata(PREFIX))  # leases go too


def test_a_blocked_shard_count_change_names_the_groups_and_shards(store: MetadataStore) -> None:
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="a", member_epoch=0, capacity=1))
    store.client.xadd(stream(1), {"n": "1"})  # nobody reads it: v1:1 stays undrained for both groups
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # v1:0 is empty: drained by both groups
    before = store.raw_metadata(PREFIX)
    with pytest.raises(MigrationInProgress) as refused:
        store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)
    assert refused.value.details["blocking"] == {"audit": ["v1:1"], GROUP: ["v1:1"]}
    assert refused.value.details["groups_without_live_members"] == ["audit"]
    assert "group audit (no live members; v1:1), group billing (v1:1)" in refused.value.message
    assert store.raw_metadata(PREFIX) == before
