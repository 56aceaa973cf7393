"""Routing is Kafka's murmur2 partitioner; strict-order gating follows from it."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from coordinator.protocol.model import Migration, OrderingMode, RoutingVersion, Shard, Topology, VersionState
from coordinator.protocol.routing import murmur2, shard_index

# Kafka's UtilsTest.testMurmur2 vectors.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def kafka_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 transliterated byte by byte (what routing.murmur2 computes faster)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    whole, tail = length - length % 4, length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_the_reference_matches_kafka_too(data: bytes, expected: int) -> None:
    assert kafka_murmur2(data) == expected


@given(data=st.binary(max_size=300))  # every tail length
@example(data=bytes(range(252)) + b"\xff\x00\x80")  # 255 bytes: the last prepared word unpacker
@example(data=bytes(range(256)) + b"\x01")  # past the prepared ones
@example(data=b"\xfe" * 1001)
def test_murmur2_is_the_byte_by_byte_algorithm(data: bytes) -> None:
    assert murmur2(data) == kafka_murmur2(data)


def test_shard_index_is_positive_modulo_and_strings_are_utf8() -> None:
    assert shard_index("foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert shard_index("é", 5) == shard_index("é".encode(), 5)
    assert {shard_index(f"key-{i}", 8) for i in range(1000)} == set(range(8))


def _topology(n_old: int, n_new: int) -> Topology:
    return Topology(
        stream_prefix="p",
        versions=(
            RoutingVersion(version=1, shard_count=n_old, state=VersionState.DRAINING, created_at_ms=0),
            RoutingVersion(version=2, shard_count=n_new, state=VersionState.ACTIVE, created_at_ms=0),
        ),
        migration=Migration(from_version=1, to_version=2, ordering=OrderingMode.STRICT, started_at_ms=0),
    )


@given(n_old=st.integers(1, 24), n_new=st.integers(1, 24), key=st.binary(max_size=16))
def test_strict_gate_covers_every_old_shard_a_key_can_come_from(n_old: int, n_new: int, key: bytes) -> None:
    old = Shard(version=1, index=shard_index(key, n_old))
    new = Shard(version=2, index=shard_index(key, n_new))
    assert old in _topology(n_old, n_new).blocked_by(new)


def test_doubling_gates_each_new_shard_on_one_old_shard() -> None:
    topo = _topology(4, 8)
    assert topo.blocked_by(Shard(version=2, index=5)) == {Shard(version=1, index=1)}
    assert len(_topology(2, 3).blocked_by(Shard(version=2, index=0))) == 2
