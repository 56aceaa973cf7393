"""The cluster URL scheme (rsc_redis/clients.py), without a server."""

from __future__ import annotations

import pytest
import redis

from rsc_redis.clients import client_from_url, is_cluster_url, node_url


@pytest.mark.parametrize(
    ("url", "cluster", "node"),
    [
        ("redis+cluster://h:7000/", True, "redis://h:7000/"),
        ("REDIS+CLUSTER://h:7000", True, "redis://h:7000"),
        ("rediss+cluster://u:p@h:7000/0", True, "rediss://u:p@h:7000/0"),
        ("redis://h:6380/2", False, "redis://h:6380/2"),
        ("unix:///tmp/r.sock?db=1", False, "unix:///tmp/r.sock?db=1"),
    ],
)
def test_the_scheme_says_cluster_and_the_seed_nodes_url_follows(url: str, cluster: bool, node: str) -> None:
    assert (is_cluster_url(url), node_url(url)) == (cluster, node)


def test_a_cluster_url_naming_another_database_is_refused() -> None:
    with pytest.raises(ValueError, match="only database 0"):
        client_from_url("redis+cluster://127.0.0.1:1/3")


def test_a_plain_url_still_gives_a_plain_client() -> None:
    client = client_from_url("redis://127.0.0.1:1/0")
    assert type(client) is redis.Redis
    client.close()
