"""Blips shorter than the lease fence nobody (docs/consumers.md, "Retries and the lease").

A group with a 2 s lease and a 200 ms heartbeat interval, two members consuming under load, and
outages of about 1.2 s, several times each:

* **the API hung** (SIGSTOP of every API server process, then SIGCONT): heartbeats time out (the e2e
  members' heartbeat timeout is 1 s) and are retried;
* **Redis restarted** (SIGTERM, down for about 1.2 s, started again on the same port with its
  append-only file, so the data is kept): the API answers 503 ``STORE_UNAVAILABLE`` with
  ``Retry-After: 1``, the data plane's calls fail, the producer's sends fail.

Before the member bounded its retries by its lease, two ``Retry-After: 1`` in a row outlasted a 2 s
lease and every member was fenced by a 1.2 s Redis restart. Now: no member logs a fence, every member
keeps its id and epoch (the group epoch does not move), and the delivery checker finds nothing lost,
nothing out of order and no two members on one shard at once.

``E2E_BLIP_ROUNDS`` (default 3) sets how many outages of each kind; the long form (more rounds) is the
``chaos``-marked test at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from config.embedded_redis import RedisServer, free_port
from tests.polling import wait_until

from .conftest import keys_for_every_shard
from .helpers import finish, pid_of
from .stack import HandledLogs, Proc, ProducerLoop, Stack, live, stable_and_balanced

SHARDS = 4
LEASE_TTL_MS, HEARTBEAT_INTERVAL_MS = 2_000, 200
OUTAGE_S = 1.2


@pytest.fixture
def persistent_stack(tmp_path: Path) -> Iterator[Stack]:
    """A stack whose Redis keeps its data across a restart (append-only file in the stack's directory)
    and keeps its port (so every process reconnects to the same address)."""
    stack = Stack(tmp_path / "stack")
    stack.redis = RedisServer(port=free_port(), data_dir=stack.dir / "redis-data")
    try:
        yield stack.start()
    finally:
        stack.close()


def restart_redis(stack: Stack, down_s: float) -> float:
    """SIGTERM Redis (it flushes its append-only file), keep it down for about ``down_s``, start it
    again on the same port; returns how long it was really down."""
    began = time.monotonic()
    stack.redis.stop()
    time.sleep(max(0.0, began + down_s - 0.1 - time.monotonic()))  # the start takes ~0.1 s more
    stack.redis.start()
    return time.monotonic() - began


def hang_api(stack: Stack, down_s: float) -> float:
    began = time.monotonic()
    stack.pause_api()
    time.sleep(down_s)
    stack.resume_api()
    return time.monotonic() - began


def fences(procs: list[Proc]) -> dict[str, list[str]]:
    return {p.name: [line for line in p.output().splitlines() if "fenced at epoch" in line] for p in procs}


def identities(view: dict[str, Any]) -> set[tuple[str, int, str]]:
    return {(m["member_id"], m["member_epoch"], m["state"]) for m in view["members"]}


def run_blips(stack: Stack, producers: Callable[..., ProducerLoop], rounds: int) -> None:
    stack.create_group(
        shard_count=SHARDS,
        lease_ttl_ms=LEASE_TTL_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        revocation_timeout_ms=5_000,
    )
    procs = [stack.start_member(f"m{i}") for i in range(2)]
    wait_until(lambda: stable_and_balanced(stack.describe(), 2, SHARDS), what="two members, stable")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=100, batch=4)
    logs = HandledLogs(stack.handled_dir)
    wait_until(lambda: all(logs.by(p.name.removeprefix("member-")) for p in procs), what="both consume")
    before = stack.describe()
    assert {pid_of(m) for m in live(before)} == {p.pid for p in procs}

    def renewed() -> bool:
        # Every member's lease renewed since the blip ended (the view needs the API and Redis back).
        try:
            view = stack.describe()
        except (OSError, AssertionError):
            return False
        return len(live(view)) == 2 and all(m["lease_remaining_ms"] > LEASE_TTL_MS - 600 for m in live(view))

    outages: list[str] = []
    for kind, blip in [("API hung", hang_api), ("Redis restarted", restart_redis)] * rounds:
        outages.append(f"{kind} {blip(stack, OUTAGE_S):.2f} s")
        wait_until(renewed, timeout_s=20, interval_s=0.05, what=f"leases renewed after: {outages}")
        assert fences(procs) == {p.name: [] for p in procs}, outages
        time.sleep(0.3)  # some traffic between two blips

    after = stack.describe()
    context = f"outages: {outages}"
    assert identities(after) == identities(before), context  # same ids, same epochs, nobody expired
    assert after["group_epoch"] == before["group_epoch"], context
    assert all(p.alive for p in procs), context

    report = finish(producer, logs, redis_stayed_up=False)
    assert (report.lost, report.out_of_order, report.overlaps) == ([], [], []), (
        f"{report.summary()}; {context}"
    )
    assert fences(procs) == {p.name: [] for p in procs}, context
    # Nothing was fenced, so nothing had to be handled twice.
    assert report.duplicates == {}, f"{report.summary()}; {context}"


def test_api_hangs_and_redis_restarts_shorter_than_the_lease_fence_nobody(
    persistent_stack: Stack, producers: Callable[..., ProducerLoop]
) -> None:
    run_blips(persistent_stack, producers, rounds=int(os.environ.get("E2E_BLIP_ROUNDS", "3")))


@pytest.mark.chaos
def test_many_blips_fence_nobody(persistent_stack: Stack, producers: Callable[..., ProducerLoop]) -> None:
    run_blips(persistent_stack, producers, rounds=int(os.environ.get("E2E_BLIP_ROUNDS_LONG", "15")))
