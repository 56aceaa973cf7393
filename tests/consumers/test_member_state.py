"""The member state machine, driven like a protocol: scripted time, scripted coordinator answers."""

from __future__ import annotations

import logging

import pytest

from consumers.member.state import (
    COORDINATOR_UNREACHABLE,
    MEMBER_FENCED,
    RENEWED,
    TRANSITIONS,
    Decisions,
    HeartbeatRequest,
    IllegalMemberTransition,
    InvalidResponse,
    LeaseRenewalRequest,
    MemberConfig,
    Phase,
    PhaseInput,
    Response,
    UnitState,
)
from coordinator.protocol.model import Shard
from tests.consumers.script import (
    CLIENT,
    INTERVAL_MS,
    LEAVE_RESPONSE,
    MEMBER_ID,
    Script,
    names,
    response,
    s,
    started,
    stopped,
)


def joined(shards: tuple[str, ...] = ("v1:0", "v1:1"), epoch: int = 3, **kw: object) -> Script:
    """A member that joined with ``shards`` and acknowledged the grant (steady at ``epoch``)."""
    t = Script(**kw)  # type: ignore[arg-type]
    t.join(response(epoch, shards))
    t.exchange(response(epoch, shards))  # the immediate heartbeat that reports the new owned set
    return t


# ------------------------------------------------------------------------------------------ joining


def test_the_first_heartbeat_is_a_join_with_capacity_and_client_and_no_owned_shards() -> None:
    t = Script(capacity=4)
    assert t.sm.phase is Phase.JOINING
    request = t.heartbeat()
    assert request.to_json() == {
        "member_id": MEMBER_ID, "member_epoch": 0, "capacity": 4, "client": CLIENT, "join_seq": 1
    }  # fmt: skip
    assert t.no_heartbeat_due(), "one heartbeat at a time"


def test_a_join_response_starts_a_unit_per_shard_and_sizes_the_workers() -> None:
    t = Script(capacity=4)
    d = t.join(response(3, {"v1:2": 3, "v1:0": 2}, max_concurrency=2, readable=["v1:0"]))
    assert t.sm.phase is Phase.MEMBER
    assert t.sm.member_epoch == 3
    assert started(d) == ["v1:0", "v1:2"]
    assert [(x.assignment_epoch, x.readable, x.incarnation) for x in d.start] == [(2, True, 1), (3, False, 1)]
    assert d.stop == ()
    assert d.concurrency == 2
    assert any("joined at epoch 3" in n.message and n.level == logging.INFO for n in d.notices)
    assert any("assigned [v1:0, v1:2]" in n.message for n in d.notices)


@pytest.mark.parametrize(("capacity", "max_concurrency", "workers"), [(4, 2, 2), (2, 8, 2), (3, 3, 3)])
def test_workers_are_the_smaller_of_runtime_capacity_and_the_responses_max_concurrency(
    capacity: int, max_concurrency: int, workers: int
) -> None:
    t = Script(capacity=capacity)
    d = t.join(response(1, ["v1:0"], max_concurrency=max_concurrency))
    assert d.concurrency == workers
    assert t.sm.concurrency == workers


def test_a_change_of_max_concurrency_resizes_the_workers_and_an_unchanged_one_says_nothing() -> None:
    t = joined(capacity=8)
    assert t.sm.concurrency == 2
    t.advance(INTERVAL_MS)
    _, d = t.exchange(response(4, ["v1:0", "v1:1"], max_concurrency=5))
    assert d.concurrency == 5
    assert d.start == d.stop == ()
    t.advance(INTERVAL_MS)
    _, d = t.exchange(response(4, ["v1:0", "v1:1"], max_concurrency=5))
    assert d.concurrency is None


def test_after_a_grant_the_member_heartbeats_at_once_to_report_what_it_owns_then_waits_an_interval() -> None:
    t = Script()
    t.join(response(3, ["v1:0", "v1:1"]))
    request = t.heartbeat()  # due at once: owned changed from "not reported"
    assert request.to_json() == {"member_id": MEMBER_ID, "member_epoch": 3, "owned_shards": ["v1:0", "v1:1"]}
    t.answer(request, response(3, ["v1:0", "v1:1"]))
    assert t.no_heartbeat_due()
    assert t.sm.next_wakeup_ms() == INTERVAL_MS
    t.advance(INTERVAL_MS - 1)
    assert t.no_heartbeat_due()
    t.advance(1)
    assert t.heartbeat().member_epoch == 3


