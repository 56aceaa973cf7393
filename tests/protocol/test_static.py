"""Static membership in the pure core (docs/protocol.md section 3, "Static membership"; static.py):
an instance id keeps a member's shards across a restart with a new member id, without moving any other
member's shards; a second live process with the same instance id is refused, never fenced in a loop."""

from __future__ import annotations

import pytest

from coordinator.protocol.describe import HeartbeatResponse, describe_group
from coordinator.protocol.errors import FencedInstanceId, InvalidIdentifier, UnreleasedInstanceId
from coordinator.protocol.group import Heartbeat, tick_schedule
from coordinator.protocol.model import EndReason, MemberState

from .context import GROUP, Context, names

TTL = 10_000


def settle(ctx: Context, *member_ids: str) -> dict[str, HeartbeatResponse]:
    """Every named member heartbeats, acknowledging, until nothing changes."""
    last: dict[str, HeartbeatResponse] = {}
    for _ in range(4):
        for mid in member_ids:
            m = ctx.member(mid)
            last[mid] = ctx.heartbeat(mid, m.member_epoch, frozenset(m.assigned))
    return last


def three_static_members(ctx: Context) -> dict[str, HeartbeatResponse]:
    for mid, instance in (("a1", "pod-a"), ("b1", "pod-b"), ("c1", "pod-c")):
        ctx.join(mid, instance_id=instance)
    return settle(ctx, "a1", "b1", "c1")


def shards_of(ctx: Context, *member_ids: str) -> dict[str, list[str]]:
    return {mid: names(ctx.member(mid).assigned) for mid in member_ids}


def test_a_temporary_leave_holds_the_shards_and_the_new_incarnation_gets_them_back() -> None:
    ctx = Context(shard_count=6)
    three_static_members(ctx)
    before = shards_of(ctx, "a1", "b1", "c1")
    assert all(len(v) == 2 for v in before.values())
    epoch = ctx.group.group_epoch

    ctx.now += 100
    ctx.heartbeat("b1", -2)  # a clean stop of a static member: a temporary leave
    b1 = ctx.member("b1")
    assert (b1.state, b1.end_reason, b1.assigned, b1.held_until_ms) == (
        MemberState.LEFT,
        EndReason.LEFT,
        {},
        ctx.now + TTL,
    )
    # No bump, and b1's target is held: nobody else is given its shards.
    assert ctx.group.group_epoch == epoch
    assert sorted(str(s) for s in ctx.group.target["b1"]) == before["b1"]
    settle(ctx, "a1", "c1")
    assert shards_of(ctx, "a1", "c1") == {"a1": before["a1"], "c1": before["c1"]}

    ctx.now += 3_000
    r = ctx.join("b2", instance_id="pod-b")  # the restarted process: a new member id
    assert (r.member_state, names(r.shards)) == (MemberState.STABLE, before["b1"])
    assert r.member_epoch == ctx.group.group_epoch == epoch + 1
    assert "b1" not in ctx.group.target and ctx.member("b1").held_until_ms is None
    # Nobody else moved, not even for one step.
    after = settle(ctx, "a1", "b2", "c1")
    assert shards_of(ctx, "a1", "b2", "c1") == {"a1": before["a1"], "b2": before["b1"], "c1": before["c1"]}
    assert all(r.member_state is MemberState.STABLE and not r.revoking for r in after.values())
    # The old id is fenced with FENCED_INSTANCE_ID (a FENCED_MEMBER_EPOCH), naming what replaced it.
    with pytest.raises(FencedInstanceId) as fenced:
        ctx.heartbeat("b1", b1.member_epoch)
    assert fenced.value.details == {"member_id": "b1", "instance_id": "pod-b"}


def test_a_static_member_that_dies_is_held_after_its_lease_and_comes_back() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    before = shards_of(ctx, "a1", "b1", "c1")
    # a1 goes silent; the others keep heartbeating.
    for _ in range(11):
        ctx.now += 1_000
        settle(ctx, "b1", "c1")
        ctx.tick()
    a1 = ctx.member("a1")
    assert (a1.state, a1.end_reason) == (MemberState.EXPIRED, EndReason.LEASE_EXPIRED)
    assert a1.held_until_ms == a1.ended_at_ms + TTL  # type: ignore[operator]
    assert shards_of(ctx, "b1", "c1") == {"b1": before["b1"], "c1": before["c1"]}
    # The tick must come back when the hold ends.
    assert tick_schedule(ctx.group).next_deadline_ms == a1.held_until_ms
    r = ctx.join("a2", instance_id="pod-a")
    assert names(r.shards) == before["a1"]
    assert shards_of(ctx, "b1", "c1") == {"b1": before["b1"], "c1": before["c1"]}


def test_a_join_finds_the_holders_lease_ended_before_any_tick() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    before = shards_of(ctx, "a1", "b1", "c1")
    for _ in range(10):  # a1 is silent until its lease has ended; no tick runs
        ctx.now += 1_000
        settle(ctx, "b1", "c1")
    assert ctx.member("a1").state is MemberState.STABLE and ctx.member("a1").lease_deadline_ms <= ctx.now
    r = ctx.join("a2", instance_id="pod-a")
    assert names(r.shards) == before["a1"]
    a1 = ctx.member("a1")
    assert (a1.state, a1.end_reason, a1.held_until_ms) == (MemberState.EXPIRED, EndReason.LEASE_EXPIRED, None)


