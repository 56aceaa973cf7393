"""The fenced data plane and the producer on a real 3-primary Redis Cluster: prefixes on every primary,
slots moved under a client with a stale slot map (MOVED), the functions library flushed (a clear error
until the coordinator's tick loads it on every primary), and a reply lost on the way back (the call is
not re-sent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from redis.cluster import RedisCluster

from consumers import idempotency
from consumers.dataplane import DataPlane, DataPlaneUnavailable, library, redis_client
from consumers.dataplane.connection import resends
from consumers.dataplane.plane import FenceStatus, ShardFetch
from consumers.errors import FunctionsNotLoaded, InvalidRequest
from consumers.process import redis_client_for
from consumers.producer import Producer
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore
from rsc_redis import functions
from rsc_redis.clients import node_url
from rsc_redis.keys import meta_key
from tests.cluster.harness import LocalCluster
from tests.cluster.helpers import prefixes_on_every_primary, slot_of_prefix
from tests.dataplane.harness import GROUP, Harness
from tests.dataplane.proxy import LossyProxy

V1_0, V1_1 = Shard(1, 0), Shard(1, 1)


@pytest.fixture
def client(cluster_url: str) -> Iterator[RedisCluster]:
    c = redis_client(cluster_url)
    yield c  # type: ignore[misc]
    c.close()


def test_the_data_plane_client_of_a_cluster_url_never_resends(client: RedisCluster, cluster_url: str) -> None:
    assert isinstance(client, RedisCluster)
    assert resends(client) == 0
    assert isinstance(redis_client_for(cluster_url), RedisCluster)
    DataPlane(client, "orders", GROUP)  # accepted
    # redis-py's default cluster client re-sends a command after a connection error: refused.
    default = RedisCluster.from_url(node_url(cluster_url))
    with pytest.raises(InvalidRequest, match="re-sends"):
        DataPlane(default, "orders", GROUP)
    default.close()


def test_fenced_reads_and_acks_on_every_primary(client: RedisCluster, local_cluster: LocalCluster) -> None:
    for prefix in prefixes_on_every_primary(local_cluster, stem="d"):
        h = Harness(client, prefix=prefix)
        h.create(shard_count=2)
        a = h.join("a")
        assert a.shards == [V1_0, V1_1]
        ids = h.produce(V1_0, 2, 3)
        read = h.plane.read("a", a.epoch, V1_0, 10)
        assert read.ok and [e.entry_id for e in read.entries] == ids
        # Fenced: another member, a future epoch.
        assert h.plane.read("b", 1, V1_0, 10).status is FenceStatus.MEMBER_FENCED
        assert h.plane.read("a", a.epoch + 1, V1_0, 10).status is FenceStatus.STALE_EPOCH
        # The steady state: acks folded into the next fetch, several shards in one script call.
        more = h.produce(V1_1, 2, 2)
        results = h.plane.fetch("a", [ShardFetch(V1_0, a.epoch, ids), ShardFetch(V1_1, a.epoch)], 10)
        assert [r.ok for r in results] == [True, True] and results[0].acked
        assert [e.entry_id for e in results[1].entries] == more
        assert h.pending(V1_0) == [] and [i for i, _ in h.pending(V1_1)] == more
        # The member's own lease renewal (its record lives in the prefix's slot), counted by the fence
        # once the coordinator's deadline has passed.
        assert h.plane.renew_lease("a", a.epoch).renewed
        seconds, micros = client.time()
        client.hset(meta_key(prefix), "l:billing:a", seconds * 1000 + micros // 1000 - 1)
        assert h.plane.read("a", a.epoch, V1_0, 1).ok
        # A hand-over: b joins, a releases v1:1 after acking what it read; then a is NOT_OWNER there.
        assert h.plane.ack("a", a.epoch, V1_1, more) is FenceStatus.OK
        h.join("b")
        h.converge("a", "b")
        owner_of_1 = "a" if V1_1 in h.members["a"].grants else "b"
        other = "b" if owner_of_1 == "a" else "a"
        assert h.plane.read(other, h.members[other].epoch, V1_1, 1).status is FenceStatus.NOT_OWNER


def test_a_slot_moved_under_a_stale_client_is_followed_not_resent(
    client: RedisCluster, local_cluster: LocalCluster
) -> None:
    """MOVED: the script did not run on the old node; the client sends it to the new one, once."""
    (prefix,) = prefixes_on_every_primary(local_cluster, stem="m")[:1]
    h = Harness(client, prefix=prefix)
    h.create(shard_count=1)
    a = h.join("a")
    ids = h.produce(V1_0, 1, 4)
    slot = slot_of_prefix(prefix)
    target = next(s for s in local_cluster.primaries() if s.port != local_cluster.server_for_slot(slot).port)
    local_cluster.move_slot(slot, target)  # the client's slot map is stale now
    first = h.plane.read("a", a.epoch, V1_0, 2)
    assert first.ok and [e.entry_id for e in first.entries] == ids[:2]
    assert [i for i, _ in h.pending(V1_0)] == ids[:2]  # delivered once: not re-run
    # The producer (fast path and batch path) and the store follow as well.
    local_cluster.move_slot(slot, local_cluster.server_for_slot(0))
    key = h.key_for(V1_0, 1)
    h.producer.send(prefix, key, {"n": 99})
    h.producer.send_batch(prefix, [(key, {"n": i}) for i in range(1200)])  # three calls: a pipeline
    assert h.xlen(V1_0) == 4 + 1 + 1200
    assert h.heartbeat("a").epoch == a.epoch


def test_an_ask_during_a_slot_migration_is_followed(
    client: RedisCluster, local_cluster: LocalCluster
) -> None:
    """While a slot migrates, a key already moved answers ASK on the source; the client asks the target."""
    (prefix,) = prefixes_on_every_primary(local_cluster, stem="k")[:1]
    h = Harness(client, prefix=prefix)
    h.create(shard_count=1)
    h.join("a")
    slot = slot_of_prefix(prefix)
    source = local_cluster.server_for_slot(slot)
    target = next(s for s in local_cluster.primaries() if s.port != source.port)
    local_cluster.begin_slot_move(slot, target)
    # A key of the slot that does not exist on the source yet: the source answers ASK.
    probe = f"rsc:{{{prefix}}}:probe"
    assert client.set(probe, "x") and client.get(probe) == b"x"
    local_cluster.finish_slot_move(slot, source, target)
    assert h.heartbeat("a").epoch == 1 and client.get(probe) == b"x"


def test_a_library_flushed_everywhere_is_a_clear_error_until_the_tick_loads_it_on_every_primary(
    client: RedisCluster, local_cluster: LocalCluster, cluster_store: MetadataStore
) -> None:
    """Members and producers send no Lua: after FUNCTION FLUSH on every primary (new or restarted
    nodes) their calls raise FunctionsNotLoaded, nothing runs; the coordinator's tick loads the library
    on every primary, and pipelined calls grouped per node run again."""
    harnesses = [Harness(client, prefix=p) for p in prefixes_on_every_primary(local_cluster, stem="f")]
    for h in harnesses:
        h.create(shard_count=1)
        h.join("a")
    local_cluster.function_flush()
    for h in harnesses:
        with pytest.raises(FunctionsNotLoaded, match="redis_functions load"):
            h.producer.send(h.prefix, h.key_for(V1_0, 1), {"n": 0})
        with pytest.raises(FunctionsNotLoaded):
            h.producer.require_functions()
        assert h.xlen(V1_0) == 0
    cluster_store.tick()
    installed = functions.installed_libraries(client)
    assert len(installed) == 3 and all(names == [library.library().name] for names in installed.values())
    for h in harnesses:
        prefix = h.prefix
        key = h.key_for(V1_0, 1)
        h.producer.require_functions()
        assert h.producer.send(prefix, key, {"n": 1}).shard == V1_0
        h.producer.send_batch(prefix, [(key, {"n": i}) for i in range(600)])  # pipelined calls
        assert h.xlen(V1_0) == 601
        a = h.heartbeat("a")
        assert len(h.plane.read("a", a.epoch, V1_0, 1000).entries) == 601


def _sha(name: str) -> str:
    """What the proxies watch for: the function's name, which every FCALL of it carries."""
    return library.function_name(name)


