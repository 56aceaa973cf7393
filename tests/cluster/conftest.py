"""Fixtures of the Redis Cluster tests: one private 3-primary cluster for the session (started on free
ports, torn down at the end; never 127.0.0.1:6379), emptied before each test, with the data plane's
Redis Functions library loaded on every primary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from coordinator.store import MetadataStore
from coordinator.store.functions import DataPlaneFunctions, keys_from_settings
from rsc_redis.clients import client_from_url
from tests.cluster.harness import LocalCluster


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(local_cluster: LocalCluster) -> str:
    """The cluster, healthy, its keys flushed and the data plane's library loaded on every primary (as
    the coordinator loads it; FLUSHALL keeps functions, a test that flushed them gets them back)."""
    local_cluster.wait_healthy()
    local_cluster.flushall()
    client = client_from_url(local_cluster.url)
    try:
        DataPlaneFunctions(client, keys_from_settings()).ensure()
    finally:
        client.close()
    return local_cluster.url


@pytest.fixture
def cluster_store(cluster_url: str) -> Iterator[MetadataStore]:
    store = MetadataStore.from_url(cluster_url)
    yield store
    store.client.close()


@pytest.fixture
def admin(cluster_url: str) -> Iterator[redis.cluster.RedisCluster]:
    """A plain cluster client for the test's own reads (str replies)."""
    client = client_from_url(cluster_url, decode_responses=True)
    yield client
    client.close()
