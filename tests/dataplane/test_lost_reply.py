"""A data-plane call is sent once (issue 7, A): when a connection is cut after the request, the caller
gets ``DataPlaneUnavailable`` and decides; the client library never re-runs the script behind its back.

The fault is real: :class:`tests.dataplane.proxy.LossyProxy` forwards the script call to Redis, which
runs it, and drops the reply.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from consumers.dataplane import DataPlane, DataPlaneUnavailable, library, redis_client, scripts
from consumers.dataplane.connection import resends
from consumers.errors import InvalidRequest
from consumers.process import redis_client_for
from consumers.producer import Producer
from coordinator.protocol.model import Shard
from rsc_redis.keys import lease_records_key, meta_key, redeliver_key
from tests.dataplane.harness import GROUP, PREFIX, Harness
from tests.dataplane.proxy import LossyProxy, has_entries

V1_0 = Shard(1, 0)


def sha(name: str) -> str:
    """What the proxy watches for: the function's name, which every FCALL of it carries."""
    return library.function_name(name)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[LossyProxy]:
    port = urlparse(redis_url).port
    assert port is not None
    with LossyProxy(port) as p:
        yield p


def test_a_read_whose_reply_is_lost_is_not_resent_and_its_entries_wait_in_the_pending_list(
    harness: Harness, proxy: LossyProxy
) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 3)
    client = redis_client_for(proxy.url)
    plane = DataPlane(client, PREFIX, GROUP)
    proxy.lose_replies(sha("read_new"), times=1)

    with pytest.raises(DataPlaneUnavailable) as caught:
        plane.read("m1", m1.epoch, V1_0, 2)

    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert (proxy.calls_seen, proxy.cuts) == (1, 1)  # sent once, never re-sent
    assert h.pending(V1_0) == [(i, "m1") for i in ids[:2]]  # it ran: delivered, reply lost
    # The way back (what a member does): its own pending entries first, in order, then new ones.
    recovered = plane.read_own_pending("m1", m1.epoch, V1_0, 10)
    assert [e.entry_id for e in recovered.entries] == ids[:2]
    assert [e.entry_id for e in plane.read("m1", m1.epoch, V1_0, 10).entries] == ids[2:]
    assert proxy.calls_seen == 2
    client.close()


def test_a_read_that_times_out_is_not_resent_either(harness: Harness, proxy: LossyProxy) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    client = redis_client(proxy.url, socket_timeout=0.3)
    plane = DataPlane(client, PREFIX, GROUP)
    proxy.lose_replies(sha("read_new"), times=1, swallow=True)

    with pytest.raises(DataPlaneUnavailable) as caught:
        plane.read("m1", m1.epoch, V1_0, 10)

    assert isinstance(caught.value.__cause__, redis.TimeoutError)
    assert (proxy.calls_seen, proxy.cuts) == (1, 1)
    assert h.pending(V1_0) == [(i, "m1") for i in ids]
    assert plane.read("m1", m1.epoch, V1_0, 10).entries == []  # a new connection; nothing new
    client.close()


