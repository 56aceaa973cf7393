"""The metadata store's Redis for a management command: one line saying what to set when it is not
configured or cannot be reached, before anything else tries (and logs) a connection."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError
from redis.exceptions import RedisError

from rsc_redis import clients


def require_reachable_redis() -> str:
    """``settings.REDIS_URL`` once it answers a PING; else CommandError naming REDIS_URL and what to do."""
    url = settings.REDIS_URL
    if not url:
        raise CommandError(
            "STORE_UNAVAILABLE: REDIS_URL is not set: set it to the coordinator's Redis (e.g. "
            "REDIS_URL=redis://127.0.0.1:6379/0, in the environment or .env); in this repository's checkout, "
            "commands beside a running `make run` take its settings",
            returncode=1,
        )
    client = clients.client_from_url(url, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except (RedisError, OSError) as e:
        raise CommandError(
            f"STORE_UNAVAILABLE: cannot reach the coordinator's Redis at REDIS_URL={_without_password(url)} "
            f"({e}): is it running? Otherwise set REDIS_URL to the right one (environment or .env)",
            returncode=1,
        ) from e
    finally:
        client.close()
    return str(url)


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.partition(":")[0]
    return f"{scheme}{sep}{user + ':' if user else ':'}***@{host}"
