"""Every Lua script of the store and the data plane runs on a cluster, on prefixes of every primary.
Redis Cluster refuses a script that touches a key of another slot than its declared keys (and a key
served by another node), so each call below would fail if a script mixed slots."""

from __future__ import annotations

from redis.cluster import RedisCluster

from consumers.dataplane import redis_client
from coordinator.protocol.group import LEAVE_EPOCH, Heartbeat
from coordinator.protocol.model import OrderingMode, RetentionPolicy, Shard
from coordinator.store import MetadataStore
from tests.cluster.harness import LocalCluster
from tests.cluster.helpers import prefixes_on_every_primary
from tests.dataplane.harness import GROUP, Harness

V1_0, V2_0 = Shard(1, 0), Shard(2, 0)


def test_operator_and_data_plane_scripts_on_every_primary(
    cluster_store: MetadataStore, local_cluster: LocalCluster, cluster_url: str
) -> None:
    client: RedisCluster = redis_client(cluster_url)  # type: ignore[assignment]
    store = cluster_store
    for prefix in prefixes_on_every_primary(local_cluster, stem="o"):
        h = Harness(client, prefix=prefix)
        h.create(shard_count=1)
        a = h.join("a")
        ids = h.produce(V1_0, 1, 6)
        assert [e.entry_id for e in h.plane.read("a", a.epoch, V1_0, 6).entries] == ids
        # read_pending.lua, dead_letter.lua, ack.lua
        assert [e.entry_id for e in h.plane.read_own_pending("a", a.epoch, V1_0, 10).entries] == ids
        assert h.plane.dead_letter("a", a.epoch, V1_0, ids[0], "ValueError: bad").dead_lettered
        # skip.lua, redeliver.lua (operator scripts)
        assert [
            r["id"] for r in store.skip_entries(prefix, GROUP, "v1:0", entry_ids=[ids[1]])["skipped"]
        ] == [ids[1]]
        assert store.redeliver(prefix, GROUP, "v1:0")
        # claim.lua, delete_ghosts.lua: b takes over a's shard (a leaves without acking the rest).
        store.heartbeat(prefix, GROUP, Heartbeat(member_id="a", member_epoch=LEAVE_EPOCH))
        b = h.join("b")
        claimed, _cursor = h.plane.claim_orphans("b", b.epoch, V1_0, 10)
        assert [e.entry_id for e in claimed.entries] == ids[2:]
        assert h.plane.ack("b", b.epoch, V1_0, ids[2:]).value == "OK"
        assert h.plane.delete_ghost_consumers("b", b.epoch, V1_0) == 1
        # replay_dead_letter.lua, purge_dead_letters.lua
        (letter,) = store.dead_letters(prefix, GROUP)["entries"]
        store.replay_dead_letters(prefix, GROUP, [letter["id"]])
        h.produce(V1_0, 1, 1)
        letter_id = h.plane.dead_letter("b", b.epoch, V1_0, _read_one(h, b.epoch), "E: again").dead_letter_id
        assert letter_id and store.purge_dead_letters(prefix, GROUP, None)
        # A resharding whose old version is released (forget_released.lua) then deleted by retention
        # (delete_retired.lua); trim.lua on the new version.
        store.change_shard_count(prefix, 2, OrderingMode.STRICT)
        store.set_retention(prefix, RetentionPolicy(retired_grace_ms=0))
        store.heartbeat(prefix, GROUP, Heartbeat(member_id="b", member_epoch=LEAVE_EPOCH))
        count = store.unconsumed_for_release(prefix, GROUP)
        store.release_drain(prefix, GROUP, confirm_unconsumed=count)
        store.tick()
    reports = store.retention_pass()
    assert all(r.error is None for r in reports), reports
    assert sum(len(r.deleted_keys) for r in reports) == 3  # every prefix's retired v1:0
    client.close()


def _read_one(h: Harness, epoch: int) -> str:
    (entry,) = h.plane.read("b", epoch, V1_0, 1).entries
    return entry.entry_id
