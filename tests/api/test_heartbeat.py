"""Member heartbeats over HTTP against a real Redis: the hand-over between two members, and fencing.

The scenarios read like docs/protocol.md sections 3 and 4: join, revoke, acknowledge, grant; each step
asserts the whole response (and, where it matters, the operator's view of the group).
"""

from __future__ import annotations

from typing import Any

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

ALL = ["v1:0", "v1:1", "v1:2", "v1:3"]


def shard(name: str, epoch: int, readable: bool = True) -> dict[str, Any]:
    return {
        "shard": name,
        "stream_key": f"rsc:{{{PREFIX}}}:{name}",
        "assignment_epoch": epoch,
        "readable": readable,
    }


def response(
    member_id: str,
    member_epoch: int,
    state: str,
    epoch: int,
    shards: list[dict[str, Any]],
    revoking: list[str] | None = None,
    max_concurrency: int = 2,
) -> dict[str, Any]:
    """A heartbeat response as docs/protocol.md section 3 lists it (group with the test's config)."""
    return {
        "member_id": member_id,
        "member_epoch": member_epoch,
        "member_state": state,
        "group_epoch": epoch,
        "assignment_epoch": epoch,
        "heartbeat_interval_ms": 1000,
        "lease_ttl_ms": 20000,
        "shards": shards,
        "revoking": revoking or [],
        "max_concurrency": max_concurrency,
        "routing": {"active_version": 1, "shard_count": 4},
    }


def ok(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == "application/json"
    return dict(r.json())


def create(api: Api) -> None:
    api.create_group(shard_count=4, max_concurrency=4, lease_ttl_ms=20000, heartbeat_interval_ms=1000)


def test_two_members_hand_over_half_the_shards_revoke_before_assign(api: Api) -> None:
    create(api)

    # 1. a joins the empty group: group epoch 1, a gets every shard at epoch 1.
    a = api.join(
        "a", capacity=2, client={"host": "10.0.0.1", "pid": 11, "listener": "orders", "version": "1"}
    )
    assert a == response("a", 1, "STABLE", 1, [shard(s, 1) for s in ALL])

    # 2. b joins: group epoch 2, target {a: v1:0-1, b: v1:2-3}; a still owns everything, so b waits.
    b = api.join("b", capacity=8)
    assert b == response("b", 2, "UNRELEASED_SHARDS", 2, [], max_concurrency=4)

    # 3. a heartbeats at epoch 1: it must revoke v1:2 and v1:3 and keeps epoch 1 until it does.
    a = ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=ALL))
    assert a == response(
        "a", 1, "UNREVOKED_SHARDS", 2, [shard("v1:0", 1), shard("v1:1", 1)], ["v1:2", "v1:3"]
    )

    # 4. b asks before a acknowledged: nothing is granted (single-owner rule).
    b = ok(api.heartbeat(member_id="b", member_epoch=2))
    assert b == response("b", 2, "UNRELEASED_SHARDS", 2, [], max_concurrency=4)
    group = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()
    assert group["state"] == "RECONCILING"
    assert [(p["shard"], p["revoked_by"]) for p in group["pending_revocations"]] == [
        ("v1:2", "a"),
        ("v1:3", "a"),
    ]
    assert group["unreleased_shards"] == [
        {"shard": "v1:2", "wanted_by": "b", "owned_by": "a"},
        {"shard": "v1:3", "wanted_by": "b", "owned_by": "a"},
    ]

    # 5. a acknowledges by leaving the revoked shards out of owned_shards: it moves to epoch 2.
    a = ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=["v1:0", "v1:1"]))
    assert a == response("a", 2, "STABLE", 2, [shard("v1:0", 1), shard("v1:1", 1)])

    # 6. b now receives v1:2 and v1:3, granted at epoch 2.
    b = ok(api.heartbeat(member_id="b", member_epoch=2, owned_shards=[]))
    assert b == response("b", 2, "STABLE", 2, [shard("v1:2", 2), shard("v1:3", 2)], max_concurrency=4)

    group = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()
    assert group["state"] == "STABLE"
    assert (group["group_epoch"], group["assignment_epoch"]) == (2, 2)
    assert group["target_assignment"] == {"a": ["v1:0", "v1:1"], "b": ["v1:2", "v1:3"]}
    assert group["pending_revocations"] == group["unreleased_shards"] == group["awaiting_pickup"] == []
    members = {m["member_id"]: m for m in group["members"]}
    assert {m: (v["state"], v["member_epoch"], v["effective_concurrency"]) for m, v in members.items()} == {
        "a": ("STABLE", 2, 2),
        "b": ("STABLE", 2, 4),
    }
    assert members["a"]["client"] == {"host": "10.0.0.1", "pid": 11, "listener": "orders", "version": "1"}
    assert members["a"]["current_assignment"] == [
        {"shard": "v1:0", "assignment_epoch": 1},
        {"shard": "v1:1", "assignment_epoch": 1},
    ]

    # 7. a leaves: its shards are free at once, b gets them after the bump.
    left = ok(api.heartbeat(member_id="a", member_epoch=-1))
    assert (left["member_epoch"], left["member_state"], left["group_epoch"], left["shards"]) == (
        -1,
        "LEFT",
        3,
        [],
    )
    b = ok(api.heartbeat(member_id="b", member_epoch=2, owned_shards=["v1:2", "v1:3"]))
    assert b == {
        **response(
            "b", 3, "STABLE", 3, [shard("v1:0", 3), shard("v1:1", 3), shard("v1:2", 2), shard("v1:3", 2)]
        ),
        "max_concurrency": 4,
    }


