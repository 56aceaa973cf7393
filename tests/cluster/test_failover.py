"""A primary fails over (``CLUSTER FAILOVER`` on its replica) while members consume and a producer
produces through the cluster: no acknowledged entry is lost, no two members ever handle one shard at
once, and the group stays (or becomes again) stable. The promoted node has the data plane's functions
(FUNCTION LOAD replicates to replicas) but no store scripts cached: the coordinator's first calls there
answer NOSCRIPT and are loaded again. 3 primaries + 3 replicas: ``chaos`` only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import LocalCluster
from tests.cluster.helpers import slot_of_prefix
from tests.cluster.stack import ClusterProducerLoop, ClusterStack
from tests.e2e.conftest import TIMINGS, keys_for_every_shard
from tests.e2e.helpers import finish
from tests.e2e.stack import HandledLogs, stable_and_balanced, wait_until

pytestmark = pytest.mark.chaos
SHARDS = 4


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas_per_master=1) as cluster:
        yield cluster


def _replica_of(cluster: LocalCluster, primary_port: int) -> object:
    for server in cluster.replicas():
        with cluster.node(server) as client:
            if int(client.info("replication")["master_port"]) == primary_port:
                return server
    raise LookupError(primary_port)


def test_a_primary_fails_over_under_load_and_no_acknowledged_entry_is_lost(
    replicated_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = replicated_cluster
    stack = ClusterStack(cluster, tmp_path / "stack")
    try:
        stack.start()
        stack.create_group(shard_count=SHARDS, **TIMINGS)
        producer = ClusterProducerLoop(cluster.url, "e2e", keys=keys_for_every_shard(SHARDS), rate_per_s=300)
        producer.start()
        logs = HandledLogs(stack.handled_dir)
        stack.start_member("m0")
        stack.start_member("m1")
        wait_until(lambda: stable_and_balanced(stack.describe(), 2, SHARDS), timeout_s=60, what="2 members")
        time.sleep(1.0)
        primary = cluster.server_for_slot(slot_of_prefix("e2e"))
        replica = _replica_of(cluster, primary.port)
        cluster.failover(replica)  # type: ignore[arg-type]
        assert cluster.server_for_slot(slot_of_prefix("e2e")).port == replica.port  # type: ignore[attr-defined]
        time.sleep(2.0)
        wait_until(lambda: stable_and_balanced(stack.describe(), 2, SHARDS), timeout_s=60, what="stable")
        report = finish(producer, logs, redis_stayed_up=False)
        assert report.produced > 600 and report.lost == [], report.summary()
        assert report.overlaps == [] and report.out_of_order == [], report.summary()
        # Both members are still the ones that joined: none was fenced by the failover.
        assert {m["state"] for m in stack.describe()["members"]} == {"STABLE"}
    finally:
        stack.close()