def test_the_interval_comes_from_the_response() -> None:
    t = Script()
    t.join(response(1, [], interval_ms=250))
    t.exchange(response(1, [], interval_ms=250))
    assert t.sm.next_wakeup_ms() == t.now + 250


# ------------------------------------------------------------------------------------------ rebalance


def test_revocation_drains_only_the_revoked_shard_and_is_acknowledged_once_its_unit_stopped() -> None:
    t = joined(("v1:0", "v1:1", "v1:2"), epoch=3)
    t.advance(INTERVAL_MS)
    # Another member joined: the coordinator revokes v1:2, keeps our epoch (UNREVOKED_SHARDS).
    _, d = t.exchange(response(3, {"v1:0": 3, "v1:1": 3}, revoking=["v1:2"], state="UNREVOKED_SHARDS"))
    assert stopped(d, abandon=False) == ["v1:2"]
    assert d.start == ()
    assert t.sm.units[Shard.parse("v1:2")] is UnitState.DRAINING
    # Until its unit has finished (in-flight entry handled and acked) the shard is still ours.
    t.advance(INTERVAL_MS)
    request, _ = t.exchange(response(3, {"v1:0": 3, "v1:1": 3}, revoking=["v1:2"], state="UNREVOKED_SHARDS"))
    assert request.owned_shards == tuple(s("v1:0", "v1:1", "v1:2"))
    t.advance(10)
    d = t.stopped("v1:2")
    assert d.start == d.stop == ()
    request = t.heartbeat()  # at once, not an interval later
    assert names(request.owned_shards or ()) == ["v1:0", "v1:1"]
    assert request.member_epoch == 3
    d = t.answer(request, response(5, {"v1:0": 3, "v1:1": 3}))
    assert t.sm.member_epoch == 5
    assert d.start == d.stop == ()
    assert any("epoch 3 -> 5" in n.message for n in d.notices)


def test_unaffected_shards_never_pause_through_a_rebalance() -> None:
    t = joined(("v1:0", "v1:1", "v1:2", "v1:3"), epoch=2)
    kept = {"v1:0", "v1:1"}
    steps = [
        response(2, {"v1:0": 2, "v1:1": 2}, revoking=["v1:2", "v1:3"], state="UNREVOKED_SHARDS"),
        response(2, {"v1:0": 2, "v1:1": 2}, revoking=["v1:2", "v1:3"], state="UNREVOKED_SHARDS"),
        response(4, {"v1:0": 2, "v1:1": 2}),
        response(6, {"v1:0": 2, "v1:1": 2, "v1:4": 6}, state="STABLE"),
        response(7, {"v1:0": 2, "v1:1": 2, "v1:4": 6}, max_concurrency=3),
    ]
    for body in steps:
        t.advance(INTERVAL_MS)
        _, d = t.exchange(body)
        assert not set(stopped(d)) & kept
        if body is steps[1]:
            t.stopped("v1:2")
            t.stopped("v1:3")
    assert all(t.sm.units[x] is UnitState.RUNNING for x in s(*kept))
    assert names(t.units) == ["v1:0", "v1:1", "v1:4"]
    assert t.units[Shard.parse("v1:4")].assignment_epoch == 6


def test_a_grant_while_unreleased_starts_just_the_new_shard() -> None:
    t = Script()
    t.join(response(2, ["v1:0"], state="UNRELEASED_SHARDS"))
    t.exchange(response(2, ["v1:0"], state="UNRELEASED_SHARDS"))
    t.advance(INTERVAL_MS)
    _, d = t.exchange(response(2, {"v1:0": 2, "v1:1": 2}))
    assert started(d) == ["v1:1"]
    assert d.stop == ()


def test_a_shard_the_response_drops_without_revoking_is_stopped_too() -> None:
    t = joined(("v1:0", "v1:1"))
    t.advance(INTERVAL_MS)
    _, d = t.exchange(response(3, ["v1:0"]))
    assert stopped(d, abandon=False) == ["v1:1"]


# ------------------------------------------------------------------------------------------ fencing


