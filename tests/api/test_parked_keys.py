"""A member's report of its parked keys (issue 27; docs/protocol.md section 3, ``parked_keys``): kept
after an accepted heartbeat, shown by ``describe`` for live members, cleared by ``{}``; a malformed
report is a 400 problem that writes nothing, and a refused heartbeat's report is not kept."""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import GROUP, PREFIX, Api, assert_problem, redis_snapshot


def renew(api: Api, member_id: str, epoch: int, owned: list[str], **body: Any) -> Any:
    return api.heartbeat(member_id=member_id, member_epoch=epoch, owned_shards=owned, **body)


def parked_view(api: Api) -> dict[str, Any]:
    response = api.get(f"admin/groups/{PREFIX}/{GROUP}")
    assert response.status_code == 200, response.content
    return dict(response.json()["parked_keys"])


def test_a_report_is_shown_until_cleared(api: Api) -> None:
    api.create_group(shard_count=2)
    joined = api.join("a")
    owned = [s["shard"] for s in joined["shards"]]
    assert parked_view(api) == {}
    report = [{"shard": "v1:0", "count": 3, "keys": ["k1", "k2"]}]
    response = renew(api, "a", joined["member_epoch"], owned, parked_keys=report)
    assert response.status_code == 200, response.content
    shown = {"a": {"v1:0": {"count": 3, "keys": ["k1", "k2"]}}}
    assert parked_view(api) == shown
    response = renew(api, "a", joined["member_epoch"], owned)  # no report: unchanged
    assert response.status_code == 200 and parked_view(api) == shown
    response = renew(api, "a", joined["member_epoch"], owned, parked_keys=[])
    assert response.status_code == 200 and parked_view(api) == {}
    # A count below the keys named is taken as the number named.
    report = [{"shard": "v1:1", "count": 1, "keys": ["x", "y"]}]
    renew(api, "a", joined["member_epoch"], owned, parked_keys=report)
    assert parked_view(api) == {"a": {"v1:1": {"count": 2, "keys": ["x", "y"]}}}


def test_a_member_that_left_is_not_shown(api: Api) -> None:
    api.create_group(shard_count=2)
    joined = api.join("a")
    owned = [s["shard"] for s in joined["shards"]]
    renew(api, "a", joined["member_epoch"], owned, parked_keys=[{"shard": "v1:1", "count": 1, "keys": ["k"]}])
    assert api.heartbeat(member_id="a", member_epoch=-1).status_code == 200
    assert parked_view(api) == {}


@pytest.mark.parametrize(
    "report",
    [
        {"v1:0": {"count": 1, "keys": []}},
        [{"shard": "v1:0", "count": 0, "keys": []}],
        [{"shard": "v1:0", "count": 20, "keys": [f"k{i}" for i in range(17)]}],
        [{"shard": "v1:0", "count": 1, "keys": ["x" * 257]}],
        [{"shard": "v1:0", "count": 1, "keys": [5]}],
        [{"shard": "v1:0", "count": "1", "keys": []}],
        [{"shard": "v1:0", "count": 1}],
        [{"shard": "v1:0", "count": 1, "keys": [], "extra": 1}],
        [{"shard": "shard-0", "count": 1, "keys": []}],
        [{"count": 1, "keys": []}],
    ],
)
def test_a_malformed_report_is_a_problem_and_writes_nothing(api: Api, store: Any, report: Any) -> None:
    api.create_group(shard_count=2)
    joined = api.join("a")
    owned = [s["shard"] for s in joined["shards"]]
    before = redis_snapshot(store.client)
    response = renew(api, "a", joined["member_epoch"], owned, parked_keys=report)
    body = assert_problem(response, 400, "INVALID_REQUEST")
    assert "parked_keys" in body["detail"], body
    after = redis_snapshot(store.client)
    assert {k: v for k, v in after.items() if b":hbr:" not in k} == {
        k: v for k, v in before.items() if b":hbr:" not in k
    }


def test_a_refused_heartbeat_keeps_no_report(api: Api) -> None:
    api.create_group(shard_count=2)
    joined = api.join("a")
    owned = [s["shard"] for s in joined["shards"]]
    report = [{"shard": "v1:0", "count": 1, "keys": ["k"]}]
    response = renew(api, "a", joined["member_epoch"] + 5, owned, parked_keys=report)
    assert_problem(response, 409, "FENCED_MEMBER_EPOCH")
    assert parked_view(api) == {}
