"""The data plane: fenced reads, acks and take-overs of shard streams (docs/protocol.md section 7).

Importable without Django: it needs only a redis-py client, built with :func:`redis_client` (bytes
replies, no re-sends). ``consumers.producer`` holds the producer.
"""

from consumers.errors import DataPlaneError, DataPlaneUnavailable

from .connection import redis_client
from .envelope import Delivery, Entry
from .plane import (
    DataPlane,
    DeadLetterOutcome,
    DeadLetterResult,
    FenceStatus,
    FetchResult,
    LeaseRenewal,
    LeaseRenewalResult,
    ReadResult,
    ShardFetch,
)

__all__ = [
    "DataPlane",
    "DataPlaneError",
    "DataPlaneUnavailable",
    "DeadLetterOutcome",
    "DeadLetterResult",
    "Delivery",
    "Entry",
    "FenceStatus",
    "FetchResult",
    "LeaseRenewal",
    "LeaseRenewalResult",
    "ReadResult",
    "ShardFetch",
    "redis_client",
]
