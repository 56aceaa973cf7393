"""Redis at the store's boundary: its errors translated to the protocol's, its replies decoded.

Every module of the store uses these two, so that no ``redis.*`` exception leaves the store and a reply
is decoded one way (dramatiq's Redis broker translates the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from coordinator.protocol.errors import MetadataCorrupt, StoreUnavailable

# Error replies that mean "Redis cannot serve this right now", as opposed to "this cannot work".
TRANSIENT_REPLIES = (
    "BUSY",
    "LOADING",
    "READONLY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "OOM",
    "NOREPLICAS",
)


@contextmanager
def translate_redis_errors() -> Iterator[None]:
    """No ``redis.*`` exception leaves the store. Unreachable or temporarily unable: the retriable
    ``StoreUnavailable``. Any other error reply (a script that failed on unreadable data): the
    non-retriable ``MetadataCorrupt``."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise StoreUnavailable(f"the metadata store is unreachable: {e}") from e
    except redis.ResponseError as e:
        if str(e).split(" ", 1)[0].upper() in TRANSIENT_REPLIES:
            raise StoreUnavailable(f"the metadata store is temporarily unable to serve: {e}") from e
        raise MetadataCorrupt(f"the metadata store refused the operation: {e}") from e
    except redis.RedisError as e:
        raise StoreUnavailable(f"the metadata store failed: {e}") from e


def text(value: Any) -> str:
    """A reply value as text (UTF-8, invalid bytes replaced: it is shown to people or compared)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
