"""A real run_member's metrics port and its JSON log lines (docs/metrics.md): the figures match what it
did, and its log records name member, group, prefix and shard."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

from config.embedded_redis import free_port
from consumers.producer import Producer
from tests.polling import wait_until

from .stack import GROUP, PREFIX, Stack, live, stable_and_balanced

SHARDS = 2
ENTRIES = 30


def scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("rsc_member") and sample.labels.get("consumer_group") == GROUP:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def test_a_members_metrics_and_json_logs(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    stack.create_group(shard_count=SHARDS, heartbeat_interval_ms=200, lease_ttl_ms=2_000)
    port = free_port()
    member = stack.start_member(
        "m0", RSC_MEMBER_METRICS_PORT=str(port), LOG_FORMAT="json", E2E_HANDLED_LOG=""
    )
    view = wait_until(stack.describe, lambda v: stable_and_balanced(v, 1, SHARDS), what="m0 owns both shards")
    (described,) = live(view)

    producer = Producer(redis.Redis.from_url(stack.redis.url))
    for index in range(ENTRIES):
        producer.send(PREFIX, f"key-{index}", {"n": index})
    poison = producer.send(PREFIX, "poisoned", {"poison": True})  # its handler raises (stays pending)
    figures = wait_until(
        lambda: scrape(port),
        lambda f: (
            f.get("rsc_member_handled_total", 0) >= ENTRIES and f.get("rsc_member_failed_total", 0) >= 1
        ),
        what="the member's metrics count every entry",
    )
    assert figures["rsc_member_handled_total"] == ENTRIES
    assert figures["rsc_member_failed_total"] == 1
    assert figures["rsc_member_handler_seconds_count"] == ENTRIES + 1
    assert figures["rsc_member_effective_concurrency"] == 1
    assert figures["rsc_member_shards"] == SHARDS
    assert figures["rsc_member_rebalances_total"] >= 1
    assert figures.get("rsc_member_fences_total", 0) == 0

    records: list[dict[str, Any]] = []
    for line in member.output().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    mine = [r for r in records if r.get("member_id") == described["member_id"]]
    assert mine, member.output()[-2000:]
    assert all(r["consumer_group"] == GROUP and r["stream_prefix"] == PREFIX for r in mine)
    # the handler's failure, logged on its shard's thread, names that shard
    (failure,) = [r for r in mine if "shard" in r and r["level"] == "ERROR"]
    assert failure["shard"] == str(poison.shard), failure
