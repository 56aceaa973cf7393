"""Helpers of the cluster tests: stream prefixes whose hash tags land on chosen primaries."""

from __future__ import annotations

from typing import Any

from redis.cluster import key_slot

from rsc_redis import keys as rkeys
from tests.cluster.harness import LocalCluster


def slot_of_prefix(prefix: str) -> int:
    return int(key_slot(rkeys.meta_key(prefix).encode()))


def prefixes_on_every_primary(cluster: LocalCluster, per_primary: int = 1, stem: str = "p") -> list[str]:
    """``per_primary`` prefixes on each primary (round robin: the first three are on three different
    primaries), found by trying ``stem0``, ``stem1``, ..."""
    by_port: dict[int, list[str]] = {s.port: [] for s in cluster.primaries()}
    slots = _slot_map(cluster)
    i = 0
    while any(len(v) < per_primary for v in by_port.values()):
        name = f"{stem}{i}"
        port = slots(slot_of_prefix(name))
        if len(by_port[port]) < per_primary:
            by_port[port].append(name)
        i += 1
    columns = list(by_port.values())
    return [column[row] for row in range(per_primary) for column in columns]


def _slot_map(cluster: LocalCluster) -> Any:
    with cluster.node(cluster.servers[0]) as client:
        ranges = [(int(a), int(b), int(p[1])) for a, b, p, *_ in client.execute_command("CLUSTER SLOTS")]

    def port_of(slot: int) -> int:
        return next(port for a, b, port in ranges if a <= slot <= b)

    return port_of
