"""What a commit writes comes from the core's records (coordinator/store/commit_plan.py), and is exactly
what the store wrote when it worked the changes out by comparing states (tests/store/diff_oracle.py).

The state machine of tests/protocol/test_stateful.py (joins, heartbeats, lost responses, leaves, expiry,
resharding, drains, releases, capacity and concurrency changes), with heartbeats of several members also
decided together as the store batches them (``MemberHeartbeats``): every decision that changes the
state is planned both ways, on the state as a store would have loaded it (read in format 2, or now and
then in format 1, whose next commit writes every member). Pure: no Redis. The store, tick and API tests
check the same on every commit they make (diff_oracle.every_commit_checked_against_the_diff)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from coordinator.protocol.commands import Command, MemberHeartbeats, Outcome
from coordinator.protocol.errors import CoordinatorError, FencedMemberEpoch, UnknownMemberId
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import PrefixState
from coordinator.store import codec
from tests.protocol.test_stateful import GROUP, MEMBER_IDS, PREFIX, CoordinatorMachine, SimMember
from tests.store.diff_oracle import assert_plans_equal


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a load of ``state`` reads (coordinator.store.commit_plan.LoadedState)."""

    state: PrefixState | None
    topology_rev: str = ""
    group_revs: Mapping[str, str] = field(default_factory=dict)
    group_names: list[str] = field(default_factory=list)
    raw_topology: bytes = b""
    decoded: Mapping[str, codec.DecodedGroup] = field(default_factory=dict)
    members_revs: Mapping[str, str] = field(default_factory=dict)
    record_revs: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)


def loaded_from(state: PrefixState | None, decision: int) -> Loaded:
    """``state`` as a store loads it; every fourth decision on a group read in format 1."""
    if state is None:
        return Loaded(state=None)
    names = sorted(state.groups)
    decoded = {}
    for name, group in state.groups.items():
        if decision % 4 == 3:
            decoded[name] = codec.DecodedGroup(
                raw=b'{"format":1}', format=1, group=group, heartbeats={}, records={}
            )
            continue
        decoded[name] = codec.DecodedGroup(
            raw=codec.encode_group_header(group),
            format=codec.GROUP_FORMAT,
            group=group,
            heartbeats={m: member.last_heartbeat_ms for m, member in group.members.items()},
            records={m: codec.encode_member(member) for m, member in group.members.items()},
            revs=dict.fromkeys(group.members, b"2"),
        )
    return Loaded(
        state=state,
        topology_rev=str(decision + 1),
        group_revs=dict.fromkeys(names, "7"),
        group_names=names,
        raw_topology=codec.encode_topology(state.topology, names).encode(),
        decoded=decoded,
        members_revs=dict.fromkeys(names, "3"),
        record_revs={name: dict.fromkeys(state.groups[name].members, b"2") for name in names},
    )


class CommitPlanMachine(CoordinatorMachine):
    decisions = 0
    compared = 0

    def decide(self, state: PrefixState | None, command: Command) -> Outcome:
        outcome = super().decide(state, command)
        # The store commits only a decision that changed the state (Committer.execute in
        # coordinator/store/committing.py).
        if outcome.state is not None and outcome.state != state:
            assert outcome.changes, "a change without records"
            assert_plans_equal(loaded_from(state, self.decisions), outcome)
            CommitPlanMachine.compared += 1
        self.decisions += 1
        return outcome

    @rule(data=st.data())
    def heartbeats_decided_together(self, data: st.DataObject) -> None:
        """Joins, heartbeats and leaves of different members decided in one batch (batching.py)."""
        ids = data.draw(st.lists(st.sampled_from(MEMBER_IDS), min_size=2, max_size=4, unique=True))
        sent: list[tuple[str, str]] = []
        heartbeats = []
        for mid in ids:
            kind = data.draw(st.sampled_from(["join", "heartbeat", "leave"]))
            sim = self.sims[mid]
            if kind == "join":
                self.sims[mid] = SimMember(capacity=sim.capacity)
                self.last_seen.pop(mid, None)
                hb = Heartbeat(member_id=mid, member_epoch=0, owned=frozenset(), capacity=sim.capacity)
            elif kind == "leave":
                hb = Heartbeat(member_id=mid, member_epoch=-1)
            elif sim.joined:
                hb = Heartbeat(member_id=mid, member_epoch=sim.epoch, owned=self.owned(mid, ack=True))
            else:
                continue
            sent.append((mid, kind))
            heartbeats.append(hb)
        command = MemberHeartbeats(stream_prefix=PREFIX, consumer_group=GROUP, heartbeats=tuple(heartbeats))
        outcome = self.decide(self.state, command)
        assert outcome.state is not None and isinstance(outcome.result, tuple)
        self.state = outcome.state
        for (mid, kind), result in zip(sent, outcome.result, strict=True):
            if isinstance(result, FencedMemberEpoch | UnknownMemberId) or kind == "leave":
                self.sims[mid] = SimMember(capacity=self.sims[mid].capacity)
            elif isinstance(result, CoordinatorError):
                raise result
            else:
                self.receive(mid, result)


CommitPlanMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestCommitPlanMachine = CommitPlanMachine.TestCase


def test_the_machine_compared_commits() -> None:
    """Runs after the machine (file order): it did compare plans, many of them."""
    assert CommitPlanMachine.compared > 1000
