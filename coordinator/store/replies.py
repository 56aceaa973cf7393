"""Redis at the store's boundary: its errors translated to the protocol's, its replies decoded.

Every module of the store uses these two, so that no ``redis.*`` exception leaves the store and a reply
is decoded one way (dramatiq's Redis broker translates the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from coordinator.protocol.errors import MetadataCorrupt, StoreUnavailable
from rsc_redis import errors


@contextmanager
def translate_redis_errors() -> Iterator[None]:
    """No ``redis.*`` exception leaves the store (nor the cluster client's own, which do not derive from
    ``RedisError``), classified by :func:`rsc_redis.errors.classify` (type and error code, never the
    message): unreachable, timed out or temporarily unable (a failover's ``CLUSTERDOWN``, ``TRYAGAIN``,
    ``MASTERDOWN``, ``READONLY``, ``LOADING``, ``BUSY``, ...) is the retriable ``StoreUnavailable``;
    any other error reply (a script that failed on unreadable data, an ACL refusal) the non-retriable
    ``MetadataCorrupt``."""
    try:
        yield
    except (redis.RedisError, RedisClusterException) as e:
        message = errors.describe(e)
        kind = errors.classify(e)
        if kind is errors.Kind.UNKNOWN_OUTCOME:
            raise StoreUnavailable(f"the metadata store is unreachable: {message}") from e
        if kind is errors.Kind.NOT_NOW:
            raise StoreUnavailable(f"the metadata store is temporarily unable to serve: {message}") from e
        raise MetadataCorrupt(f"the metadata store refused the operation: {message}") from e


def text(value: Any) -> str:
    """A reply value as text (UTF-8, invalid bytes replaced: it is shown to people or compared)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