def test_a_client_that_resends_runs_the_script_twice_and_strands_the_first_runs_entries(
    harness: Harness, proxy: LossyProxy
) -> None:
    """Why the clients are configured: redis-py's retry re-sends the call, Redis runs it again, and the
    caller only ever sees the second run. The data plane therefore refuses such a client."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 4)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 3))
    read_new = scripts.function(client, "read_new")
    proxy.lose_replies(sha("read_new"), times=1)

    reply = read_new(
        keys=[meta_key(PREFIX), h.stream(V1_0), redeliver_key(PREFIX, GROUP), lease_records_key(PREFIX)],
        args=[GROUP, "m1", m1.epoch, str(V1_0), 2],
    )

    assert proxy.calls_seen == 2  # re-sent behind the caller's back
    assert [entry[0].decode() for entry in reply[1]] == ids[2:4]  # what the caller sees
    assert h.pending(V1_0) == [(i, "m1") for i in ids]  # ids[:2] too: delivered, never returned
    with pytest.raises(InvalidRequest, match="re-sends a command"):
        DataPlane(client, PREFIX, GROUP)
    client.close()


def test_an_append_whose_reply_is_lost_is_not_resent(harness: Harness, proxy: LossyProxy) -> None:
    h = harness
    h.create(shard_count=1)
    client = redis_client(proxy.url)
    producer = Producer(client)
    producer.route(PREFIX)  # cached before the cut
    proxy.lose_replies(sha("produce"), times=1)

    with pytest.raises(DataPlaneUnavailable):
        producer.send(PREFIX, "k", {"n": 1})

    assert proxy.calls_seen == 1
    assert h.xlen(V1_0) == 1  # appended once: the outcome was unknown to the caller, not doubled
    client.close()


@pytest.mark.parametrize("swallow", [False, True], ids=["connection-cut", "timeout"])
def test_an_idempotent_send_whose_reply_is_lost_is_retried_into_the_first_append(
    harness: Harness, proxy: LossyProxy, swallow: bool
) -> None:
    """Enqueue once (docs/producer.md): the call ran, its reply was lost (the connection cut, or a read
    that times out); the caller's retry with the same key gets the first append's id and event id, and
    the stream holds the event once."""
    h = harness
    h.create(shard_count=1)
    client = redis_client(proxy.url, socket_timeout=0.3)
    producer = Producer(client)
    producer.route(PREFIX)
    proxy.lose_replies(sha("idempotent_produce"), times=1, swallow=swallow)

    with pytest.raises(DataPlaneUnavailable):
        producer.send(PREFIX, "k", {"n": 1}, idempotency_key="order-1")
    (entry_id, fields), = h.client.xrange(h.stream(V1_0))  # it ran: appended once
    retried = producer.send(PREFIX, "k", {"n": 1}, idempotency_key="order-1")

    assert proxy.calls_seen == 2 and proxy.cuts == 1
    assert retried.duplicate and retried.entry_id == entry_id.decode()
    assert retried.event_id.encode() in fields[b"envelope"]
    assert h.xlen(V1_0) == 1
    client.close()


def test_the_clients_the_package_builds_never_resend(redis_url: str) -> None:
    for client in (
        redis_client(redis_url),
        redis_client_for(redis_url),
        redis_client(redis_url + "?retry_on_timeout=true"),  # URL options cannot bring re-sends back
    ):
        assert resends(client) == 0
        connection = client.connection_pool.make_connection()  # not connected: no I/O
        assert connection.retry.get_retries() == 0
        assert client.ping()
        client.close()
    assert resends(redis.Redis(host="127.0.0.1", port=1)) > 0  # redis-py 8's own default re-sends
    assert resends(redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), -1))) == -1


def test_a_cluster_clients_own_command_retry_counts_as_resending() -> None:
    """``RedisCluster`` re-sends a command after a connection error or timeout by its own ``retry`` (10
    times by default), whatever its connections say. Here the client is built without connecting (its
    constructor would ask a server for its slots): only its settings are read, no command is sent
    (tests/cluster runs real clusters)."""

    def cluster_client(retries: int) -> RedisCluster:
        client = RedisCluster.__new__(RedisCluster)
        client.retry = Retry(NoBackoff(), retries)
        client.nodes_manager = SimpleNamespace(connection_kwargs={"retry": Retry(NoBackoff(), 0)})
        return client

    assert resends(cluster_client(10)) == 10
    assert resends(cluster_client(0)) == 0
    assert resends(cluster_client(-1)) == -1
    with pytest.raises(InvalidRequest, match=r"or timeout \(up to 10 times\)"):
        DataPlane(cluster_client(10), PREFIX, GROUP)


def test_a_producer_accepts_a_resending_client_with_a_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="consumers.dataplane"):
        Producer(redis_client(redis_url))
        assert not caplog.records
        Producer(redis.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 2)))
    (record,) = caplog.records
    assert "up to 2 times" in record.getMessage() and "redis_client(url)" in record.getMessage()


def test_the_proxy_only_loses_the_replies_it_is_told_to(harness: Harness, proxy: LossyProxy) -> None:
    """The proxy itself: an empty read passes, the first read with entries is lost."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    client = redis_client(proxy.url)
    plane = DataPlane(client, PREFIX, GROUP)
    proxy.lose_replies(sha("read_new"), times=1, when=has_entries)
    assert plane.read("m1", m1.epoch, V1_0, 10).entries == []
    ids = h.produce(V1_0, 1, 1)
    with pytest.raises(DataPlaneUnavailable):
        plane.read("m1", m1.epoch, V1_0, 10)
    assert plane.read("m1", m1.epoch, V1_0, 10).entries == []  # the connection is re-made; armed no more
    assert (proxy.calls_seen, proxy.cuts) == (3, 1)
    assert h.pending(V1_0) == [(ids[0], "m1")]
    client.close()
