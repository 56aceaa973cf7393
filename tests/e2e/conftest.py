"""Fixtures of the end-to-end tests: a whole stack of real processes per test (tests/e2e/stack.py).

Each test gets its own private Redis, coordinator API (granian, config.serve), tick (Celery worker + beat)
and member processes, all killed when the test ends, whatever happened. The stack's directory (process
logs, handled logs) is under the test's ``tmp_path``, so a failed run can be read afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.protocol.routing import shard_index

from .stack import ProducerLoop, Stack

# Short timings, so that an expiry takes about two seconds: the lease is ten heartbeat intervals, and
# the tick (200 ms, tests/e2e/stack.py) runs ten times per lease.
TIMINGS = {"lease_ttl_ms": 2000, "heartbeat_interval_ms": 200, "revocation_timeout_ms": 5000}


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """``make_stack(**Stack kwargs)``: a started stack, closed (every process killed) at teardown."""
    stacks: list[Stack] = []

    def make(**kwargs: Any) -> Stack:
        stack = Stack(tmp_path / f"stack{len(stacks)}", **kwargs)
        stacks.append(stack)
        return stack.start()

    try:
        yield make
    finally:
        for stack in stacks:
            stack.close()


@pytest.fixture
def producers() -> Iterator[Callable[..., ProducerLoop]]:
    """``producers(redis_url, **ProducerLoop kwargs)``: a started producer thread, stopped at teardown."""
    started: list[ProducerLoop] = []

    def make(redis_url: str, **kwargs: Any) -> ProducerLoop:
        loop = ProducerLoop(redis_url, **kwargs).start()
        started.append(loop)
        return loop

    try:
        yield make
    finally:
        for loop in started:
            loop.stop()


def keys_for_every_shard(shard_count: int, per_shard: int = 3) -> list[str]:
    """Partition keys that spread evenly: exactly ``per_shard`` keys route to each shard (docs section 10),
    so every shard receives a steady stream and no shard's silence can pass for "kept consuming"."""
    buckets: dict[int, list[str]] = {i: [] for i in range(shard_count)}
    n = 0
    while any(len(b) < per_shard for b in buckets.values()):
        key = f"key-{n}"
        n += 1
        bucket = buckets[shard_index(key.encode(), shard_count)]
        if len(bucket) < per_shard:
            bucket.append(key)
    # Interleaved by shard, so that round-robin production visits every shard in turn.
    return [buckets[i][j] for j in range(per_shard) for i in range(shard_count)]
