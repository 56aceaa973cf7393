"""Redis killed under the API: a clear 503 problem with Retry-After, then recovery by itself once Redis is
back (same process, same cached store and connection pool: no restart, no reset_store)."""

from __future__ import annotations

from typing import Any

from config.embedded_redis import RedisServer
from coordinator.store import get_store, reset_store

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

ALL = ["v1:0", "v1:1"]


def test_redis_killed_then_restarted(api: Api, settings: Any, disposable_redis: RedisServer) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    store = get_store()
    api.create_group(shard_count=2, lease_ttl_ms=60_000)
    member = api.join("m1")
    assert member["member_epoch"] == 1

    disposable_redis.kill()
    for call in (
        lambda: api.heartbeat(member_id="m1", member_epoch=1, owned_shards=ALL),  # the fast path
        lambda: api.heartbeat(member_id="m2", member_epoch=0, capacity=1),  # the full path
        lambda: api.get(f"routing/{PREFIX}", token=MEMBER_TOKEN),
        lambda: api.get("admin/groups"),
        lambda: api.get(f"autoscaling/{PREFIX}/{GROUP}"),  # a scaler's read (docs/autoscaling.md)
        lambda: api.post("admin/groups", {"stream_prefix": PREFIX, "consumer_group": "g2"}),
        lambda: api.delete(f"admin/groups/{PREFIX}/{GROUP}"),
    ):
        problem = assert_problem(call(), 503, "STORE_UNAVAILABLE")
        assert problem["retriable"] is True
        assert "metadata store is unavailable" in problem["detail"]
        assert str(disposable_redis.port) not in problem["detail"]  # the driver's words stay in the log

    # The embedded Redis keeps nothing on disk: it comes back empty, and the API simply works again.
    disposable_redis.restart()
    assert get_store() is store
    assert_problem(api.heartbeat(member_id="m1", member_epoch=1, owned_shards=ALL), 404, "GROUP_NOT_FOUND")
    api.create_group(shard_count=2)
    assert api.join("m1")["member_epoch"] == 1
    assert api.get(f"routing/{PREFIX}", token=MEMBER_TOKEN).json()["shard_count"] == 2