@pytest.mark.parametrize("code", ["FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"])
def test_a_fencing_heartbeat_error_drops_every_shard_at_once_and_rejoins_with_epoch_0(code: str) -> None:
    t = joined(("v1:0", "v1:1"), epoch=3)
    t.advance(INTERVAL_MS)
    d = t.fail(t.heartbeat(), code, message="lease ended", retriable=False)
    assert stopped(d, abandon=True) == ["v1:0", "v1:1"]
    assert stopped(d, abandon=False) == []
    assert t.sm.phase is Phase.JOINING
    assert t.sm.member_epoch == 0
    assert t.sm.assigned == {}
    assert t.sm.owned() == frozenset()
    assert any(n.level == logging.WARNING and "fenced" in n.message for n in d.notices)
    request = t.heartbeat()  # at once
    assert request.member_epoch == 0
    assert request.capacity == 4


def test_the_data_planes_member_fenced_drops_every_shard_and_rejoins() -> None:
    t = joined(("v1:0", "v1:1"), epoch=3)
    d = t.sm.on_member_fenced(t.incarnation, t.now)
    assert stopped(d, abandon=True) == ["v1:0", "v1:1"]
    assert t.sm.phase is Phase.JOINING
    assert t.heartbeat().member_epoch == 0


def test_a_rejoin_does_not_restart_a_shard_until_its_abandoned_unit_has_stopped() -> None:
    t = joined(("v1:0", "v1:1"), epoch=3)
    t.sm.on_member_fenced(t.incarnation, t.now)
    t.stopped("v1:1")  # v1:0's handler is still busy with an entry
    d = t.join(response(7, ["v1:0", "v1:1"]))
    assert started(d) == ["v1:1"]
    assert d.start[0].incarnation == 2
    assert t.sm.owned() == s("v1:0", "v1:1")  # granted: ours, even though its unit has not started
    d = t.stopped("v1:0")
    assert started(d) == ["v1:0"]
    assert d.start[0].incarnation == 2


def test_reports_from_an_earlier_incarnation_are_ignored() -> None:
    t = joined(("v1:0",), epoch=3)
    old = t.incarnation
    t.sm.on_member_fenced(old, t.now)
    t.join(response(9, ["v1:1"]))
    d = t.sm.on_member_fenced(old, t.now)  # the abandoned v1:0 unit saw MEMBER_FENCED late
    assert d.stop == ()
    assert t.sm.phase is Phase.MEMBER
    assert t.sm.epoch_for(old) is None
    assert t.sm.epoch_for(t.incarnation) == 9
    t.sm.on_not_owner(Shard.parse("v1:0"), old, t.now)
    assert t.sm.suspended == {}


def test_a_response_to_a_heartbeat_sent_before_a_fence_is_ignored() -> None:
    t = joined(("v1:0",), epoch=3)
    t.advance(INTERVAL_MS)
    in_flight = t.heartbeat()
    t.sm.on_member_fenced(t.incarnation, t.now)  # the data plane fenced us meanwhile
    d = t.answer(in_flight, response(3, ["v1:0"]))
    assert d.start == ()
    assert t.sm.phase is Phase.JOINING
    assert t.heartbeat().member_epoch == 0


def test_a_response_with_epoch_minus_one_fences_a_member() -> None:
    t = joined(("v1:0",))
    t.advance(INTERVAL_MS)
    d = t.answer(t.heartbeat(), LEAVE_RESPONSE)
    assert stopped(d, abandon=True) == ["v1:0"]
    assert t.sm.phase is Phase.JOINING


# ------------------------------------------------------------------------------------------ data plane


def test_not_owner_drains_the_shard_heartbeats_now_and_waits_for_a_newer_response() -> None:
    t = joined(("v1:0", "v1:1"), epoch=3)
    t.advance(INTERVAL_MS)
    in_flight = t.heartbeat()  # sent before the data plane said NOT_OWNER
    d = t.sm.on_not_owner(Shard.parse("v1:1"), t.incarnation, t.now)
    assert stopped(d, abandon=False) == ["v1:1"]
    t.stopped("v1:1")
    # The answer to the earlier heartbeat still lists v1:1: it is not restarted on that word.
    d = t.answer(in_flight, response(3, ["v1:0", "v1:1"]))
    assert d.start == ()
    request = t.heartbeat()  # at once: we owe the coordinator a heartbeat
    assert names(request.owned_shards or ()) == ["v1:0"]
    d = t.answer(request, response(3, ["v1:0", "v1:1"]))  # a newer answer: it is ours after all
    assert started(d) == ["v1:1"]


def test_stale_epoch_asks_for_a_heartbeat_now() -> None:
    t = joined(("v1:0",), epoch=3)
    t.advance(10)
    assert t.no_heartbeat_due()
    t.sm.on_stale_epoch(t.incarnation, t.now)
    assert t.heartbeat().member_epoch == 3


