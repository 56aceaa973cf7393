"""A static member's side (docs/consumers.md, "Static membership"): it joins with its instance id, a
clean stop is a temporary leave (-2) unless it leaves the group for good, FENCED_INSTANCE_ID is a fence,
and UNRELEASED_INSTANCE_ID is one clear ERROR then joins again with a growing backoff, never in a tight
loop and never fencing anybody."""

from __future__ import annotations

import logging

from consumers.member.state import UNRELEASED_INSTANCE_ID, Phase
from tests.consumers.script import LEAVE_RESPONSE, MEMBER_ID, Script, response, started, stopped

SHARDS = ("v1:0", "v1:1")


def due_in(t: Script) -> int:
    wake = t.sm.next_wakeup_ms()
    assert wake is not None
    return wake - t.now


def test_the_join_carries_the_instance_id_and_nothing_else_does() -> None:
    t = Script(instance_id="pod-a.orders.0")
    join = t.heartbeat()
    assert join.to_json()["instance_id"] == "pod-a.orders.0"
    t.answer(join, response(3, SHARDS))
    assert "instance_id" not in t.heartbeat().to_json()


def stop_and_leave(t: Script) -> int:
    t.join(response(3, SHARDS))
    t.sm.request_stop(t.now, 5_000)
    for shard in SHARDS:
        t.stopped(shard)
    assert t.sm.phase is Phase.LEAVING
    leave = t.heartbeat()
    d = t.answer(leave, {**LEAVE_RESPONSE, "member_epoch": leave.member_epoch})
    assert d.finished
    return leave.member_epoch


def test_a_clean_stop_of_a_static_member_is_a_temporary_leave() -> None:
    t = Script(instance_id="pod-a.orders.0")
    assert stop_and_leave(t) == -2
    assert any("for now" in n.message for d in t.log for n in d.notices)


def test_leave_group_and_a_dynamic_member_leave_for_good() -> None:
    assert stop_and_leave(Script(instance_id="pod-a.orders.0", leave_group=True)) == -1
    assert stop_and_leave(Script()) == -1


def test_fenced_instance_id_is_a_fence() -> None:
    t = Script(instance_id="pod-a.orders.0")
    t.join(response(3, SHARDS))
    t.advance(due_in(t))
    d = t.fail(t.heartbeat(), "FENCED_INSTANCE_ID", message="replaced", retriable=False)
    assert sorted(stopped(d, abandon=True)) == list(SHARDS)
    assert t.sm.phase is Phase.JOINING and t.incarnation == 2


def test_unreleased_instance_id_logs_one_error_and_backs_off_until_it_is_released() -> None:
    t = Script(instance_id="pod-a.orders.0")
    delays: list[int] = []
    errors = 0
    for _ in range(8):
        join = t.heartbeat()
        assert join.member_epoch == 0 and join.instance_id == "pod-a.orders.0"
        d = t.fail(join, UNRELEASED_INSTANCE_ID, message="held by m1", retriable=True, jitter=0.0)
        errors += sum(1 for n in d.notices if n.level >= logging.ERROR)
        assert t.sm.phase is Phase.JOINING and t.incarnation == 1  # nothing to drop: never a member
        delays.append(due_in(t))
        assert t.no_heartbeat_due()  # not at once: a backoff
        t.advance(delays[-1])
    assert errors == 1
    assert delays == sorted(delays) and delays[0] < delays[-1]  # growing ...
    assert delays[-1] <= t.sm.config.retry_backoff_max_ms  # ... to the join backoff's cap
    d = t.answer(t.heartbeat(), response(9, SHARDS))
    assert started(d) == list(SHARDS)
    assert any("released after 8 refused" in n.message and n.level == logging.INFO for n in d.notices)
    assert MEMBER_ID  # the member id is its own throughout; only the instance id was contended
