"""Scenario tests of the protocol core, ported in spirit from Kafka's group coordinator tests.

Each test reads like the protocol: join, heartbeat, revoke acknowledged, epoch bumped; and asserts the
whole of what a member is told, not one field.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.protocol.commands import MemberHeartbeat, apply
from coordinator.protocol.describe import HeartbeatResponse, describe_group
from coordinator.protocol.errors import (
    FencedMemberEpoch,
    GroupMaxSizeReached,
    GroupNotFound,
    InvalidIdentifier,
    InvalidRequest,
    MigrationInProgress,
    ShardCountUnchanged,
    StaleJoin,
    UnknownMemberId,
)
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import EndReason, MemberState, OrderingMode, VersionState

from .context import GROUP, PREFIX, Context, names, shards

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_SHARDS
UNRELEASED = MemberState.UNRELEASED_SHARDS


def told(r: HeartbeatResponse) -> tuple[MemberState, int, list[str], list[str]]:
    """What a member is told: state, epoch, shards it may read, shards it must release."""
    return r.member_state, r.member_epoch, names(r.shards), names(r.revoking)


def test_first_member_joins_an_empty_group() -> None:
    ctx = Context(shard_count=4)
    assert (ctx.group.group_epoch, ctx.group.assignment_epoch) == (0, 0)
    r = ctx.join("a", capacity=2)
    assert told(r) == (STABLE, 1, ["v1:0", "v1:1", "v1:2", "v1:3"], [])
    assert [a.assignment_epoch for a in r.shards] == [1, 1, 1, 1]
    assert all(a.readable for a in r.shards)
    assert (r.group_epoch, r.assignment_epoch, r.max_concurrency) == (1, 1, 1)
    assert (r.active_version, r.shard_count, r.heartbeat_interval_ms) == (1, 4, 1_000)
    # Steady state: the same heartbeat changes nothing but the lease.
    ctx.now += 500
    again = ctx.ack(r)
    assert told(again) == told(r)
    assert ctx.member("a").lease_deadline_ms == 10_500


def test_second_member_joins_revoke_before_assign_step_by_step() -> None:
    ctx = Context(shard_count=4)
    a = ctx.join("a")
    b = ctx.join("b")
    # b is at the new epoch but everything is still a's: it waits.
    assert told(b) == (UNRELEASED, 2, [], [])
    assert ctx.group.target == {"a": shards("v1:0", "v1:1"), "b": shards("v1:2", "v1:3")}

    a = ctx.heartbeat("a", 1)  # owned not reported: learns what to revoke, keeps epoch 1
    assert told(a) == (UNREVOKED, 1, ["v1:0", "v1:1"], ["v1:2", "v1:3"])
    assert told(ctx.heartbeat("b", 2)) == (UNRELEASED, 2, [], [])  # still owned by a

    a = ctx.heartbeat("a", 1, shards("v1:0", "v1:1", "v1:2"))  # releases only part: not enough
    assert told(a) == (UNREVOKED, 1, ["v1:0", "v1:1"], ["v1:2", "v1:3"])

    a = ctx.heartbeat("a", 1, shards("v1:0", "v1:1"))  # revocation acknowledged
    assert told(a) == (STABLE, 2, ["v1:0", "v1:1"], [])
    assert [s.assignment_epoch for s in a.shards] == [1, 1]  # kept shards keep their grant epoch

    b = ctx.heartbeat("b", 2)
    assert told(b) == (STABLE, 2, ["v1:2", "v1:3"], [])
    assert [s.assignment_epoch for s in b.shards] == [2, 2]
    assert describe_group(ctx.state, GROUP, ctx.now)["state"] == "STABLE"  # type: ignore[arg-type]


def _two_stable_members(ctx: Context) -> tuple[HeartbeatResponse, HeartbeatResponse]:
    ctx.join("a")
    ctx.join("b")
    ctx.heartbeat("a", 1)
    a = ctx.heartbeat("a", 1, shards("v1:0", "v1:1"))
    b = ctx.heartbeat("b", 2)
    assert told(a)[0] == told(b)[0] == STABLE
    return a, b


def test_leave_releases_shards_at_once() -> None:
    ctx = Context(shard_count=4)
    a, _ = _two_stable_members(ctx)
    left = ctx.heartbeat("b", -1)
    assert (left.member_epoch, left.member_state, left.shards) == (-1, MemberState.LEFT, ())
    assert ctx.member("b").end_reason is EndReason.LEFT
    assert ctx.group.group_epoch == 3
    a = ctx.ack(a)
    assert told(a) == (STABLE, 3, ["v1:0", "v1:1", "v1:2", "v1:3"], [])
    # Leaving again (a lost response, retried) is a no-op.
    assert ctx.heartbeat("b", -1).member_epoch == -1
    assert ctx.group.group_epoch == 3


def test_lease_expiry_by_the_tick_frees_shards() -> None:
    ctx = Context(shard_count=4, lease_ttl_ms=10_000)
    a, _ = _two_stable_members(ctx)
    ctx.now += 9_000
    a = ctx.ack(a)  # a renews; b stays silent
    report = ctx.tick(advance_ms=1_000)  # now == 10_000: b's lease (deadline 10_000) has ended
    assert report.expired == ((GROUP, "b"),)
    assert ctx.member("b").state is MemberState.EXPIRED
    assert ctx.member("b").end_reason is EndReason.LEASE_EXPIRED
    assert ctx.group.group_epoch == 3
    assert told(ctx.ack(a)) == (STABLE, 3, ["v1:0", "v1:1", "v1:2", "v1:3"], [])
    # The tick is idempotent.
    before = ctx.state
    assert ctx.tick().expired == ()
    assert ctx.state == before
    # b comes back with its old epoch: fenced; it rejoins with epoch 0.
    with pytest.raises(FencedMemberEpoch):
        ctx.heartbeat("b", 2, shards("v1:2", "v1:3"))
    assert ctx.join("b").member_epoch == 4


def test_heartbeat_after_the_lease_ended_is_fenced_even_before_the_tick() -> None:
    ctx = Context(shard_count=2, lease_ttl_ms=10_000)
    r = ctx.join("a")
    ctx.now += 10_000
    before = ctx.state
    with pytest.raises(FencedMemberEpoch, match="lease"):
        ctx.ack(r)
    assert ctx.state == before  # a rejected heartbeat changes nothing


def test_revocation_timeout_fences_a_member_that_keeps_its_shards() -> None:
    ctx = Context(shard_count=4, revocation_timeout_ms=30_000, lease_ttl_ms=10_000)
    ctx.join("a")
    ctx.join("b")
    a = ctx.heartbeat("a", 1)
    assert a.member_state is UNREVOKED
    assert ctx.member("a").revocation_deadline_ms == 30_000
    for _ in range(5):  # a stays alive but never releases; b waits
        ctx.now += 5_000
        ctx.heartbeat("a", 1, shards("v1:0", "v1:1", "v1:2", "v1:3"))
        assert ctx.heartbeat("b", 2).member_state is UNRELEASED
        ctx.tick()
    assert ctx.member("a").state is UNREVOKED
    report = ctx.tick(advance_ms=5_000)  # now == 30_000: the revocation deadline
    assert report.expired == ((GROUP, "a"),)
    assert ctx.member("a").state is MemberState.EXPIRED
    assert ctx.member("a").end_reason is EndReason.REVOCATION_TIMEOUT
    b = ctx.heartbeat("b", 2)
    assert told(b) == (STABLE, 3, ["v1:0", "v1:1", "v1:2", "v1:3"], [])


def renewed_in_redis(ctx: Context, member_id: str, until_ms: int) -> None:
    """What the store loads for a member that renews its own lease in Redis (section 5): the later
    deadline; its epoch, state and assignment do not move."""
    assert ctx.state is not None
    group = ctx.group
    member = replace(group.members[member_id], lease_deadline_ms=until_ms)
    group = replace(group, members={**group.members, member_id: member})
    ctx.state = replace(ctx.state, groups={**ctx.state.groups, GROUP: group})


def test_a_member_that_never_hears_of_a_revocation_is_fenced_by_the_revocation_timeout() -> None:
    """The coordinator cannot reach it (it renews its lease in Redis, section 5): the revocation clock
    starts at the first tick after the bump that moved its shards, so the rebalance still ends."""
    ctx = Context(shard_count=4, revocation_timeout_ms=30_000, lease_ttl_ms=10_000)
    ctx.join("a")
    ctx.ack(ctx.heartbeat("a", 1))
    ctx.join("b")  # the target moves two of a's shards to b; a never heartbeats again
    ctx.tick(advance_ms=1_000)
    assert (ctx.member("a").state, ctx.member("a").revocation_deadline_ms) == (STABLE, 31_000)
    for _ in range(5):
        renewed_in_redis(ctx, "a", ctx.now + 10_000)
        assert ctx.heartbeat("b", 2).member_state is UNRELEASED
        assert ctx.tick(advance_ms=5_000).expired == ()
    renewed_in_redis(ctx, "a", ctx.now + 10_000)
    ctx.heartbeat("b", 2)
    assert ctx.tick(advance_ms=4_999).expired == ()
    assert ctx.tick(advance_ms=1).expired == ((GROUP, "a"),)  # now == 31_000
    assert ctx.member("a").end_reason is EndReason.REVOCATION_TIMEOUT
    assert told(ctx.heartbeat("b", 2)) == (STABLE, 3, ["v1:0", "v1:1", "v1:2", "v1:3"], [])


def a_owes_b_a_shard() -> Context:
    """a held all four shards; b joined, the target moved two of them to b, and the tick started a's
    revocation clock (at 0: deadline 30_000) before a heard of it."""
    ctx = Context(shard_count=4, revocation_timeout_ms=30_000, lease_ttl_ms=60_000)
    ctx.join("a")
    ctx.ack(ctx.heartbeat("a", 1))
    ctx.join("b")
    ctx.tick()
    assert (ctx.member("a").state, ctx.member("a").revocation_deadline_ms) == (STABLE, 30_000)
    return ctx


def test_a_revocation_clock_started_by_the_tick_is_kept_by_the_heartbeat() -> None:
    ctx = a_owes_b_a_shard()
    ctx.now += 20_000
    a = ctx.heartbeat("a", 1)  # hears of it now: it has what was left of the 30 s, not 30 s more
    assert a.member_state is UNREVOKED and ctx.member("a").revocation_deadline_ms == 30_000


def test_a_revocation_clock_stops_when_nothing_is_owed_any_more() -> None:
    ctx = a_owes_b_a_shard()
    ctx.heartbeat("b", -1)  # b leaves before a heard of anything: a owes nothing any more
    ctx.tick(advance_ms=1_000)
    assert (ctx.member("a").state, ctx.member("a").revocation_deadline_ms) == (STABLE, None)


def test_stale_and_future_epochs_are_fenced() -> None:
    ctx = Context(shard_count=4)
    a, _ = _two_stable_members(ctx)
    ctx.heartbeat("b", -1)
    a = ctx.ack(a)  # a: epoch 3, previous 2
    assert (ctx.member("a").member_epoch, ctx.member("a").previous_epoch) == (3, 2)
    before = ctx.state
    with pytest.raises(FencedMemberEpoch) as future:
        ctx.heartbeat("a", 4, frozenset())
    assert future.value.details == {"member_id": "a", "member_epoch": 3, "received_epoch": 4}
    with pytest.raises(FencedMemberEpoch):
        ctx.heartbeat("a", 1, frozenset())  # older than the previous epoch
    assert ctx.state == before


def test_previous_epoch_is_accepted_after_a_lost_response() -> None:
    ctx = Context(shard_count=4)
    a, _ = _two_stable_members(ctx)
    ctx.heartbeat("b", -1)
    ctx.ack(a)  # moves a to epoch 3 with all four shards: this response is lost
    # a still believes epoch 2 and two shards: accepted, and told the truth again.
    again = ctx.heartbeat("a", 2, shards("v1:0", "v1:1"))
    assert told(again) == (STABLE, 3, ["v1:0", "v1:1", "v1:2", "v1:3"], [])
    # Not when it claims a shard it is not assigned, nor without reporting what it owns.
    ctx.join("c")
    ctx.heartbeat("a", 3)  # a must now revoke; it stays at epoch 3, previous 2
    with pytest.raises(FencedMemberEpoch):
        ctx.heartbeat("a", 2, shards("v1:0", "v1:1", "v1:2", "v1:3", "v1:4"))
    with pytest.raises(FencedMemberEpoch):
        ctx.heartbeat("a", 2)


def test_unknown_member_and_missing_group() -> None:
    ctx = Context(shard_count=2)
    with pytest.raises(UnknownMemberId, match="rejoin with member_epoch 0"):
        ctx.heartbeat("ghost", 3, frozenset())
    hb = Heartbeat(member_id="a", member_epoch=0, owned=frozenset(), capacity=1)
    with pytest.raises(GroupNotFound):
        apply(ctx.state, MemberHeartbeat(stream_prefix=PREFIX, consumer_group="nope", heartbeat=hb), 0)
    with pytest.raises(GroupNotFound):
        apply(None, MemberHeartbeat(stream_prefix="other", consumer_group=GROUP, heartbeat=hb), 0)


def test_group_full() -> None:
    ctx = Context(shard_count=2, max_members=2)
    ctx.join("a")
    ctx.join("b")
    before = ctx.state
    with pytest.raises(GroupMaxSizeReached):
        ctx.join("c")
    assert ctx.state == before
    ctx.heartbeat("b", -1)
    assert ctx.join("c").member_state in (STABLE, UNRELEASED)


def test_unaffected_members_keep_consuming_through_a_rebalance() -> None:
    ctx = Context(shard_count=6)
    for m in "abc":
        ctx.join(m)
    for _ in range(3):
        resp = {m: ctx.ack(ctx.heartbeat(m, ctx.member(m).member_epoch, ctx.member(m).owned)) for m in "abc"}
    assert all(r.member_state is STABLE for r in resp.values())
    before = {m: dict(ctx.member(m).assigned) for m in "abc"}
    epoch = ctx.group.group_epoch

    ctx.join("d")  # 6 shards over 4 members: two keep 2, one gives one to d
    assert ctx.group.group_epoch == epoch + 1
    moved = [m for m in "abc" if ctx.group.target[m] != frozenset(before[m])]
    assert moved == ["c"]
    for m in "ab":
        r = ctx.ack(resp[m])
        # Settled: their targets did not move, so they stay STABLE at the epoch they have, with the same
        # shards and grant epochs, no revocation; the response says the group's new epochs.
        assert told(r) == (STABLE, resp[m].member_epoch, names(before[m]), [])
        assert (r.group_epoch, r.assignment_epoch) == (epoch + 1, epoch + 1)
        assert dict(ctx.member(m).assigned) == before[m]
    c = ctx.heartbeat("c", resp["c"].member_epoch)
    assert c.member_state is UNREVOKED and len(c.revoking) == 1
    c = ctx.ack(c)  # c releases its shard: its own assignment moved, so its epoch moves
    assert told(c)[:2] == (STABLE, epoch + 1)
    assert told(ctx.heartbeat("d", ctx.member("d").member_epoch))[:2] == (STABLE, epoch + 1)
    assert describe_group(ctx.state, GROUP, ctx.now)["state"] == "STABLE"  # type: ignore[arg-type]
    assert [ctx.member(m).member_epoch for m in "ab"] == [resp["a"].member_epoch, resp["b"].member_epoch]


def test_max_concurrency_versus_capacity() -> None:
    ctx = Context(shard_count=4, max_concurrency=4)
    r = ctx.join("a", capacity=8)
    assert r.max_concurrency == 4  # the group's cap wins
    target = dict(ctx.group.target)
    ctx.set_max_concurrency(2)
    assert ctx.group.group_epoch == 2  # a metadata change
    r = ctx.ack(r)
    # The bump reaches the member in its response; its own assignment did not move, nor its epoch.
    assert (r.max_concurrency, r.member_epoch, r.group_epoch) == (2, 1, 2)
    r = ctx.heartbeat("a", 1, capacity=1)  # the member's own capacity is lower
    assert (r.max_concurrency, ctx.group.group_epoch) == (1, 3)
    assert dict(ctx.group.target) == target  # capacity and max_concurrency are never weights
    ctx.set_max_concurrency(2)
    assert ctx.group.group_epoch == 3  # unchanged value: no bump
    with pytest.raises(InvalidRequest):
        ctx.set_max_concurrency(0)


def test_capacity_is_not_an_assignment_weight() -> None:
    ctx = Context(shard_count=6)
    ctx.join("a", capacity=1)
    ctx.join("b", capacity=64)
    assert {m: len(t) for m, t in ctx.group.target.items()} == {"a": 3, "b": 3}


def test_strict_resharding_drains_old_shards_before_new_ones_are_read() -> None:
    ctx = Context(shard_count=4)
    a = ctx.join("a")
    ctx.reshard(8)  # gcd(4, 8) = 4: new shard j waits for old shard j % 4
    topo = ctx.state.topology  # type: ignore[union-attr]
    assert [(v.version, v.shard_count, v.state) for v in topo.versions] == [
        (1, 4, VersionState.DRAINING),
        (2, 8, VersionState.ACTIVE),
    ]
    a = ctx.ack(a)
    assert a.member_epoch == 2 and len(a.shards) == 12
    readable = {str(s.shard) for s in a.shards if s.readable}
    assert readable == {"v1:0", "v1:1", "v1:2", "v1:3"}

    ctx.drained("v1:1")
    a = ctx.ack(a)
    readable = {str(s.shard) for s in a.shards if s.readable}
    assert readable == {"v1:0", "v1:2", "v1:3", "v2:1", "v2:5"}
    assert names(a.revoking) == ["v1:1"]  # the drained shard leaves through revocation
    a = ctx.ack(a)
    assert a.member_state is STABLE

    ctx.drained("v1:0", "v1:2", "v1:3")
    assert ctx.state.topology.versions[0].state is VersionState.RETIRED  # type: ignore[union-attr]
    assert ctx.state.topology.migration.completed_at_ms == ctx.now  # type: ignore[union-attr]
    a = ctx.ack(ctx.ack(a))
    assert told(a) == (STABLE, a.member_epoch, [f"v2:{i}" for i in range(8)], [])
    assert all(s.readable for s in a.shards)


def test_strict_resharding_to_a_coprime_count_waits_for_every_old_shard() -> None:
    ctx = Context(shard_count=2)
    a = ctx.join("a")
    ctx.reshard(3)
    ctx.drained("v1:0")
    a = ctx.ack(a)
    assert not any(s.readable for s in a.shards if s.shard.version == 2)


def test_relaxed_resharding_reads_new_shards_at_once() -> None:
    ctx = Context(shard_count=2)
    a = ctx.join("a")
    ctx.reshard(3, OrderingMode.RELAXED)
    a = ctx.ack(a)
    assert all(s.readable for s in a.shards)
    assert names(a.shards) == ["v1:0", "v1:1", "v2:0", "v2:1", "v2:2"]


def test_resharding_with_two_members_balances_old_and_new_shards() -> None:
    ctx = Context(shard_count=4)
    _two_stable_members(ctx)
    ctx.reshard(2)
    sizes = sorted(len(t) for t in ctx.group.target.values())
    assert sizes == [3, 3]
    # Sticky: both keep their old shards; the new ones fill the rest.
    assert ctx.group.target["a"] >= shards("v1:0", "v1:1")


def test_a_second_migration_is_refused_while_one_is_active() -> None:
    ctx = Context(shard_count=4)
    ctx.join("a")
    with pytest.raises(ShardCountUnchanged):
        ctx.reshard(4)
    ctx.reshard(6)
    before = ctx.state
    with pytest.raises(MigrationInProgress) as refused:
        ctx.reshard(8)
    assert refused.value.details == {
        "from_version": 1,
        "to_version": 2,
        "blocking": {GROUP: ["v1:0", "v1:1", "v1:2", "v1:3"]},
        "groups_without_live_members": [],
    }
    assert "still draining: group billing (v1:0..v1:3)" in refused.value.message
    assert ctx.state == before
    ctx.drained(*(f"v1:{i}" for i in range(4)))
    ctx.reshard(8)  # allowed once the first one completed
    assert ctx.state.topology.active_version.version == 3  # type: ignore[union-attr]


def test_a_group_without_members_needs_drain_reports_too() -> None:
    ctx = Context(shard_count=2)
    ctx.reshard(4)
    assert ctx.state.topology.migration.active  # type: ignore[union-attr]
    ctx.drained("v1:0", "v1:1")
    assert not ctx.state.topology.migration.active  # type: ignore[union-attr]


def test_rejoin_with_a_live_id_fences_the_old_incarnation() -> None:
    ctx = Context(shard_count=2)
    first = ctx.join("a")
    again = ctx.join("a")  # the first response was lost, or a new process reused the id
    assert again.member_epoch == 2 > first.member_epoch
    assert [s.assignment_epoch for s in again.shards] == [2, 2]  # old-epoch reads are refused
    assert ctx.member("a").state is STABLE


def test_join_must_report_capacity_and_identifiers_are_validated() -> None:
    ctx = Context(shard_count=2)
    with pytest.raises(InvalidRequest, match="capacity"):
        ctx.heartbeat("a", 0, frozenset())
    for bad in ("", "a b", "a:b", "{a}", "x" * 129, "-a"):
        with pytest.raises(InvalidIdentifier):
            ctx.join(bad)
    with pytest.raises(InvalidRequest):
        ctx.heartbeat("a", -3)  # -2 is a static member's temporary leave (test_static.py)
    with pytest.raises(InvalidRequest):
        ctx.join("a", capacity=0)


# ---------------------------------------------------------------------------------------------- join_seq


def join_with(ctx: Context, member_id: str, seq: int | None, owner: str | None = None) -> HeartbeatResponse:
    hb = Heartbeat(
        member_id=member_id, member_epoch=0, owned=frozenset(), capacity=2, join_seq=seq, owner=owner
    )
    result = ctx.run(MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb))
    assert isinstance(result, HeartbeatResponse)
    return result


def test_a_retried_join_with_the_same_join_seq_answers_the_live_member_without_fencing_it() -> None:
    ctx = Context(shard_count=4)
    first = join_with(ctx, "a", 1)
    ctx.join("b")  # the group moves on meanwhile
    before = ctx.group
    again = join_with(ctx, "a", 1)  # the same join, retried (its answer was lost)
    assert ctx.group is before or ctx.group == before  # nothing changed: no fence, no bump
    assert again.member_epoch == ctx.member("a").member_epoch >= first.member_epoch
    assert ctx.member("a").state.is_live and ctx.member("a").end_reason is None


def test_a_delayed_older_join_is_refused_and_cannot_fence_the_live_incarnation() -> None:
    ctx = Context(shard_count=4)
    join_with(ctx, "a", 1)
    ctx.now += 20_000  # a's lease ends: fenced by the tick, it rejoins with the next join_seq
    ctx.tick()
    rejoined = join_with(ctx, "a", 2)
    before = ctx.group
    with pytest.raises(StaleJoin) as refused:
        join_with(ctx, "a", 1)  # the first join's retry, stuck in a restarting server, lands now
    assert refused.value.details == {"member_id": "a", "join_seq": 1, "current_join_seq": 2}
    assert ctx.group == before and ctx.member("a").member_epoch == rejoined.member_epoch
    # A higher join_seq is a new incarnation: the live one is fenced first, as any rejoin.
    third = join_with(ctx, "a", 3)
    assert third.member_epoch > rejoined.member_epoch and ctx.member("a").join_seq == 3


def test_joins_without_join_seq_keep_the_old_rule_and_other_heartbeats_ignore_it() -> None:
    ctx = Context(shard_count=4)
    r = join_with(ctx, "a", None)
    again = join_with(ctx, "a", None)  # no join_seq: a join of a live id fences it and joins afresh
    assert again.member_epoch > r.member_epoch
    hb = Heartbeat(member_id="a", member_epoch=again.member_epoch, join_seq=7)
    result = ctx.run(MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb))
    assert isinstance(result, HeartbeatResponse) and ctx.member("a").join_seq is None
    with pytest.raises(InvalidRequest):
        join_with(ctx, "a", -1)
