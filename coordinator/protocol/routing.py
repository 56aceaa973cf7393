"""Partition-key routing: Kafka's murmur2, positive modulo the active version's shard count.

This is exactly Kafka's default partitioner for keyed records (``Utils.murmur2`` and
``Utils.toPositive(hash) % numPartitions``), so its published test vectors apply and any language with a
Kafka client can route identically. Keys are encoded as UTF-8 when given as ``str``.
"""

from __future__ import annotations

from .errors import InvalidRequest

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2, returned as a signed 32-bit int like Java's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def shard_index(partition_key: str | bytes, shard_count: int) -> int:
    """The shard index of ``partition_key`` among ``shard_count`` shards."""
    if shard_count < 1:
        raise InvalidRequest(f"shard_count must be positive; got {shard_count}")
    data = partition_key.encode("utf-8") if isinstance(partition_key, str) else partition_key
    return (murmur2(data) & 0x7FFFFFFF) % shard_count
