"""Several seed nodes in a cluster URL (docs/cluster.md): a process started while the first one is down
learns the cluster from the next, for the store, the data plane and the producer alike."""

from __future__ import annotations

from config.embedded_redis import HOST, free_port
from consumers.dataplane import redis_client
from coordinator.store import MetadataStore
from rsc_redis.clients import client_from_url
from tests.cluster.harness import LocalCluster


def test_a_process_starts_while_its_first_seed_node_is_down(
    local_cluster: LocalCluster, cluster_url: str
) -> None:
    down = free_port()  # nothing listens there
    live = [s.port for s in local_cluster.primaries()]
    url = f"redis+cluster://{HOST}:{down},{HOST}:{live[1]},{HOST}:{live[2]}/"

    client = client_from_url(url, decode_responses=True)
    try:
        for i in range(20):  # keys in slots of every primary
            client.set(f"seed-test-{i}", str(i))
        assert [client.get(f"seed-test-{i}") for i in range(20)] == [str(i) for i in range(20)]
        assert len(client.get_primaries()) == 3
    finally:
        client.close()

    plane_client = redis_client(url)
    try:
        assert plane_client.get("seed-test-3") == b"3"
    finally:
        plane_client.close()

    store = MetadataStore.from_url(url)
    try:
        assert store.client.get("seed-test-4") == b"4"
    finally:
        store.client.close()
