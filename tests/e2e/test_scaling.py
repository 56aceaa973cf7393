"""Scaling a group of real member processes out (1 -> 3 -> 6) and back in (6 -> 1) while producing.

What it proves, end to end (the API on granian, Celery tick, ``run_member`` processes, the fenced data plane):

* every rebalance converges: STABLE, every shard owned by exactly one live member, sizes within one;
* nothing produced is lost, nothing is handled twice, per-key order holds, and no two members ever
  handle one shard at overlapping times (tests/e2e/checker.py);
* incremental rebalancing (docs/protocol.md section 4, goal 11): a member keeps the shards the sticky
  assignor leaves it - the coordinator shows them in its current assignment *at their original shard
  assignment epoch in every poll during the rebalance* (never revoked, never re-granted) - and it keeps
  handling them *while the group is reconciling*: for each kept shard, the handler log has entries
  handled by that member between the first poll that saw the group epoch move and the first poll that
  saw the group STABLE again, and none handled by anyone else. An eager ("stop the world") rebalance,
  or a runtime that paused its kept shards while it released the others, fails one of these.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from .conftest import TIMINGS, keys_for_every_shard
from .helpers import Rebalance, finish, handled_between, pid_of, watch_rebalance
from .stack import HandledLogs, ProducerLoop, Stack, live, stable_and_balanced, wait_until

SHARDS = 12
MEMBER_ENV = {"E2E_HANDLER_SLEEP_MS": "2", "RSC_RUNTIME_MAX_CONCURRENCY": "4"}
RATE_PER_S = 480  # 40 entries per second on every shard: one every 25 ms
# "Handled during the rebalance" is checked on windows of at least this many ms (six entries per shard):
# a shorter one (a scale-in often converges within one heartbeat) is too short to show a pause. The
# scale-out windows always qualify (joins, revocations, grants take several heartbeats), and the test
# requires that at least one did.
MIN_WINDOW_MS = 150


def assert_kept_shards_never_stopped(rebalance: Rebalance, logs: HandledLogs) -> tuple[int, bool]:
    """The incremental-rebalance assertions of the module docstring. Returns how many shards were kept
    and whether the window was long enough to check the handler log (see MIN_WINDOW_MS)."""
    kept = rebalance.kept()
    window_ms = (rebalance.stable_ns - rebalance.started_ns) / 1e6
    after = {m["member_id"]: m for m in live(rebalance.after)}
    total = 0
    for member in live(rebalance.before):
        member_id = member["member_id"]
        if member_id not in after:
            continue
        # Sticky: a surviving member keeps as many of its shards as its new quota allows.
        expected = min(len(member["current_assignment"]), len(after[member_id]["current_assignment"]))
        assert len(kept[member_id]) == expected, (member_id, kept[member_id], rebalance.after)
        after_epochs = {a["shard"]: a["assignment_epoch"] for a in after[member_id]["current_assignment"]}
        for shard, epoch in kept[member_id].items():
            assert after_epochs[shard] == epoch, f"{shard} was re-granted to {member_id}"
            for _t, view in rebalance.views:
                [seen] = [m for m in view["members"] if m["member_id"] == member_id]
                held = {a["shard"]: a["assignment_epoch"] for a in seen["current_assignment"]}
                assert held.get(shard) == epoch, f"{shard} left {member_id} during the rebalance: {seen}"
        total += len(kept[member_id])
        if window_ms < MIN_WINDOW_MS:
            continue
        rows = handled_between(logs.refresh(), rebalance.started_ns, rebalance.stable_ns)
        pid = pid_of(member)
        for shard in kept[member_id]:
            by_member = [r for r in rows if r["shard"] == shard and r["pid"] == pid]
            by_others = [r for r in rows if r["shard"] == shard and r["pid"] != pid]
            assert by_member, (
                f"{member_id} handled nothing of its kept shard {shard} while the group reconciled "
                f"({window_ms:.0f} ms)"
            )
            assert not by_others, f"kept shard {shard} handled by another member: {by_others[:3]}"
    return total, window_ms >= MIN_WINDOW_MS


def test_scale_out_1_3_6_and_back_in_to_1_while_producing(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop]
) -> None:
    stack = make_stack(member_env=MEMBER_ENV)
    stack.create_group(shard_count=SHARDS, max_concurrency=4, **TIMINGS)
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=RATE_PER_S, batch=12)
    logs = HandledLogs(stack.handled_dir)

    stack.start_member("m0")
    wait_until(lambda: stable_and_balanced(stack.describe(), 1, SHARDS), what="m0 owns every shard")
    kept_total, checked = 0, []
    for first, count in ((1, 3), (3, 6)):

        def scale_out(first: int = first, count: int = count) -> None:
            for i in range(first, count):
                stack.start_member(f"m{i}")

        rebalance = watch_rebalance(stack, scale_out, members=count, shards=SHARDS)
        kept, window_checked = assert_kept_shards_never_stopped(rebalance, logs)
        kept_total += kept
        checked.append(window_checked)
    assert any(checked), "no scale-out window was long enough to check the handler log"

    leaving = [stack.members[f"m{i}"] for i in range(1, 6)]

    def scale_in() -> None:
        for proc in leaving:
            proc.signal(signal.SIGTERM)

    rebalance = watch_rebalance(stack, scale_in, members=1, shards=SHARDS)
    kept_total += assert_kept_shards_never_stopped(rebalance, logs)[0]
    assert kept_total == 4 + 3 * 2 + 2  # 1->3: m0 keeps 4 of 12; 3->6: 2 each; 6->1: m0 keeps its 2
    for proc in leaving:
        assert proc.wait(30) == 0, proc.output()[-2000:]

    report = finish(producer, logs)
    assert report.produced > 1000, report.summary()
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], []), (
        report.summary()
    )
    view = stack.describe()
    assert stable_and_balanced(view, 1, SHARDS)
    [survivor] = live(view)
    assert pid_of(survivor) == stack.members["m0"].pid
    ended: dict[str, Any] = {m["member_id"]: m for m in view["members"] if m not in live(view)}
    assert sorted(pid_of(m) for m in ended.values()) == sorted(p.pid for p in leaving)
    assert {m["state"] for m in ended.values()} == {"LEFT"}  # graceful: they left, none expired