def test_stale_epoch_during_a_heartbeat_asks_for_another_one_right_after_it() -> None:
    t = joined(("v1:0",), epoch=3)
    t.advance(INTERVAL_MS)
    in_flight = t.heartbeat()
    t.sm.on_stale_epoch(t.incarnation, t.now)
    t.answer(in_flight, response(3, ["v1:0"]))
    assert t.heartbeat().member_epoch == 3


def test_a_failed_unit_is_restarted_after_the_next_heartbeat_response() -> None:
    t = joined(("v1:0", "v1:1"))
    d = t.stopped("v1:1", failed=True)
    assert d.start == ()
    assert any(n.level == logging.ERROR for n in d.notices)
    assert t.sm.owned() == s("v1:0")
    _, d = t.exchange(response(3, ["v1:0", "v1:1"]))  # due at once: owned changed
    assert started(d) == ["v1:1"]


def test_a_unit_that_was_never_started_cannot_stop() -> None:
    t = joined(("v1:0",))
    with pytest.raises(IllegalMemberTransition):
        t.stopped("v1:9")


# ------------------------------------------------------------------------------------------ failures


def test_coordinator_unreachable_keeps_consuming_and_backs_off_up_to_the_heartbeat_interval() -> None:
    t = joined(("v1:0", "v1:1"), epoch=3, retry_jitter_ratio=0.0)
    delays, levels = [], []
    for _ in range(6):
        t.advance(INTERVAL_MS if not delays else delays[-1])
        d = t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE, message="connection refused")
        assert d.stop == () and d.start == ()
        (notice,) = d.notices
        assert "keeping [v1:0, v1:1]" in notice.message
        levels.append(notice.level)
        delays.append(t.sm.next_wakeup_ms() - t.now)  # type: ignore[operator]
    assert delays == [100, 200, 400, 800, 1000, 1000]
    # A long outage logs warnings at failures 1, 2, 4, 8, ... and the rest at debug level.
    W, D = logging.WARNING, logging.DEBUG
    assert levels == [W, W, D, W, D, D]
    assert t.sm.phase is Phase.MEMBER
    # A success resets the backoff.
    t.advance(1000)
    _, d = t.exchange(response(3, ["v1:0", "v1:1"]))
    assert [n.message for n in d.notices] == ["heartbeat answered again after 6 failures"]
    t.advance(INTERVAL_MS)
    t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE)
    assert t.sm.next_wakeup_ms() == t.now + 100


def test_a_stopped_unit_does_not_cut_a_backoff_short() -> None:
    t = joined(("v1:0", "v1:1"), retry_jitter_ratio=0.0)
    t.advance(INTERVAL_MS)
    t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE)
    t.stopped("v1:1", failed=True)
    assert t.no_heartbeat_due()
    t.advance(100)
    assert t.heartbeat().owned_shards == tuple(s("v1:0"))


def test_group_not_found_on_join_is_retried_with_backoff_up_to_the_maximum() -> None:
    t = Script(retry_backoff_max_ms=1_000)
    delays = []
    for _ in range(6):
        # jitter 0.999: the top of a join's equal jitter, which is the backoff itself (less rounding)
        d = t.fail(t.heartbeat(), "GROUP_NOT_FOUND", message="no such group", retriable=True, jitter=0.999)
        assert t.sm.phase is Phase.JOINING
        delays.append(t.sm.next_wakeup_ms() - t.now)  # type: ignore[operator]
        t.advance(delays[-1])
    assert delays == [99, 199, 399, 799, 999, 999]
    assert any("GROUP_NOT_FOUND" in n.message for n in d.notices)


def test_jitter_shortens_a_renewals_backoff_by_at_most_its_ratio() -> None:
    t = joined(("v1:0",), retry_jitter_ratio=0.2)
    t.advance(INTERVAL_MS)
    t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE, jitter=0.999)
    assert 80 <= t.sm.next_wakeup_ms() - t.now <= 100  # type: ignore[operator]


def test_retry_after_is_respected() -> None:
    t = Script(retry_jitter_ratio=0.0)
    t.fail(t.heartbeat(), "STORE_UNAVAILABLE", retry_after_ms=1_000)
    assert t.sm.next_wakeup_ms() == 1_000


