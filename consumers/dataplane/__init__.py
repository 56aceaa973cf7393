"""The data plane: fenced reads, acks and take-overs of shard streams (docs/protocol.md section 7).

Importable without Django: it needs only a redis-py client. ``consumers.producer`` holds the producer.
"""

from consumers.errors import DataPlaneError, DataPlaneUnavailable

from .envelope import Delivery, Entry
from .plane import DataPlane, FenceStatus, ReadResult

__all__ = [
    "DataPlane",
    "DataPlaneError",
    "DataPlaneUnavailable",
    "Delivery",
    "Entry",
    "FenceStatus",
    "ReadResult",
]
