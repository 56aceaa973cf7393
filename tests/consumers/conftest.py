"""Fixtures of the consumers tests: a consumer group on the suite's private Redis (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.consumers.harness import Cluster


@pytest.fixture
def cluster(redis_url: str) -> Iterator[Cluster]:
    c = Cluster(redis_url)
    try:
        yield c
    finally:
        c.close()
