"""Assertion helpers of the end-to-end tests: rebalance watching, pending-entry snapshots, reports."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from coordinator.protocol.model import Shard
from rsc_redis.keys import stream_key

from .checker import Report, check
from .conftest import keys_for_every_shard
from .stack import (
    GROUP,
    PREFIX,
    HandledLogs,
    Proc,
    ProducerLoop,
    Stack,
    live,
    stable_and_balanced,
    wait_until,
)

SHARDS = 6  # of the group start_group() creates


def logged_since(proc: Proc, offset: int, text: str) -> bool:
    return text in proc.output()[offset:]


def start_group(
    stack: Stack, producers: Callable[..., ProducerLoop], lease_ttl_ms: int
) -> tuple[ProducerLoop, HandledLogs, list[Proc]]:
    """The group of the coordinator outage and overload tests: SHARDS shards, three members consuming
    every shard (150 entries/s spread evenly), heartbeat interval 200 ms, revocation timeout 5 s."""
    stack.create_group(
        shard_count=SHARDS, lease_ttl_ms=lease_ttl_ms, heartbeat_interval_ms=200, revocation_timeout_ms=5000
    )
    procs = [stack.start_member(f"m{i}") for i in range(3)]
    wait_until(lambda: stable_and_balanced(stack.describe(), 3, SHARDS), what="three members, stable")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=150, batch=6)
    logs = HandledLogs(stack.handled_dir)
    wait_until(lambda: all(logs.by(p.name.removeprefix("member-")) for p in procs), what="all consume")
    return producer, logs, procs


@dataclass
class Rebalance:
    """What the test saw of one rebalance through the describe endpoint, polled every few ms."""

    before: dict[str, Any]
    after: dict[str, Any]
    views: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (monotonic ns, view)
    started_ns: int = 0  # first poll that saw the group epoch move
    stable_ns: int = 0  # first poll that saw it STABLE and balanced again

    def kept(self) -> dict[str, dict[str, int]]:
        """member id -> {shard: shard assignment epoch} of the shards it owned before and after."""
        after = {m["member_id"]: m for m in live(self.after)}
        result = {}
        for member in live(self.before):
            if member["member_id"] in after:
                old = {a["shard"]: a["assignment_epoch"] for a in member["current_assignment"]}
                new = {a["shard"] for a in after[member["member_id"]]["current_assignment"]}
                result[member["member_id"]] = {s: e for s, e in old.items() if s in new}
        return result


def watch_rebalance(
    stack: Stack,
    action: Callable[[], None],
    *,
    members: int,
    shards: int,
    timeout_s: float = 60.0,
    prefix: str = PREFIX,
    group: str = GROUP,
) -> Rebalance:
    """Run ``action`` (start or stop members) and poll describe until the group is STABLE and balanced
    with ``members`` live members again."""
    before = stack.describe(prefix, group)
    action()
    result = Rebalance(before=before, after=before)
    deadline = time.monotonic() + timeout_s
    while True:
        now_ns = time.monotonic_ns()
        view = stack.describe(prefix, group)
        result.views.append((now_ns, view))
        if not result.started_ns and view["group_epoch"] > before["group_epoch"]:
            result.started_ns = now_ns
        if result.started_ns and stable_and_balanced(view, members, shards):
            result.stable_ns, result.after = now_ns, view
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no STABLE group of {members} members within {timeout_s} s: {view}")
        time.sleep(0.02)


def ref(row: dict[str, Any]) -> tuple[str, str]:
    """An entry's identity: (shard, entry id). Entry ids alone repeat across shards (one pipeline appends
    to several streams within the same millisecond)."""
    return (row["shard"], row["entry_id"])


def pending_for(stack: Stack, member_id: str, shards: Iterable[str]) -> set[tuple[str, str]]:
    """(shard, entry id) of the entries pending (read, not acked) for ``member_id`` on ``shards``."""
    client = stack.client()
    found: set[tuple[str, str]] = set()
    for shard in shards:
        key = stream_key(PREFIX, Shard.parse(shard))
        for item in client.xpending_range(key, GROUP, "-", "+", 10_000, consumername=member_id):
            found.add((shard, item["message_id"].decode()))
    return found


def freeze_holding_unhandled(
    stack: Stack,
    proc: Proc,
    member_id: str,
    shards: list[str],
    logs: HandledLogs,
    *,
    at_least: int,
    on_every_shard: bool = False,
) -> tuple[int, set[tuple[str, str]]]:
    """SIGSTOP ``proc`` at a moment when it holds at least ``at_least`` read-but-unhandled entries (its
    pending list minus what its handler logged) - on each of ``shards`` if ``on_every_shard``. Returns
    (the monotonic ns once every thread of it has stopped, its pending list).

    The pending list is read while the process is stopped, so it is exactly what it had read and not
    acked. If it holds too few, it is resumed at once (far below its lease) and tried again."""
    for _attempt in range(500):
        proc.signal(signal.SIGSTOP)
        proc.wait_stopped()  # every thread: none may start a handler call after stopped_ns
        stopped_ns = time.monotonic_ns()
        pending = pending_for(stack, member_id, shards)
        unhandled = pending - {ref(r) for r in logs.refresh() if r["pid"] == proc.pid}
        counts = [len([e for e in unhandled if e[0] == shard]) for shard in shards]
        if (min(counts) if on_every_shard else sum(counts)) >= at_least:
            return stopped_ns, pending
        proc.signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"{proc} never held {at_least} unhandled entries")


def finish(
    producer: ProducerLoop, logs: HandledLogs, timeout_s: float = 60.0, *, redis_stayed_up: bool = True
) -> Report:
    """Stop producing, wait until every produced event was handled, return the checker's report."""
    producer.stop()
    if redis_stayed_up:
        assert producer.failures == 0, "a send raised: Redis stayed up, so none should"
    logs.wait_all_handled(producer.produced, timeout_s=timeout_s)
    return check(producer.produced, logs.rows)