def test_a_non_retriable_error_is_logged_as_an_error_and_retried_anyway() -> None:
    t = Script()
    d = t.fail(t.heartbeat(), "UNAUTHENTICATED", message="bad token", retriable=False)
    assert any(n.level == logging.ERROR and "UNAUTHENTICATED" in n.message for n in d.notices)
    assert t.sm.phase is Phase.JOINING
    assert t.sm.next_wakeup_ms() is not None


def test_a_malformed_response_is_a_failure_not_a_crash() -> None:
    t = joined(("v1:0",))
    t.advance(INTERVAL_MS)
    d = t.answer(t.heartbeat(), {"member_epoch": 3, "shards": "nope"})
    assert d.stop == ()
    assert any("INVALID_RESPONSE" in n.message for n in d.notices)
    assert t.sm.phase is Phase.MEMBER


@pytest.mark.parametrize(
    "body",
    [
        {},
        {**response(1), "shards": [{"shard": "v0:1", "assignment_epoch": 1}]},
        {**response(1), "member_epoch": "1"},
        {**response(1), "heartbeat_interval_ms": 0},
        {**response(1), "revoking": ["x"]},
        {**response(1), "max_concurrency": True},
    ],
)
def test_response_parsing_rejects_malformed_bodies(body: dict[str, object]) -> None:
    with pytest.raises(InvalidResponse):
        Response.from_json(body)


# ------------------------------------------------------------------------------------------ stopping


def test_graceful_stop_drains_every_unit_keeps_the_lease_then_leaves() -> None:
    t = joined(("v1:0", "v1:1"), epoch=3)
    d = t.sm.request_stop(t.now, 5_000)
    assert stopped(d, abandon=False) == ["v1:0", "v1:1"]
    assert t.sm.phase is Phase.DRAINING
    t.advance(INTERVAL_MS)  # still renewing the lease: the acks of the in-flight work need it
    request = t.heartbeat()
    assert request.member_epoch == 3
    d = t.answer(request, response(3, ["v1:0", "v1:1"]))
    assert d.start == ()  # nothing new while stopping
    t.stopped("v1:0")
    assert t.sm.phase is Phase.DRAINING
    t.stopped("v1:1")
    assert t.sm.phase is Phase.LEAVING
    request = t.heartbeat()  # at once
    assert request.to_json() == {"member_id": MEMBER_ID, "member_epoch": -1}
    d = t.answer(request, LEAVE_RESPONSE)
    assert d.finished
    assert t.sm.phase is Phase.LEFT
    assert t.no_heartbeat_due()
    assert t.sm.next_wakeup_ms() is None


def test_the_shutdown_timeout_abandons_what_is_still_running_and_leaves() -> None:
    t = joined(("v1:0", "v1:1"))
    t.sm.request_stop(t.now, 2_000)
    t.stopped("v1:0")
    assert t.sm.next_wakeup_ms() == t.now + 1_000  # the next renewal, before the deadline
    t.advance(1_000)
    t.exchange(response(3, ["v1:0", "v1:1"]))
    t.advance(1_000)
    d = t.log[-1]
    assert stopped(d, abandon=True) == ["v1:1"]
    assert t.sm.phase is Phase.LEAVING
    assert t.heartbeat().member_epoch == -1


def test_a_leave_that_cannot_be_delivered_is_given_up_after_the_leave_timeout() -> None:
    t = joined(("v1:0",), leave_timeout_ms=500, retry_jitter_ratio=0.0)
    t.sm.request_stop(t.now, 1_000)
    t.stopped("v1:0")
    t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE)
    t.advance(100)
    t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE)
    t.advance(400)
    assert t.sm.phase is Phase.LEFT
    assert any("lease will expire" in n.message for n in t.log[-1].notices)


@pytest.mark.parametrize("code", ["FENCED_MEMBER_EPOCH", "INVALID_REQUEST"])
def test_a_refused_leave_is_not_retried(code: str) -> None:
    t = joined(("v1:0",))
    t.sm.request_stop(t.now, 1_000)
    t.stopped("v1:0")
    d = t.fail(t.heartbeat(), code, retriable=False)
    assert d.finished


def test_stopping_before_any_join_was_sent_finishes_at_once() -> None:
    t = Script()
    d = t.sm.request_stop(t.now, 1_000)
    assert d.finished


