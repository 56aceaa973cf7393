"""Fixtures of the Redis Cluster tests: one private 3-primary cluster for the session (started on free
ports, torn down at the end; never 127.0.0.1:6379), emptied before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from coordinator.store import MetadataStore
from rsc_redis.clients import client_from_url
from tests.cluster.harness import LocalCluster


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(local_cluster: LocalCluster) -> str:
    local_cluster.wait_healthy()
    local_cluster.flushall()
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