def handled_between(
    rows: Iterable[dict[str, Any]], start_ns: int, end_ns: int, *, pid: int | None = None
) -> list[dict[str, Any]]:
    return [r for r in rows if start_ns <= r["start_ns"] <= end_ns and (pid is None or r["pid"] == pid)]


def fence_times_ms(proc: Proc) -> list[int]:
    """Wall-clock ms of every "fenced at epoch" line the member process logged (its own log format:
    ``2026-11-29 13:11:21,758 WARNING consumers.member: ...``)."""
    times = []
    for line in proc.output().splitlines():
        if "fenced at epoch" in line:
            # logging's asctime is local time; a naive datetime's timestamp() reads it as such.
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            times.append(int(stamp.timestamp() * 1000))
    return times


def unexplained_duplicates(
    report: Report, rows: list[dict[str, Any]], procs: Iterable[Proc], allowed: Iterable[str] = ()
) -> list[str]:
    """Duplicates that neither ``allowed`` (event ids) nor a fence explain. At-least-once makes one when
    a member handled an entry and then lost the right to ack it: its first handler was fenced (lease
    ended, or a heartbeat answer lost twice) after that handling began, so the next owner (or itself,
    rejoined) handled it again."""
    fences = {p.pid: fence_times_ms(p) for p in procs}
    first: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["start_ns"]):
        first.setdefault(row["event_id"], row)
    allowed = set(allowed)
    unexplained = []
    for event_id in report.duplicates:
        row = first[event_id]
        started_ms = row["wall_ns"] // 1_000_000
        if event_id not in allowed and not any(f >= started_ms for f in fences.get(row["pid"], ())):
            unexplained.append(event_id)
    return unexplained


def pid_of(view_member: dict[str, Any]) -> int:
    return int(view_member["client"]["pid"])
