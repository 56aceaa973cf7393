"""End to end on a Redis Cluster: the coordinator API (granian, config.serve), the tick (Celery with beat,
its broker a separate plain Redis) and real ``run_member`` processes, all given
``REDIS_URL=redis+cluster://...``.

Then several coordinators at once: two API processes and two tick runners (Celery beat and
``manage.py run_tick``) against one cluster, members split between the APIs, one member SIGKILLed
(both tick runners race to expire it): at every observation one owner per shard and no epoch ever
decreases; at the end nothing lost, nothing handled twice, no two members on one shard at once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import LocalCluster
from tests.cluster.stack import ClusterProducerLoop, ClusterStack
from tests.e2e.conftest import TIMINGS, keys_for_every_shard
from tests.e2e.helpers import finish
from tests.e2e.stack import HandledLogs, live, owners, stable_and_balanced, wait_until

SHARDS = 6


@pytest.fixture
def stack(local_cluster: LocalCluster, cluster_url: str, tmp_path: Path) -> Iterator[ClusterStack]:
    s = ClusterStack(local_cluster, tmp_path / "stack", member_env={"E2E_HANDLER_SLEEP_MS": "1"})
    try:
        yield s.start()
    finally:
        s.close()


def test_members_consume_every_entry_once_through_a_cluster_and_a_resharding(stack: ClusterStack) -> None:
    stack.create_group(shard_count=SHARDS, **TIMINGS)
    producer = ClusterProducerLoop(
        stack.cluster.url, "e2e", keys=keys_for_every_shard(SHARDS), rate_per_s=300
    )
    producer.start()
    logs = HandledLogs(stack.handled_dir)
    stack.start_member("m0")
    stack.start_member("m1")
    wait_until(lambda: stable_and_balanced(stack.describe(), 2, SHARDS), timeout_s=60, what="two members")
    time.sleep(0.5)
    # Resharding under load (strict ordering): the old version drains and retires, on the cluster.
    stack.admin.ok("POST", "admin/stream-prefixes/e2e/shard-count", {"shard_count": SHARDS + 2})
    wait_until(
        lambda: stack.admin.ok("GET", "admin/stream-prefixes/e2e")["migration"],
        lambda m: not m["active"], timeout_s=60, what="the old version drained and retired",
    )  # fmt: skip
    wait_until(lambda: stable_and_balanced(stack.describe(), 2, SHARDS + 2), timeout_s=60, what="resharded")
    stack.members["m1"].signal(signal.SIGTERM)  # a graceful leave: m0 takes every shard
    wait_until(lambda: stable_and_balanced(stack.describe(), 1, SHARDS + 2), timeout_s=60, what="m0 alone")
    report = finish(producer, logs)
    assert report.produced > 300, report.summary()
    assert {r["routing_version"] for r in producer.produced} == {1, 2}
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], []), (
        report.summary()
    )


class Observer:
    """Polls the group from the store (every coordinator writes there) and checks the invariants at
    each observation: one owner per shard, group / assignment / member epochs never decrease."""

    def __init__(self, stack: ClusterStack) -> None:
        self.stack = stack
        self.views = 0
        self.problems: list[str] = []
        self._epochs: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                view = self.stack.describe_from_store()
            except Exception as e:  # the store answers throughout; note anything else
                self.problems.append(f"describe failed: {e!r}")
                continue
            self.check(view)
            time.sleep(0.02)

    def check(self, view: dict[str, Any]) -> None:
        self.views += 1
        try:
            owners(view)  # asserts one owner per shard among live members
        except AssertionError as e:
            self.problems.append(str(e)[:300])
        seen = {"group": view["group_epoch"], "assignment": view["assignment_epoch"]}
        seen.update({f"member {m['member_id']}": m["member_epoch"] for m in view["members"]})
        for name, epoch in seen.items():
            if epoch < self._epochs.get(name, 0):
                self.problems.append(f"{name} epoch went back from {self._epochs[name]} to {epoch}")
            self._epochs[name] = max(epoch, self._epochs.get(name, 0))


def test_two_coordinators_and_two_tick_runners_keep_the_invariants(stack: ClusterStack) -> None:
    second = stack.start_second_api()
    stack.start_tick_loop(interval_ms=150)
    stack.create_group(shard_count=SHARDS, **TIMINGS)
    producer = ClusterProducerLoop(
        stack.cluster.url, "e2e", keys=keys_for_every_shard(SHARDS), rate_per_s=300
    )
    producer.start()
    logs = HandledLogs(stack.handled_dir)
    with Observer(stack) as observer:
        stack.start_member("a0")
        stack.start_member("b0", RSC_COORDINATOR_URL=f"http://127.0.0.1:{second}")
        stack.start_member("b1", RSC_COORDINATOR_URL=f"http://127.0.0.1:{second}")
        wait_until(lambda: stable_and_balanced(stack.describe(), 3, SHARDS), timeout_s=60, what="3 members")
        stack.members["b1"].kill()  # its lease ends; both tick runners race to expire it
        wait_until(
            lambda: stable_and_balanced(stack.describe_from_store(), 2, SHARDS), timeout_s=60, what="expired"
        )
        stack.start_member("a1")
        wait_until(lambda: stable_and_balanced(stack.describe(), 3, SHARDS), timeout_s=60, what="a1 joined")
        report = finish(producer, logs)
    assert observer.views > 50 and observer.problems == [], observer.problems[:5]
    view = stack.describe()
    assert len(live(view)) == 3
    expired = [m for m in view["members"] if m["state"] == "EXPIRED"]
    assert len(expired) == 1, view["members"]
    # A SIGKILLed member may have handled entries it could not ack: those are handled again by the next
    # owner (at-least-once); nothing else may be duplicated, and nothing is lost or overlapping.
    assert report.lost == [] and report.out_of_order == [] and report.overlaps == [], report.summary()
