"""Shared fixtures. Every Redis a test sees is a private server the suite starts itself, on a free port
(never 6379), so FLUSHALL and kill/pause are safe.

Each of those servers gets the data plane's Redis Functions library (rsc_redis/dataplane/library.py),
rendered with this session's keys, whenever a process of it starts (``load_functions``): what the
coordinator does on its start and every tick. FLUSHALL keeps functions; a test that needs the library
missing deletes it (FUNCTION DELETE / FLUSH) itself."""

import os
import secrets
from collections.abc import Iterator

import pytest
import redis

from config.embedded_redis import FORBIDDEN_PORT, RedisServer
from coordinator.store.functions import DataPlaneFunctions, keys_from_settings

# The processes the tests start (the API server, Celery, run_member, run_tick, the dev stack) run as
# production does: DEBUG off, which refuses to start without a real SECRET_KEY (config/settings.py). One
# random key per test session, over plain HTTP (no TLS in the tests). Set at import, before any child
# starts.
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(64))
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
# pytest-django has loaded tests.settings (development mode, for this process only) and exported its name;
# the children load the project's own settings, as a deployment does.
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"


def load_functions(server: RedisServer) -> None:
    """Load the data plane's library into ``server`` (as its ``default`` user), where it is missing."""
    load_functions_at(server.url)


def load_functions_at(url: str) -> None:
    from rsc_redis.clients import client_from_url

    client = client_from_url(url, socket_timeout=5)
    try:
        DataPlaneFunctions(client, keys_from_settings()).ensure()
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One private Redis for the whole session. Prefer `redis_url`, which also repairs and empties it."""
    with RedisServer(after_start=load_functions) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session server, up and answering (resumed or restarted if an earlier test paused or
    killed it) and empty."""
    redis_server.ensure_running()
    assert redis_server.port != FORBIDDEN_PORT
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    try:
        client.flushall()  # keys only: the library stays (a test that deleted it gets it back below)
        DataPlaneFunctions(client, keys_from_settings()).ensure()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def disposable_redis() -> Iterator[RedisServer]:
    """A separate private Redis for this test alone: kill it, pause it, restart it."""
    with RedisServer(after_start=load_functions) as server:
        yield server


# The PostgreSQL pass of `make test` (python -m tests.postgres): only the tests that touch the database.
_DB_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "admin_client",
    "admin_user",
    "django_user_model",
    "live_server",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RSC_TEST_DB_ONLY") != "1":
        return
    keep, drop = [], []
    for item in items:
        uses_db = item.get_closest_marker("django_db") is not None or bool(
            _DB_FIXTURES & set(getattr(item, "fixturenames", ()))
        )
        (keep if uses_db else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
