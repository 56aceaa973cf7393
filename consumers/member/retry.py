"""When a failed heartbeat is tried again: the member's retry rules, as pure functions of numbers.

Theory of operation
-------------------
:meth:`consumers.member.state.MemberStateMachine._failed` asks this module when the next attempt is
due. ``jitter`` is a number in [0, 1) that the loop draws (the state machine draws nothing, so a test
can pin it). The rules, in the order they apply:

1. **Backoff.** The n-th failure in a row waits ``retry_backoff_initial_ms * 2**(n-1)``, at most
   ``retry_backoff_max_ms``; a renewal waits at most one heartbeat interval.
2. **Jitter.** A renewal's backoff is shortened by up to ``retry_jitter_ratio``. A *join* gets *equal
   jitter*: half its backoff, plus a random part of up to as much again. Joins are what a crowd does at
   one moment (a deployment restarted, the coordinator back after an outage), and the coordinator sheds
   them first (429 ``JOINS_THROTTLED``): without jitter the crowd would come back in lock step.
3. **Retry-After.** No attempt is earlier than the coordinator's Retry-After (at most
   ``retry_backoff_max_ms``). For a join, the Retry-After raises the fixed half of the equal jitter, so
   a throttled crowd is spread over the Retry-After and as much again, never before it.
4. **The lease.** While the member holds a lease, the attempt is due no later than the lease's end *as
   the member knows it* (the send time of its last accepted heartbeat + ``lease_ttl_ms``, on its own
   clock: a lower bound of the coordinator's deadline) minus one round trip (the duration of the last
   successful heartbeat, at least ``round_trip_floor_ms``). This one wins over the three above,
   Retry-After included: a Redis or API blip shorter than the lease must fence nobody, and two
   ``503 Retry-After: 1`` in a row on a 2 s lease would. When even that moment has passed, attempts
   are at least ``round_trip_floor_ms`` apart (a coordinator that refuses at once is not spun on);
   once the lease may have ended, the ordinary backoff applies again.

Joins hold no lease, so rule 4 never shortens them.
"""

from __future__ import annotations

from .values import MemberConfig


def backoff_ms(failures: int, initial_ms: int, max_ms: int) -> int:
    """Rule 1: ``initial_ms`` doubled per failure after the first, at most ``max_ms``."""
    return min(max_ms, initial_ms << min(max(failures, 1) - 1, 30))


def join_retry_delay_ms(
    failures: int, config: MemberConfig, retry_after_ms: int | None, jitter: float
) -> int:
    """Rules 1-3 for a join: equal jitter over the backoff, the fixed half raised to the Retry-After."""
    fixed = backoff_ms(failures, config.retry_backoff_initial_ms, config.retry_backoff_max_ms) // 2
    if retry_after_ms is not None:
        fixed = max(fixed, min(retry_after_ms, config.retry_backoff_max_ms))
    return fixed + int(fixed * _unit(jitter))


def renewal_retry_delay_ms(
    failures: int,
    config: MemberConfig,
    retry_after_ms: int | None,
    jitter: float,
    *,
    heartbeat_interval_ms: int | None,
) -> int:
    """Rules 1-3 for a renewal or a leave (``heartbeat_interval_ms``: the cap while we are a member)."""
    cap = config.retry_backoff_max_ms
    if heartbeat_interval_ms is not None:
        cap = min(cap, heartbeat_interval_ms)
    delay = backoff_ms(failures, config.retry_backoff_initial_ms, cap)
    delay -= int(delay * config.retry_jitter_ratio * _unit(jitter))
    if retry_after_ms is not None:
        delay = max(delay, min(retry_after_ms, config.retry_backoff_max_ms))
    return delay


def lease_bound_due_ms(
    now_ms: int, due_ms: int, *, lease_deadline_ms: int | None, round_trip_ms: int, floor_ms: int
) -> int:
    """Rule 4: ``due_ms``, pulled in to one round trip before ``lease_deadline_ms`` while it lasts."""
    if lease_deadline_ms is None or now_ms >= lease_deadline_ms:
        return due_ms  # no lease, or it may have ended already: nothing left to save by hurrying
    latest = max(lease_deadline_ms - round_trip_ms, now_ms + floor_ms)
    return min(due_ms, latest)


def _unit(jitter: float) -> float:
    return min(max(jitter, 0.0), 1.0)
