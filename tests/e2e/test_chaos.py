"""Soak / chaos runs (``make chaos``; excluded from ``make test``): the short scenarios of this directory,
longer, random and mixed, under load.

``E2E_CHAOS_SECONDS`` (default 120) bounds each run; it runs once per listener ordering (``shard``,
``key``, ``none``; ``E2E_CHAOS_ORDERING`` picks one; under ``none`` per-key order is not checked: it
promises none), ``E2E_CHAOS_SEED`` replays one (the seed is printed
and part of every failure message). After every action the test waits for the group to settle (STABLE,
balanced over the member processes alive), so a run is a sequence of real rebalances, not a pile-up.

At the end: nothing lost, order per key kept, no two members handling one shard at overlapping times,
every shard owned by exactly one live member. Duplicates are allowed (``kill -9`` makes them).

The actions keep every pause below the lease (3 s here): a member frozen *past* its lease is the known
zombie gap pinned by tests/e2e/test_member_failures.py (xfail), which a soak must not keep rediscovering.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable

import pytest

from .conftest import keys_for_every_shard
from .helpers import finish, pid_of
from .stack import HandledLogs, ProducerLoop, Stack, live, owners, stable_and_balanced, wait_until

SHARDS = 12
LEASE_TTL_MS = 3000
MIN_MEMBERS, MAX_MEMBERS = 2, 6


class Chaos:
    def __init__(self, stack: Stack, rng: random.Random) -> None:
        self.stack, self.rng = stack, rng
        self.spawned = 0
        self.history: list[str] = []

    def alive(self) -> list[str]:
        return sorted(self.stack.live_members())

    def start_member(self) -> str:
        name = f"c{self.spawned}"
        self.spawned += 1
        self.stack.start_member(name)
        return name

    def pick(self) -> str:
        return self.rng.choice(self.alive())

    # -- actions ------------------------------------------------------------------------------------

    def kill_9_and_replace(self) -> str:
        name = self.pick()
        self.stack.members[name].kill()
        return f"kill -9 {name}, started {self.start_member()}"

    def graceful_restart(self) -> str:
        name = self.pick()
        proc = self.stack.members[name]
        proc.signal(signal.SIGTERM)
        code = proc.wait(30)
        assert code == 0, f"{name} exited {code}:\n{proc.output()[-2000:]}"
        return f"SIGTERM {name}, started {self.start_member()}"

    def scale_out(self) -> str:
        if len(self.alive()) >= MAX_MEMBERS:
            return self.scale_in()
        return f"scale out: {self.start_member()}"

    def scale_in(self) -> str:
        if len(self.alive()) <= MIN_MEMBERS:
            return self.scale_out()
        name = self.pick()
        self.stack.members[name].signal(signal.SIGTERM)
        assert self.stack.members[name].wait(30) == 0
        return f"scale in: SIGTERM {name}"

    def short_pause(self) -> str:
        name = self.pick()
        pause_s = self.rng.uniform(0.2, LEASE_TTL_MS / 1000 / 3)
        proc = self.stack.members[name]
        proc.signal(signal.SIGSTOP)
        time.sleep(pause_s)
        proc.signal(signal.SIGCONT)
        return f"SIGSTOP {name} for {pause_s:.2f} s"

    def api_blip(self) -> str:
        outage_s = self.rng.uniform(0.5, LEASE_TTL_MS / 1000 / 3)
        self.stack.stop_api()
        time.sleep(outage_s)
        self.stack.start_api()
        return f"API down {outage_s:.2f} s (+ restart)"

    def long_coordinator_outage(self) -> str:
        outage_s = self.rng.uniform(LEASE_TTL_MS / 1000 * 1.2, LEASE_TTL_MS / 1000 * 2)
        self.stack.stop_api()
        self.stack.stop_tick()
        time.sleep(outage_s)
        self.stack.start_tick(wait=False)
        self.stack.start_api()
        return f"API and tick down {outage_s:.2f} s"

    def tick_restart(self) -> str:
        self.stack.stop_tick()
        self.stack.start_tick()
        return "tick restarted"

    def redis_pause(self) -> str:
        pause_s = self.rng.uniform(0.2, 0.6)
        self.stack.redis.pause()
        time.sleep(pause_s)
        self.stack.redis.resume()
        return f"Redis paused {pause_s:.2f} s"

    def settle(self) -> None:
        """STABLE and balanced, and the live members are exactly the member processes alive (a count
        alone would take a killed member not yet expired for the replacement not yet joined)."""
        pids = {self.stack.members[name].pid for name in self.alive()}

        def settled() -> bool:
            view = self.stack.describe()
            return stable_and_balanced(view, len(pids), SHARDS) and {pid_of(m) for m in live(view)} == pids

        wait_until(settled, timeout_s=60, interval_s=0.1, what=f"settled after {self.history[-3:]}")


# Every ordering by default (issue 27: key and none face the same faults); E2E_CHAOS_ORDERING picks one.
CHAOS_ORDERINGS = [o for o in ("shard", "key", "none") if os.environ.get("E2E_CHAOS_ORDERING", o) == o]


@pytest.mark.chaos
@pytest.mark.parametrize("ordering", CHAOS_ORDERINGS)
def test_soak_random_failures_under_load(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop], ordering: str
) -> None:
    seconds = float(os.environ.get("E2E_CHAOS_SECONDS", "120"))
    seed = int(os.environ.get("E2E_CHAOS_SEED", str(time.time_ns() % 1_000_000)))
    print(f"chaos seed {seed} ({seconds:.0f} s, ordering {ordering})")
    rng = random.Random(seed)
    stack = make_stack(
        member_env={"E2E_HANDLER_SLEEP_MS": "3", "RSC_RUNTIME_MAX_CONCURRENCY": "2", "E2E_ORDERING": ordering}
    )
    stack.create_group(
        shard_count=SHARDS,
        max_concurrency=2,
        lease_ttl_ms=LEASE_TTL_MS,
        heartbeat_interval_ms=200,
        revocation_timeout_ms=10_000,
    )
    chaos = Chaos(stack, rng)
    for _ in range(4):
        chaos.start_member()
    wait_until(lambda: stable_and_balanced(stack.describe(), 4, SHARDS), what="four members, stable")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=300, batch=10)
    logs = HandledLogs(stack.handled_dir)
    actions = [
        (chaos.kill_9_and_replace, 3),
        (chaos.graceful_restart, 3),
        (chaos.scale_out, 2),
        (chaos.scale_in, 2),
        (chaos.short_pause, 2),
        (chaos.api_blip, 2),
        (chaos.tick_restart, 1),
        (chaos.redis_pause, 1),
        (chaos.long_coordinator_outage, 1),
    ]
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            action = rng.choices([a for a, _ in actions], weights=[w for _, w in actions])[0]
            chaos.history.append(action())
            chaos.settle()
            time.sleep(rng.uniform(0.2, 1.5))  # let traffic flow between two failures
    except BaseException as e:
        raise AssertionError(f"seed {seed}, after {chaos.history}") from e

    report = finish(producer, logs, timeout_s=120, redis_stayed_up=False)
    context = f"seed {seed}, ordering {ordering}: {report.summary()}; actions: {chaos.history}"
    assert report.lost == [], context
    if ordering != "none":
        assert report.out_of_order == [], context
    assert report.overlaps == [], context
    view = stack.describe()
    assert stable_and_balanced(view, len(chaos.alive()), SHARDS), context
    assert len(owners(view)) == SHARDS
    print(context)
