"""End-to-end benchmark: the whole product as real processes on one private Redis (tests/e2e/stack.py).

    python bench/e2e_bench.py [--out FILE] [--messages N] [--shards S] [--batch-size B]

One run, one machine, one private Redis, one coordinator API (gunicorn), one tick (Celery worker + beat):

1. ``producer``: ``consumers.producer.Producer`` (routing + the fenced ``produce.lua``) against raw redis-py
   XADD of the same envelope fields, one at a time and in batches (``send_batch`` vs a pipeline);
2. ``throughput``: end-to-end messages per second - produce, fenced read, no-op handler, fenced ack - with
   1 and with 4 ``run_member`` processes, next to a raw XADD / XREADGROUP / XACK loop with the same
   batch size, the same number of consumer processes and the same shards. Timed from the first send
   to the moment Redis shows every entry delivered and acked;
3. ``latency``: produce-to-handle p50 / p99 (the producer's wall clock in the payload, the handler's at
   its start) at a steady rate with 4 members;
4. ``kill_9_recovery``: ``kill -9`` of one of those members, then the time until each of its shards is
   handled again by another member (lease expiry by the tick, reassignment, claim of its pending entries);
5. ``rebalance_3_to_6``: 3 more members join a group of 3; time until the group is STABLE and balanced,
   from the launch of the new processes and from the first join the coordinator saw.

Everything is measured here, nothing is typed in; every wait is bounded. The whole run takes a couple of
minutes. Figures from a loaded 2-core CI box are noisy: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import redis  # noqa: E402

from consumers.dataplane.envelope import encode_event  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from coordinator.protocol.model import Shard  # noqa: E402
from coordinator.store.codec import stream_key  # noqa: E402
from tests.e2e.helpers import watch_rebalance  # noqa: E402
from tests.e2e.stack import (  # noqa: E402
    HandledLogs,
    ProducerLoop,
    Stack,
    live,
    stable_and_balanced,
    wait_until,
)

LEASE_TTL_MS, HEARTBEAT_INTERVAL_MS, TICK_INTERVAL_MS = 2000, 200, 200


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rounded(d: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in d.items()}


# ---------------------------------------------------------------------------------------------- 1. producer


def bench_producer(stack: Stack, seconds: float, batch: int) -> dict[str, Any]:
    prefix = "pbench"
    stack.create_group(prefix, "pbench-g", shard_count=8, **timings())
    client = redis.Redis.from_url(stack.redis.url)
    producer = Producer(client)
    keys = [f"k{i}" for i in range(64)]
    raw_keys = [f"raw:{{{prefix}}}:{i}" for i in range(8)]

    def fields(i: int) -> dict[str, Any]:
        event = encode_event(keys[i % 64], {"seq": i})
        return {
            "event_id": event.event_id,
            "partition_key": event.partition_key,
            "content_type": event.content_type,
            "payload": event.payload,
            "headers": event.headers,
            "routing_version": b"1",
            "produced_at_ms": b"0",
        }

    def rate(step: Any, per_step: int) -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step(n)
            n += 1
        return n * per_step / (time.perf_counter() - t0)

    def raw_batch(n: int) -> None:
        pipe = client.pipeline(transaction=False)
        for i in range(batch):
            pipe.xadd(raw_keys[i % 8], fields(n * batch + i))
        pipe.execute()

    result = {
        "producer_send_per_s": rate(lambda n: producer.send(prefix, keys[n % 64], {"seq": n}), 1),
        "raw_xadd_per_s": rate(lambda n: client.xadd(raw_keys[n % 8], fields(n)), 1),
        f"producer_send_batch_{batch}_msgs_per_s": rate(
            lambda n: producer.send_batch(prefix, [(keys[i % 64], {"seq": i}) for i in range(batch)]), batch
        ),
        f"raw_pipelined_xadd_{batch}_msgs_per_s": rate(raw_batch, batch),
    }
    client.close()
    return rounded(result)


# ---------------------------------------------------------------------------------------------- 2. throughput


def drained(client: redis.Redis, keys: list[str], group: str) -> bool:
    """Every entry of every key delivered to ``group`` and acked."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
        pipe.xinfo_groups(key)
    replies = pipe.execute()
    for stream, groups in zip(replies[::2], replies[1::2], strict=True):
        [info] = [g for g in groups if g["name"] in (group, group.encode())]
        if info["pending"] or info["last-delivered-id"] != stream["last-generated-id"]:
            return False
    return True


def produce_and_drain(
    client: redis.Redis, send: Any, messages: int, chunk: int, keys: list[str], group: str
) -> float:
    """Send ``messages`` in chunks as fast as possible; seconds until Redis shows all of them acked."""
    t0 = time.perf_counter()
    for start in range(0, messages, chunk):
        send(start, min(chunk, messages - start))
    wait_until(lambda: drained(client, keys, group), timeout_s=300, interval_s=0.005, what="drained")
    return time.perf_counter() - t0


