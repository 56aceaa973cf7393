"""The member's retry rules and join idempotency (consumers/member/retry.py, docs/consumers.md "Retries"),
driven through the state machine with scripted time and scripted coordinator answers.

The lease here is the one of the e2e outage tests: 2000 ms, heartbeats every 200 ms (the script's
responses set ``lease_ttl_ms`` to ten heartbeat intervals)."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from consumers.member.retry import join_retry_delay_ms, renewal_retry_delay_ms
from consumers.member.state import COORDINATOR_UNREACHABLE, STALE_JOIN, MemberConfig, Phase
from tests.consumers.script import MEMBER_ID, Script, response, started, stopped

INTERVAL = 200
LEASE = 10 * INTERVAL
SHARDS = ("v1:0", "v1:1")


def member(rtt_ms: int = 0, **config: object) -> Script:
    """Joined and steady at epoch 3; its last heartbeat was sent at ``t.now - rtt_ms`` and took
    ``rtt_ms``, so its lease (as it knows it) ends at ``t.now - rtt_ms + LEASE``."""
    t = Script(**config)  # type: ignore[arg-type]
    t.join(response(3, SHARDS, interval_ms=INTERVAL))
    request = t.heartbeat()
    t.advance(rtt_ms)
    t.answer(request, response(3, SHARDS, interval_ms=INTERVAL))
    return t


def due_in(t: Script) -> int:
    wake = t.sm.next_wakeup_ms()
    assert wake is not None
    return wake - t.now


def fail_renewal(t: Script, code: str = "STORE_UNAVAILABLE", **kwargs: object) -> None:
    request = t.heartbeat()
    assert request.member_epoch == 3
    d = t.fail(request, code, **kwargs)
    assert d.stop == () and t.sm.phase is Phase.MEMBER  # a failure changes nothing else


# ------------------------------------------------------------------------------------------ the lease


def test_retry_after_is_honoured_while_it_ends_before_the_lease_and_cut_short_when_it_would_not() -> None:
    t = member()  # lease known until 2000; round trip: the 50 ms floor
    t.advance(INTERVAL)
    fail_renewal(t, retry_after_ms=1_000)  # at 200: 1200 is well inside the lease
    assert t.sm.next_wakeup_ms() == 1_200
    t.advance(1_000)
    fail_renewal(t, retry_after_ms=1_000)  # at 1200: 2200 would outlive the lease
    assert t.sm.next_wakeup_ms() == LEASE - 50
    assert "(before the lease ends)" in t.log[-1].notices[0].message
    t.advance(due_in(t))
    t.exchange(response(3, SHARDS, interval_ms=INTERVAL))  # the blip is over: renewed in time
    assert t.sm.lease_valid(t.incarnation, LEASE + 1)
    assert t.sm.next_wakeup_ms() == t.now + INTERVAL


def test_the_backoff_alone_is_bounded_by_the_lease_too() -> None:
    t = member(retry_jitter_ratio=0.0)
    t.advance(INTERVAL)
    while t.now + INTERVAL <= LEASE - 50:  # backoffs of 100, then 200 ms (the heartbeat interval)
        fail_renewal(t, COORDINATOR_UNREACHABLE)
        t.advance(due_in(t))
    fail_renewal(t, COORDINATOR_UNREACHABLE)  # at 1900, a 200 ms backoff would end past the lease
    assert t.now == 1_900 and t.sm.next_wakeup_ms() == LEASE - 50


def test_the_margin_is_the_last_successful_heartbeats_round_trip() -> None:
    t = member(rtt_ms=400)  # sent at 0, answered at 400: the lease is known until 2000
    t.advance(600)  # at 1000
    fail_renewal(t, retry_after_ms=1_000)
    assert t.sm.next_wakeup_ms() == LEASE - 400


def test_the_margin_has_a_floor_and_a_late_retry_is_not_spun() -> None:
    t = member(round_trip_floor_ms=80)
    t.advance(1_950)  # past lease - margin, before the lease's end
    fail_renewal(t, retry_after_ms=1_000)
    t.advance(79)
    assert t.no_heartbeat_due()  # not at once (a coordinator that refuses at once is not spun on) ...
    t.advance(1)
    assert t.heartbeat().member_epoch == 3  # ... and not after the Retry-After either


def test_once_the_lease_may_have_ended_the_ordinary_rules_apply_again() -> None:
    t = member()
    t.advance(LEASE)
    fail_renewal(t, retry_after_ms=1_000)
    assert due_in(t) == 1_000


def test_a_slow_answer_pulls_the_next_heartbeat_in_too() -> None:
    t = member(rtt_ms=1_900)  # sent at 0, answered at 1900: the next one is due before 2000 - 1900
    assert due_in(t) == 50  # the floor: as soon as may be, not 200 ms later


def test_joins_hold_no_lease_and_are_not_pulled_in() -> None:
    t = member()
    t.sm.on_member_fenced(t.incarnation, t.now)
    t.fail(t.heartbeat(), "STORE_UNAVAILABLE", retry_after_ms=3_000)
    assert due_in(t) == 3_000


# ------------------------------------------------------------------------------------------ jitter


def test_a_joins_backoff_has_equal_jitter() -> None:
    delays = []
    for jitter in (0.0, 0.5, 0.999):
        t = Script()
        t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE, jitter=jitter)
        t.advance(due_in(t))
        t.fail(t.heartbeat(), COORDINATOR_UNREACHABLE, jitter=jitter)  # the second failure: backoff 200
        delays.append(due_in(t))
    assert delays == [100, 150, 199]


def test_joins_throttled_is_honoured_and_spread() -> None:
    delays = []
    for jitter in (0.0, 0.5, 0.999):
        t = Script()
        d = t.fail(t.heartbeat(), "JOINS_THROTTLED", retry_after_ms=1_200, jitter=jitter)
        assert t.sm.phase is Phase.JOINING and d.start == ()
        delays.append(due_in(t))
        t.advance(1_199)
        assert t.no_heartbeat_due()  # never before the Retry-After
    assert delays == [1_200, 1_800, 2_398]
    assert t.sm.request_stop(t.now, 1_000).finished  # the coordinator said no: nothing to leave


@given(
    failures=st.integers(1, 40),
    retry_after=st.none() | st.integers(0, 20_000),
    jitter=st.floats(0, 1, exclude_max=True),
)
def test_retry_delays_stay_within_their_bounds(failures: int, retry_after: int | None, jitter: float) -> None:
    config = MemberConfig(member_id=MEMBER_ID, capacity=1, retry_backoff_max_ms=5_000)
    backoff = min(5_000, 100 * 2 ** (failures - 1))
    fixed = max(backoff // 2, min(retry_after, 5_000) if retry_after is not None else 0)
    assert fixed <= join_retry_delay_ms(failures, config, retry_after, jitter) <= 2 * fixed
    renewal = renewal_retry_delay_ms(failures, config, retry_after, jitter, heartbeat_interval_ms=INTERVAL)
    floor = min(retry_after, 5_000) if retry_after is not None else 0
    assert max(floor, int(min(backoff, INTERVAL) * 0.8)) <= renewal <= max(floor, min(backoff, INTERVAL))


# ------------------------------------------------------------------------------------------ join_seq


def test_every_attempt_of_one_join_carries_the_same_join_seq() -> None:
    t = Script()
    seqs = []
    for code in (COORDINATOR_UNREACHABLE, "GROUP_NOT_FOUND", "STORE_UNAVAILABLE"):
        request = t.heartbeat()
        seqs.append(request.join_seq)
        t.fail(request, code)
        t.advance(due_in(t))
    request = t.heartbeat()
    seqs.append(request.join_seq)
    t.answer(request, {"not": "a response"})  # a malformed answer: retried as the same join
    t.advance(due_in(t))
    join = t.heartbeat()
    assert [*seqs, join.join_seq] == [1, 1, 1, 1, 1]
    t.answer(join, response(3, SHARDS))
    renewal = t.heartbeat()
    assert renewal.join_seq is None and "join_seq" not in renewal.to_json()


def test_each_fence_moves_the_next_join_to_the_next_join_seq() -> None:
    t = member()
    t.advance(INTERVAL)
    t.fail(t.heartbeat(), "FENCED_MEMBER_EPOCH", retriable=False)  # the coordinator fenced us
    join = t.heartbeat()
    assert join.join_seq == 2
    t.answer(join, response(5, SHARDS))
    t.sm.on_member_fenced(t.incarnation, t.now)  # the data plane fenced us
    join = t.heartbeat()
    assert (join.join_seq, join.incarnation) == (3, 3)
    t.answer(join, response(0, []))  # answered with epoch 0: a fence too
    assert t.heartbeat().join_seq == 4


def test_a_report_from_an_earlier_incarnation_does_not_move_join_seq() -> None:
    t = member()
    old = t.incarnation
    t.sm.on_member_fenced(old, t.now)
    t.sm.on_member_fenced(old, t.now)  # a second unit of the old incarnation says it too: ignored
    assert t.heartbeat().join_seq == 2


# ------------------------------------------------------------------------------------------ STALE_JOIN


def test_stale_join_is_a_fence_of_that_join_and_the_next_goes_above_the_recorded_one() -> None:
    t = Script()
    d = t.fail(
        t.heartbeat(), STALE_JOIN, message="a delayed retry", retriable=False, jitter=0.5,
        details={"member_id": MEMBER_ID, "join_seq": 1, "current_join_seq": 5},
    )  # fmt: skip
    assert t.sm.phase is Phase.JOINING and t.incarnation == 2
    (notice,) = d.notices
    assert notice.level == logging.WARNING and STALE_JOIN in notice.message and "shared" in notice.message
    assert due_in(t) == 75  # a join backoff (equal jitter over 100 ms), not at once
    t.advance(75)
    join = t.heartbeat()
    assert join.join_seq == 6
    d = t.answer(join, response(8, SHARDS))
    assert started(d) == list(SHARDS) and t.sm.member_epoch == 8


def test_stale_join_without_details_still_moves_on() -> None:
    t = Script()
    t.fail(t.heartbeat(), STALE_JOIN, retriable=False)
    t.advance(due_in(t))
    assert t.heartbeat().join_seq == 2


def test_stale_join_after_a_stop_finishes_the_member_without_a_leave() -> None:
    t = Script()
    join = t.heartbeat()
    t.sm.request_stop(t.now, 1_000)
    assert t.sm.phase is Phase.LEAVING  # the join may have been applied ...
    d = t.fail(join, STALE_JOIN, retriable=False, details={"current_join_seq": 4})
    assert d.finished  # ... STALE_JOIN says it was not: nothing to leave
    assert stopped(d) == []
