"""The delivery checker itself: it must find each kind of fault it claims to find."""

from __future__ import annotations

from typing import Any

from .checker import check


def produced(eid: str, key: str = "k", seq: int = 0, version: int = 1) -> dict[str, Any]:
    return {"event_id": eid, "partition_key": key, "routing_version": version, "seq": seq}


def handled(
    eid: str, member: str, start: int, end: int, key: str = "k", seq: int = 0, shard: str = "v1:0"
) -> dict[str, Any]:
    return {
        "event_id": eid,
        "partition_key": key,
        "routing_version": 1,
        "seq": seq,
        "shard": shard,
        "member_id": member,
        "start_ns": start,
        "end_ns": end,
    }


def test_clean_run() -> None:
    report = check(
        [produced("a", seq=0), produced("b", seq=1)],
        [handled("a", "m1", 0, 1), handled("b", "m1", 2, 3, seq=1)],
    )
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], [])


def test_finds_lost_duplicated_out_of_order_and_overlapping() -> None:
    report = check(
        [produced("a", seq=0), produced("b", seq=1), produced("c", seq=2)],
        [
            handled("b", "m1", 0, 10, seq=1),
            handled("a", "m2", 5, 6, seq=0),  # overlaps m1 on the same shard, and seq 0 after seq 1
            handled("b", "m2", 20, 21, seq=1),  # re-delivery: a duplicate, not out of order
        ],
    )
    assert report.lost == ["c"]
    assert report.duplicates == {"b": 2}
    assert report.out_of_order == [("k", 1, 0, 1)]
    assert report.overlaps == [("v1:0", "m1", "m2")]
    assert "lost=1" in report.summary()


def test_different_shards_may_run_in_parallel() -> None:
    report = check(
        [produced("a"), produced("b", key="j")],
        [handled("a", "m1", 0, 10), handled("b", "m2", 1, 5, key="j", shard="v1:1")],
    )
    assert report.overlaps == []
