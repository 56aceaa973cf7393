"""Redis outages surface as the typed, retriable ``DataPlaneUnavailable``; nothing ``redis.*`` escapes,
and the data plane works again once Redis is back."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from config.embedded_redis import RedisServer
from consumers.dataplane import DataPlaneUnavailable, FenceStatus
from consumers.errors import ConsumersError, ErrorCode, StreamPrefixNotFound
from coordinator.protocol.model import Shard
from tests.dataplane.harness import Harness, make_client

V1_0 = Shard(1, 0)


def test_a_killed_redis_is_a_retriable_error_and_a_restarted_one_serves_again(
    disposable_redis: RedisServer,
) -> None:
    client = make_client(disposable_redis.url)
    h = Harness(client)
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 1)
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, V1_0, 10).entries] == ids

    disposable_redis.kill()
    calls = {
        "read": lambda: h.plane.read("m1", m1.epoch, V1_0, 10),
        "read_own_pending": lambda: h.plane.read_own_pending("m1", m1.epoch, V1_0, 10),
        "claim_orphans": lambda: h.plane.claim_orphans("m1", m1.epoch, V1_0, 10),
        "ack": lambda: h.plane.ack("m1", m1.epoch, V1_0, ids),
        "delete_ghost_consumers": lambda: h.plane.delete_ghost_consumers("m1", m1.epoch, V1_0),
        "send": lambda: h.producer.send(h.prefix, "k", 1),
        "send_batch": lambda: h.producer.send_batch(h.prefix, [("a", 1), ("b", 2)]),
    }
    for name, call in calls.items():
        with pytest.raises(DataPlaneUnavailable) as caught:
            call()
        assert caught.value.retriable and caught.value.code is ErrorCode.DATA_PLANE_UNAVAILABLE, name
        assert isinstance(caught.value.__cause__, redis.ConnectionError), name

    disposable_redis.restart()  # empty: the metadata is gone with everything else
    assert h.plane.read("m1", m1.epoch, V1_0, 10).status is FenceStatus.MEMBER_FENCED
    with pytest.raises(StreamPrefixNotFound):
        h.producer.send(h.prefix, "k", 1)  # its cached route is refused, not written blindly
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    assert [e.entry_id for e in h.plane.read("m1", m1.epoch, V1_0, 10).entries] == ids
    client.close()


def test_a_hung_redis_times_out_as_unavailable(disposable_redis: RedisServer) -> None:
    client = redis.Redis.from_url(disposable_redis.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    h = Harness(client)
    h.create(shard_count=1)
    m1 = h.join("m1")
    disposable_redis.pause()
    try:
        with pytest.raises(DataPlaneUnavailable) as caught:
            h.plane.read("m1", m1.epoch, V1_0, 10)
        assert isinstance(caught.value, ConsumersError) and caught.value.retriable
    finally:
        disposable_redis.resume()
    client.close()