def test_stopping_while_a_join_is_in_flight_leaves_after_its_answer() -> None:
    t = Script()
    join = t.heartbeat()
    t.sm.request_stop(t.now, 1_000)
    assert t.sm.phase is Phase.LEAVING  # nothing to drain; the join may have been applied
    assert t.no_heartbeat_due()  # the leave waits for the join's answer
    d = t.answer(join, response(2, ["v1:0"]))
    assert d.start == ()
    assert t.sm.phase is Phase.LEAVING
    assert t.heartbeat().member_epoch == -1


def test_stopping_after_a_refused_join_does_not_leave() -> None:
    t = Script()
    t.fail(t.heartbeat(), "GROUP_NOT_FOUND")
    assert t.sm.request_stop(t.now, 1_000).finished


@pytest.mark.parametrize(
    "code", [COORDINATOR_UNREACHABLE, "STORE_UNAVAILABLE", "HTTP_502", "INVALID_RESPONSE"]
)
def test_stopping_after_a_join_that_may_have_been_applied_leaves(code: str) -> None:
    t = Script()
    t.fail(t.heartbeat(), code)
    assert not t.sm.request_stop(t.now, 1_000).finished
    assert t.sm.phase is Phase.LEAVING


def test_stopping_while_rejoining_after_a_fence_waits_for_the_abandoned_units_and_does_not_leave() -> None:
    t = joined(("v1:0",))
    t.sm.on_member_fenced(t.incarnation, t.now)
    t.sm.request_stop(t.now, 1_000)
    assert t.sm.phase is Phase.DRAINING
    assert t.no_heartbeat_due()  # never a join after a stop
    d = t.stopped("v1:0")
    assert d.finished


def test_a_fence_while_draining_abandons_the_units() -> None:
    t = joined(("v1:0",))
    t.sm.request_stop(t.now, 5_000)
    t.advance(INTERVAL_MS)
    d = t.fail(t.heartbeat(), "FENCED_MEMBER_EPOCH")
    assert stopped(d, abandon=True) == ["v1:0"]
    assert t.sm.phase is Phase.DRAINING
    assert t.stopped("v1:0").finished


# ------------------------------------------------------------------------------------------ the table


def test_every_phase_input_pair_outside_the_table_is_illegal() -> None:
    t = Script()
    for phase in Phase:
        for event in PhaseInput:
            t.sm.phase = phase
            if (phase, event) in TRANSITIONS:
                t.sm._transition(event)
                assert t.sm.phase is TRANSITIONS[(phase, event)]
            else:
                with pytest.raises(IllegalMemberTransition):
                    t.sm._transition(event)


def test_left_is_terminal() -> None:
    assert {nxt for (phase, _), nxt in TRANSITIONS.items() if phase is Phase.LEFT} == {Phase.LEFT}


def test_only_a_heartbeat_in_flight_can_be_answered() -> None:
    t = Script()
    with pytest.raises(IllegalMemberTransition):
        t.answer(HeartbeatRequest(member_id=MEMBER_ID, member_epoch=0, seq=7), response(1))


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        MemberConfig(member_id=MEMBER_ID, capacity=0)


def test_decisions_default_to_nothing() -> None:
    assert Decisions() == Decisions(start=(), stop=(), concurrency=None, notices=(), finished=False)


# ------------------------------------------------------------------------------------------ the lease


def test_the_lease_is_known_valid_from_a_heartbeats_send_time_for_the_lease_ttl() -> None:
    t = Script()
    assert not t.sm.lease_valid(t.incarnation, t.now)
    t.advance(5)
    join = t.heartbeat()  # sent at 5
    t.advance(20)
    t.answer(join, response(3, ["v1:0"], interval_ms=1_000))  # lease_ttl_ms 10_000
    assert t.sm.lease_valid(t.incarnation, 10_004)
    assert not t.sm.lease_valid(t.incarnation, 10_005)
    assert not t.sm.lease_valid(t.incarnation - 1, 100)
    t.exchange(response(3, ["v1:0"]))  # sent at 25
    assert t.sm.lease_valid(t.incarnation, 10_024)
    assert not t.sm.lease_valid(t.incarnation, 10_025)