def test_a_read_whose_reply_is_lost_on_a_cluster_node_is_not_resent(
    client: RedisCluster, local_cluster: LocalCluster, cluster_url: str
) -> None:
    """Every node reached through a proxy that can drop a reply after Redis ran the call: the cluster
    client raises DataPlaneUnavailable and sends the call once, like the one-Redis client."""
    (prefix,) = prefixes_on_every_primary(local_cluster, stem="l")[:1]
    h = Harness(client, prefix=prefix)
    h.create(shard_count=1)
    a = h.join("a")
    ids = h.produce(V1_0, 1, 3)
    proxies = {s.port: LossyProxy(s.port) for s in local_cluster.servers}
    try:
        remap = {("127.0.0.1", port): ("127.0.0.1", p.port) for port, p in proxies.items()}
        lossy = redis_client(cluster_url, address_remap=lambda address: remap.get(address, address))
        plane = DataPlane(lossy, prefix, GROUP)
        for p in proxies.values():
            p.lose_replies(_sha("read_new"), times=1)
        with pytest.raises(DataPlaneUnavailable) as caught:
            plane.read("a", a.epoch, V1_0, 2)
        assert isinstance(caught.value.__cause__, redis.ConnectionError | redis.TimeoutError)
        assert sum(p.calls_seen for p in proxies.values()) == 1  # sent once, never re-sent
        assert [i for i, _ in h.pending(V1_0)] == ids[:2]  # it ran; the reply was lost
        # The way back, as a member does it: its own pending entries first, then new ones.
        for p in proxies.values():
            p.lose_replies(_sha("read_new"), times=0)
        assert [e.entry_id for e in plane.read_own_pending("a", a.epoch, V1_0, 10).entries] == ids[:2]
        assert [e.entry_id for e in plane.read("a", a.epoch, V1_0, 10).entries] == ids[2:]
        lossy.close()
    finally:
        for p in proxies.values():
            p.close()
    assert urlparse(cluster_url).scheme == "redis+cluster"


