"""Fixtures of the database tests: the real API and store over the suite's private Redis, and the test
database (SQLite, or the private PostgreSQL of ``python -m tests.postgres``).

The concurrency tests run with ``django_db(transaction=True)``: their threads open connections of their
own, which see only committed rows, so the test's data must be committed too (no wrapping transaction).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from coordinator.store import MetadataStore, get_store, reset_store
from tests.api.helpers import ADMIN_TOKEN, MEMBER_TOKEN, Api


@pytest.fixture
def store(settings: Any, redis_url: str) -> Iterator[MetadataStore]:
    """The store on an empty private Redis, with the API's environment tokens configured."""
    settings.REDIS_URL = redis_url
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN]
    settings.RSC_ADMIN_TOKENS = [ADMIN_TOKEN]
    reset_store()
    yield get_store()
    reset_store()


@pytest.fixture
def api(store: MetadataStore) -> Api:
    return Api(Client())