def e2e_throughput(stack: Stack, members: int, shards: int, messages: int, batch_size: int) -> float:
    prefix, group = f"tput{members}", "tput"
    stack.create_group(prefix, group, shard_count=shards, **timings())
    procs = [
        stack.start_member(
            f"tput{members}-{i}",
            E2E_STREAM_PREFIX=prefix,
            E2E_CONSUMER_GROUP=group,
            E2E_HANDLED_LOG="",  # no-op handler
            E2E_BATCH_SIZE=str(batch_size),
        )
        for i in range(members)
    ]
    try:
        wait_until(
            lambda: stable_and_balanced(stack.describe(prefix, group), members, shards),
            timeout_s=60,
            what=f"{members} members stable",
        )
        client = redis.Redis.from_url(stack.redis.url)
        producer = Producer(client)
        keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(shards)]

        def send(start: int, n: int) -> None:
            producer.send_batch(prefix, [(f"k{(start + i) % 256}", {"seq": start + i}) for i in range(n)])

        elapsed = produce_and_drain(client, send, messages, 100, keys, group)
        client.close()
        return messages / elapsed
    finally:
        for proc in procs:
            proc.kill()


def _raw_consumer(
    url: str, keys: list[str], group: str, name: str, batch: int, ready: Any, stop: Any
) -> None:
    """The raw loop of one consumer process: per shard XREADGROUP COUNT batch ... > then XACK, polling
    with the runtime's idle backoff (2 ms doubling to 50 ms per empty shard)."""
    client = redis.Redis.from_url(url)
    idle = dict.fromkeys(keys, 0.0)
    due = dict.fromkeys(keys, 0.0)
    ready.set()
    while not stop.is_set():
        now = time.monotonic()
        for key in keys:
            if due[key] > now:
                continue
            reply = client.xreadgroup(group, name, {key: ">"}, count=batch)
            entries = reply[0][1] if reply else []
            if entries:
                client.xack(key, group, *[entry_id for entry_id, _ in entries])
                idle[key] = 0.0
            else:
                idle[key] = min(max(idle[key] * 2, 0.002), 0.05)
                due[key] = now + idle[key]
        time.sleep(max(0.0, min(due.values()) - time.monotonic()))


def raw_throughput(url: str, consumers: int, shards: int, messages: int, batch_size: int) -> float:
    group = "raw"
    keys = [f"rawtput{consumers}:{{x}}:{i}" for i in range(shards)]
    client = redis.Redis.from_url(url)
    for key in keys:
        client.xgroup_create(key, group, id="$", mkstream=True)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    readies, procs = [], []
    for c in range(consumers):
        ready = ctx.Event()
        mine = keys[c::consumers]
        proc = ctx.Process(target=_raw_consumer, args=(url, mine, group, f"c{c}", batch_size, ready, stop))
        proc.start()
        readies.append(ready)
        procs.append(proc)
    try:
        for ready in readies:
            assert ready.wait(60), "raw consumer did not start"
        pad = b"x" * 40

        def send(start: int, n: int) -> None:
            pipe = client.pipeline(transaction=False)
            for i in range(start, start + n):
                pipe.xadd(
                    keys[i % shards], {"event_id": str(i), "partition_key": f"k{i % 256}", "payload": pad}
                )
            pipe.execute()

        return messages / produce_and_drain(client, send, messages, 100, keys, group)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        client.close()


def bench_throughput(stack: Stack, shards: int, messages: int, batch_size: int) -> dict[str, Any]:
    result: dict[str, Any] = {"shards": shards, "messages": messages, "batch_size": batch_size}
    for members in (1, 4):
        e2e = e2e_throughput(stack, members, shards, messages, batch_size)
        raw = raw_throughput(stack.redis.url, members, shards, messages, batch_size)
        result[f"{members}_member"] = rounded(
            {"e2e_msgs_per_s": e2e, "raw_loop_msgs_per_s": raw, "e2e_over_raw": e2e / raw}
        )
        print(f"throughput, {members} member(s): e2e {e2e:.0f}/s, raw {raw:.0f}/s", flush=True)
    return result


# ------------------------------------------------------------------------------- 3-4. latency, kill -9