def test_a_batch_whose_reply_is_lost_on_a_cluster_node_is_not_resent(
    client: RedisCluster, local_cluster: LocalCluster, cluster_url: str
) -> None:
    """The producer's pipelined batch (several script calls) on a cluster: a lost reply raises, and
    nothing is appended twice (redis-py's ClusterPipeline would re-send it; the producer does not use it)."""
    (prefix,) = prefixes_on_every_primary(local_cluster, stem="b")[:1]
    h = Harness(client, prefix=prefix)
    h.create(shard_count=1)
    key = h.key_for(V1_0, 1)
    proxies = {s.port: LossyProxy(s.port) for s in local_cluster.servers}
    try:
        remap = {("127.0.0.1", port): ("127.0.0.1", p.port) for port, p in proxies.items()}
        lossy = redis_client(cluster_url, address_remap=lambda address: remap.get(address, address))
        producer = Producer(lossy)
        producer.send(prefix, key, {"n": -1})  # loads the route and the script
        for p in proxies.values():
            p.lose_replies(_sha("produce"), times=1)
        with pytest.raises(DataPlaneUnavailable):
            producer.send_batch(prefix, [(key, {"n": i}) for i in range(1000)])  # two calls, pipelined
        # The first call ran (its reply was lost); the second ran too, or never reached Redis before the
        # cut. A re-send of either (what ClusterPipeline does) would leave 1 + 500 + 1000 or more.
        assert h.xlen(V1_0) in (1 + 500, 1 + 1000)
        lossy.close()
    finally:
        for p in proxies.values():
            p.close()


def test_idempotent_sends_whose_replies_are_lost_are_appended_once_on_every_primary(
    client: RedisCluster, local_cluster: LocalCluster, cluster_url: str
) -> None:
    """Enqueue once on a cluster (docs/producer.md, "Enqueue once"): the idempotency keys share the
    prefix's slot, so ``idempotent_produce`` runs on each prefix's primary; a single send and a batch of
    two pipelined calls lose their replies, and the retries append nothing more."""
    prefixes = prefixes_on_every_primary(local_cluster, stem="once")
    proxies = {s.port: LossyProxy(s.port) for s in local_cluster.servers}
    try:
        remap = {("127.0.0.1", port): ("127.0.0.1", p.port) for port, p in proxies.items()}
        lossy = redis_client(cluster_url, address_remap=lambda address: remap.get(address, address))
        producer = Producer(lossy)
        assert idempotency.server_has_xadd_idmp(lossy) is False  # HELLO on every primary: Redis 7
        for prefix in prefixes:
            h = Harness(client, prefix=prefix)
            h.create(shard_count=2)
            producer.route(prefix)
            items = [(f"k{i}", {"n": i}) for i in range(Producer.max_entries_per_call + 100)]
            keys = [f"job-{i}" for i in range(len(items))]
            for p in proxies.values():
                p.lose_replies(_sha("idempotent_produce"), times=1)
            with pytest.raises(DataPlaneUnavailable):
                producer.send(prefix, "k", {"n": -1}, idempotency_key="single")
            for p in proxies.values():
                p.lose_replies(_sha("idempotent_produce"), times=1)
            with pytest.raises(DataPlaneUnavailable):
                producer.send_batch(prefix, items, idempotency_keys=keys)  # two calls, pipelined
            for p in proxies.values():
                p.lose_replies(_sha("idempotent_produce"), times=0)

            single = producer.send(prefix, "k", {"n": -1}, idempotency_key="single")
            batch = producer.send_batch(prefix, items, idempotency_keys=keys)

            assert single.duplicate  # the lost call ran: its retry got the first append
            assert sum(r.duplicate for r in batch) in (Producer.max_entries_per_call, len(items))
            assert h.xlen(V1_0) + h.xlen(V1_1) == 1 + len(items)  # every key once, whatever was lost
        lossy.close()
    finally:
        for p in proxies.values():
            p.close()


