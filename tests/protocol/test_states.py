"""Every (member state, event) pair is either a defined transition or a typed error."""

from __future__ import annotations

import itertools

import pytest

from coordinator.protocol.errors import CoordinatorError, FencedMemberEpoch, IllegalTransition
from coordinator.protocol.model import MemberState
from coordinator.protocol.states import TRANSITIONS, MemberEvent, allowed_next, check_transition


@pytest.mark.parametrize(("state", "event"), list(itertools.product(MemberState, MemberEvent)))
def test_every_pair_is_a_transition_or_a_typed_error(state: MemberState, event: MemberEvent) -> None:
    if (state, event) in TRANSITIONS:
        targets = allowed_next(state, event)
        assert targets and all(isinstance(t, MemberState) for t in targets)
    else:
        with pytest.raises(CoordinatorError) as raised:
            allowed_next(state, event)
        assert raised.value.code.value in {"ILLEGAL_TRANSITION", "FENCED_MEMBER_EPOCH"}


def test_terminal_members_are_fenced_on_heartbeat_and_only_rejoin() -> None:
    for terminal in (MemberState.EXPIRED, MemberState.LEFT):
        with pytest.raises(FencedMemberEpoch, match="rejoin with epoch 0"):
            allowed_next(terminal, MemberEvent.HEARTBEAT)
        assert allowed_next(terminal, MemberEvent.JOIN) == {MemberState.STABLE, MemberState.UNRELEASED_SHARDS}
    for live in (MemberState.STABLE, MemberState.UNREVOKED_SHARDS, MemberState.UNRELEASED_SHARDS):
        with pytest.raises(IllegalTransition):
            allowed_next(live, MemberEvent.JOIN)


def test_a_computed_state_outside_the_table_is_rejected() -> None:
    with pytest.raises(IllegalTransition):
        check_transition(MemberState.STABLE, MemberEvent.LEAVE, MemberState.EXPIRED)
    assert check_transition(MemberState.STABLE, MemberEvent.LEAVE, MemberState.LEFT) is MemberState.LEFT