def bench_latency_and_kill(stack: Stack, shards: int, seconds: float, rate_per_s: float) -> dict[str, Any]:
    prefix, group = "lat", "lat-g"
    stack.create_group(prefix, group, shard_count=shards, **timings())
    procs = [
        stack.start_member(f"lat-{i}", E2E_STREAM_PREFIX=prefix, E2E_CONSUMER_GROUP=group) for i in range(4)
    ]
    wait_until(
        lambda: stable_and_balanced(stack.describe(prefix, group), 4, shards), timeout_s=60, what="4 stable"
    )
    logs = HandledLogs(stack.handled_dir)
    producer = ProducerLoop(
        stack.redis.url, prefix, keys=256, rate_per_s=rate_per_s, batch=5, stamp=True
    ).start()
    try:
        time.sleep(seconds)  # the measurement window: steady production
        produced = producer.snapshot()
        logs.wait_all_handled(produced, timeout_s=60)
        first: dict[str, dict[str, Any]] = {}
        for row in sorted(logs.rows, key=lambda r: r["start_ns"]):
            first.setdefault(row["event_id"], row)
        latencies = [
            (first[p["event_id"]]["wall_ns"] - first[p["event_id"]]["sent_ns"]) / 1e6 for p in produced
        ]
        latency = rounded(
            {
                "messages": len(latencies),
                "rate_per_s": rate_per_s,
                "members": 4,
                "p50_ms": percentile(latencies, 0.50),
                "p99_ms": percentile(latencies, 0.99),
                "max_ms": max(latencies),
                "mean_ms": statistics.fmean(latencies),
            }
        )
        print(f"latency: {latency}", flush=True)

        view = stack.describe(prefix, group)
        victim = procs[1]
        [member] = [m for m in live(view) if m["client"]["pid"] == victim.pid]
        victim_shards = [a["shard"] for a in member["current_assignment"]]
        victim.signal(signal.SIGKILL)
        killed_ns = time.monotonic_ns()

        def recovered() -> dict[str, int]:
            rows = logs.refresh()
            found: dict[str, int] = {}
            for row in rows:
                if row["shard"] in victim_shards and row["pid"] != victim.pid and row["start_ns"] > killed_ns:
                    found[row["shard"]] = min(found.get(row["shard"], row["start_ns"]), row["start_ns"])
            return found

        found = wait_until(recovered, lambda f: len(f) == len(victim_shards), timeout_s=60, what="recovered")
        per_shard = {shard: (ns - killed_ns) / 1e6 for shard, ns in sorted(found.items())}
        kill = {
            "shards_of_victim": len(victim_shards),
            "per_shard_ms": {s: round(v, 1) for s, v in per_shard.items()},
            "max_ms": round(max(per_shard.values()), 1),
            "lease_ttl_ms": LEASE_TTL_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "tick_interval_ms": TICK_INTERVAL_MS,
        }
        print(f"kill -9 recovery: {kill}", flush=True)
        return {"latency": latency, "kill_9_recovery": kill}
    finally:
        producer.stop()
        for proc in procs:
            proc.kill()


# ---------------------------------------------------------------------------------------------- 5. rebalance


def bench_rebalance(stack: Stack, shards: int) -> dict[str, Any]:
    prefix, group = "conv", "conv-g"
    stack.create_group(prefix, group, shard_count=shards, **timings())
    env = {"E2E_STREAM_PREFIX": prefix, "E2E_CONSUMER_GROUP": group, "E2E_HANDLED_LOG": ""}
    procs = [stack.start_member(f"conv-{i}", **env) for i in range(3)]
    wait_until(lambda: stable_and_balanced(stack.describe(prefix, group), 3, shards), timeout_s=60, what="3")
    producer = ProducerLoop(stack.redis.url, prefix, keys=256, rate_per_s=300, batch=5).start()
    launched: list[int] = []
    try:

        def scale_out() -> None:
            launched.append(time.monotonic_ns())
            procs.extend(stack.start_member(f"conv-{i}", **env) for i in range(3, 6))

        rebalance = watch_rebalance(stack, scale_out, members=6, shards=shards, prefix=prefix, group=group)
        return rounded(
            {
                "shards": shards,
                "from_launch_ms": (rebalance.stable_ns - launched[0]) / 1e6,
                "from_first_join_ms": (rebalance.stable_ns - rebalance.started_ns) / 1e6,
                "group_epochs": rebalance.after["group_epoch"] - rebalance.before["group_epoch"],
            }
        )
    finally:
        producer.stop()
        for proc in procs:
            proc.kill()


def timings() -> dict[str, int]:
    return {"lease_ttl_ms": LEASE_TTL_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="also write the JSON result to this file")
    parser.add_argument("--messages", type=int, default=20_000, help="messages per throughput run")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="entries per read, e2e and raw alike")
    parser.add_argument("--producer-seconds", type=float, default=2.0)
    parser.add_argument("--latency-seconds", type=float, default=8.0)
    parser.add_argument("--latency-rate", type=float, default=500.0)
    args = parser.parse_args()

    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    with Stack(tick_interval_ms=TICK_INTERVAL_MS) as stack:
        results["redis"] = stack.client().info("server")["redis_version"]
        results["producer"] = bench_producer(stack, args.producer_seconds, 100)
        print(f"producer: {results['producer']}", flush=True)
        results["throughput"] = bench_throughput(stack, args.shards, args.messages, args.batch_size)
        results.update(bench_latency_and_kill(stack, args.shards, args.latency_seconds, args.latency_rate))
        results["rebalance_3_to_6"] = bench_rebalance(stack, 12)
        print(f"rebalance 3 -> 6: {results['rebalance_3_to_6']}", flush=True)
    results["bench_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
