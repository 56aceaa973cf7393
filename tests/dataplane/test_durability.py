"""``durability="replicated"`` (docs/producer.md, "Durability") against a real primary and replica: a
send returns only once the replica has the entry, and one the replica did not acknowledge in time
raises ``NotReplicated`` although it was appended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from config.embedded_redis import HOST, RedisServer
from consumers.dataplane import redis_client
from consumers.errors import InvalidRequest, NotReplicated
from consumers.producer import Producer
from tests.conftest import load_functions
from tests.dataplane.harness import Harness


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary with one replica (the library loaded on the primary reaches the replica)."""
    with (
        RedisServer(after_start=load_functions) as primary,
        RedisServer(extra_args=["--replicaof", HOST, str(primary.port)]) as replica,
    ):
        _wait_in_sync(replica)
        yield primary, replica


def _wait_in_sync(replica: RedisServer, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    with redis.Redis.from_url(replica.url, decode_responses=True) as client:
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.05)


@pytest.fixture
def harness(pair: tuple[RedisServer, RedisServer]) -> Iterator[Harness]:
    primary, replica = pair
    replica.ensure_running()
    _wait_in_sync(replica)
    client = redis_client(primary.url)
    client.flushall()
    h = Harness(client)
    h.create(shard_count=2)
    yield h
    client.close()


def _on_replica(replica: RedisServer, stream: str, entry_id: str) -> bool:
    with redis.Redis.from_url(replica.url) as client:
        return bool(client.xrange(stream, entry_id, entry_id))


def test_a_replicated_send_returns_once_the_replica_has_it(
    harness: Harness, pair: tuple[RedisServer, RedisServer]
) -> None:
    producer = Producer(harness.client, durability="replicated")
    for i in range(20):
        result = producer.send(harness.prefix, f"k{i}", {"n": i})
        assert _on_replica(pair[1], result.stream_key, result.entry_id)  # no wait: it is there
    results = producer.send_batch(harness.prefix, [(f"k{i}", i) for i in range(50)])
    assert all(_on_replica(pair[1], r.stream_key, r.entry_id) for r in results)
    # Per send, on a producer whose own level is "primary".
    plain = Producer(harness.client)
    result = plain.send(harness.prefix, "k", 1, durability="replicated")
    assert _on_replica(pair[1], result.stream_key, result.entry_id)


def test_an_entry_the_replica_did_not_acknowledge_in_time_is_not_replicated_but_appended(
    harness: Harness, pair: tuple[RedisServer, RedisServer]
) -> None:
    primary, replica = pair
    producer = Producer(harness.client, durability="replicated", replication_timeout_ms=100)
    replica.pause()  # the link stays up, nothing is acknowledged
    try:
        with pytest.raises(NotReplicated) as single:
            producer.send(harness.prefix, "k", {"n": 1})
        with pytest.raises(NotReplicated) as batch:
            producer.send_batch(harness.prefix, [(f"k{i}", i) for i in range(10)])
        assert Producer(harness.client).send(harness.prefix, "k", 2)  # "primary" does not wait
    finally:
        replica.resume()
    for caught, count in ((single.value, 1), (batch.value, 10)):
        assert caught.retriable and caught.code == "NOT_REPLICATED" and caught.details["replicas"] == 0
        assert len(caught.results) == count
        with redis.Redis.from_url(primary.url) as client:  # appended: on the primary
            assert all(client.xrange(r.stream_key, r.entry_id, r.entry_id) for r in caught.results)


def test_lingering_replicated_sends_each_get_their_outcome(
    harness: Harness, pair: tuple[RedisServer, RedisServer]
) -> None:
    producer = Producer(harness.client, durability="replicated", linger_ms=5)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: producer.send(harness.prefix, f"k{i}", i), range(32)))
    assert all(_on_replica(pair[1], r.stream_key, r.entry_id) for r in results)


def test_without_a_replica_a_replicated_send_is_never_acknowledged(redis_url: str) -> None:
    client = redis_client(redis_url)
    h = Harness(client)
    h.create(shard_count=1)
    with pytest.raises(NotReplicated):
        Producer(client, replication_timeout_ms=20).send(h.prefix, "k", 1, durability="replicated")
    client.close()


@pytest.mark.parametrize("options", [{"durability": "disk"}, {"replication_timeout_ms": 0}])
def test_bad_durability_options_are_refused(redis_url: str, options: dict[str, object]) -> None:
    client = redis_client(redis_url)
    with pytest.raises(InvalidRequest):
        Producer(client, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        Producer(client).send("p", "k", 1, durability="disk")
    client.close()