def _waiting(wait: Any, after: dict[str, str]) -> tuple[Any, list[list[str]]]:
    """``wait.wait(after)`` on a thread of its own (armed first): the thread and where its result goes."""
    import threading

    got: list[list[str]] = []
    wait.arm()
    thread = threading.Thread(target=lambda: got.append(wait.wait(after, 10_000)), daemon=True)
    thread.start()
    return thread, got


def test_a_member_waits_for_new_entries_on_the_primary_of_its_prefix(
    client: RedisCluster, local_cluster: LocalCluster
) -> None:
    """The wake-up on a cluster: one XREAD over a prefix's streams (one slot), on that prefix's primary,
    ended by CLIENT UNBLOCK sent to the same node; on every primary."""
    import time

    for prefix in prefixes_on_every_primary(local_cluster, stem="w"):
        h = Harness(client, prefix=prefix)
        h.create(shard_count=2)
        a = h.join("a")
        idle = h.plane.fetch("a", [ShardFetch(s, a.epoch, token="0", wait=True) for s in (V1_0, V1_1)], 10)
        after = {h.plane.stream_key(s): r.last_id for s, r in zip((V1_0, V1_1), idle, strict=True)}
        assert set(after.values()) == {"0-0"}
        wait = h.plane.entry_wait()
        wait.probe()
        try:
            thread, got = _waiting(wait, after)
            time.sleep(0.05)
            h.produce(V1_1, 2, 1)
            thread.join(5)
            assert got == [[h.plane.stream_key(V1_1)]]
            thread, got = _waiting(wait, {h.plane.stream_key(V1_0): "0-0"})
            deadline = time.monotonic() + 5
            while not wait.interrupt():
                assert time.monotonic() < deadline
                time.sleep(0.001)
            thread.join(5)
            assert got == [[]]
        finally:
            wait.close()


def test_after_a_connection_error_the_next_call_reads_the_slot_map_before_it_sends(
    client: RedisCluster, local_cluster: LocalCluster, cluster_url: str
) -> None:
    """A failover as one client sees it: the node its slot map names for the prefix stops answering
    (its proxy closed), and the slot is served elsewhere. The failed call marks the map stale; the next
    one reads it afresh first and goes to the new node (redis-py's own refresh, right after the error,
    would run before a promotion and still name the dead node)."""
    (prefix,) = prefixes_on_every_primary(local_cluster, stem="f")[:1]
    h = Harness(client, prefix=prefix)
    h.create(shard_count=1)
    a = h.join("a")
    ids = h.produce(V1_0, 1, 3)
    proxies = {s.port: LossyProxy(s.port) for s in local_cluster.servers}
    remap = {("127.0.0.1", port): ("127.0.0.1", p.port) for port, p in proxies.items()}
    flaky = redis_client(cluster_url, address_remap=lambda address: remap.get(address, address))
    plane = DataPlane(flaky, prefix, GROUP)
    slot = slot_of_prefix(prefix)
    source = local_cluster.server_for_slot(slot)
    target = next(s for s in local_cluster.primaries() if s.port != source.port)
    try:
        assert plane.read_own_pending("a", a.epoch, V1_0, 10).ok  # the slot map is learned
        local_cluster.move_slot(slot, target)
        proxies[source.port].close()  # the node the client's map names no longer answers
        with pytest.raises(DataPlaneUnavailable) as caught:
            plane.read("a", a.epoch, V1_0, 10)
        assert isinstance(caught.value.__cause__, redis.ConnectionError)
        result = plane.read("a", a.epoch, V1_0, 10)  # the map read afresh first: the new node
        assert result.ok and [e.entry_id for e in result.entries] == ids
    finally:
        flaky.close()
        for p in proxies.values():
            p.close()
        local_cluster.move_slot(slot, source)
