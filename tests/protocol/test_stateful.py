"""A Hypothesis state machine over the pure core: many members, lost responses, expiry, resharding.

Simulated members behave like the real runtime: they remember the last response they received, report
what they own, acknowledge revocations (or dawdle), lose responses, go silent, leave and rejoin. After
every step the invariants of docs/protocol.md ("Invariants") are checked against the coordinator state
*and* against what the members believe: no shard is ever readable by two members at once. Operators
release the group from a drain (refused while it has live members), and the tick caps ended members.
Some members are static (an instance id, docs/protocol.md section 3): they leave temporarily, die and
come back under another member id; a takeover moves no other member's target, and a second live process
with one instance id is refused without fencing anybody.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator.protocol.assignor import assign
from coordinator.protocol.commands import (
    ChangeShardCount,
    Command,
    CreateGroup,
    MemberHeartbeat,
    Outcome,
    ReleaseDrain,
    ReportDrained,
    SetMaxConcurrency,
    Tick,
    apply,
)
from coordinator.protocol.describe import HeartbeatResponse, describe_group
from coordinator.protocol.errors import (
    CoordinatorError,
    FencedMemberEpoch,
    GroupHasLiveMembers,
    MigrationInProgress,
    MigrationNotActive,
    UnknownMemberId,
    UnreleasedInstanceId,
)
from coordinator.protocol.group import Heartbeat, assignable_shards, tick_due, tick_schedule
from coordinator.protocol.model import (
    GroupConfig,
    MemberState,
    OrderingMode,
    PrefixState,
    Shard,
    VersionState,
)
from coordinator.protocol.resharding import undrained_shards
from coordinator.protocol.static import assignor_members

PREFIX, GROUP = "orders", "billing"
LEASE_TTL_MS, HB_MS, REVOKE_MS = 10_000, 1_000, 30_000
MEMBER_IDS = [f"m{i}" for i in range(7)]
INSTANCE_IDS = ["pod-a", "pod-b", "pod-c"]


@dataclass
class SimMember:
    """What one member process believes."""

    epoch: int = 0
    shards: dict[Shard, int] = field(default_factory=dict)  # shard -> its assignment epoch
    revoking: set[Shard] = field(default_factory=set)  # still holding, must release
    joined: bool = False
    capacity: int = 2
    instance: str | None = None  # the instance id it joins with (kept across fences)


def can_read(state: PrefixState, member_id: str, shard: Shard, epoch: int, now_ms: int) -> bool:
    """The data-plane fence of docs/protocol.md ("Fencing the data plane"), evaluated on the state."""
    member = state.groups[GROUP].members.get(member_id)
    if member is None or not member.state.is_live or member.lease_deadline_ms <= now_ms:
        return False
    grant = member.assigned.get(shard)
    return grant is not None and grant <= epoch <= member.member_epoch


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize(shards=st.integers(1, 8))
    def create(self, shards: int) -> None:
        self.now = 0
        config = GroupConfig(
            lease_ttl_ms=LEASE_TTL_MS,
            heartbeat_interval_ms=HB_MS,
            revocation_timeout_ms=REVOKE_MS,
            max_concurrency=4,
        )
        cmd = CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=shards, config=config)
        self.state: PrefixState = self.decide(None, cmd).state  # type: ignore[assignment]
        self.sims: dict[str, SimMember] = {m: SimMember() for m in MEMBER_IDS}
        self.epochs_seen: dict[str, int] = {}
        self.group_epoch = 0
        # member id -> (joined at, epoch, state, assigned, revoking) after the last step (a join forgets it)
        self.last_seen: dict[str, tuple[object, ...]] = {}

    # ------------------------------------------------------------------ helpers

    def decide(self, state: PrefixState | None, command: Command) -> Outcome:
        """Every command of a rule is decided here, at the machine's time (tests/store/test_commit_plan.py
        also checks what each outcome's records make the store write)."""
        return apply(state, command, self.now)

    def send(
        self,
        member_id: str,
        epoch: int,
        owned: frozenset[Shard] | None,
        capacity: int | None = None,
        lose: bool = False,
    ) -> None:
        sim = self.sims[member_id]
        hb = Heartbeat(
            member_id=member_id,
            member_epoch=epoch,
            owned=owned,
            capacity=capacity,
            instance_id=sim.instance if epoch == 0 else None,
        )
        try:
            outcome = self.decide(
                self.state, MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb)
            )
        except (FencedMemberEpoch, UnknownMemberId):
            # The runtime drops every shard at once and rejoins later.
            self.sims[member_id] = SimMember(capacity=sim.capacity, instance=sim.instance)
            return
        except UnreleasedInstanceId as refused:
            # Another live member, its lease running, holds the instance id: nothing changed, nobody
            # was fenced; the runtime backs off and joins again later.
            holder = self.state.groups[GROUP].members[refused.details["member_id"]]
            assert holder.member_id != member_id and holder.instance_id == sim.instance
            assert holder.state.is_live and holder.lease_deadline_ms > self.now
            self.sims[member_id] = SimMember(capacity=sim.capacity, instance=sim.instance)
            event("static: join refused, instance id held by a live member")
            return
        assert outcome.state is not None
        self.state = outcome.state
        if epoch < 0:
            self.sims[member_id] = SimMember(capacity=sim.capacity, instance=sim.instance)
            return
        if lose:
            return
        response = outcome.result
        assert isinstance(response, HeartbeatResponse)
        self.receive(member_id, response)

    def receive(self, member_id: str, response: HeartbeatResponse) -> None:
        sim = self.sims[member_id]
        new = {a.shard: a.assignment_epoch for a in response.shards}
        # Shards that disappeared from the assignment: stop reading, keep them until acknowledged.
        sim.revoking |= set(sim.shards) - set(new)
        sim.shards = new
        sim.epoch = response.member_epoch
        sim.joined = True

    def owned(self, member_id: str, ack: bool) -> frozenset[Shard]:
        sim = self.sims[member_id]
        if ack:
            sim.revoking.clear()
        return frozenset(sim.shards) | frozenset(sim.revoking)

    # ------------------------------------------------------------------ rules

    @rule(
        member_id=st.sampled_from(MEMBER_IDS),
        capacity=st.integers(1, 8),
        lose=st.booleans(),
        instance=st.sampled_from([None, *INSTANCE_IDS]),
    )
    def join(self, member_id: str, capacity: int, lose: bool, instance: str | None) -> None:
        self.sims[member_id] = SimMember(capacity=capacity, instance=instance)
        self.last_seen.pop(member_id, None)  # a new incarnation (possibly at the same instant)
        self.send(member_id, 0, frozenset(), capacity=capacity, lose=lose)

    @rule(member_id=st.sampled_from(MEMBER_IDS), ack=st.booleans(), lose=st.booleans(), report=st.booleans())
    def heartbeat(self, member_id: str, ack: bool, lose: bool, report: bool) -> None:
        sim = self.sims[member_id]
        if not sim.joined:
            return
        owned = self.owned(member_id, ack) if report or ack else None
        self.send(member_id, sim.epoch, owned, lose=lose)

    @rule(member_id=st.sampled_from(MEMBER_IDS), capacity=st.integers(1, 8))
    def change_capacity(self, member_id: str, capacity: int) -> None:
        sim = self.sims[member_id]
        if not sim.joined:
            return
        before = dict(self.state.groups[GROUP].target)
        self.send(member_id, sim.epoch, self.owned(member_id, False), capacity=capacity)
        if self.sims[member_id].joined:
            # Capacity is never an assignment weight: the target is exactly what it was.
            assert dict(self.state.groups[GROUP].target) == before

    @rule(member_id=st.sampled_from(MEMBER_IDS), temporary=st.booleans())
    def leave(self, member_id: str, temporary: bool) -> None:
        self.send(member_id, -2 if temporary else -1, None)

    @precondition(lambda self: any(True for _ in self.state.groups[GROUP].held_members()))
    @rule(data=st.data(), capacity=st.integers(1, 8))
    def static_restart(self, data: st.DataObject, capacity: int) -> None:
        """A held static member's instance comes back under a member id that is neither live nor held:
        it gets exactly the held target, and no other member's target moves (when the target was the
        assignor's answer for the group as it is, which a takeover does not change)."""
        group = self.state.groups[GROUP]
        held = data.draw(st.sampled_from(sorted(m.member_id for m in group.held_members())))
        holder = group.members[held]
        free = [
            m
            for m in MEMBER_IDS
            if m not in group.members
            or not (group.members[m].state.is_live or group.members[m].held_until_ms is not None)
        ]
        if not free:
            return
        new_id = data.draw(st.sampled_from(free))
        fixed_point = (
            assign(assignor_members(group), assignable_shards(group, self.state.topology), group.target)
            == group.target
        )
        before = dict(group.target)
        self.sims[new_id] = SimMember(capacity=capacity, instance=holder.instance_id)
        self.last_seen.pop(new_id, None)
        self.send(new_id, 0, frozenset(), capacity=capacity)
        after = self.state.groups[GROUP]
        assert after.members[new_id].state.is_live and after.members[held].held_until_ms is None
        if fixed_point:
            expected = {m: t for m, t in before.items() if m != held}
            if before.get(held):
                expected[new_id] = before[held]
            assert dict(after.target) == expected
            event("static: takeover moved no other member")

    @rule(ms=st.sampled_from([100, 1_000, 5_000, 11_000, 31_000]), cap=st.sampled_from([0, 1, 3, 100]))
    def advance_time_and_tick(self, ms: int, cap: int) -> None:
        self.now += ms
        tick = Tick(stream_prefix=PREFIX, max_ended_members=cap)
        before = self.state.groups[GROUP]
        self.state = self.decide(self.state, tick).state  # type: ignore[assignment]
        group = self.state.groups[GROUP]
        ended = [m for m in group.members.values() if not m.state.is_live and m.held_until_ms is None]
        assert len(ended) <= cap
        # A hold ends when its time comes (the tick), not before.
        assert all(m.held_until_ms > self.now for m in group.held_members())  # type: ignore[operator]
        # Only ended members are forgotten (some may have ended in this very tick), never a live one.
        survivors = {
            m.member_id
            for m in before.live_members()
            if m.lease_deadline_ms > self.now
            and (m.revocation_deadline_ms is None or m.revocation_deadline_ms > self.now)
        }
        assert survivors <= {m.member_id for m in group.live_members()}

    @rule()
    def release_drain(self) -> None:
        """An operator releases the group from the drain; only allowed without live members."""
        before = self.state
        group = before.groups[GROUP]
        try:
            outcome = self.decide(before, ReleaseDrain(stream_prefix=PREFIX, consumer_group=GROUP))
            self.state = outcome.state  # type: ignore[assignment]
        except GroupHasLiveMembers:
            assert any(True for _ in group.live_members())
            event("release-drain: refused, live members")
            return
        except MigrationNotActive:
            m = before.topology.migration
            assert m is None or not m.active or not undrained_shards(before, GROUP)
            event("release-drain: refused, no migration to release")
            return
        assert not any(True for _ in group.live_members())
        # The only group was released: nothing holds the migration back any more.
        assert not self.state.topology.draining_versions
        assert self.state.topology.migration is not None and not self.state.topology.migration.active
        assert self.state.groups[GROUP].group_epoch == group.group_epoch + 1
        event("release-drain: released")

    @rule(value=st.integers(1, 6))
    def set_max_concurrency(self, value: int) -> None:
        cmd = SetMaxConcurrency(stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=value)
        self.state = self.decide(self.state, cmd).state  # type: ignore[assignment]

    @rule(shards=st.integers(1, 8), ordering=st.sampled_from(list(OrderingMode)))
    def change_shard_count(self, shards: int, ordering: OrderingMode) -> None:
        try:
            cmd = ChangeShardCount(stream_prefix=PREFIX, shard_count=shards, ordering=ordering)
            self.state = self.decide(self.state, cmd).state  # type: ignore[assignment]
        except MigrationInProgress:
            assert self.state.topology.migration is not None and self.state.topology.migration.active
        except CoordinatorError as e:
            assert e.code.value == "SHARD_COUNT_UNCHANGED"

    @precondition(lambda self: bool(self.state.topology.draining_versions))
    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        shards = sorted(s for v in self.state.topology.draining_versions for s in v.shards())
        chosen = data.draw(st.lists(st.sampled_from(shards), min_size=1, max_size=3))
        cmd = ReportDrained(stream_prefix=PREFIX, consumer_group=GROUP, shards=frozenset(chosen))
        self.state = self.decide(self.state, cmd).state  # type: ignore[assignment]

    @rule()
    def converge(self) -> None:
        """Every live member heartbeats, acknowledging, until the group is stable; then check balance."""
        group = self.state.groups[GROUP]
        for _ in range(6):
            for member_id in sorted(m.member_id for m in self.state.groups[GROUP].live_members()):
                if self.sims[member_id].joined:
                    self.send(member_id, self.sims[member_id].epoch, self.owned(member_id, True))
        group = self.state.groups[GROUP]
        live = [m for m in group.live_members() if self.sims[m.member_id].joined]
        if len(live) != sum(1 for _ in group.live_members()):
            return  # a member that lost its join response is still unaware; nothing to check yet
        owners = group.owners()
        held = {s for m in group.held_members() for s in group.target.get(m.member_id, ())}
        assignable = set(assignable_shards(group, self.state.topology))
        assert set(owners) == assignable - held if live else not owners
        counts = [len(m.assigned) for m in live]
        assert not counts or max(counts) - min(counts) <= 1
        # Settled: every member STABLE, owning exactly its target (its epoch moves only with its own
        # assignment, so it may be older than the assignment epoch).
        targets = {m.member_id: group.target.get(m.member_id, frozenset()) for m in live}
        assert all(m.state.value == "STABLE" and m.assigned.keys() == targets[m.member_id] for m in live)
        assert describe_group(self.state, GROUP, self.now)["state"] == ("STABLE" if live else "EMPTY")

    # ------------------------------------------------------------------ invariants

    @invariant()
    def one_owner_per_shard(self) -> None:
        seen: dict[Shard, str] = {}
        for member in self.state.groups[GROUP].live_members():
            for shard in member.owned:
                assert shard not in seen, f"{shard} owned by {seen[shard]} and {member.member_id}"
                seen[shard] = member.member_id

    @invariant()
    def no_shard_readable_by_two_members(self) -> None:
        readers: dict[Shard, str] = {}
        for member_id, sim in self.sims.items():
            for shard in sim.shards:
                if can_read(self.state, member_id, shard, sim.epoch, self.now):
                    assert shard not in readers, f"{shard} readable by {readers[shard]} and {member_id}"
                    readers[shard] = member_id

    @invariant()
    def epochs_never_decrease(self) -> None:
        group = self.state.groups[GROUP]
        assert group.group_epoch >= self.group_epoch
        assert group.assignment_epoch <= group.group_epoch
        self.group_epoch = group.group_epoch
        for member in group.members.values():
            if member.state.is_live and member.member_epoch > 0:
                key = f"{member.member_id}@{member.joined_at_ms}"
                assert member.member_epoch >= self.epochs_seen.get(key, 0)
                self.epochs_seen[key] = member.member_epoch
                assert member.member_epoch <= group.assignment_epoch

    @invariant()
    def an_epoch_moves_only_with_its_members_assignment(self) -> None:
        """Section 4: a STABLE member whose assignment did not move keeps its epoch through any bump (it
        is settled); its epoch moves only in a step that changed its state, shards or revocations."""
        seen: dict[str, tuple[object, ...]] = {}
        for member in self.state.groups[GROUP].live_members():
            now = (
                member.joined_at_ms,
                member.member_epoch,
                member.state,
                dict(member.assigned),
                member.revoking,
            )
            was = self.last_seen.get(member.member_id)
            if was is not None and was[2] is MemberState.STABLE and was[2:] == now[2:]:
                assert was[1] == now[1], f"{member.member_id}'s epoch moved with nothing else"
            seen[member.member_id] = now
        self.last_seen = seen

    @invariant()
    def the_target_names_only_live_members_with_shards(self) -> None:
        """Every change of who is live bumps (a new target over the live members), and the target lists
        only members that get shards (model.Group.target): every other live member's target is empty,
        so the group's header is the size of its shard count, not of its members."""
        group = self.state.groups[GROUP]
        assert set(group.target) <= set(assignor_members(group))  # live, or held for an instance id
        assert all(group.target.values())

    @invariant()
    def one_holder_per_instance_id_and_held_shards_given_to_nobody_else(self) -> None:
        group = self.state.groups[GROUP]
        holders = [
            m.instance_id for m in group.members.values() if m.member_id in set(assignor_members(group))
        ]
        named = [i for i in holders if i is not None]
        assert len(named) == len(set(named)), named
        owners = group.owners()
        for member in group.held_members():
            assert not member.state.is_live and member.instance_id is not None and not member.owned
            # Another member may still own one of its shards (it has not heard of the rebalance that gave
            # it to the held member yet), never as part of its own target: it is giving it up.
            for shard in group.target.get(member.member_id, frozenset()):
                owner = owners.get(shard)
                assert owner is None or shard not in group.target.get(owner, frozenset())

    @invariant()
    def target_is_balanced_and_complete(self) -> None:
        group = self.state.groups[GROUP]
        live = set(assignor_members(group))  # the live members and the held ones
        target = {m: group.target.get(m, frozenset()) for m in live}
        every = [s for t in target.values() for s in t]
        assert len(every) == len(set(every)), "a shard in two targets"
        if live:
            assert set(every) == set(assignable_shards(group, self.state.topology))
            sizes = [len(target[m]) for m in live]
            assert max(sizes) - min(sizes) <= 1

    @invariant()
    def a_tick_the_schedule_says_is_not_due_changes_nothing(self) -> None:
        """The store skips reading a group whose tick is not due (tick_schedule, the lease index); that
        is only sound if such a tick would have changed nothing, at any later time and any settings."""
        group = self.state.groups[GROUP]
        schedule = tick_schedule(group)
        leases = [m.lease_deadline_ms for m in group.live_members()]
        migrating = bool(self.state.topology.draining_versions)
        for later in (0, 1, 999, 1_000, 5_000, 11_000, 31_000, 700_000):
            for retention, cap in ((600_000, 100), (0, 0), (1_000, 3)):
                now = self.now + later
                tick = Tick(stream_prefix=PREFIX, retention_ms=retention, max_ended_members=cap)
                due = tick_due(schedule, min(leases, default=None), now, retention, cap, migrating)
                if not due:
                    assert apply(self.state, tick, now).state == self.state, (later, retention, cap)
                else:
                    event("tick due")

    @invariant()
    def one_active_version_and_at_most_one_migration(self) -> None:
        states = [v.state for v in self.state.topology.versions]
        assert states.count(VersionState.ACTIVE) == 1
        assert states.count(VersionState.DRAINING) <= 1


CoordinatorMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestCoordinatorMachine = CoordinatorMachine.TestCase
