"""The entry lifecycle end to end (docs/protocol.md sections 14-15, docs/operations.md), with real processes.

* A poison entry in the default mode stays pending and holds a strict resharding back; the operator sees
  which group, shard and entry on the API and the operator page, skips it (audited, with its fields), and
  the migration completes with per-key order intact for every other key.
* The opt-in policies: an entry tried ``max_deliveries`` times lands in the dead-letter stream; replayed,
  it is delivered again; nothing acknowledged is lost.
* Retention: produce and consume across two reshardings; the streams stay short, the retired versions'
  keys go, nothing is lost (a short form here, the long soak under ``make chaos``).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis

from consumers.producer import Producer
from tests.polling import wait_until

from .checker import check
from .conftest import TIMINGS, keys_for_every_shard
from .stack import GROUP, PREFIX, Stack, stable_and_balanced


def prefix_view(stack: Stack) -> dict[str, Any]:
    return dict(stack.admin.ok("GET", f"admin/stream-prefixes/{PREFIX}"))


def backlog_row(view: dict[str, Any], shard: str) -> dict[str, Any]:
    (row,) = [r for r in view["backlog"] if r["shard"] == shard]
    return row


def first_handlings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    first = []
    for row in sorted(rows, key=lambda r: r["start_ns"]):
        if row["event_id"] not in seen:
            seen.add(row["event_id"])
            first.append(row)
    return first


def strict_order_violations(rows: list[dict[str, Any]]) -> list[str]:
    """Keys whose new-version entries were handled before their old-version entries had all been (the
    strict mode's promise: per-key order across the shard-count change)."""
    by_key: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in first_handlings(rows):
        by_key[row["partition_key"]][row["routing_version"]].append(row)
    bad = []
    for key, versions in by_key.items():
        ordered = sorted(versions)
        for old, new in itertools.pairwise(ordered):
            if max(r["end_ns"] for r in versions[old]) > min(r["start_ns"] for r in versions[new]):
                bad.append(f"{key}: v{new} handled before v{old} was done")
    return bad


def audit_rows(stack: Stack, action: str) -> list[dict[str, Any]]:
    with sqlite3.connect(stack.dir / "coordinator.sqlite3") as db:
        rows = db.execute(
            "SELECT outcome, details, message FROM admin_ui_auditentry WHERE action = ?", (action,)
        ).fetchall()
    return [{"outcome": o, "details": json.loads(d), "message": m} for o, d, m in rows]


def render_group_page(stack: Stack) -> str:
    """The operator page, rendered in this process against the stack's Redis (a staff superuser)."""
    from django.contrib.auth import get_user_model
    from django.test import Client, override_settings
    from django.urls import reverse

    from coordinator.store import reset_store

    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client = Client()
    client.force_login(user)
    with override_settings(REDIS_URL=stack.redis.url):
        reset_store()
        try:
            response = client.get(reverse("admin:admin_ui_group_detail", args=[PREFIX, GROUP]))
        finally:
            reset_store()
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_a_poison_entry_holds_a_strict_resharding_until_the_operator_skips_it(
    make_stack: Any, producers: Any
) -> None:
    stack = make_stack()
    stack.create_group(shard_count=4, **TIMINGS)
    for name in ("a", "b"):
        stack.start_member(name)
    wait_until(stack.describe, lambda v: stable_and_balanced(v, 2, 4), timeout_s=30, what="2 members")
    loop = producers(stack.redis.url, keys=keys_for_every_shard(4), rate_per_s=200)

    poison = Producer(stack.client()).send(PREFIX, "poison-key", {"seq": 1, "poison": True})
    shard = str(poison.shard)
    wait_until(
        lambda: backlog_row(stack.describe(), shard), lambda r: r["pending"] >= 1 and r["oldest_pending_id"]
        == poison.entry_id, timeout_s=20, what="the poison entry pending on its shard",
    )  # fmt: skip

    stack.admin.call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 8})
    # Every other old shard drains; the poison's does not, and the migration says why.
    blocking = wait_until(
        lambda: prefix_view(stack)["migration"]["blocking"],
        lambda rows: [r["shard"] for r in rows] == [shard],
        timeout_s=30, what="only the poison's shard left to drain",
    )  # fmt: skip
    (row,) = blocking
    assert row["consumer_group"] == GROUP and row["owner"] and row["pending"] == 1
    assert row["oldest_pending_age_ms"] >= 0
    reshard = f"admin/stream-prefixes/{PREFIX}/shard-count"
    status, problem = stack.admin.call("POST", reshard, {"shard_count": 2})
    assert status == 409 and problem["code"] == "MIGRATION_IN_PROGRESS"
    assert problem["details"]["blocking"] == {GROUP: [shard]}
    assert GROUP in problem["detail"] and shard in problem["detail"]
    page = render_group_page(stack)
    assert shard in page and poison.entry_id in page

    status, body = stack.admin.call(
        "POST", f"admin/groups/{PREFIX}/{GROUP}/shards/{shard}/skip",
        {"entry_ids": [poison.entry_id], "reason": "poison: the handler cannot parse it"},
    )  # fmt: skip
    assert status == 200 and body["count"] == 1, body
    wait_until(
        lambda: prefix_view(stack)["migration"], lambda m: not m["active"], timeout_s=30,
        what="the migration completes once the poison entry is skipped",
    )  # fmt: skip

    loop.stop()
    produced = loop.snapshot()
    from .stack import HandledLogs

    logs = HandledLogs(stack.handled_dir)
    rows = logs.wait_all_handled(produced, timeout_s=60)
    report = check(produced, rows)
    assert report.lost == [] and report.out_of_order == [] and report.overlaps == [], report.summary()
    assert strict_order_violations(rows) == []
    assert poison.event_id not in {r["event_id"] for r in rows}  # skipped, never handled ...
    (audit,) = audit_rows(stack, "skip_entries")  # ... and not gone without a trace
    assert audit["outcome"] == "ok"
    skipped = audit["details"]["skipped"]
    assert [s["id"] for s in skipped] == [poison.entry_id]
    assert skipped[0]["fields"]["event_id"] == poison.event_id
    assert json.loads(skipped[0]["fields"]["payload"]) == {"seq": 1, "poison": True}
    assert audit["details"]["reason"] == "poison: the handler cannot parse it"


