"""Static membership over HTTP (docs/protocol.md section 3, "Static membership"): ``instance_id`` on a
join, the temporary leave (``member_epoch`` -2), the take-over by a new member id, and the refusals as
problem details with stable codes, each changing no metadata."""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import GROUP, PREFIX, Api, assert_problem


def shards_of(r: dict[str, Any]) -> list[str]:
    return [s["shard"] for s in r["shards"]]


def describe(api: Api) -> dict[str, Any]:
    return dict(api.get(f"admin/groups/{PREFIX}/{GROUP}").json())


def test_a_restarted_static_member_gets_its_shards_back_and_nobody_else_moves(api: Api) -> None:
    api.create_group(shard_count=4)
    a = api.join("a1", instance_id="pod-a")
    b = api.join("b1", instance_id="pod-b")
    for _ in range(3):
        a = api.heartbeat(member_id="a1", member_epoch=a["member_epoch"], owned_shards=shards_of(a)).json()
        b = api.heartbeat(member_id="b1", member_epoch=b["member_epoch"], owned_shards=shards_of(b)).json()
    before_a, before_b = shards_of(a), shards_of(b)
    assert len(before_a) == len(before_b) == 2

    left = api.heartbeat(member_id="b1", member_epoch=-2)
    assert left.status_code == 200, left.content
    view = describe(api)
    members = {m["member_id"]: m for m in view["members"]}
    assert (members["b1"]["state"], members["b1"]["instance_id"]) == ("LEFT", "pod-b")
    assert members["b1"]["held_until_ms"] is not None
    assert view["held_instances"] == [
        {
            "instance_id": "pod-b",
            "member_id": "b1",
            "held_until_ms": members["b1"]["held_until_ms"],
            "shards": before_b,
        }
    ]

    b2 = api.join("b2", instance_id="pod-b")
    assert (b2["member_state"], shards_of(b2)) == ("STABLE", before_b)
    a = api.heartbeat(member_id="a1", member_epoch=a["member_epoch"], owned_shards=before_a).json()
    assert (a["member_state"], shards_of(a), a["revoking"]) == ("STABLE", before_a, [])
    assert describe(api)["held_instances"] == []

    fenced = api.heartbeat(member_id="b1", member_epoch=b["member_epoch"], owned_shards=before_b)
    problem = assert_problem(fenced, 409, "FENCED_INSTANCE_ID")
    assert problem["details"] == {"member_id": "b1", "instance_id": "pod-b"}


def test_a_second_live_member_with_the_instance_id_is_refused_409_and_nothing_changes(
    api: Api, store: Any
) -> None:
    api.create_group(shard_count=2)
    a = api.join("a1", instance_id="pod-a")
    before = store.raw_metadata(PREFIX)
    for _ in range(2):  # the same answer every time: nobody is fenced, nothing is written
        refused = api.heartbeat(member_id="x1", member_epoch=0, capacity=1, instance_id="pod-a")
        problem = assert_problem(refused, 409, "UNRELEASED_INSTANCE_ID")
        assert problem["retriable"] is True
        assert problem["details"]["instance_id"] == "pod-a" and problem["details"]["member_id"] == "a1"
        assert isinstance(problem["details"]["lease_deadline_ms"], int)
        assert store.raw_metadata(PREFIX) == before
    again = api.heartbeat(member_id="a1", member_epoch=a["member_epoch"], owned_shards=shards_of(a))
    assert again.status_code == 200 and again.json()["member_state"] == "STABLE"


@pytest.mark.parametrize("bad", ["", "-pod", "pod:0", "pod 0", "p" * 129, 7, True, ["pod"]])
def test_an_invalid_instance_id_is_a_400_and_changes_nothing(api: Api, store: Any, bad: object) -> None:
    api.create_group(shard_count=2)
    before = store.raw_metadata(PREFIX)
    r = api.heartbeat(member_id="a1", member_epoch=0, capacity=1, instance_id=bad)
    assert r.status_code == 400
    problem = assert_problem(r, 400, r.json()["code"])
    assert problem["code"] in {"INVALID_IDENTIFIER", "INVALID_REQUEST"}
    assert [e["field"] for e in problem["errors"]] == ["instance_id"]
    assert store.raw_metadata(PREFIX) == before


def test_member_epoch_below_minus_two_is_refused(api: Api) -> None:
    api.create_group(shard_count=2)
    r = api.heartbeat(member_id="a1", member_epoch=-3)
    problem = assert_problem(r, 400, "INVALID_REQUEST")
    assert [e["field"] for e in problem["errors"]] == ["member_epoch"]
