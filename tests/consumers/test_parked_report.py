"""Parked keys reach the coordinator (issue 27): a member reports the keys parked on its shards with a
heartbeat when they change, and ``describe`` (the operator pages' source) shows them for live members
only (coordinator/store/parked_reports.py, docs/protocol.md section 3)."""

from __future__ import annotations

import threading
from typing import Any

from consumers.member import member as member_module
from consumers.runtime import Runtime
from coordinator.store import parked_reports
from tests.consumers.harness import GROUP, PREFIX, Cluster, Recorder, eventually

WIDE = Runtime(max_concurrency=8, batch_size=8)


def test_the_member_and_the_coordinator_agree_on_the_limits() -> None:
    assert member_module.PARKED_KEYS_REPORTED == parked_reports.MAX_KEYS_PER_SHARD
    assert member_module.PARKED_KEY_CHARS == parked_reports.MAX_KEY_CHARS
    assert member_module.PARKED_SHARDS_REPORTED == parked_reports.MAX_SHARDS


def test_describe_shows_the_parked_keys_until_they_go_on(cluster: Cluster) -> None:
    bad = [cluster.key_for(0, n) for n in range(2)]
    cured = threading.Event()

    def handler(entry: Any) -> None:
        if entry.payload.get("fail") and not cured.is_set():
            raise RuntimeError("not yet")

    m = cluster.member(
        Recorder(handler), runtime=WIDE, ordering="key", on_error="redeliver", max_deliveries=1000,
        redeliver_backoff_ms=200,
    )  # fmt: skip
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    assert cluster.describe()["parked_keys"] == {}
    for key in bad:
        cluster.send(key, fail=True)
    parked = eventually(
        lambda: cluster.describe()["parked_keys"].get(m.member_id), what="the parked keys reported"
    )
    eventually(
        lambda: cluster.describe()["parked_keys"][m.member_id] == {"v1:0": {"count": 2, "keys": sorted(bad)}},
        what="both keys reported",
    )
    assert set(parked) == {"v1:0"}
    cured.set()
    eventually(lambda: cluster.describe()["parked_keys"] == {}, what="the report cleared once they go on")


def test_a_report_outlives_no_member(cluster: Cluster) -> None:
    """The report of a member that left is not shown, and is deleted when read."""
    m = cluster.member(Recorder(), runtime=WIDE, ordering="key", on_error="redeliver")
    eventually(lambda: len(m.running_shards) == 4, what="the member runs its shards")
    # Its first renewal reports "nothing parked" once (its report is unknown until then); after that it
    # sends nothing more while nothing changes, so this record of the test's stays.
    eventually(lambda: m._parked_reported is not None, what="the member's first report accepted")
    cluster.store.parked.record(PREFIX, GROUP, m.member_id, {"v1:0": {"count": 1, "keys": ["k"]}})
    cluster.store.parked.record(PREFIX, GROUP, "gone-member", {"v1:1": {"count": 1, "keys": ["x"]}})
    view = cluster.describe()["parked_keys"]
    assert view == {m.member_id: {"v1:0": {"count": 1, "keys": ["k"]}}}
    assert cluster.client.hkeys(f"rsc:{{{PREFIX}}}:parked") == [f"{GROUP}\n{m.member_id}".encode()]