DLQ_GROUP = "e2e-dlq"


def test_opt_in_redelivery_dead_letters_an_entry_and_replay_delivers_it(
    make_stack: Any, producers: Any, tmp_path: Path
) -> None:
    cure = tmp_path / "cure"
    stack = make_stack(member_env={"E2E_CURE_FILE": str(cure), "E2E_CONSUMER_GROUP": DLQ_GROUP})
    stack.create_group(group=DLQ_GROUP, shard_count=2, **TIMINGS)
    stack.start_member("a", listener="e2e_dlq")
    wait_until(lambda: stack.describe(group=DLQ_GROUP), lambda v: stable_and_balanced(v, 1, 2), timeout_s=30,
               what="1 member, 2 shards")  # fmt: skip
    loop = producers(stack.redis.url, keys=keys_for_every_shard(2), rate_per_s=100)
    poison = Producer(stack.client()).send(PREFIX, "poison-key", {"seq": 1, "poison": True})

    path = f"admin/groups/{PREFIX}/{DLQ_GROUP}/dead-letters"
    letters = wait_until(lambda: stack.admin.ok("GET", path)["entries"], lambda e: len(e) == 1, timeout_s=30,
                         what="the poison entry dead-lettered")  # fmt: skip
    (letter,) = letters
    assert letter["source_id"] == poison.entry_id and letter["source_shard"] == str(poison.shard)
    assert letter["deliveries"] == 3 and "poison" in letter["error"]
    assert letter["event_id"] == poison.event_id
    attempts_log = stack.handled_log("a").with_suffix(".jsonl.attempts")
    attempts = [json.loads(line) for line in attempts_log.read_text().splitlines()]
    assert [a["event_id"] for a in attempts] == [poison.event_id] * 3  # tried exactly max_deliveries times
    row = backlog_row(stack.describe(group=DLQ_GROUP), str(poison.shard))
    assert row["pending"] == 0 or row["oldest_pending_id"] != poison.entry_id  # acked with the copy

    cure.touch()
    status, body = stack.admin.call("POST", f"{path}/replay", {"ids": [letter["id"]]})
    assert status == 200 and len(body["replayed"]) == 1, body
    assert stack.admin.ok("GET", path)["entries"] == []

    loop.stop()
    produced = [*loop.snapshot(), {"event_id": poison.event_id, "partition_key": "poison-key",
                                   "routing_version": 1, "seq": 1}]  # fmt: skip
    from .stack import HandledLogs

    rows = HandledLogs(stack.handled_dir).wait_all_handled(produced, timeout_s=60)
    report = check(produced, rows)
    assert report.lost == [] and report.overlaps == [], report.summary()


