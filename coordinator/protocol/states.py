"""The member state machine, as data.

Theory of operation
-------------------
A member is in one of five states. Three are live and say how far it has reconciled with the group's
target assignment; two are terminal and fence it:

* ``STABLE``: it owns exactly its target for its epoch. Nothing pending.
* ``UNREVOKED_SHARDS``: the target took shards away. The member keeps its epoch and must stop reading
  them, finish and ack their in-flight entries, and say so by leaving them out of its next heartbeat's
  owned shards. Until then they still count as its own and no other member may receive them.
* ``UNRELEASED_SHARDS``: the member is at the new epoch and holds what it could get, but part of its
  target is still owned (being revoked) by others; it receives those shards on a later heartbeat.
* ``EXPIRED``: its lease ended, it missed the revocation timeout, or a new incarnation rejoined with its
  id. Its shards were released at that moment.
* ``LEFT``: it left the group (epoch -1).

Which live state a reconciliation lands in depends on data (what is revoked, what is still owned by
others), so the table maps ``(state, event)`` to the *set* of states the event may lead to; the code
that computes the next state asserts its answer is in that set. A pair that is not in the table is an
error: the error class named by ``_ERRORS`` when the protocol defines one, else ``IllegalTransition``.
"""

from __future__ import annotations

from enum import StrEnum

from .errors import CoordinatorError, FencedMemberEpoch, IllegalTransition
from .model import MemberState

S = MemberState


class MemberEvent(StrEnum):
    JOIN = "JOIN"  # epoch 0 from an unknown or terminal member id
    HEARTBEAT = "HEARTBEAT"  # a heartbeat at the current (or accepted previous) epoch: reconcile
    LEAVE = "LEAVE"  # epoch -1
    LEASE_EXPIRED = "LEASE_EXPIRED"  # the lease deadline passed (tick, or a late heartbeat)
    REVOCATION_TIMEOUT = "REVOCATION_TIMEOUT"  # revoked shards not released in time
    FENCE = "FENCE"  # a new incarnation rejoined (epoch 0) with this live member's id


_LIVE = (S.STABLE, S.UNREVOKED_SHARDS, S.UNRELEASED_SHARDS)
_RECONCILED = frozenset({S.STABLE, S.UNREVOKED_SHARDS, S.UNRELEASED_SHARDS})

TRANSITIONS: dict[tuple[MemberState, MemberEvent], frozenset[MemberState]] = {
    # A member that joins holds nothing, so it has nothing to revoke.
    **{(t, MemberEvent.JOIN): frozenset({S.STABLE, S.UNRELEASED_SHARDS}) for t in (S.EXPIRED, S.LEFT)},
    **{(s, MemberEvent.HEARTBEAT): _RECONCILED for s in _LIVE},
    **{(s, MemberEvent.LEAVE): frozenset({S.LEFT}) for s in _LIVE},
    # Leaving twice (a lost leave response, retried) or after being fenced changes nothing.
    (S.LEFT, MemberEvent.LEAVE): frozenset({S.LEFT}),
    (S.EXPIRED, MemberEvent.LEAVE): frozenset({S.EXPIRED}),
    **{(s, MemberEvent.LEASE_EXPIRED): frozenset({S.EXPIRED}) for s in _LIVE},
    # UNREVOKED_SHARDS: told to release and did not in time. STABLE / UNRELEASED_SHARDS: the target took
    # shards away and the member did not heartbeat to hear of it in time (the tick started the clock).
    **{(s, MemberEvent.REVOCATION_TIMEOUT): frozenset({S.EXPIRED}) for s in _LIVE},
    **{(s, MemberEvent.FENCE): frozenset({S.EXPIRED}) for s in _LIVE},
}

# Pairs outside the table that the protocol answers with a specific client-facing error.
_ERRORS: dict[tuple[MemberState, MemberEvent], type[CoordinatorError]] = {
    (S.EXPIRED, MemberEvent.HEARTBEAT): FencedMemberEpoch,
    (S.LEFT, MemberEvent.HEARTBEAT): FencedMemberEpoch,
}


def allowed_next(state: MemberState, event: MemberEvent) -> frozenset[MemberState]:
    """The states ``event`` may lead to from ``state``; raises the typed error for undefined pairs."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        error = _ERRORS.get((state, event), IllegalTransition)
        if error is FencedMemberEpoch:
            raise FencedMemberEpoch(
                f"the member is {state.value}: it must drop all its shards and rejoin with epoch 0",
                member_state=state.value,
            ) from None
        raise error(
            f"event {event.value} is not defined for a member in state {state.value}",
            member_state=state.value,
            event=event.value,
        ) from None


def check_transition(state: MemberState, event: MemberEvent, new_state: MemberState) -> MemberState:
    """Assert that computed ``new_state`` is one the table allows; returns it."""
    allowed = allowed_next(state, event)
    if new_state not in allowed:
        raise IllegalTransition(
            f"{state.value} --{event.value}--> {new_state.value} is not a transition of the protocol",
            member_state=state.value,
            event=event.value,
        )
    return new_state