def test_steady_heartbeats_answer_the_same_and_renew_the_lease(api: Api, store: Any) -> None:
    create(api)
    first = api.join("a")
    lease_before = store.describe_group(PREFIX, GROUP)["members"][0]["lease_remaining_ms"]
    again = ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=ALL))
    assert again == first
    assert store.describe_group(PREFIX, GROUP)["members"][0]["lease_remaining_ms"] >= lease_before - 50


def test_stale_future_and_unknown_epochs_are_fenced_and_change_nothing(api: Api, store: Any) -> None:
    create(api)
    api.join("a")
    api.join("b")
    ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=ALL))
    ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=["v1:0", "v1:1"]))  # now at epoch 2
    before = store.raw_metadata(PREFIX)

    # The previous epoch with owned_shards that claim nothing beyond the assignment: a lost response.
    ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=["v1:0"]))
    before = store.raw_metadata(PREFIX)

    for body, code, details in [
        # previous epoch, but owned not reported: cannot prove it saw the revocation
        ({"member_epoch": 1}, "FENCED_MEMBER_EPOCH", {"member_epoch": 2, "received_epoch": 1}),
        # previous epoch claiming a shard it gave away
        ({"member_epoch": 1, "owned_shards": ["v1:0", "v1:2"]}, "FENCED_MEMBER_EPOCH", {"received_epoch": 1}),
        # from the future
        ({"member_epoch": 3, "owned_shards": ["v1:0", "v1:1"]}, "FENCED_MEMBER_EPOCH", {"received_epoch": 3}),
        ({"member_epoch": 9007199254740992}, "FENCED_MEMBER_EPOCH", {"member_id": "a"}),
    ]:
        problem = assert_problem(api.heartbeat(member_id="a", **body), 409, code)
        assert problem["details"].items() >= details.items()
        assert "rejoin with member_epoch 0" in problem["detail"]
        assert store.raw_metadata(PREFIX) == before, body

    problem = assert_problem(api.heartbeat(member_id="ghost", member_epoch=4), 409, "UNKNOWN_MEMBER_ID")
    assert problem["details"] == {"member_id": "ghost"}
    assert store.raw_metadata(PREFIX) == before


