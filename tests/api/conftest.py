"""Fixtures of the HTTP API tests: the real API over a real private Redis (tests/conftest.py).

Every test gets an empty Redis, the store pointed at it (``settings.REDIS_URL`` + ``reset_store``), a
test database (credentials live there), one member and one admin token from the "environment", and
``api`` (tests/api/helpers.py): a thin client that sends JSON with a bearer token.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from coordinator.store import MetadataStore, get_store, reset_store
from tests.store.diff_oracle import every_commit_checked_against_the_diff  # noqa: F401 (autouse)

from .helpers import ADMIN_TOKEN, MEMBER_TOKEN, Api


@pytest.fixture(autouse=True)
def api_environment(settings: Any, redis_url: str, db: None) -> Iterator[None]:
    settings.REDIS_URL = redis_url
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN]
    settings.RSC_ADMIN_TOKENS = [ADMIN_TOKEN]
    settings.RSC_API_MAX_BODY_BYTES = 64 * 1024
    cache.clear()  # the admin API's rate limit counts in the default cache (coordinator/api/throttling.py)
    reset_store()
    yield
    reset_store()


@pytest.fixture
def store() -> MetadataStore:
    return get_store()


@pytest.fixture
def api(client: Client) -> Api:
    return Api(client)
