"""Random input sequences against the member state machine, with its invariants checked after every step.

The coordinator here is adversarial (any assignment, any epoch bump, any error at any time); the
invariants are the member's side of the protocol:

* at most one unit per shard in this process (a shard is started only when it has no unit);
* every unit the machine counts is one the loop was told to start, and vice versa;
* a running unit is assigned, not suspended, and the member is a MEMBER; every other unit was told to
  stop (drain or abandon);
* every shard whose unit is still finishing its work (not abandoned) is reported as owned, so no
  revocation is acknowledged before the work on it is done;
* once LEFT, nothing more is sent;
* every join of one incarnation carries the same ``join_seq``, a later incarnation a higher one, and a
  join after ``STALE_JOIN`` one above the number the coordinator said it recorded;
* a failed renewal's retry is due no later than one round trip before the lease ends (as the member
  knows it), whatever the Retry-After;
* at most one renewal of its own in Redis is in flight, and the lease as the member knows it never
  outlasts a renewal the coordinator or Redis accepted at the incarnation and epoch the member is at
  (a renewal in Redis at an epoch the coordinator has since moved the member from counts for nothing;
  that interleaving is rare in random runs and pinned in test_member_state.py too).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from consumers.member.state import (
    COORDINATOR_UNREACHABLE,
    MEMBER_FENCED,
    RENEWED,
    STALE_JOIN,
    HeartbeatRequest,
    LeaseRenewalRequest,
    Phase,
    UnitState,
)
from coordinator.protocol.model import Shard
from tests.consumers.script import LEAVE_RESPONSE, Script, response

SHARDS = [f"v1:{i}" for i in range(5)]
TTL = int(response(1)["lease_ttl_ms"])
shard_sets = st.sets(st.sampled_from(SHARDS), max_size=len(SHARDS))


class MemberMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.t = Script(capacity=3, retry_jitter_ratio=0.0)
        self.epoch = 1
        self.told_to_stop: set[Shard] = set()
        self.join_seqs: dict[int, int] = {}  # incarnation -> the join_seq its joins carried
        self.join_seq_above = 0  # the next join must carry more than this (a STALE_JOIN's record)
        self.renewal: LeaseRenewalRequest | None = None  # our own renewal in Redis, in flight
        self.held: HeartbeatRequest | None = None  # a heartbeat sent, answered by a later step
        # (incarnation, epoch) -> the latest lease deadline an accepted renewal implies there.
        self.bounds: dict[tuple[int, int], int] = {}

    def _poll(self) -> HeartbeatRequest | None:
        """The heartbeat due now, if any, after its wake-up time; checks a join's join_seq."""
        wake = self.t.sm.next_wakeup_ms()
        if wake is None:
            return None
        self.t.advance(max(0, wake - self.t.now))
        request = self.t.sm.poll_heartbeat(self.t.now)
        if request is not None and request.member_epoch == 0:
            assert request.join_seq is not None
            if request.incarnation in self.join_seqs:
                assert request.join_seq == self.join_seqs[request.incarnation], "a retry changed join_seq"
            else:
                assert all(request.join_seq > seq for seq in self.join_seqs.values())
                assert request.join_seq > self.join_seq_above
                self.join_seqs[request.incarnation] = request.join_seq
        return request

    def _track(self) -> None:
        for d in self.t.log:
            for stop in d.stop:
                self.told_to_stop.add(stop.shard)
            for start in d.start:
                self.told_to_stop.discard(start.shard)
        self.t.log.clear()

    @rule(assigned=shard_sets, revoking=shard_sets, bump=st.booleans(), mc=st.integers(1, 6))
    def heartbeat_answered(self, assigned: set[str], revoking: set[str], bump: bool, mc: int) -> None:
        request, self.held = self.held or self._poll(), None
        if request is None:
            return
        self.epoch += int(bump)
        if request.member_epoch == -1:
            self.t.answer(request, LEAVE_RESPONSE)
        else:
            body = response(self.epoch, assigned, revoking=revoking - assigned, max_concurrency=mc)
            key = (request.incarnation, self.epoch)
            self.bounds[key] = max(self.bounds.get(key, 0), request.sent_ms + TTL)
            self.t.answer(request, body)
        self._track()

    @rule()
    def heartbeat_sent(self) -> None:
        """A heartbeat goes out and stays unanswered for a while (our own renewals may happen meanwhile)."""
        if self.held is None:
            self.held = self._poll()

    @rule(
        outcome=st.sampled_from(
            [RENEWED, RENEWED, RENEWED, MEMBER_FENCED, "STALE_EPOCH", "NO_LEASE_TTL", "UNAVAILABLE"]
        ),
        answer_now=st.booleans(),
    )
    def lease_renewed_in_redis(self, outcome: str, answer_now: bool) -> None:
        sm = self.t.sm
        if self.renewal is None:
            due = sm.lease_renewal_due_ms()
            if due is None:
                return
            self.t.advance(max(0, due - self.t.now))
            self.renewal = sm.poll_lease_renewal(self.t.now)
            if self.renewal is None:  # the advance itself changed things (a drain deadline passed)
                return
            if not answer_now:
                return  # answered by a later step, after whatever happens meanwhile
        request, self.renewal = self.renewal, None
        if outcome == RENEWED:
            key = (request.incarnation, request.member_epoch)
            self.bounds[key] = max(self.bounds.get(key, 0), request.sent_ms + TTL)
        self.t._record(sm.on_lease_renewal(request, outcome, TTL, self.t.now))
        self._track()

    @rule(
        code=st.sampled_from([COORDINATOR_UNREACHABLE, "GROUP_NOT_FOUND", "FENCED_MEMBER_EPOCH",
                              "UNKNOWN_MEMBER_ID", "STORE_UNAVAILABLE", "JOINS_THROTTLED", STALE_JOIN]),
        retry_after=st.none() | st.integers(0, 3_000),
        jitter=st.floats(0, 1, exclude_max=True),
        recorded=st.integers(0, 50),
    )  # fmt: skip
    def heartbeat_failed(self, code: str, retry_after: int | None, jitter: float, recorded: int) -> None:
        request, self.held = self.held or self._poll(), None
        if request is None:
            return
        if code == STALE_JOIN and request.member_epoch != 0:
            code = COORDINATOR_UNREACHABLE  # the coordinator says STALE_JOIN to joins only
        sm = self.t.sm
        lease_end = sm.lease_deadline_ms(sm.incarnation)
        self.t.fail(
            request,
            code,
            retriable=code not in ("FENCED_MEMBER_EPOCH", STALE_JOIN),
            retry_after_ms=retry_after,
            jitter=jitter,
            details={"current_join_seq": recorded} if code == STALE_JOIN else None,
        )
        if code == STALE_JOIN:
            self.join_seq_above = max(self.join_seq_above, recorded)
        renewal = request.member_epoch > 0 and code not in ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID")
        if renewal and lease_end is not None and self.t.now < lease_end and sm.phase is not Phase.LEFT:
            latest = max(lease_end - sm._round_trip_ms, self.t.now + sm.config.round_trip_floor_ms)
            assert sm._due_ms <= latest, "a retry outlives the lease"
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
    def one_renewal_in_redis_at_a_time(self) -> None:
        if self.renewal is not None:
            assert self.t.sm.poll_lease_renewal(self.t.now + 10**9) is None

    @invariant()
    def the_lease_as_known_never_outlasts_an_accepted_renewal_at_the_members_epoch(self) -> None:
        sm = self.t.sm
        deadline = sm.lease_deadline_ms(sm.incarnation)
        if deadline is not None:
            assert deadline <= self.bounds.get((sm.incarnation, sm.member_epoch), -1)

    @invariant()
    def nothing_is_sent_after_leaving(self) -> None:
        if self.t.sm.phase is Phase.LEFT:
            assert self.t.sm.poll_heartbeat(self.t.now + 10**9) is None
            assert self.t.sm.next_wakeup_ms() is None


MemberMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestMemberMachine = MemberMachine.TestCase