def test_a_left_member_is_fenced_and_rejoins_with_epoch_zero(api: Api) -> None:
    create(api)
    api.join("a")
    ok(api.heartbeat(member_id="a", member_epoch=-1))
    assert_problem(api.heartbeat(member_id="a", member_epoch=1), 409, "FENCED_MEMBER_EPOCH")
    # Leaving again is idempotent (a lost leave response is retried).
    assert ok(api.heartbeat(member_id="a", member_epoch=-1))["member_epoch"] == -1
    rejoined = api.join("a")
    assert (rejoined["member_epoch"], rejoined["member_state"]) == (3, "STABLE")


def test_a_rejoin_under_a_live_id_fences_the_old_incarnation(api: Api) -> None:
    create(api)
    api.join("a")
    again = api.join("a")  # e.g. the first join's response was lost
    assert (again["member_epoch"], again["member_state"], len(again["shards"])) == (2, "STABLE", 4)
    assert_problem(api.heartbeat(member_id="a", member_epoch=1, owned_shards=ALL), 409, "FENCED_MEMBER_EPOCH")


def test_join_needs_capacity_and_a_full_group_refuses_joins(api: Api) -> None:
    api.create_group(max_members=1)
    problem = assert_problem(api.heartbeat(member_id="a", member_epoch=0), 400, "INVALID_REQUEST")
    assert problem["details"] == {"field": "capacity"}
    api.join("a")
    problem = assert_problem(
        api.heartbeat(member_id="b", member_epoch=0, capacity=1), 409, "GROUP_MAX_SIZE_REACHED"
    )
    assert problem["retriable"] is True
    assert problem["details"] == {"max_members": 1}


def test_heartbeat_to_a_group_that_does_not_exist(api: Api) -> None:
    problem = assert_problem(api.heartbeat(member_id="a", member_epoch=0, capacity=1), 404, "GROUP_NOT_FOUND")
    assert problem["retriable"] is True
    assert problem["details"] == {"stream_prefix": PREFIX, "consumer_group": GROUP}


def test_capacity_change_bumps_the_group_epoch_without_moving_shards(api: Api) -> None:
    create(api)
    api.join("a", capacity=1)
    r = ok(api.heartbeat(member_id="a", member_epoch=1, owned_shards=ALL, capacity=3))
    # The group epoch moves; a's assignment does not, so neither does its epoch.
    assert r == response("a", 1, "STABLE", 2, [shard(s, 1) for s in ALL], max_concurrency=3)


def test_an_admin_token_may_heartbeat_too(api: Api) -> None:
    create(api)
    r = api.post(f"groups/{PREFIX}/{GROUP}/heartbeat", {"member_id": "a", "member_epoch": 0, "capacity": 1})
    assert ok(r)["member_epoch"] == 1
    assert MEMBER_TOKEN  # the default helper uses the member token; this one used the admin token


def test_join_seq_makes_a_retried_join_idempotent_and_a_stale_one_harmless(api: Api, store: Any) -> None:
    """docs/protocol.md section 3, "Join idempotency", through the API and the store's documents."""
    api.create_group()
    first = api.join("m1", join_seq=1)
    again = api.join("m1", join_seq=1)  # the same join, retried: the member as it is, not fenced
    assert again["member_epoch"] == first["member_epoch"]
    view = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()
    assert [(m["member_id"], m["state"]) for m in view["members"]] == [("m1", "STABLE")]
    rejoined = api.join("m1", join_seq=2)  # a rejoin: the next number, a new incarnation
    assert rejoined["member_epoch"] > first["member_epoch"]
    before = store.raw_metadata(PREFIX)
    stale = api.heartbeat(member_id="m1", member_epoch=0, capacity=2, join_seq=1)
    problem = assert_problem(stale, 409, "STALE_JOIN")
    assert problem["details"] == {"member_id": "m1", "join_seq": 1, "current_join_seq": 2}
    assert store.raw_metadata(PREFIX) == before
