"""The metadata store on a real 3-primary Redis Cluster: prefixes spread over every primary, each
prefix's keys in one slot (its ``{P}`` tag), the global keys in theirs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis.cluster import RedisCluster

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import GroupNotFound, StreamPrefixNotFound
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, OrderingMode, Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys
from rsc_redis.clients import is_cluster
from tests.cluster.harness import LocalCluster
from tests.cluster.helpers import prefixes_on_every_primary, slot_of_prefix

GROUP = "billing"


def create(
    store: MetadataStore, prefix: str, shard_count: int = 2, group: str = GROUP, **config: int
) -> None:
    defaults = {"lease_ttl_ms": 10_000, "heartbeat_interval_ms": 1_000}
    store.create_group(
        CreateGroup(
            stream_prefix=prefix,
            consumer_group=group,
            shard_count=shard_count,
            config=GroupConfig(**{**defaults, **config}),
        )
    )


def hb(store: MetadataStore, prefix: str, member: str, epoch: int, owned: Any = None) -> dict[str, Any]:
    owned_set = None if owned is None else frozenset(Shard.parse(s) for s in owned)
    return store.heartbeat(
        prefix, GROUP, Heartbeat(member_id=member, member_epoch=epoch, owned=owned_set, capacity=4)
    )


def shards_of(response: dict[str, Any]) -> list[str]:
    return [s["shard"] for s in response["shards"]]


def test_the_cluster_url_builds_a_cluster_client(cluster_store: MetadataStore) -> None:
    assert is_cluster(cluster_store.client) and isinstance(cluster_store.client, RedisCluster)


def test_groups_on_prefixes_of_every_primary_live_their_whole_life(
    cluster_store: MetadataStore, local_cluster: LocalCluster, admin: RedisCluster
) -> None:
    store = cluster_store
    prefixes = prefixes_on_every_primary(local_cluster)
    assert len({local_cluster.server_for_slot(slot_of_prefix(p)).port for p in prefixes}) == 3
    for prefix in prefixes:
        create(store, prefix, shard_count=2)
        create(store, prefix, shard_count=2, group="audit")
    assert store.stream_prefixes() == sorted(prefixes)
    assert {(r["stream_prefix"], r["consumer_group"]) for r in store.list_groups()} == {
        (p, g) for p in prefixes for g in (GROUP, "audit")
    }
    for prefix in prefixes:
        # Every key of the prefix, on the primary of its tag's slot.
        for i in range(2):
            groups = admin.xinfo_groups(rkeys.stream_key(prefix, Shard(1, i)))
            assert sorted(g["name"] for g in groups) == ["audit", GROUP]
        # Join (full path), then steady (fast path: the lease moves, nothing else).
        a = hb(store, prefix, "a", 0, [])
        assert (a["member_epoch"], shards_of(a)) == (1, ["v1:0", "v1:1"])
        steady = hb(store, prefix, "a", 1, shards_of(a))
        assert steady["member_state"] == "STABLE" and steady["member_epoch"] == 1
        b = hb(store, prefix, "b", 0, [])
        assert b["member_state"] == "UNRELEASED_SHARDS"
        assert store.describe_group(prefix, GROUP)["group_epoch"] == 2

    # Resharding on every primary: the new version's streams and consumer groups exist, the tick
    # drains and retires the old one.
    for prefix in prefixes:
        store.change_shard_count(prefix, 4, OrderingMode.STRICT)
        assert store.raw_metadata(prefix)[b"route"] == b"2 4 1"
        for i in range(4):
            assert len(admin.xinfo_groups(rkeys.stream_key(prefix, Shard(2, i)))) == 2
    reports = store.tick()
    assert sorted(r.stream_prefix for r in reports) == sorted(prefixes)
    assert all(r.error is None and r.retired_versions == (1,) for r in reports)
    for prefix in prefixes:
        view = store.describe_prefix(prefix)
        assert view["topology"]["active_version"] == 2 and not view["migration"]["active"]

    # Delete: the groups (and their Redis consumer groups), then the prefix.
    for prefix in prefixes:
        store.delete_group(prefix, "audit")
        assert [g["name"] for g in admin.xinfo_groups(rkeys.stream_key(prefix, Shard(2, 0)))] == [GROUP]
        with pytest.raises(GroupNotFound):
            store.describe_group(prefix, "audit")
    gone = prefixes[0]
    store.delete_prefix(gone, force=True)
    with pytest.raises(StreamPrefixNotFound):
        store.describe_prefix(gone)
    assert store.stream_prefixes() == sorted(prefixes[1:])
    assert admin.exists(rkeys.meta_key(gone), rkeys.stream_key(gone, Shard(2, 0))) == 0


def test_the_tick_expires_members_on_every_primary(
    cluster_store: MetadataStore, local_cluster: LocalCluster
) -> None:
    store = cluster_store
    prefixes = prefixes_on_every_primary(local_cluster, stem="t")
    for prefix in prefixes:
        create(store, prefix, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
        hb(store, prefix, "a", 0, [])
    time.sleep(1.1)
    reports = store.tick()
    assert sorted((r.stream_prefix, r.expired) for r in reports) == sorted(
        (p, (("billing", "a"),)) for p in prefixes
    )


def test_scripts_are_loaded_on_the_node_that_runs_them(
    cluster_store: MetadataStore, local_cluster: LocalCluster
) -> None:
    """After SCRIPT FLUSH everywhere (a restarted or promoted node has no scripts), EVALSHA's NOSCRIPT
    is answered by loading the script and calling it again, on whichever primary serves the prefix;
    so is a pipeline of scripts (the retention pass)."""
    store = cluster_store
    prefixes = prefixes_on_every_primary(local_cluster, stem="s")
    for prefix in prefixes:
        create(store, prefix)
    local_cluster.script_flush()
    for prefix in prefixes:
        assert hb(store, prefix, "a", 0, [])["member_epoch"] == 1
    local_cluster.script_flush()
    reports = store.retention_pass()
    assert sorted(r.stream_prefix for r in reports) == sorted(prefixes)
    assert all(r.error is None for r in reports)


def test_a_credentials_limits_check_members_on_every_primary(
    cluster_store: MetadataStore, local_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential's two keys share its hash tag (one script, one slot); the check at its cap reads the
    metadata of prefixes on every primary in one pipeline."""
    from coordinator.protocol.errors import CredentialMemberLimitReached
    from coordinator.store import JoinLimits, credential_limits

    monkeypatch.setattr(credential_limits, "TRUST_MS", 0)  # every member checked at the cap
    prefixes = prefixes_on_every_primary(local_cluster)
    owner = "database:42"
    limits = JoinLimits(max_members=len(prefixes), period_ms=1, burst=100)
    for prefix in prefixes:
        create(cluster_store, prefix)
        assert cluster_store.credential_limits.admit(owner, prefix, GROUP, "m", limits).counted
        join = Heartbeat(member_id="m", member_epoch=0, capacity=1, owner=owner)
        cluster_store.heartbeat(prefix, GROUP, join)
    with pytest.raises(CredentialMemberLimitReached):  # every one checked, on its primary: live
        cluster_store.credential_limits.admit(owner, prefixes[0], GROUP, "n", limits)
    cluster_store.delete_group(prefixes[-1], GROUP)
    assert cluster_store.credential_limits.admit(owner, prefixes[0], GROUP, "n", limits).counted