MEMORY_BOUND = 32 * 1024 * 1024


def stream_lengths(client: redis.Redis) -> dict[str, int]:
    keys = [k.decode() for k in client.scan_iter(match=f"rsc:{{{PREFIX}}}:v*", count=1000)]
    return {k: int(client.xlen(k)) for k in keys}


@pytest.mark.parametrize(
    "phase_s", [pytest.param(6, id="short"), pytest.param(60, id="soak", marks=pytest.mark.chaos)]
)
def test_retention_keeps_streams_bounded_across_two_reshardings(
    make_stack: Any, producers: Any, phase_s: int
) -> None:
    """Producing ~300 entries/s for three phases (4, 6, then 3 shards, strict): every stream is trimmed to
    what the group still needs, so the total stream length stays below ``bound`` (15 s of traffic, 4,500
    entries; the soak produces ~54,000) and Redis's used_memory within MEMORY_BOUND (32 MiB) of where it
    started; once both migrations complete the retired versions' keys are deleted; at the end every acked
    entry is trimmed and memory is back within 4 MiB; nothing is lost."""
    rate = 300
    bound = 15 * rate
    stack = make_stack(env={"RSC_RETENTION_INTERVAL_MS": "1000"})
    stack.create_group(shard_count=4, **TIMINGS)
    for name in ("a", "b"):
        stack.start_member(name)
    wait_until(stack.describe, lambda v: stable_and_balanced(v, 2, 4), timeout_s=30, what="2 members")
    client = stack.client()
    used_memory_before = int(client.info("memory")["used_memory"])
    loop = producers(stack.redis.url, keys=keys_for_every_shard(12, per_shard=2), rate_per_s=rate)
    samples: list[int] = []
    memory: list[int] = []

    def run_phase() -> None:
        deadline = time.monotonic() + phase_s
        while time.monotonic() < deadline:
            samples.append(sum(stream_lengths(client).values()))
            memory.append(int(client.info("memory")["used_memory"]))
            time.sleep(0.5)

    run_phase()
    for count in (6, 3):
        reshard = f"admin/stream-prefixes/{PREFIX}/shard-count"
        status, body = stack.admin.call("POST", reshard, {"shard_count": count})
        assert status == 202, body
        run_phase()
        wait_until(lambda: prefix_view(stack)["migration"], lambda m: not m["active"], timeout_s=60,
                   what=f"the migration to {count} shards completes")  # fmt: skip
    loop.stop()
    produced = loop.snapshot()
    from .stack import HandledLogs

    rows = HandledLogs(stack.handled_dir).wait_all_handled(produced, timeout_s=90)
    report = check(produced, rows)
    assert report.lost == [] and report.overlaps == [], report.summary()
    assert len(produced) > bound or phase_s < 60  # the soak produces far more than the bound
    print(  # the figures docs/operations.md quotes (pytest -s)
        f"retention: produced={len(produced)} peak_stream_length={max(samples)} bound={bound} "
        f"used_memory_before={used_memory_before} peak_used_memory={max(memory)}"
    )
    assert max(samples) <= bound, f"total stream length peaked at {max(samples)} (bound {bound})"
    # Redis memory stays within MEMORY_BOUND of where it started, however long production runs.
    assert max(memory) - used_memory_before < MEMORY_BOUND, (used_memory_before, max(memory))

    def retired_keys() -> list[str]:
        return [k for k in stream_lengths(client) if not k.startswith(f"rsc:{{{PREFIX}}}:v3:")]

    wait_until(retired_keys, lambda keys: keys == [], timeout_s=30, what="retired versions' streams deleted")
    wait_until(lambda: sum(stream_lengths(client).values()), lambda n: n == 0, timeout_s=30,
               what="every acked entry trimmed")  # fmt: skip
    used_memory_after = int(client.info("memory")["used_memory"])
    # Everything produced is gone from Redis again: memory is back near where it started (4 MiB slack for
    # allocator fragmentation and the consumer groups' own bookkeeping).
    assert used_memory_after - used_memory_before < 4 * 1024 * 1024, (used_memory_before, used_memory_after)
