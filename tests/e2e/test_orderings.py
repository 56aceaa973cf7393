"""``ordering="key"`` and ``"none"`` end to end (real ``run_member`` processes, the API, the tick): a strict
resharding under load. Under "key", per-key order holds *across the two routing versions* (a key's
entries on the new version wait for its entries on the old one: strict readability, plus the window's
lanes within a shard); under both, nothing is lost and no two members handle one shard at overlapping
times. The fault tests of the other orderings run for these too (tests/e2e/test_member_failures.py:
kill -9, SIGSTOP past the lease; tests/consumers/test_resync.py: lost replies)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import TIMINGS, keys_for_every_shard
from .helpers import finish
from .stack import PREFIX, HandledLogs, ProducerLoop, Stack, stable_and_balanced, wait_until

MEMBER_ENV = {"E2E_HANDLER_SLEEP_MS": "5", "RSC_RUNTIME_MAX_CONCURRENCY": "4"}


def reorders_across_versions(rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Per key, first handlings in start order must have increasing ``seq`` (the producer's per-key
    count), whatever version each entry was routed to: (key, seq, after) for each that does not."""
    first: dict[str, dict[int, int]] = defaultdict(dict)
    for r in rows:
        seen = first[r["partition_key"]]
        seen[r["seq"]] = min(seen.get(r["seq"], r["start_ns"]), r["start_ns"])
    bad = []
    for key, starts in first.items():
        highest = -1
        for seq in sorted(starts, key=starts.__getitem__):
            if seq < highest:
                bad.append((key, seq, highest))
            highest = max(highest, seq)
    return bad


@pytest.mark.parametrize("ordering", ["key", "none"])
def test_a_strict_resharding_under_load(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop], ordering: str
) -> None:
    stack = make_stack(member_env={**MEMBER_ENV, "E2E_ORDERING": ordering})
    stack.create_group(shard_count=4, max_concurrency=4, **TIMINGS)
    for name in ("a", "b"):
        stack.start_member(name)
    wait_until(stack.describe, lambda v: stable_and_balanced(v, 2, 4), timeout_s=30, what="two members")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(12, per_shard=2), rate_per_s=300, batch=6)
    logs = HandledLogs(stack.handled_dir)
    wait_until(lambda: len(logs.refresh()), lambda n: n >= 300, what="traffic on version 1")
    status, body = stack.admin.call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 6})
    assert status == 202, body
    wait_until(lambda: stack.admin.ok("GET", f"admin/stream-prefixes/{PREFIX}")["migration"],
               lambda m: not m["active"], timeout_s=60, what="the strict migration completes")  # fmt: skip
    handled = len(logs.refresh())
    wait_until(lambda: len(logs.refresh()) - handled, lambda n: n >= 300, what="traffic on version 2")
    report = finish(producer, logs)
    assert (report.lost, report.overlaps) == ([], []), report.summary()
    rows = logs.rows
    assert {r["routing_version"] for r in rows} == {1, 2}
    if ordering == "key":
        assert report.out_of_order == [], report.summary()
        assert reorders_across_versions(rows) == []
    assert f"ordering {ordering}" in stack.members["a"].output()
    wait_until(stack.describe, lambda v: stable_and_balanced(v, 2, 6), timeout_s=30, what="6 shards, stable")