def test_a_lapsed_lease_is_said_once_and_its_renewal_too() -> None:
    t = joined(("v1:0",), retry_jitter_ratio=0.0)
    deadline = 10_000  # both heartbeats were sent at 0
    t.advance(INTERVAL_MS)
    while t.now < deadline:
        request = t.sm.poll_heartbeat(t.now)
        if request is not None:
            t.fail(request, COORDINATOR_UNREACHABLE)
        assert t.sm.next_wakeup_ms() is not None
        t.advance(min(t.sm.next_wakeup_ms(), deadline) - t.now)  # type: ignore[type-var]
    lapsed = [n for d in t.log for n in d.notices if "may have ended" in n.message]
    assert len(lapsed) == 1 and lapsed[0].level == logging.WARNING
    assert not t.sm.lease_valid(t.incarnation, t.now)
    assert t.sm.phase is Phase.MEMBER  # the data plane or the coordinator will say whether it ended
    t.advance(t.sm.next_wakeup_ms() - t.now)  # type: ignore[operator]
    _, d = t.exchange(response(3, ["v1:0"]))
    assert "lease renewed: handling again" in [n.message for n in d.notices]
    assert t.sm.lease_valid(t.incarnation, t.now)


def test_a_fence_forgets_the_lease() -> None:
    t = joined(("v1:0",))
    old = t.incarnation
    t.sm.on_member_fenced(old, t.now)
    assert not t.sm.lease_valid(old, t.now)
    assert not t.sm.lease_valid(t.incarnation, t.now)


# ------------------------------------------------------------------------------------------ renewing in Redis


def test_while_heartbeats_are_answered_the_member_never_renews_in_redis() -> None:
    t = joined(("v1:0",))  # both heartbeats sent at 0; lease TTL 10_000
    assert t.sm.lease_renewal_due_ms() == 5_000  # half the TTL after the last accepted renewal
    for _ in range(20):
        t.advance(INTERVAL_MS)
        t.exchange(response(3, ["v1:0"]))
        assert t.sm.poll_lease_renewal(t.now) is None
    assert t.sm.lease_renewal_due_ms() == t.now + 5_000


def test_half_a_lease_without_an_answer_renews_in_redis_for_as_long_as_it_takes() -> None:
    t = joined(("v1:0",))  # the lease as known: until 10_000
    t.advance(4_999)
    assert t.sm.poll_lease_renewal(t.now) is None
    t.advance(1)
    request = t.sm.poll_lease_renewal(t.now)
    assert request == LeaseRenewalRequest(member_id=MEMBER_ID, member_epoch=3, incarnation=1, sent_ms=5_000)
    assert t.sm.poll_lease_renewal(t.now) is None and t.sm.lease_renewal_due_ms() is None  # one at a time
    t.advance(3)
    d = t.sm.on_lease_renewal(request, RENEWED, 10_000, t.now)
    assert [(n.level, n.message) for n in d.notices] == [
        (
            logging.INFO,
            "no heartbeat accepted for 5000 ms: renewing the lease in Redis until the coordinator answers",
        )
    ]
    assert t.sm.lease_valid(t.incarnation, 14_999) and not t.sm.lease_valid(t.incarnation, 15_000)
    for until in (20_000, 25_000, 30_000):  # long past the coordinator's lease, quietly
        t.advance(t.sm.lease_renewal_due_ms() - t.now)  # type: ignore[operator]
        again = t.sm.poll_lease_renewal(t.now)
        assert again is not None
        d = t.sm.on_lease_renewal(again, RENEWED, 10_000, t.now)
        assert d.notices == () and d.stop == ()
        assert t.sm.lease_valid(t.incarnation, until - 1) and not t.sm.lease_valid(t.incarnation, until)
    assert t.sm.phase is Phase.MEMBER and list(t.units) == [Shard(1, 0)]
    _, d = t.exchange(response(3, ["v1:0"]))  # the coordinator answers again
    assert "the coordinator answers again: renewing the lease through it" in [n.message for n in d.notices]
    assert t.sm.lease_renewal_due_ms() == t.now + 5_000


def test_a_lapsed_lease_renewed_in_redis_handles_again() -> None:
    t = joined(("v1:0",))
    t.advance(10_000)  # renewal attempts failed until now (none was made): the lease may have ended
    assert not t.sm.lease_valid(t.incarnation, t.now)
    request = t.sm.poll_lease_renewal(t.now)
    assert request is not None
    d = t.sm.on_lease_renewal(request, RENEWED, 10_000, t.now)  # Redis says it had not ended
    assert "lease renewed in Redis: handling again" in [n.message for n in d.notices]
    assert t.sm.lease_valid(t.incarnation, t.now)