def test_the_hold_ends_after_the_session_timeout_and_the_shards_move_like_today() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    ctx.heartbeat("c1", -2)
    ctx.now += TTL - 1
    settle(ctx, "a1", "b1")
    report = ctx.tick()
    assert report.expired == () and "c1" in ctx.group.target
    ctx.now += 1
    settle(ctx, "a1", "b1")
    epoch = ctx.group.group_epoch
    ctx.tick()
    assert ctx.group.group_epoch == epoch + 1 and "c1" not in ctx.group.target
    assert ctx.member("c1").held_until_ms is None
    settle(ctx, "a1", "b1")
    assert sorted(s for m in ("a1", "b1") for s in shards_of(ctx, m)[m]) == ["v1:0", "v1:1", "v1:2", "v1:3"]
    # A late join with the instance id is an ordinary join now (it gets a fair share, from the others).
    r = ctx.join("c2", instance_id="pod-c")
    assert r.member_state is MemberState.UNRELEASED_SHARDS


def test_a_second_live_process_with_the_same_instance_id_is_refused_and_fences_nobody() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    state = ctx.state
    with pytest.raises(UnreleasedInstanceId) as refused:
        ctx.join("x1", instance_id="pod-b")
    assert refused.value.code.value == "UNRELEASED_INSTANCE_ID" and refused.value.retriable
    assert refused.value.details == {
        "instance_id": "pod-b",
        "member_id": "b1",
        "lease_deadline_ms": ctx.member("b1").lease_deadline_ms,
    }
    assert ctx.state is state  # nothing changed: b1 keeps reading, x1 was not added
    # Again and again: the answer is the same, and b1 is never fenced.
    for _ in range(3):
        ctx.now += 1_000
        settle(ctx, "a1", "b1", "c1")
        with pytest.raises(UnreleasedInstanceId):
            ctx.join("x1", instance_id="pod-b")
    assert ctx.member("b1").state is MemberState.STABLE


def test_the_same_member_id_rejoining_with_its_instance_id_keeps_its_shards() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    before = shards_of(ctx, "a1", "b1", "c1")
    ctx.heartbeat("a1", -2)
    r = ctx.join("a1", instance_id="pod-a")
    assert names(r.shards) == before["a1"]
    # A live member's own rejoin (a lost join response) fences the old incarnation as before: no refusal.
    r = ctx.join("a1", instance_id="pod-a")
    assert names(r.shards) == before["a1"]


def test_a_plain_leave_of_a_static_member_and_a_temporary_leave_of_a_dynamic_one_release_at_once() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    ctx.heartbeat("a1", -1)  # a static member leaving for good (scaled in with leave_group)
    assert ctx.member("a1").held_until_ms is None and "a1" not in ctx.group.target
    ctx.join("d1")
    ctx.heartbeat("d1", -2)  # no instance id: a plain leave
    assert ctx.member("d1").held_until_ms is None and "d1" not in ctx.group.target


def test_held_members_are_not_forgotten_while_held_and_show_in_describe() -> None:
    ctx = Context(shard_count=4)
    three_static_members(ctx)
    ctx.heartbeat("a1", -2)
    ctx.now += 1_000
    ctx.tick(retention_ms=0, max_ended_members=0)
    assert "a1" in ctx.group.members
    view = describe_group(ctx.state, GROUP, ctx.now)  # type: ignore[arg-type]
    members = {m["member_id"]: m for m in view["members"]}  # type: ignore[attr-defined,index]
    assert members["a1"]["instance_id"] == "pod-a"
    assert members["a1"]["held_until_ms"] == ctx.member("a1").held_until_ms
    assert members["b1"]["instance_id"] == "pod-b" and members["b1"]["held_until_ms"] is None
    ctx.now += TTL
    ctx.tick(retention_ms=0, max_ended_members=0)
    assert "a1" not in ctx.group.members  # released, then forgotten like any ended member


def test_a_revocation_timeout_is_not_held() -> None:
    ctx = Context(shard_count=4)
    ctx.join("a1", instance_id="pod-a")
    settle(ctx, "a1")
    ctx.join("b1", instance_id="pod-b")  # a1 must give up two shards and never does
    for _ in range(31):
        ctx.now += 1_000
        m = ctx.member("a1")
        ctx.heartbeat("a1", m.member_epoch, None)
        ctx.heartbeat("b1", ctx.member("b1").member_epoch, None)
        ctx.tick()
    a1 = ctx.member("a1")
    assert (a1.end_reason, a1.held_until_ms) == (EndReason.REVOCATION_TIMEOUT, None)
    assert "a1" not in ctx.group.target


@pytest.mark.parametrize("bad", ["", "-pod", "pod:1", "a" * 129, 7])
def test_an_invalid_instance_id_is_refused(bad: object) -> None:
    with pytest.raises(InvalidIdentifier) as refused:
        Heartbeat(member_id="a", member_epoch=0, capacity=1, instance_id=bad).validated()  # type: ignore[arg-type]
    assert refused.value.details == {"field": "instance_id"}
