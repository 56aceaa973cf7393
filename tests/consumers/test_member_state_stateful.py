"""Random input sequences against the member state machine, with its invariants checked after every step.

The coordinator here is adversarial (any assignment, any epoch bump, any error at any time); the
invariants are the member's side of the protocol:

* at most one unit per shard in this process (a shard is started only when it has no unit);
* every unit the machine counts is one the loop was told to start, and vice versa;
* a running unit is assigned, not suspended, and the member is a MEMBER; every other unit was told to
  stop (drain or abandon);
* every shard whose unit is still finishing its work (not abandoned) is reported as owned, so no
  revocation is acknowledged before the work on it is done;
* once LEFT, nothing more is sent.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from consumers.member.state import COORDINATOR_UNREACHABLE, Phase, UnitState
from coordinator.protocol.model import Shard
from tests.consumers.script import LEAVE_RESPONSE, Script, response

SHARDS = [f"v1:{i}" for i in range(5)]
shard_sets = st.sets(st.sampled_from(SHARDS), max_size=len(SHARDS))


class MemberMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.t = Script(capacity=3, retry_jitter_ratio=0.0)
        self.epoch = 1
        self.told_to_stop: set[Shard] = set()

    def _track(self) -> None:
        for d in self.t.log:
            for stop in d.stop:
                self.told_to_stop.add(stop.shard)
            for start in d.start:
                self.told_to_stop.discard(start.shard)
        self.t.log.clear()

    @rule(assigned=shard_sets, revoking=shard_sets, bump=st.booleans(), mc=st.integers(1, 6))
    def heartbeat_answered(self, assigned: set[str], revoking: set[str], bump: bool, mc: int) -> None:
        wake = self.t.sm.next_wakeup_ms()
        if wake is None:
            return
        self.t.advance(max(0, wake - self.t.now))
        request = self.t.sm.poll_heartbeat(self.t.now)
        if request is None:
            return
        self.epoch += int(bump)
        if request.member_epoch == -1:
            self.t.answer(request, LEAVE_RESPONSE)
        else:
            body = response(self.epoch, assigned, revoking=revoking - assigned, max_concurrency=mc)
            self.t.answer(request, body)
        self._track()

    @rule(code=st.sampled_from([COORDINATOR_UNREACHABLE, "GROUP_NOT_FOUND", "FENCED_MEMBER_EPOCH",
                                "UNKNOWN_MEMBER_ID", "STORE_UNAVAILABLE"]))  # fmt: skip
    def heartbeat_failed(self, code: str) -> None:
        wake = self.t.sm.next_wakeup_ms()
        if wake is None:
            return
        self.t.advance(max(0, wake - self.t.now))
        request = self.t.sm.poll_heartbeat(self.t.now)
        if request is not None:
            self.t.fail(request, code, retriable=code != "FENCED_MEMBER_EPOCH")
        self._track()

    @rule()
    def data_plane_fenced(self) -> None:
        self.t._record(self.t.sm.on_member_fenced(self.t.incarnation, self.t.now))
        self._track()

    @precondition(lambda self: bool(self.t.units))
    @rule(data=st.data())
    def not_owner(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.t.units)))
        start = self.t.units[shard]
        self.t._record(self.t.sm.on_not_owner(shard, start.incarnation, self.t.now))
        self._track()

    @rule()
    def stale_epoch(self) -> None:
        self.t._record(self.t.sm.on_stale_epoch(self.t.incarnation, self.t.now))

    @precondition(lambda self: bool(self.t.units))
    @rule(data=st.data())
    def unit_stopped(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.t.units)))
        failed = self.t.sm.units[shard] is UnitState.RUNNING  # a running unit stops only on a failure
        self.t.stopped(str(shard), failed=failed)
        self._track()

    @rule(timeout_ms=st.integers(0, 3_000))
    def stop(self, timeout_ms: int) -> None:
        self.t._record(self.t.sm.request_stop(self.t.now, timeout_ms))
        self._track()

    @rule(ms=st.integers(0, 2_000))
    def time_passes(self, ms: int) -> None:
        self.t.advance(ms)
        self._track()

    # -------------------------------------------------------------------------------------- invariants

    @invariant()
    def units_match_what_the_loop_runs(self) -> None:
        assert set(self.t.sm.units) == set(self.t.units)

    @invariant()
    def running_units_are_assigned_and_the_rest_were_told_to_stop(self) -> None:
        sm = self.t.sm
        for shard, state in sm.units.items():
            if state is UnitState.RUNNING:
                assert sm.phase is Phase.MEMBER
                assert shard in sm.assigned and shard not in sm.suspended
                assert shard not in self.told_to_stop
            else:
                assert shard in self.told_to_stop

    @invariant()
    def work_in_progress_is_reported_as_owned(self) -> None:
        sm = self.t.sm
        busy = {s for s, u in sm.units.items() if u is not UnitState.ABANDONED}
        assert busy <= sm.owned()

    @invariant()
    def a_member_runs_every_assigned_shard_it_can(self) -> None:
        sm = self.t.sm
        if sm.phase is Phase.MEMBER:
            for shard in sm.assigned:
                assert shard in sm.units or shard in sm.suspended

    @invariant()
    def nothing_is_sent_after_leaving(self) -> None:
        if self.t.sm.phase is Phase.LEFT:
            assert self.t.sm.poll_heartbeat(self.t.now + 10**9) is None
            assert self.t.sm.next_wakeup_ms() is None


MemberMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestMemberMachine = MemberMachine.TestCase
