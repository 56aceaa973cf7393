"""/metrics under the API server (granian, config/serve.py) with several worker processes:
prometheus-client's multiprocess mode sums every worker's heartbeat figures (coordinator/metrics.py),
whichever worker answers the scrape."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .stack import GROUP, MEMBER_TOKEN, PREFIX, Api, Stack

METRICS_TOKEN = "e2e-metrics-token-9f8e7d6c5b4a39281706"


def scrape(port: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200, body
    finally:
        conn.close()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "rsc_heartbeat_seconds_count":
                counts[sample.labels["path"]] = sample.value
    return counts


def test_every_workers_heartbeats_are_counted(make_stack: Callable[..., Stack], tmp_path: Path) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    stack = make_stack(
        api_workers=2,
        api_threads=2,
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(directory),
            "RSC_METRICS_TOKENS": METRICS_TOKEN,
            "RSC_HEARTBEAT_FLOOR_MS": "0",  # one member id, 60 heartbeats back to back
        },
    )
    stack.create_group(shard_count=2, heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    member = Api(stack.api_port, token=MEMBER_TOKEN)
    path = f"groups/{PREFIX}/{GROUP}/heartbeat"
    epoch = member.ok("POST", path, {"member_id": "m1", "member_epoch": 0, "capacity": 1})["member_epoch"]
    sent = 1
    # A fresh connection each; which worker accepts is the kernel's choice, so send until both have
    # served heartbeats (each worker writes its own histogram file).
    while sent < 61 or len(list(directory.glob("histogram_*.db"))) < 2:
        assert sent < 1_000, "one worker accepted every connection"
        member.ok("POST", path, {"member_id": "m1", "member_epoch": epoch})
        sent += 1
    for _ in range(4):  # whichever worker answers, the sum is the same
        counts = scrape(stack.api_port)
        assert counts.get("fast", 0) + counts.get("full", 0) == sent, counts
