"""Delivery checker: reads the produced log and the handled log and reports what went wrong.

Logs are JSON lines.
* produced: ``{"event_id", "partition_key", "routing_version", "seq"}``: one line per message whose XADD
  was acknowledged (``seq`` increases per partition key in produce order);
* handled: ``{"event_id", "partition_key", "routing_version", "shard", "seq", "member_id", "start_ns",
  "end_ns"}``: one line per handler invocation, written by the handler when it returns.

It reports
* ``lost``: produced, never handled (an acknowledged message that vanished);
* ``duplicates``: handled more than once (allowed by at-least-once, but counted);
* ``out_of_order``: a first handling of ``seq`` n after a first handling of a larger seq of the same key
  within one routing version;
* ``overlaps``: two different members handling the same shard at overlapping times (the single-owner
  rule seen from the handlers).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Report:
    produced: int = 0
    handled: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    out_of_order: list[tuple[str, int, int, int]] = field(default_factory=list)  # key, version, seq, after
    overlaps: list[tuple[str, str, str]] = field(default_factory=list)  # shard, member a, member b

    def summary(self) -> str:
        return (
            f"produced={self.produced} handled={self.handled} lost={len(self.lost)} "
            f"duplicates={len(self.duplicates)} out_of_order={len(self.out_of_order)} "
            f"overlaps={len(self.overlaps)}"
        )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def check(produced: Iterable[dict[str, Any]], handled: Iterable[dict[str, Any]]) -> Report:
    produced = list(produced)
    handled = sorted(handled, key=lambda h: (h["start_ns"], h["end_ns"]))
    report = Report(produced=len(produced), handled=len(handled))
    counts = Counter(h["event_id"] for h in handled)
    report.lost = sorted({p["event_id"] for p in produced} - set(counts))
    report.duplicates = {e: n for e, n in counts.items() if n > 1}

    highest: dict[tuple[str, int], int] = {}
    seen: set[str] = set()
    for h in handled:
        if h["event_id"] in seen:
            continue
        seen.add(h["event_id"])
        key = (h["partition_key"], h["routing_version"])
        if key in highest and h["seq"] < highest[key]:
            report.out_of_order.append((key[0], key[1], h["seq"], highest[key]))
        highest[key] = max(highest.get(key, h["seq"]), h["seq"])

    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h in handled:
        by_shard[h["shard"]].append(h)
    for shard, rows in by_shard.items():
        rows.sort(key=lambda h: h["start_ns"])
        latest_end: dict[str, int] = {}
        for h in rows:
            for member, end in latest_end.items():
                if member != h["member_id"] and end > h["start_ns"]:
                    report.overlaps.append((shard, member, h["member_id"]))
            latest_end[h["member_id"]] = max(latest_end.get(h["member_id"], 0), h["end_ns"])
    return report
