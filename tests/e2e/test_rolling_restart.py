"""A graceful rolling restart of every member process (SIGTERM, wait for the exit, start a new one), one
at a time, under load.

It proves the graceful path end to end: on SIGTERM a member stops reading, finishes the entry in flight,
acks what it handled, leaves the group (LEFT, not EXPIRED) and exits 0; the rest of its batch stays
pending and the next owner claims it. So across three restarts: zero lost, **zero duplicates**, order
per key kept, no two members handling one shard at overlapping times, and the group ends STABLE with
three new members.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from .conftest import TIMINGS, keys_for_every_shard
from .helpers import finish, pid_of
from .stack import HandledLogs, ProducerLoop, Stack, live, stable_and_balanced, wait_until

SHARDS = 6


def test_graceful_rolling_restart_loses_and_duplicates_nothing(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop]
) -> None:
    # A handler that takes a few ms: a member always has a batch in flight when SIGTERM arrives.
    stack = make_stack(member_env={"E2E_HANDLER_SLEEP_MS": "5"})
    stack.create_group(shard_count=SHARDS, **TIMINGS)
    for i in range(3):
        stack.start_member(f"m{i}")
    wait_until(lambda: stable_and_balanced(stack.describe(), 3, SHARDS), what="three members, stable")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=150, batch=6)
    logs = HandledLogs(stack.handled_dir)

    old = [stack.members[f"m{i}"] for i in range(3)]
    for i, proc in enumerate(old):
        handled_so_far = len(logs.refresh())
        wait_until(lambda n=handled_so_far: len(logs.refresh()) - n, lambda n: n >= 30, what="traffic")
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.output()[-3000:]
        assert "left the group" in proc.output()
        new = stack.start_member(f"m{i}-restarted")

        def settled(new_pid: int = new.pid) -> bool:
            view = stack.describe()
            return stable_and_balanced(view, 3, SHARDS) and new_pid in {pid_of(m) for m in live(view)}

        wait_until(settled, what=f"m{i} restarted, the group stable again")

    report = finish(producer, logs)
    assert report.produced > 300, report.summary()
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], []), (
        report.summary()
    )
    view = stack.describe()
    assert stable_and_balanced(view, 3, SHARDS)
    ended = [m for m in view["members"] if m not in live(view)]
    assert sorted(pid_of(m) for m in ended) == sorted(p.pid for p in old)
    assert {(m["state"], m["end_reason"]) for m in ended} == {("LEFT", "LEFT")}, ended
    # Every old member handled something before it left: the restarts happened under load.
    assert all(logs.by(f"m{i}") for i in range(3))
