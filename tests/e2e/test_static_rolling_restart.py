"""A rolling restart of static members (docs/protocol.md section 3, "Static membership"): every member
process is stopped (SIGTERM) and a new one started with the same ``RSC_INSTANCE_ID``, one at a time,
under load.

Each stopped member leaves *for now* (member epoch -2): its shards wait, read by nobody, and the next
process with its instance id is granted exactly them at its join. So across the restarts no shard is
ever owned or handled by a member of another instance (0 shards moved), each restart bumps the group
epoch once (the take-over join; the leave bumps nothing), and the delivery checker finds nothing lost,
duplicated or reordered, and no two members handling one shard at overlapping times.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from .conftest import keys_for_every_shard
from .helpers import finish, pid_of
from .stack import HandledLogs, ProducerLoop, Stack, live, stable_and_balanced, wait_until

SHARDS = 6
INSTANCES = 3
# A lease long enough for a new process to start (Python, Django) before the held shards move on.
TIMINGS = {"lease_ttl_ms": 20_000, "heartbeat_interval_ms": 200, "revocation_timeout_ms": 5_000}


def instance_of(name: str) -> str:
    """The instance (``pod-<i>``) of a process named ``pod-<i>`` or ``pod-<i>-r<n>``."""
    return "-".join(name.split("-")[:2])


def ownership(view: dict[str, Any]) -> dict[str, str]:
    """shard -> the instance (``pod-<i>``) of the live member that owns it (assigned or revoking)."""
    owned = {}
    for m in live(view):
        assert m["instance_id"] is not None, m
        for shard in [a["shard"] for a in m["current_assignment"]] + m["revoking"]:
            assert shard not in owned
            owned[shard] = m["instance_id"].split(".")[0]
    return owned


def test_a_rolling_restart_of_static_members_moves_no_shard_and_loses_nothing(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop]
) -> None:
    stack = make_stack(member_env={"E2E_HANDLER_SLEEP_MS": "5"})
    stack.create_group(shard_count=SHARDS, **TIMINGS)
    for i in range(INSTANCES):
        stack.start_member(f"pod-{i}", RSC_INSTANCE_ID=f"pod-{i}")
    wait_until(lambda: stable_and_balanced(stack.describe(), INSTANCES, SHARDS), what="three members, stable")
    start = stack.describe()
    initial = ownership(start)
    assert sorted(initial) == sorted(f"v1:{i}" for i in range(SHARDS))
    assert {m["instance_id"] for m in live(start)} == {f"pod-{i}.e2e.0" for i in range(INSTANCES)}
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=150, batch=6)
    logs = HandledLogs(stack.handled_dir)
    seen_moves: list[tuple[str, str, str]] = []

    def check_ownership(view: dict[str, Any]) -> None:
        # While an instance restarts its shards are owned by nobody, never by another instance.
        for shard, instance in ownership(view).items():
            if instance != initial[shard]:
                seen_moves.append((shard, initial[shard], instance))

    old = [stack.members[f"pod-{i}"] for i in range(INSTANCES)]
    for i, proc in enumerate(old):
        handled_so_far = len(logs.refresh())
        wait_until(lambda n=handled_so_far: len(logs.refresh()) - n, lambda n: n >= 30, what="traffic")
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.output()[-3000:]
        assert "left the group for now" in proc.output(), proc.output()[-3000:]
        view = stack.describe()
        check_ownership(view)
        assert [h["instance_id"] for h in view["held_instances"]] == [f"pod-{i}.e2e.0"], view
        new = stack.start_member(f"pod-{i}-r1", RSC_INSTANCE_ID=f"pod-{i}")

        def settled(new_pid: int = new.pid) -> bool:
            view = stack.describe()
            check_ownership(view)
            return (
                stable_and_balanced(view, INSTANCES, SHARDS)
                and new_pid in {pid_of(m) for m in live(view)}
                and not view["held_instances"]
            )

        wait_until(settled, what=f"pod-{i} restarted with its shards, the group stable again")
        assert "instance id pod-" in new.output()

    report = finish(producer, logs)
    assert report.produced > 300, report.summary()
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], []), (
        report.summary()
    )
    # 0 shards moved: no member of another instance ever owned a shard, nor handled one.
    assert seen_moves == []
    handled_elsewhere = [
        (r["shard"], r["member_id"])
        for r in logs.rows
        if instance_of(r["member_id"].split("/", 1)[0]) != initial[r["shard"]]
    ]
    assert handled_elsewhere == []
    end = stack.describe()
    assert ownership(end) == initial
    # One bump per restart (the take-over join); the temporary leaves bumped nothing.
    assert end["group_epoch"] == start["group_epoch"] + INSTANCES
    ended = [m for m in end["members"] if m not in live(end)]
    assert sorted(pid_of(m) for m in ended) == sorted(p.pid for p in old)
    assert {(m["state"], m["end_reason"], m["held_until_ms"]) for m in ended} == {("LEFT", "LEFT", None)}
    # Every instance handled something before and after its restart: the restarts happened under load.
    assert all(logs.by(f"pod-{i}") and logs.by(f"pod-{i}-r1") for i in range(INSTANCES))
