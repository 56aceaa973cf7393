"""The cluster URL scheme (rsc_redis/clients.py), without a server."""

from __future__ import annotations

import pytest
import redis

from rsc_redis.clients import client_from_url, cluster_seeds, is_cluster_url, node_url


@pytest.mark.parametrize(
    ("url", "cluster", "node"),
    [
        ("redis+cluster://h:7000/", True, "redis://h:7000/"),
        ("REDIS+CLUSTER://h:7000", True, "redis://h:7000"),
        ("rediss+cluster://u:p@h:7000/0", True, "rediss://u:p@h:7000/0"),
        ("redis://h:6380/2", False, "redis://h:6380/2"),
        ("unix:///tmp/r.sock?db=1", False, "unix:///tmp/r.sock?db=1"),
        ("redis+cluster://h1:7000,h2:7001/", True, "redis://h1:7000/"),
        ("rediss+cluster://u:p@h1:7000,h2:7001/0", True, "rediss://u:p@h1:7000/0"),
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


@pytest.mark.parametrize(
    ("url", "seeds"),
    [
        ("redis+cluster://h:7000/", [("h", 7000)]),
        ("redis+cluster://h1:7000,h2:7001,h3/", [("h1", 7000), ("h2", 7001), ("h3", 6379)]),
        ("rediss+cluster://u:p%40ss@h1:7000, [::1]:7001/", [("h1", 7000), ("::1", 7001)]),
    ],
)
def test_a_cluster_url_may_name_several_seed_nodes(url: str, seeds: list[tuple[str, int]]) -> None:
    assert cluster_seeds(url) == seeds


@pytest.mark.parametrize("url", ["redis+cluster://h1:7000,/", "redis+cluster://h1:x/"])
def test_a_malformed_seed_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        cluster_seeds(url)
