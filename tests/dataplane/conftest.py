"""Fixtures of the data-plane tests: a client without client-side retries and the harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.dataplane.harness import Harness, make_client


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = make_client(redis_url)
    yield c
    c.close()


@pytest.fixture
def harness(client: redis.Redis) -> Harness:
    return Harness(client)
