"""The member state machine: what one coordinator member does next, as a pure function of its inputs.

Theory of operation
-------------------
A member (docs/protocol.md sections 3 and 4) heartbeats the coordinator and runs one local *unit* (a
fetch loop) per shard it holds. This class decides, and the thin loop in :mod:`consumers.member.member`
carries out; it never touches a thread, socket, clock or Redis. Time is ``now_ms``, passed in.

Inputs: heartbeat responses and heartbeat errors (by code), the data plane's fence statuses
(``MEMBER_FENCED``, ``NOT_OWNER``, ``STALE_EPOCH``), "unit stopped", a stop request and the timer.
Outputs (:class:`Decisions`): units to start, units to stop (drain, or abandon), the worker count, what
to log, and whether the member is finished; plus, on demand, the next heartbeat (:meth:`poll_heartbeat`)
and when to wake up (:meth:`next_wakeup_ms`).

The member's *phase* moves along :data:`TRANSITIONS` (a missing pair is a bug)::

    JOINING --joined--> MEMBER --fenced--> JOINING          (drop every shard at once, rejoin with 0)
    JOINING/MEMBER --stop--> DRAINING --drained--> LEAVING --left / gave up--> LEFT
                             DRAINING --nothing to leave--> LEFT

Units. A shard gets a unit when it is assigned and the member is a ``MEMBER``. A unit that must stop is
told either to *drain* (revoked, not owner, or shutting down: stop fetching, finish the in-flight entry,
ack what was handled, then report stopped) or to *abandon* (the member was fenced: stop at once, ack
nothing). A draining unit's shard still counts as owned: the member reports it in ``owned_shards``
until the unit has stopped, and only then does the heartbeat (sent at once) acknowledge the revocation.
That is the member's half of the single-owner rule. An abandoned unit's shard is not owned any more (the
coordinator released it when it fenced the member), but the shard is not started again until the old
unit has stopped, so within one process a shard is never handled by two units at once.

Heartbeats. One at a time. A join carries the capacity, client info and ``join_seq``; a renewal carries
the member epoch and ``owned_shards``; a leave carries epoch -1. The next one is due
``heartbeat_interval_ms`` after a response, *at once* when what the member would report changed (a unit
stopped, a grant arrived) or the data plane said our epoch is stale, and after a failure by the rules of
:mod:`consumers.member.retry` (backoff, jitter, Retry-After; while we hold a lease, never later than one
round trip before it ends). Failures other than fencing change nothing else: the member keeps consuming
its assignment, because the fencing that matters is in Redis (the lease), not in this process.

Join idempotency (docs/protocol.md section 3; docs/consumers.md). Every attempt of one incarnation's
join carries the same ``join_seq``; each fence moves to the next. ``STALE_JOIN`` in answer to our own
join means another join of our id is recorded above ours (a shared id): a fence of that join.

The lease, as the member can know it. The coordinator renews the lease to (its receive time +
``lease_ttl_ms``) on every accepted heartbeat, so (our send time + ``lease_ttl_ms``) is a lower bound of
it on our clock. Past that bound the lease *may* have ended and another member may own our shards:
:meth:`MemberStateMachine.lease_valid` turns false and units neither read nor start another handler
call (a process frozen past its lease and resumed would otherwise handle what it read before the freeze,
next to the new owner). They probe the data plane instead, which says for certain: ``MEMBER_FENCED``
(drop everything, rejoin) or, once a heartbeat is answered again, nothing - and work resumes in order.

Renewing without the coordinator (docs/protocol.md section 5). When no renewal has been accepted for
half the lease TTL (the API is down, overloaded or unreachable), the member renews its lease itself, in
Redis (:meth:`MemberStateMachine.poll_lease_renewal`, ``renew_lease.lua``): renew only, at its epoch.
Such a renewal extends the lease as the member knows it only while the member stays at that epoch (the
coordinator counts the record only at the live epoch). A refusal that says the lease ended
(``MEMBER_FENCED``) is a fence; any other failure is retried after a short pause, and the heartbeats to
the coordinator go on as before.

Incarnations. Every fence starts a new incarnation. Requests, units and data-plane reports carry the
incarnation they belong to; anything from an earlier one is stale and ignored (a response to a heartbeat
sent before the fence, a ``MEMBER_FENCED`` from a unit that was already abandoned).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from coordinator.protocol.model import Shard

from .retry import join_retry_delay_ms, lease_bound_due_ms, renewal_retry_delay_ms
from .values import (
    AMBIGUOUS_CODES,
    CLIENT_ERROR,
    COORDINATOR_UNREACHABLE,
    FENCING_CODES,
    INVALID_RESPONSE,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    MEMBER_FENCED,
    RENEWED,
    STALE_JOIN,
    TEMPORARY_LEAVE_EPOCH,
    UNRELEASED_INSTANCE_ID,
    Decisions,
    Grant,
    HeartbeatRequest,
    InvalidResponse,
    LeaseRenewalRequest,
    MemberConfig,
    Notice,
    Response,
    ShardStart,
    ShardStop,
)

# The values are part of this module's interface (callers import them from here too).
__all__ = [
    "AMBIGUOUS_CODES",
    "CLIENT_ERROR",
    "COORDINATOR_UNREACHABLE",
    "FENCING_CODES",
    "INVALID_RESPONSE",
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STALE_JOIN",
    "TEMPORARY_LEAVE_EPOCH",
    "TRANSITIONS",
    "UNRELEASED_INSTANCE_ID",
    "Decisions",
    "Grant",
    "HeartbeatRequest",
    "IllegalMemberTransition",
    "InvalidResponse",
    "MemberConfig",
    "MemberStateMachine",
    "Notice",
    "Phase",
    "PhaseInput",
    "Response",
    "ShardStart",
    "ShardStop",
    "UnitState",
]


class Phase(StrEnum):
    JOINING = "JOINING"  # the next heartbeat is a join (epoch 0); holds nothing
    MEMBER = "MEMBER"  # joined: renews at its epoch, runs a unit per assigned shard
    DRAINING = "DRAINING"  # stopping: no new units; waits for the running ones to finish their work
    LEAVING = "LEAVING"  # the next heartbeat is a leave (epoch -1)
    LEFT = "LEFT"  # finished


class PhaseInput(StrEnum):
    JOINED = "JOINED"  # a join was answered
    FENCED = "FENCED"  # FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID / the data plane's MEMBER_FENCED
    STOP = "STOP"  # graceful stop requested
    DRAINED = "DRAINED"  # every unit stopped (or the shutdown deadline passed) and we may be a member
    NOTHING_TO_LEAVE = "NOTHING_TO_LEAVE"  # drained, and the coordinator does not count us as a member
    LEFT = "LEFT"  # the leave was answered (or refused for good)
    GAVE_UP = "GAVE_UP"  # the leave could not be delivered in time; the lease will expire instead


P, E = Phase, PhaseInput
TRANSITIONS: dict[tuple[Phase, PhaseInput], Phase] = {
    (P.JOINING, E.JOINED): P.MEMBER,
    (P.JOINING, E.FENCED): P.JOINING,
    (P.MEMBER, E.FENCED): P.JOINING,
    (P.JOINING, E.STOP): P.DRAINING,
    (P.MEMBER, E.STOP): P.DRAINING,
    # A join answered after the stop request: we may be a member now, so we will leave.
    (P.DRAINING, E.JOINED): P.DRAINING,
    (P.DRAINING, E.FENCED): P.DRAINING,
    (P.DRAINING, E.STOP): P.DRAINING,
    (P.DRAINING, E.DRAINED): P.LEAVING,
    (P.DRAINING, E.NOTHING_TO_LEAVE): P.LEFT,
    (P.LEAVING, E.STOP): P.LEAVING,
    (P.LEAVING, E.FENCED): P.LEFT,  # the coordinator already dropped us: nothing left to leave
    (P.LEAVING, E.LEFT): P.LEFT,
    (P.LEAVING, E.GAVE_UP): P.LEFT,
    (P.LEFT, E.STOP): P.LEFT,
    (P.LEFT, E.FENCED): P.LEFT,
}


class IllegalMemberTransition(RuntimeError):
    """A (phase, input) pair outside :data:`TRANSITIONS`: a bug in the member, never caused by input."""


class UnitState(StrEnum):
    RUNNING = "RUNNING"  # fetching and handling
    DRAINING = "DRAINING"  # told to stop: finishes in-flight work and acks it; still owned
    ABANDONED = "ABANDONED"  # told to stop after a fence: acks nothing; not owned


# --------------------------------------------------------------------------------------------- machine


@dataclass(slots=True)
class _Pending:
    """Decisions being collected while one input is applied."""

    start: list[ShardStart] = field(default_factory=list)
    stop: list[ShardStop] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


class MemberStateMachine:
    """One member's decisions. Not thread-safe: the loop serializes calls (one lock per member)."""

    def __init__(self, config: MemberConfig, now_ms: int) -> None:
        self.config = config
        self.phase = Phase.JOINING
        self.incarnation = 1
        # Sent with every attempt of this incarnation's join; the next number after each fence.
        self.join_seq = 1
        # Joins refused UNRELEASED_INSTANCE_ID in a row (the first logs an ERROR, the others DEBUG).
        self._instance_refusals = 0
        self.member_epoch = JOIN_EPOCH
        self.member_state = ""  # the coordinator's view (STABLE, UNREVOKED_SHARDS, ...), for logs
        self.assigned: dict[Shard, Grant] = {}
        self.revoking: frozenset[Shard] = frozenset()
        self.units: dict[Shard, UnitState] = {}
        # Shards stopped locally (NOT_OWNER, a failed unit) until a response to a heartbeat sent after
        # that moment confirms them again: shard -> the last request seq issued when it was suspended.
        self.suspended: dict[Shard, int] = {}
        self.concurrency = 0
        self.heartbeat_interval_ms = config.initial_heartbeat_interval_ms
        self._seq = 0
        self._in_flight: HeartbeatRequest | None = None
        self._due_ms = now_ms
        self._urgent = False  # something asked for a heartbeat after the in-flight one was built
        self._failures = 0
        self._last_sent_owned: frozenset[Shard] | None = None
        self._may_be_member = False  # a join of this incarnation may have been applied
        self._drain_deadline_ms: int | None = None
        self._leave_deadline_ms: int | None = None
        self._reported_concurrency = 0
        # A lower bound of the lease deadline, on the member's clock: the coordinator renews the lease to
        # (its receive time + lease_ttl_ms), and it received the request after we built it.
        self._lease_deadline_ms: int | None = None
        # How long the last successful heartbeat took (at least the floor): the margin a retry keeps
        # before the lease deadline.
        self._round_trip_ms = config.round_trip_floor_ms
        self._lease_lapse_noted = False
        # Our own renewals in Redis: (epoch, lease deadline on our clock) of the last one accepted; the
        # send time of the last renewal accepted, by the coordinator or in Redis; the lease TTL; one
        # at a time; when the next may go after one that did not renew; and whether we are renewing
        # in Redis because the coordinator does not answer (for the log).
        self._renewed_until: tuple[int, int] | None = None
        self._renewing_in_redis = False
        self._renewed_ms: int | None = None
        self._lease_ttl_ms: int | None = None
        self._renewal_in_flight = False
        self._renewal_not_before_ms = 0
        self._pending = _Pending()

    # ------------------------------------------------------------------------------------------ queries

    @property
    def finished(self) -> bool:
        return self.phase is Phase.LEFT

    def owned(self) -> frozenset[Shard]:
        """What the next renewal reports: assigned shards (unless stopped locally) plus every shard whose
        unit has not finished draining. Abandoned units do not count: the coordinator released them."""
        held = {s for s, u in self.units.items() if u is not UnitState.ABANDONED}
        return frozenset(held | {s for s in self.assigned if s not in self.suspended})

    def lease_valid(self, incarnation: int, now_ms: int) -> bool:
        """True while the lease of ``incarnation`` surely has not ended: units handle and read only then.

        After it, the lease *may* have ended (no heartbeat was accepted for ``lease_ttl_ms``): another
        member may already own our shards, so a unit must not start another handler call - not even
        for entries it read before (a process frozen past its lease, then resumed, would otherwise
        handle them next to the new owner). The data plane decides for certain at the next read."""
        deadline = self.lease_deadline_ms(incarnation)
        return deadline is not None and now_ms < deadline

    def lease_deadline_ms(self, incarnation: int) -> int | None:
        """The time from which :meth:`lease_valid` is false, as things stand (a later heartbeat may move
        it on); None when it is false already for another reason. A unit checks it before every handler
        call of a batch without asking the member each time."""
        if incarnation != self.incarnation or self.member_epoch <= 0:
            return None
        return self._lease_until()

    def epoch_for(self, incarnation: int) -> int | None:
        """The epoch a unit of ``incarnation`` presents to the data plane; None once it is stale."""
        if incarnation != self.incarnation or self.member_epoch <= 0:
            return None
        return self.member_epoch

    def next_wakeup_ms(self) -> int | None:
        """When the loop must call back (:meth:`poll_heartbeat` / :meth:`on_timer`); None: only on input."""
        times = []
        if self._in_flight is None and self._heartbeat_wanted():
            times.append(self._due_ms)
        if self.phase is Phase.DRAINING and self._drain_deadline_ms is not None:
            times.append(self._drain_deadline_ms)
        if self.phase is Phase.LEAVING and self._leave_deadline_ms is not None:
            times.append(self._leave_deadline_ms)
        watching = self.phase in (Phase.MEMBER, Phase.DRAINING) and not self._lease_lapse_noted
        until = self._lease_until()
        if watching and until is not None:
            times.append(until)  # to say so when it lapses
        return min(times) if times else None

    def lease_renewal_due_ms(self) -> int | None:
        """When the member renews its lease itself, in Redis, if no renewal is accepted before: half the
        lease TTL after the last accepted one, or later when heartbeats are that far apart (the next
        heartbeat's answer is due first: a heartbeat interval plus two round trips, at most three
        quarters of the TTL). None: not a member, or one is in flight."""
        if (
            self.phase not in (Phase.MEMBER, Phase.DRAINING)
            or self.member_epoch <= 0
            or self._renewal_in_flight
            or self._renewed_ms is None
            or self._lease_ttl_ms is None
        ):
            return None
        ttl = self._lease_ttl_ms
        after = max(ttl // 2, min(self.heartbeat_interval_ms + 2 * self._round_trip_ms, 3 * ttl // 4))
        return max(self._renewed_ms + after, self._renewal_not_before_ms)

    def poll_lease_renewal(self, now_ms: int) -> LeaseRenewalRequest | None:
        """The renewal to run in Redis now, if one is due; then in flight until :meth:`on_lease_renewal`."""
        due = self.lease_renewal_due_ms()
        if due is None or now_ms < due:
            return None
        self._renewal_in_flight = True
        return LeaseRenewalRequest(
            member_id=self.config.member_id,
            member_epoch=self.member_epoch,
            incarnation=self.incarnation,
            sent_ms=now_ms,
        )

    def on_lease_renewal(
        self, request: LeaseRenewalRequest, outcome: str, ttl_ms: int, now_ms: int
    ) -> Decisions:
        """What a renewal in Redis answered: ``OK`` (renewed for ``ttl_ms``), ``MEMBER_FENCED``, or
        anything else (not renewed: ``STALE_EPOCH``, ``NO_LEASE_TTL``, or the loop's ``UNAVAILABLE``)."""
        self._renewal_in_flight = False
        if request.incarnation != self.incarnation or request.member_epoch != self.member_epoch:
            return self._decide(now_ms)  # a heartbeat moved us on meanwhile
        if outcome == RENEWED:
            if not self._renewing_in_redis:
                self._renewing_in_redis = True
                last = request.sent_ms if self._renewed_ms is None else self._renewed_ms
                silent_ms = request.sent_ms - last
                self._note(
                    logging.INFO,
                    f"no heartbeat accepted for {silent_ms} ms: renewing the lease in Redis until the "
                    "coordinator answers",
                )
            until = request.sent_ms + ttl_ms  # ttl_ms: the group's TTL, or less (a revocation deadline)
            if self._renewed_until is None or self._renewed_until[0] != request.member_epoch:
                self._renewed_until = (request.member_epoch, until)
            else:
                self._renewed_until = (request.member_epoch, max(self._renewed_until[1], until))
            self._renewed_ms = max(self._renewed_ms or 0, request.sent_ms)
            if self._lease_lapse_noted:
                self._note(logging.INFO, "lease renewed in Redis: handling again")
                self._lease_lapse_noted = False
            return self._decide(now_ms)
        if outcome == MEMBER_FENCED:
            return self._fence(
                now_ms,
                "renewing the lease in Redis was refused: the lease ended or the member is no longer live",
            )
        self._renewal_not_before_ms = now_ms + max(
            self.config.round_trip_floor_ms, (self._lease_ttl_ms or 0) // 10
        )
        self._note(logging.DEBUG, f"renewing the lease in Redis did not renew it ({outcome})")
        return self._decide(now_ms)

    # ------------------------------------------------------------------------------------------ heartbeat

    def poll_heartbeat(self, now_ms: int) -> HeartbeatRequest | None:
        """The heartbeat to send now, if one is due and none is in flight. It is then in flight until
        :meth:`on_heartbeat_response` or :meth:`on_heartbeat_error` is called with it."""
        if self._in_flight is not None or not self._heartbeat_wanted() or now_ms < self._due_ms:
            return None
        self._seq += 1
        common = {
            "member_id": self.config.member_id,
            "seq": self._seq,
            "incarnation": self.incarnation,
            "sent_ms": now_ms,
        }
        if self.phase is Phase.JOINING:
            request = HeartbeatRequest(
                member_epoch=JOIN_EPOCH,
                capacity=self.config.capacity,
                client=self.config.client,
                join_seq=self.join_seq,
                instance_id=self.config.instance_id,
                **common,
            )
            self._may_be_member = True
        elif self.phase is Phase.LEAVING:
            request = HeartbeatRequest(member_epoch=self._leave_epoch(), **common)
        else:
            owned = self.owned()
            request = HeartbeatRequest(
                member_epoch=self.member_epoch, owned_shards=tuple(sorted(owned)), **common
            )
            self._last_sent_owned = owned
        self._in_flight = request
        self._urgent = False
        return request

    def on_heartbeat_response(
        self, request: HeartbeatRequest, body: Mapping[str, Any], now_ms: int
    ) -> Decisions:
        if not self._complete(request):
            return self._decide(now_ms)
        if request.member_epoch < 0:
            self._note(logging.INFO, _LEFT_NOTES[request.member_epoch])
            self._transition(PhaseInput.LEFT)
            return self._decide(now_ms)
        if self.phase is Phase.LEAVING:
            return self._decide(now_ms)  # a renewal answered after we started leaving: nothing to do
        try:
            response = Response.from_json(body)
        except InvalidResponse as e:
            join = request.member_epoch == JOIN_EPOCH
            return self._failed(now_ms, INVALID_RESPONSE, str(e), retriable=True, join=join)
        if response.member_epoch <= 0:
            return self._fence(now_ms, f"the coordinator answered with member epoch {response.member_epoch}")
        if self._failures:
            self._note(logging.INFO, f"heartbeat answered again after {self._failures} failures")
        self._failures = 0
        self._apply_response(request, response)
        self._lease_deadline_ms = request.sent_ms + response.lease_ttl_ms
        self._renewed_ms = max(self._renewed_ms or 0, request.sent_ms)
        self._lease_ttl_ms = response.lease_ttl_ms
        if self._renewing_in_redis:
            self._renewing_in_redis = False
            self._note(logging.INFO, "the coordinator answers again: renewing the lease through it")
        # _renewed_until stays: Redis counts a record at our epoch as long as we stay at it (and folds it
        # into the coordinator's deadline when our epoch moves), and _lease_until() checks the epoch.
        self._round_trip_ms = max(self.config.round_trip_floor_ms, now_ms - request.sent_ms)
        if self._lease_lapse_noted:
            self._note(logging.INFO, "lease renewed: handling again")
            self._lease_lapse_noted = False
        self._due_ms = now_ms if self._urgent else self._lease_bound(now_ms, self.heartbeat_interval_ms)
        return self._decide(now_ms)

    def on_heartbeat_error(
        self,
        request: HeartbeatRequest,
        code: str,
        now_ms: int,
        *,
        message: str = "",
        retriable: bool = True,
        retry_after_ms: int | None = None,
        jitter: float = 0.0,
        details: Mapping[str, Any] | None = None,
    ) -> Decisions:
        """A heartbeat failed with ``code`` (the coordinator's, or ``COORDINATOR_UNREACHABLE``).

        ``jitter`` in [0, 1) spreads the retries of many members (the loop passes a random number);
        ``details`` are the problem's structured fields (``current_join_seq`` of a ``STALE_JOIN``)."""
        if not self._complete(request):
            return self._decide(now_ms)
        if request.member_epoch < 0:
            if code in FENCING_CODES or not retriable:
                self._note(logging.WARNING, f"leave refused ({code}: {message}); not retrying it")
                self._transition(PhaseInput.LEFT)
                return self._decide(now_ms)
            return self._failed(now_ms, code, message, retriable, retry_after_ms, jitter)
        if code in FENCING_CODES:
            return self._fence(now_ms, f"heartbeat refused with {code}: {message}")
        if code == STALE_JOIN and request.member_epoch == JOIN_EPOCH:
            return self._stale_join(request, now_ms, message, details or {}, jitter)
        if code == UNRELEASED_INSTANCE_ID and request.member_epoch == JOIN_EPOCH:
            return self._unreleased_instance(now_ms, message, retry_after_ms, jitter)
        if request.member_epoch == JOIN_EPOCH and not _ambiguous(code):
            self._may_be_member = False  # the coordinator answered, and the answer was no
        join = request.member_epoch == JOIN_EPOCH
        return self._failed(now_ms, code, message, retriable, retry_after_ms, jitter, join=join)

    # ------------------------------------------------------------------------------------------ data plane

    def on_member_fenced(self, incarnation: int, now_ms: int) -> Decisions:
        """The data plane said ``MEMBER_FENCED`` to a unit of ``incarnation``."""
        if incarnation != self.incarnation or self.member_epoch <= 0:
            return self._decide(now_ms)
        return self._fence(now_ms, "the data plane refused it (lease ended or member no longer live)")

    def on_not_owner(self, shard: Shard, incarnation: int, now_ms: int) -> Decisions:
        """The data plane said ``NOT_OWNER``: the coordinator moved on. Stop the shard, heartbeat now."""
        if incarnation == self.incarnation and shard in self.units:
            self._suspend(shard, now_ms)
            self._note(logging.INFO, f"shard {shard}: the data plane says it is not ours; stopping it")
        return self._decide(now_ms)

    def on_stale_epoch(self, incarnation: int, now_ms: int) -> Decisions:
        """The data plane said ``STALE_EPOCH``: a response was probably lost. Heartbeat now."""
        if incarnation == self.incarnation:
            self._heartbeat_now(now_ms)
        return self._decide(now_ms)

    def on_unit_stopped(self, shard: Shard, now_ms: int, *, failed: bool = False) -> Decisions:
        """The unit of ``shard`` has finished (nothing of it runs any more). ``failed``: it stopped on an
        unexpected error; the shard waits for the next heartbeat response before it is started again."""
        state = self.units.pop(shard, None)
        if state is None:
            raise IllegalMemberTransition(f"no unit for shard {shard} was running")
        if failed and state is UnitState.RUNNING and shard in self.assigned:
            self.suspended[shard] = self._seq
            self._note(logging.ERROR, f"shard {shard}: its unit failed; retrying after the next heartbeat")
        return self._decide(now_ms)

    # ------------------------------------------------------------------------------------------ lifecycle

    def request_stop(self, now_ms: int, timeout_ms: int) -> Decisions:
        """Graceful stop: drain every unit (bounded by ``timeout_ms``), then leave the group."""
        if self.phase in (Phase.JOINING, Phase.MEMBER):
            self._drain_deadline_ms = now_ms + max(0, timeout_ms)
            self._note(logging.INFO, f"stopping: finishing in-flight work (at most {timeout_ms} ms)")
        self._transition(PhaseInput.STOP)
        return self._decide(now_ms)

    def on_timer(self, now_ms: int) -> Decisions:
        return self._decide(now_ms)

    # ------------------------------------------------------------------------------------------ internals

    def _transition(self, event: PhaseInput) -> None:
        try:
            self.phase = TRANSITIONS[(self.phase, event)]
        except KeyError:
            raise IllegalMemberTransition(f"{event} is not defined in phase {self.phase}") from None

    def _note(self, level: int, message: str) -> None:
        self._pending.notices.append(Notice(level=level, message=message))

    def _heartbeat_wanted(self) -> bool:
        if self.phase in (Phase.JOINING, Phase.MEMBER, Phase.LEAVING):
            return True
        # Draining: keep renewing the lease (acks need it) while we are a member; never join.
        return self.phase is Phase.DRAINING and self.member_epoch > 0

    def _heartbeat_now(self, now_ms: int) -> None:
        self._urgent = True
        if self._failures == 0:  # never cut a backoff short: the coordinator is having trouble
            self._due_ms = min(self._due_ms, now_ms)

    def _complete(self, request: HeartbeatRequest) -> bool:
        """Mark ``request`` answered; False if it belongs to an earlier incarnation (ignore its answer)."""
        if self._in_flight is None or request.seq != self._in_flight.seq:
            raise IllegalMemberTransition(f"heartbeat {request.seq} is not the one in flight")
        self._in_flight = None
        return request.incarnation == self.incarnation

    def _suspend(self, shard: Shard, now_ms: int) -> None:
        self.suspended[shard] = self._seq
        self._heartbeat_now(now_ms)

    def _apply_response(self, request: HeartbeatRequest, r: Response) -> None:
        if request.member_epoch == JOIN_EPOCH:
            self._note(logging.INFO, f"joined at epoch {r.member_epoch} (group epoch {r.group_epoch})")
            if self._instance_refusals:
                self._note(
                    logging.INFO,
                    f"instance id {self.config.instance_id!r} released after {self._instance_refusals} "
                    "refused join(s)",
                )
                self._instance_refusals = 0
            self._transition(PhaseInput.JOINED)
        elif r.member_epoch != self.member_epoch:
            self._note(logging.INFO, f"epoch {self.member_epoch} -> {r.member_epoch} ({r.member_state})")
        granted = sorted(set(r.shards) - set(self.assigned))
        revoked = sorted(set(self.assigned) - set(r.shards))
        if granted:
            self._note(logging.INFO, f"assigned {_names(granted)} at epoch {r.member_epoch}")
        if revoked:
            self._note(logging.INFO, f"revoked {_names(revoked)}; releasing after in-flight work")
        self.member_epoch = r.member_epoch
        self.member_state = r.member_state
        self.assigned = dict(r.shards)
        self.revoking = r.revoking
        self.heartbeat_interval_ms = r.heartbeat_interval_ms
        self.concurrency = max(0, min(self.config.capacity, r.max_concurrency))
        # A response to a heartbeat sent after a shard was suspended is the coordinator's newer word.
        self.suspended = {s: seq for s, seq in self.suspended.items() if seq >= request.seq}

    def _fence(self, now_ms: int, reason: str, *, retry_in_ms: int = 0) -> Decisions:
        dropped = sorted(s for s, u in self.units.items() if u is not UnitState.ABANDONED)
        self._note(
            logging.WARNING,
            f"fenced at epoch {self.member_epoch}: {reason}; dropping {_names(dropped)} and rejoining "
            "with epoch 0",
        )
        for shard in dropped:
            self.units[shard] = UnitState.ABANDONED
            self._pending.stop.append(ShardStop(shard=shard, abandon=True, reason="fenced"))
        self.incarnation += 1
        self.join_seq += 1  # a new incarnation: its join must not be taken for a retry of the last one
        self.member_epoch = JOIN_EPOCH
        self.member_state = ""
        self.assigned = {}
        self.revoking = frozenset()
        self.suspended = {}
        self._lease_deadline_ms = None
        self._renewed_until = None
        self._renewed_ms = None
        self._renewing_in_redis = False
        self._lease_lapse_noted = False
        self._last_sent_owned = None
        self._may_be_member = False
        self._failures = 1 if retry_in_ms else 0
        self._due_ms = now_ms + retry_in_ms
        self._transition(PhaseInput.FENCED)
        return self._decide(now_ms)

    def _leave_epoch(self) -> int:
        if self.config.instance_id is not None and not self.config.leave_group:
            return TEMPORARY_LEAVE_EPOCH
        return LEAVE_EPOCH

    def _unreleased_instance(
        self, now_ms: int, message: str, retry_after_ms: int | None, jitter: float
    ) -> Decisions:
        """Our join was refused with ``UNRELEASED_INSTANCE_ID``: a live member of another id holds our
        instance id (its previous process, not yet gone, or another process given the same id). Nothing
        changed and nobody was fenced. Join again after the join backoff (growing to its cap); one ERROR
        says so, the later refusals of the same wait log at DEBUG, and the join that succeeds at INFO."""
        self._may_be_member = False
        self._instance_refusals += 1
        self._failures += 1
        delay = join_retry_delay_ms(self._failures, self.config, retry_after_ms, jitter)
        self._due_ms = now_ms + delay
        if self._instance_refusals == 1:
            self._note(
                logging.ERROR,
                f"join refused with {UNRELEASED_INSTANCE_ID}: instance id {self.config.instance_id!r} is "
                "held by a live member "
                f"({message}). Either the previous process with this instance id is still running (this "
                "join succeeds once it stops or its lease ends), or two processes were given the same "
                "instance id (give each its own: --instance-id / RSC_INSTANCE_ID). Joining again with "
                "backoff",
            )
        else:
            self._note(logging.DEBUG, f"join refused again ({UNRELEASED_INSTANCE_ID}); retry in {delay} ms")
        return self._decide(now_ms)

    def _stale_join(
        self, request: HeartbeatRequest, now_ms: int, message: str, details: Mapping[str, Any], jitter: float
    ) -> Decisions:
        """Our join was refused with ``STALE_JOIN`` (see the theory of operation): it changed nothing and
        nothing of ours is live. A fence of that join; the next one goes above the recorded number."""
        recorded = details.get("current_join_seq")
        if isinstance(recorded, int) and not isinstance(recorded, bool):
            self.join_seq = max(self.join_seq, recorded)  # _fence moves one above it
        return self._fence(
            now_ms,
            f"join {request.join_seq} refused with {STALE_JOIN} ({message}): the coordinator recorded a "
            f"later join of member id {self.config.member_id!r} (is it shared with another process?)",
            retry_in_ms=join_retry_delay_ms(1, self.config, None, jitter),
        )

    def _lease_bound(self, now_ms: int, delay_ms: int) -> int:
        """When the next heartbeat is due, ``delay_ms`` from now, but never later than one round trip
        before the lease ends as we know it (rule 4 of :mod:`consumers.member.retry`)."""
        return lease_bound_due_ms(
            now_ms,
            now_ms + delay_ms,
            lease_deadline_ms=self._lease_until() if self.member_epoch > 0 else None,
            round_trip_ms=self._round_trip_ms,
            floor_ms=self.config.round_trip_floor_ms,
        )

    def _failed(
        self,
        now_ms: int,
        code: str,
        message: str,
        retriable: bool,
        retry_after_ms: int | None = None,
        jitter: float = 0.0,
        *,
        join: bool = False,
    ) -> Decisions:
        self._failures += 1
        if join:
            delay = join_retry_delay_ms(self._failures, self.config, retry_after_ms, jitter)
        else:
            interval = self.heartbeat_interval_ms if self.member_epoch > 0 else None
            delay = renewal_retry_delay_ms(
                self._failures, self.config, retry_after_ms, jitter, heartbeat_interval_ms=interval
            )
        self._due_ms = self._lease_bound(now_ms, delay)
        bounded = " (before the lease ends)" if self._due_ms < now_ms + delay else ""
        delay = self._due_ms - now_ms
        level = logging.WARNING if retriable else logging.ERROR
        if not _worth_logging(self._failures):
            level = logging.DEBUG  # a long outage logs at failures 1, 2, 4, 8, ... not at every retry
        keeping = f"; keeping {_names(sorted(self.units))}" if self.units else ""
        self._note(
            level,
            f"heartbeat failed ({code}: {message}); retry {self._failures} in {delay} ms{bounded}{keeping}",
        )
        return self._decide(now_ms)

    def _decide(self, now_ms: int) -> Decisions:
        self._note_lease_lapse(now_ms)
        self._reconcile_units()
        self._advance_shutdown(now_ms)
        if (
            self.phase in (Phase.MEMBER, Phase.DRAINING)
            and self.member_epoch > 0
            and self.owned() != self._last_sent_owned
        ):
            self._heartbeat_now(now_ms)
        concurrency = None
        if self.concurrency != self._reported_concurrency and self.concurrency > 0:
            concurrency = self._reported_concurrency = self.concurrency
        pending, self._pending = self._pending, _Pending()
        return Decisions(
            start=tuple(pending.start),
            stop=tuple(pending.stop),
            concurrency=concurrency,
            notices=tuple(pending.notices),
            finished=self.finished,
        )

    def _lease_until(self) -> int | None:
        """The lease deadline as we know it: the coordinator's, or our own renewal's at our epoch."""
        own = self._renewed_until
        if own is None or own[0] != self.member_epoch:
            return self._lease_deadline_ms
        return max(own[1], self._lease_deadline_ms or 0)

    def _note_lease_lapse(self, now_ms: int) -> None:
        deadline = self._lease_until()
        watching = self.phase in (Phase.MEMBER, Phase.DRAINING) and not self._lease_lapse_noted
        if watching and deadline is not None and now_ms >= deadline:
            self._lease_lapse_noted = True
            self._note(
                logging.WARNING,
                "no heartbeat accepted for the lease TTL: the lease may have ended; handling nothing more "
                "until the coordinator answers (the data plane will tell for sure)",
            )

    def _reconcile_units(self) -> None:
        """Start a unit for every assigned shard without one; drain units that must not run."""
        for shard, unit in sorted(self.units.items()):
            if unit is UnitState.RUNNING and (
                self.phase is not Phase.MEMBER or shard not in self.assigned or shard in self.suspended
            ):
                self.units[shard] = UnitState.DRAINING
                reason = "stopping" if self.phase is not Phase.MEMBER else "released"
                self._pending.stop.append(ShardStop(shard=shard, abandon=False, reason=reason))
        if self.phase is not Phase.MEMBER:
            return
        for shard, grant in sorted(self.assigned.items()):
            # A shard whose previous unit (abandoned by a fence) still runs starts once that one stops.
            if shard not in self.units and shard not in self.suspended:
                self.units[shard] = UnitState.RUNNING
                self._pending.start.append(
                    ShardStart(
                        shard=shard,
                        assignment_epoch=grant.assignment_epoch,
                        readable=grant.readable,
                        incarnation=self.incarnation,
                    )
                )

    def _advance_shutdown(self, now_ms: int) -> None:
        if self.phase is Phase.DRAINING:
            assert self._drain_deadline_ms is not None
            late = now_ms >= self._drain_deadline_ms
            if late and self.units:
                left = sorted(s for s, u in self.units.items() if u is not UnitState.ABANDONED)
                self._note(logging.WARNING, f"shutdown timeout: abandoning {_names(left)}")
                for shard in left:
                    self.units[shard] = UnitState.ABANDONED
                    self._pending.stop.append(ShardStop(shard=shard, abandon=True, reason="shutdown timeout"))
            if late or not self.units:
                if self.member_epoch > 0 or self._may_be_member:
                    self._transition(PhaseInput.DRAINED)
                    self._leave_deadline_ms = now_ms + self.config.leave_timeout_ms
                    self._due_ms = now_ms
                    self._failures = 0
                else:
                    self._transition(PhaseInput.NOTHING_TO_LEAVE)
        if self.phase is Phase.LEAVING:
            assert self._leave_deadline_ms is not None
            if now_ms >= self._leave_deadline_ms and self._in_flight is None:
                self._note(logging.WARNING, "could not leave in time; the lease will expire instead")
                self._transition(PhaseInput.GAVE_UP)


_LEFT_NOTES = {
    LEAVE_EPOCH: "left the group",
    TEMPORARY_LEAVE_EPOCH: "left the group for now: its shards wait one lease TTL for its instance id",
}


def _ambiguous(code: str) -> bool:
    return code in AMBIGUOUS_CODES or code.startswith("HTTP_5")


def _worth_logging(failures: int) -> bool:
    return failures & (failures - 1) == 0  # 1, 2, 4, 8, ...


def _names(shards: list[Shard] | tuple[Shard, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shards) + "]"
