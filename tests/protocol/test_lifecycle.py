"""Scenario tests of the lifecycle commands: retention policy, release from a drain, prefix deletion,
the named blockers of a migration, and the cap on ended members.

Each asserts the whole outcome, and that a refused command leaves the state exactly as it was.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.protocol.commands import (
    ChangeShardCount,
    DeletePrefix,
    PrefixDeleted,
    ReleaseDrain,
    SetRetention,
    Tick,
    apply,
)
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    GroupHasLiveMembers,
    InvalidRequest,
    MigrationInProgress,
    MigrationNotActive,
    StreamPrefixNotEmpty,
    StreamPrefixNotFound,
)
from coordinator.protocol.group import readable
from coordinator.protocol.model import EndReason, MemberState, RetentionPolicy, Shard, VersionState
from coordinator.protocol.resharding import shard_ranges, undrained_shards

from .context import GROUP, PREFIX, Context, shards

YEAR_MS = 31_536_000_000


def reshard_command(shard_count: int) -> ChangeShardCount:
    return ChangeShardCount(stream_prefix=PREFIX, shard_count=shard_count)


def release_command(group: str) -> ReleaseDrain:
    return ReleaseDrain(stream_prefix=PREFIX, consumer_group=group)


def refused(ctx: Context, command: object) -> Exception:
    """Run a command that must be refused; the state must be unchanged."""
    before = ctx.state
    with pytest.raises(Exception) as error:
        ctx.run(command)  # type: ignore[arg-type]
    assert ctx.state is before
    return error.value


# ------------------------------------------------------------------------------------------ retention


def test_a_new_prefix_has_the_default_policy_acked_only() -> None:
    ctx = Context()
    assert ctx.state is not None
    assert ctx.state.topology.retention == RetentionPolicy(max_age_ms=None, max_len=None, retired_grace_ms=0)
    assert not ctx.state.topology.retention.may_drop_unconsumed


def test_set_retention_replaces_the_policy_and_nothing_else() -> None:
    ctx = Context()
    before = ctx.state
    assert before is not None
    ctx.set_retention(max_age_ms=3_600_000, max_len=50_000, retired_grace_ms=60_000)
    assert ctx.state is not None
    policy = RetentionPolicy(max_age_ms=3_600_000, max_len=50_000, retired_grace_ms=60_000)
    assert ctx.state == replace(before, topology=replace(before.topology, retention=policy))
    assert ctx.state.topology.retention.may_drop_unconsumed
    # The same policy again is not a change (the store then writes nothing).
    same = ctx.state
    ctx.set_retention(max_age_ms=3_600_000, max_len=50_000, retired_grace_ms=60_000)
    assert ctx.state is same
    ctx.set_retention()  # back to the defaults
    assert ctx.state.topology.retention == RetentionPolicy()


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"max_age_ms": 59_999}, "max_age_ms"),
        ({"max_age_ms": YEAR_MS + 1}, "max_age_ms"),
        ({"max_age_ms": True}, "max_age_ms"),
        ({"max_len": 999}, "max_len"),
        ({"max_len": 1_000_000_001}, "max_len"),
        ({"max_len": 1.5}, "max_len"),
        ({"retired_grace_ms": -1}, "retired_grace_ms"),
        ({"retired_grace_ms": YEAR_MS + 1}, "retired_grace_ms"),
        ({"retired_grace_ms": None}, "retired_grace_ms"),
    ],
)
def test_a_retention_value_out_of_range_is_refused_naming_its_field(
    policy: dict[str, object], field: str
) -> None:
    ctx = Context()
    error = refused(ctx, SetRetention(stream_prefix=PREFIX, policy=RetentionPolicy(**policy)))  # type: ignore[arg-type]
    assert isinstance(error, InvalidRequest)
    assert error.details["field"] == field


@pytest.mark.parametrize(
    "policy",
    [
        {"max_age_ms": 60_000, "max_len": 1_000, "retired_grace_ms": 0},
        {"max_age_ms": YEAR_MS, "max_len": 1_000_000_000, "retired_grace_ms": YEAR_MS},
    ],
)
def test_the_bounds_themselves_are_accepted(policy: dict[str, int]) -> None:
    ctx = Context()
    ctx.set_retention(**policy)
    assert ctx.state is not None and ctx.state.topology.retention == RetentionPolicy(**policy)


def test_set_retention_on_a_missing_prefix_is_not_found() -> None:
    with pytest.raises(StreamPrefixNotFound):
        apply(None, SetRetention(stream_prefix=PREFIX, policy=RetentionPolicy()), 0)


def test_the_policy_survives_a_shard_count_change() -> None:
    ctx = Context(shard_count=2)
    ctx.set_retention(max_len=10_000)
    ctx.reshard(4)
    assert ctx.state is not None and ctx.state.topology.retention == RetentionPolicy(max_len=10_000)


# ------------------------------------------------------------------------------------------ blockers


def test_a_second_migration_names_every_group_and_shard_that_holds_the_first_back() -> None:
    ctx = Context(shard_count=4)
    ctx.join("a")
    ctx.create_group("audit")  # never has a member
    ctx.reshard(2)
    ctx.drained("v1:0", "v1:2")
    error = refused(ctx, reshard_command(8))
    assert isinstance(error, MigrationInProgress)
    assert error.details == {
        "from_version": 1,
        "to_version": 2,
        "blocking": {"audit": ["v1:0", "v1:1", "v1:2", "v1:3"], GROUP: ["v1:1", "v1:3"]},
        "groups_without_live_members": ["audit"],
    }
    assert error.message == (
        "stream prefix 'orders' is still draining version 1 into version 2, and only one migration may be "
        "active at a time; still draining: group audit (no live members; v1:0..v1:3), group billing "
        "(v1:1, v1:3); a group without live members never drains on its own: release it from the drain "
        "or delete it"
    )


def test_shard_ranges_compress_consecutive_indexes_per_version() -> None:
    assert shard_ranges(shards("v1:5", "v1:0", "v1:1", "v1:2", "v2:3", "v2:4", "v1:7")) == (
        "v1:0..v1:2, v1:5, v1:7, v2:3..v2:4"
    )
    assert shard_ranges([]) == ""


# ------------------------------------------------------------------------------------------ release


def test_release_drain_of_an_idle_group_completes_the_migration() -> None:
    ctx = Context(shard_count=4)
    ctx.reshard(2)
    before = ctx.group
    assert undrained_shards(ctx.state, GROUP) == tuple(sorted(shards("v1:0", "v1:1", "v1:2", "v1:3")))  # type: ignore[arg-type]
    ctx.now += 5
    ctx.release_drain()
    assert ctx.state is not None
    v1, v2 = ctx.state.topology.versions
    assert (v1.state, v1.retired_at_ms, v2.state) == (VersionState.RETIRED, 5, VersionState.ACTIVE)
    assert ctx.state.topology.migration is not None
    assert ctx.state.topology.migration.completed_at_ms == 5
    # One bump for the release; the retired shards leave the drained set with the version.
    assert ctx.group == replace(
        before, group_epoch=before.group_epoch + 1, assignment_epoch=before.assignment_epoch + 1
    )
    # Another shard-count change is allowed again.
    ctx.reshard(8)


def test_release_drain_of_one_group_leaves_the_other_draining_and_frees_its_new_shards() -> None:
    ctx = Context(shard_count=2)
    ctx.create_group("audit")
    ctx.join("a")
    ctx.reshard(4)  # strict: v2:j waits for v1:(j mod 2) in each group
    ctx.release_drain("audit")
    assert ctx.state is not None
    audit = ctx.state.groups["audit"]
    assert audit.drained == shards("v1:0", "v1:1")
    assert all(readable(audit, ctx.state.topology, s) for s in shards("v2:0", "v2:1", "v2:2", "v2:3"))
    assert not readable(ctx.group, ctx.state.topology, Shard.parse("v2:0"))
    migration = ctx.state.topology.migration
    assert migration is not None and migration.active
    # The live group still blocks the next change, and is the only one named.
    error = refused(ctx, reshard_command(8))
    assert isinstance(error, MigrationInProgress)
    assert error.details["blocking"] == {GROUP: ["v1:0", "v1:1"]}


def test_release_drain_is_refused_while_the_group_has_live_members() -> None:
    ctx = Context(shard_count=2)
    ctx.join("a")
    ctx.join("b")
    ctx.reshard(4)
    error = refused(ctx, release_command(GROUP))
    assert isinstance(error, GroupHasLiveMembers)
    assert error.details == {"consumer_group": GROUP, "live_members": ["a", "b"]}
    assert "stop them" in error.message
    # Once they are gone (left or expired) it is allowed.
    ctx.heartbeat("a", -1)
    ctx.tick(advance_ms=60_000)
    ctx.release_drain()
    assert ctx.state is not None and not ctx.state.topology.draining_versions


def test_release_drain_without_an_active_migration_or_with_nothing_left_is_refused() -> None:
    ctx = Context(shard_count=2)
    error = refused(ctx, release_command(GROUP))
    assert isinstance(error, MigrationNotActive)
    assert "no active migration" in error.message
    ctx.create_group("audit")
    ctx.reshard(4)
    ctx.drained("v1:0", "v1:1")  # billing is done; audit still drains
    error = refused(ctx, release_command(GROUP))
    assert isinstance(error, MigrationNotActive)
    assert "nothing left to drain" in error.message
    assert error.details == {"stream_prefix": PREFIX, "consumer_group": GROUP}


def test_release_drain_of_shards_other_than_those_counted_is_refused() -> None:
    """The store counts the entries of the shards it will release, then commits: if the migration it
    counted completed and another started in between, the group's undrained shards are new ones whose
    entries nobody was shown, and the release must not abandon them."""
    ctx = Context(shard_count=2)
    ctx.reshard(4)
    counted = shards("v1:0", "v1:1")
    ctx.drained("v1:0", "v1:1")  # the migration completes after the count...
    ctx.reshard(3)  # ...and another one starts before the commit
    error = refused(ctx, ReleaseDrain(stream_prefix=PREFIX, consumer_group=GROUP, shards=counted))
    assert isinstance(error, ConfirmationMismatch)
    assert error.details == {
        "stream_prefix": PREFIX,
        "consumer_group": GROUP,
        "shards": ["v2:0", "v2:1", "v2:2", "v2:3"],
    }
    # Counted shards that drained meanwhile are no reason to refuse: the rest is released.
    ctx.release_drain_of(shards("v2:0", "v2:1", "v2:2", "v2:3", "v1:0"))
    assert ctx.state is not None and not ctx.state.topology.draining_versions


# ------------------------------------------------------------------------------------------ deletion


def test_delete_prefix_is_refused_while_it_has_groups_unless_forced() -> None:
    ctx = Context(shard_count=2)
    ctx.create_group("audit")
    error = refused(ctx, DeletePrefix(stream_prefix=PREFIX))
    assert isinstance(error, StreamPrefixNotEmpty)
    assert error.details == {"stream_prefix": PREFIX, "consumer_groups": ["audit", GROUP]}
    assert ctx.state is not None
    topology = ctx.state.topology
    outcome = apply(ctx.state, DeletePrefix(stream_prefix=PREFIX, force=True), ctx.now)
    assert outcome.state is None
    assert outcome.result == PrefixDeleted(topology=topology, consumer_groups=("audit", GROUP))


def test_delete_prefix_without_groups_needs_no_force() -> None:
    ctx = Context(shard_count=2)
    ctx.reshard(4)
    ctx.delete_group(GROUP)
    assert ctx.state is not None and ctx.state.groups == {}
    outcome = apply(ctx.state, DeletePrefix(stream_prefix=PREFIX), ctx.now)
    assert outcome.state is None
    assert isinstance(outcome.result, PrefixDeleted)
    assert [v.version for v in outcome.result.topology.versions] == [1, 2]  # every version's streams go
    assert outcome.result.consumer_groups == ()


def test_delete_prefix_of_a_missing_prefix_or_with_a_bad_force_is_refused() -> None:
    with pytest.raises(StreamPrefixNotFound):
        apply(None, DeletePrefix(stream_prefix=PREFIX), 0)
    ctx = Context(shard_count=1)
    error = refused(ctx, DeletePrefix(stream_prefix=PREFIX, force="yes"))  # type: ignore[arg-type]
    assert isinstance(error, InvalidRequest) and error.details == {"field": "force"}


# ------------------------------------------------------------------------------------------ ended members


def churn(ctx: Context, count: int, step_ms: int = 10) -> None:
    """``count`` members join and leave, one after the other."""
    for i in range(count):
        ctx.now += step_ms
        ctx.join(f"m{i:02d}")
        ctx.heartbeat(f"m{i:02d}", -1)


def test_tick_keeps_only_the_most_recently_ended_members_beyond_the_cap() -> None:
    ctx = Context(shard_count=2)
    ctx.join("live")
    churn(ctx, 5)
    report = ctx.tick(max_ended_members=2)
    assert report.collected == tuple((GROUP, f"m{i:02d}") for i in range(3))
    assert sorted(ctx.group.members) == ["live", "m03", "m04"]
    assert ctx.member("live").state is MemberState.STABLE  # live members are never counted
    assert {ctx.member(m).end_reason for m in ("m03", "m04")} == {EndReason.LEFT}
    assert ctx.tick(max_ended_members=2).collected == ()  # idempotent


def test_equal_end_times_are_capped_by_member_id_and_zero_forgets_every_ended_member() -> None:
    ctx = Context(shard_count=2)
    churn(ctx, 4, step_ms=0)  # all ended at the same instant
    ctx.tick(max_ended_members=3)
    assert sorted(ctx.group.members) == ["m00", "m01", "m02"]
    ctx.tick(max_ended_members=0)
    assert ctx.group.members == {}


def test_the_age_limit_still_applies_under_the_cap() -> None:
    ctx = Context(shard_count=2)
    churn(ctx, 3)
    report = ctx.tick(advance_ms=600_000, max_ended_members=100)
    assert [m for _, m in report.collected] == ["m00", "m01", "m02"]


@pytest.mark.parametrize("cap", [-1, 100_001, True])
def test_a_cap_out_of_range_is_refused(cap: int) -> None:
    ctx = Context()
    error = refused(ctx, Tick(stream_prefix=PREFIX, max_ended_members=cap))
    assert isinstance(error, InvalidRequest) and error.details == {"field": "max_ended_members"}