def test_a_renewal_refused_because_the_lease_ended_is_a_fence_and_other_failures_retry_after_a_pause() -> (
    None
):
    t = joined(("v1:0",))
    t.advance(5_000)
    for outcome in ("UNAVAILABLE", "STALE_EPOCH", "NO_LEASE_TTL"):
        request = t.sm.poll_lease_renewal(t.now)
        assert request is not None
        d = t.sm.on_lease_renewal(request, outcome, 0, t.now)
        assert d.stop == () and t.sm.phase is Phase.MEMBER
        assert t.sm.lease_renewal_due_ms() == t.now + 1_000  # a tenth of the TTL
        t.advance(1_000)
    request = t.sm.poll_lease_renewal(t.now)
    assert request is not None
    d = t.sm.on_lease_renewal(request, MEMBER_FENCED, 0, t.now)
    assert stopped(d, abandon=True) == ["v1:0"] and t.incarnation == 2
    assert t.sm.phase is Phase.JOINING and t.sm.lease_renewal_due_ms() is None


def test_a_renewal_at_an_epoch_the_member_has_left_does_not_extend_its_lease() -> None:
    t = joined(("v1:0",))
    t.advance(4_000)
    heartbeat = t.heartbeat()  # sent at 4_000
    t.advance(1_000)
    renewal = t.sm.poll_lease_renewal(t.now)  # sent at 5_000, at epoch 3
    assert renewal is not None and renewal.member_epoch == 3
    t.answer(heartbeat, response(4, ["v1:0"]))  # the coordinator moved the member to epoch 4
    t.sm.on_lease_renewal(renewal, RENEWED, 10_000, t.now)  # counts only at epoch 3 (Redis agrees)
    assert t.sm.lease_valid(t.incarnation, 13_999) and not t.sm.lease_valid(t.incarnation, 14_000)
    assert t.sm.lease_renewal_due_ms() == 9_000  # not in flight any more; half a TTL after 4_000


def test_a_draining_member_renews_in_redis_and_a_leaving_one_does_not() -> None:
    t = joined(("v1:0",))
    t.sm.request_stop(t.now, 30_000)
    assert t.sm.phase is Phase.DRAINING
    t.advance(5_000)
    request = t.sm.poll_lease_renewal(t.now)
    assert request is not None
    t.sm.on_lease_renewal(request, RENEWED, 10_000, t.now)
    t.stopped("v1:0")
    assert t.sm.phase is Phase.LEAVING and t.sm.lease_renewal_due_ms() is None


def test_with_heartbeats_more_than_half_a_lease_apart_a_healthy_member_still_does_not_renew_in_redis() -> (
    None
):
    t = Script()
    body = {**response(3, ["v1:0"], interval_ms=6_000), "lease_ttl_ms": 10_000}
    t.join(body)
    t.exchange(body)  # both at 0; heartbeats every 6 s, the lease 10 s
    # Half the TTL would be 5 s, before the next heartbeat is even due: wait for its answer instead
    # (the interval plus two round trips), but never past three quarters of the TTL.
    assert t.sm.lease_renewal_due_ms() == 6_000 + 2 * 50
    for _ in range(5):
        t.advance(6_000)
        assert t.sm.poll_lease_renewal(t.now) is None
        t.exchange(body)
    t.advance(6_100)  # the heartbeat due at 6_000 is not answered: now it renews in Redis
    request = t.sm.poll_lease_renewal(t.now)
    assert request is not None
    assert t.sm.on_lease_renewal(request, RENEWED, 10_000, t.now).stop == ()
    slow = {**response(3, ["v1:0"], interval_ms=9_000), "lease_ttl_ms": 10_000}
    t.exchange(slow)
    assert t.sm.lease_renewal_due_ms() == t.now + 7_500  # capped at three quarters of the TTL


def test_a_slow_heartbeat_answer_does_not_shorten_a_later_renewal_in_redis() -> None:
    t = joined(("v1:0",))
    t.advance(4_000)
    heartbeat = t.heartbeat()  # sent at 4_000: the coordinator's deadline will be 14_000
    t.advance(1_000)
    renewal = t.sm.poll_lease_renewal(t.now)
    assert renewal is not None
    t.sm.on_lease_renewal(renewal, RENEWED, 10_000, t.now)  # Redis: 15_000, at the same epoch
    t.advance(100)
    t.answer(heartbeat, response(3, ["v1:0"]))
    assert t.sm.lease_valid(t.incarnation, 14_999) and not t.sm.lease_valid(t.incarnation, 15_000)
