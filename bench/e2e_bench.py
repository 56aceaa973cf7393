"""End-to-end benchmark of the consumer side: the whole product as real processes on one private Redis.

    python bench/e2e_bench.py [--out FILE] [--messages N] [--reps R] [--batch-size B]

One run, one machine, one private Redis, one coordinator API (config.serve: granian), one tick (Celery
worker + beat) (tests/e2e/stack.py). The producer has its own benchmark (bench/producer_bench.py).

1. ``throughput``: at 8 and 64 shards, with 1 and 4 consumer processes, side by side on the SAME entries:

   * ``e2e``: ``run_member`` processes with a no-op handler (fenced fetch, handler, folded ack);
   * ``raw``: one process per member running a raw per-shard ``XREADGROUP COUNT b ... >`` + ``XACK`` loop
     (redis-py, the runtime's idle backoff), the shards split evenly between them;
   * ``faststream``: FastStream's Redis stream consumer-group subscriber, one per shard (when installed);
     it reads only the newest ``--faststream-messages`` entries of each backlog (it is too slow for all
     of them), and entries it leaves pending (it does, now and then) are reported, not counted.

   Every side has its own Redis consumer group on the same stream keys. Each repetition produces one
   backlog of N envelope entries with ``consumers.producer.Producer.send_batch`` while every consumer
   process is stopped (SIGSTOP), then lets one side at a time consume it (SIGCONT ... drained ...
   SIGSTOP). So each side reads exactly the same entries, produced the same way, none of the production
   is timed or counted, and nothing else runs while one side is measured. Per side: messages per
   second (SIGCONT to "every entry delivered and acked", as Redis reports it), client CPU (user + system
   time of the consumer processes, /proc) and Redis CPU (``INFO cpu`` of the server), both per message.
   The Redis figure includes everything the server did in the window: for ``e2e`` that is also the
   members' heartbeats and the tick, which are part of the product's cost. Ratios are per repetition,
   then the median of the repetitions.
2. ``latency``: produce-to-handle p50 / p99 with 4 members on 8 shards at half the measured maximum
   (the median ``e2e`` rate at 8 shards, 4 members), producing steadily from this process (the
   producer's wall clock in the payload, the handler's at its start).
3. ``idle``: one member holding 64 empty shards: its CPU over ``--idle-seconds``, as a share of a core.
4. ``kill_9_recovery`` and ``rebalance_3_to_6``: as before (kill -9 of a member under load; 3 members
   joining a group of 3).

Everything is measured here, nothing is typed in; every wait is bounded. Figures from a loaded 2-core
box are noisy: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import redis  # noqa: E402

from bench.heartbeat_bench import group_cpu_s  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from consumers.runtime import Runtime  # noqa: E402
from coordinator.protocol.model import Shard  # noqa: E402
from rsc_redis.keys import stream_key  # noqa: E402
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
# Throughput groups: consumers are stopped while the others run, so their lease must outlast that.
PAUSED_LEASE_TTL_MS, PAUSED_HEARTBEAT_INTERVAL_MS = 600_000, 1000
IDLE_MIN_S, IDLE_MAX_S = 0.002, 0.05  # tests/e2e/settings.py's runtime idle backoff, for the raw loop


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rounded(d: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in d.items()}


def timings(
    lease_ttl_ms: int = LEASE_TTL_MS, heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
) -> dict[str, int]:
    return {"lease_ttl_ms": lease_ttl_ms, "heartbeat_interval_ms": heartbeat_interval_ms}


# ---------------------------------------------------------------------------------------------- counters


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def last_ids(client: redis.Redis, keys: list[str]) -> dict[str, bytes]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
    return {key: info["last-generated-id"] for key, info in zip(keys, pipe.execute(), strict=True)}


def progress(client: redis.Redis, last: dict[str, bytes], group: str) -> tuple[bool, int]:
    """(every entry up to ``last`` of every key delivered to ``group``, entries pending in ``group``)."""
    pipe = client.pipeline(transaction=False)
    for key in last:
        pipe.xinfo_groups(key)
    delivered, pending = True, 0
    for key, groups in zip(last, pipe.execute(), strict=True):
        [info] = [g for g in groups if g["name"] in (group, group.encode())]
        pending += int(info["pending"])
        delivered = delivered and info["last-delivered-id"] == last[key]
    return delivered, pending


def tail_backlog(client: redis.Redis, keys: list[str], group: str, per_key: int) -> int:
    """Move ``group`` so that only the last ``per_key`` entries of each key are new to it (FastStream is
    too slow for the whole backlog); returns how many that is."""
    total = 0
    for key in keys:
        rows = client.xrevrange(key, count=per_key + 1)
        client.xgroup_setid(key, group, rows[-1][0] if len(rows) > per_key else "0-0")
        total += min(per_key, len(rows))
    return total


# ---------------------------------------------------------------------------------------------- consumers


@dataclass
class Side:
    """One way of consuming: its consumer group and its (stoppable) processes, by process group id."""

    name: str
    group: str
    pgids: list[int]
    stop: Callable[[], None]

    def signal(self, signum: int) -> None:
        for pgid in self.pgids:
            with suppress(ProcessLookupError):
                os.killpg(pgid, signum)


def _raw_consumer(url: str, keys: list[str], group: str, name: str, batch: int, ready: Any) -> None:
    """A raw consumer process: per shard XREADGROUP COUNT batch ... > then XACK, with the runtime's idle
    backoff (2 ms doubling to 50 ms per empty shard). It decodes nothing, like a no-op handler."""
    os.setpgid(0, 0)
    client = redis.Redis.from_url(url)
    idle = dict.fromkeys(keys, 0.0)
    due = dict.fromkeys(keys, 0.0)
    ready.set()
    while True:
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
                idle[key] = min(max(idle[key] * 2, IDLE_MIN_S), IDLE_MAX_S)
                due[key] = now + idle[key]
        time.sleep(max(0.0, min(due.values()) - time.monotonic()))


def _faststream_consumer(url: str, keys: list[str], group: str, name: str, batch: int, ready: Any) -> None:
    """FastStream's stream consumer-group subscriber, one per shard, no-op handler (acks after it)."""
    os.setpgid(0, 0)
    from faststream.redis import RedisBroker, StreamSub

    broker = RedisBroker(url, logger=None)  # no log line per message
    for key in keys:
        sub = StreamSub(
            key, group=group, consumer=name, max_records=batch, polling_interval=50, declare=False
        )

        @broker.subscriber(stream=sub)
        async def handle(body: Any) -> None:
            pass

    async def main() -> None:
        await broker.start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def spawn_side(name: str, target: Any, url: str, keys: list[str], processes: int, batch: int) -> Side:
    group = f"{name}-{len(keys)}-{processes}"
    client = redis.Redis.from_url(url)
    for key in keys:
        client.xgroup_create(key, group, id="$")
    client.close()
    ctx = multiprocessing.get_context("spawn")
    procs, readies = [], []
    for c in range(processes):
        ready = ctx.Event()
        proc = ctx.Process(
            target=target, args=(url, keys[c::processes], group, f"c{c}", batch, ready), daemon=True
        )
        proc.start()
        procs.append(proc)
        readies.append(ready)
    for ready in readies:
        assert ready.wait(120), f"{name} consumer did not start"

    def stop() -> None:
        for proc in procs:
            proc.kill()
            proc.join(10)

    return Side(name, group, [p.pid for p in procs], stop)


def start_members(
    stack: Stack, prefix: str, group: str, shards: int, members: int, batch: int, **extra: str
) -> Side:
    env = {"E2E_STREAM_PREFIX": prefix, "E2E_CONSUMER_GROUP": group, "E2E_HANDLED_LOG": "",
           "E2E_BATCH_SIZE": str(batch), **extra}  # fmt: skip
    procs = [stack.start_member(f"{group}-{i}", listener="e2e_noop", **env) for i in range(members)]
    wait_until(
        lambda: stable_and_balanced(stack.describe(prefix, group), members, shards),
        timeout_s=120,
        what=f"{members} members stable",
    )

    def stop() -> None:
        for proc in procs:
            proc.kill()

    return Side("e2e", group, [p.pid for p in procs], stop)


def faststream_available() -> str:
    """'' when FastStream's Redis support imports, else why not."""
    try:
        import faststream.redis  # noqa: F401
    except ImportError as e:
        return f"not installed ({e}); pip install 'faststream[redis]' (the 'bench' extra)"
    return ""


# ---------------------------------------------------------------------------------------------- 1. throughput


def measure(side: Side, client: redis.Redis, last: dict[str, bytes], messages: int) -> dict[str, float]:
    """Let ``side`` consume its backlog of ``messages``: until every entry is delivered and acked, or, for
    a side that leaves entries pending for good (FastStream does, now and then), until nothing has been
    acked for 3 s once everything is delivered; those entries are not counted."""
    _, pending0 = progress(client, last, side.group)
    cpu0, redis0, t0 = group_cpu_s(side.pgids), redis_cpu_s(client), time.perf_counter()
    side.signal(signal.SIGCONT)
    seen, moved = (False, -1), t0
    while True:
        now = time.perf_counter()
        state = progress(client, last, side.group)
        if state != seen:
            seen, moved = state, now
        delivered, pending = state
        # pending below pending0: entries left pending before (a folded ack not yet sent) acked meanwhile
        if delivered and (pending <= pending0 or (side.name != "e2e" and now - moved > 3.0)):
            break
        assert now - t0 < 600, (
            f"{side.name}: not drained after 600 s (all delivered: {delivered}, pending {pending}, "
            f"at the start {pending0}, last change {now - moved:.0f} s ago)"
        )
        time.sleep(0.01)
    elapsed = (now if pending <= pending0 else moved) - t0
    side.signal(signal.SIGSTOP)
    cpu1, redis1 = group_cpu_s(side.pgids), redis_cpu_s(client)
    left = max(0, pending - pending0)  # below 0: it acked entries an earlier repetition left pending
    acked = messages - left
    return {
        "msgs_per_s": acked / elapsed,
        "client_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / acked,
        "redis_cpu_us_per_msg": (redis1 - redis0) * 1e6 / acked,
        "left_pending": left,
    }


def produce_backlog(client: redis.Redis, prefix: str, messages: int, rep: int) -> None:
    producer = Producer(client)
    for start in range(0, messages, 100):
        n = min(100, messages - start)
        producer.send_batch(
            prefix, [(f"k{(start + i) % 256}", {"seq": start + i, "rep": rep}) for i in range(n)]
        )


@contextmanager
def sides(
    stack: Stack, prefix: str, shards: int, members: int, batch: int, fast: bool
) -> Iterator[list[Side]]:
    keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(shards)]
    started: list[Side] = []
    try:
        group = f"tput-{shards}-{members}"
        stack.create_group(prefix, group, shard_count=shards, start_from="latest",
                           **timings(PAUSED_LEASE_TTL_MS, PAUSED_HEARTBEAT_INTERVAL_MS))  # fmt: skip
        started.append(start_members(stack, prefix, group, shards, members, batch))
        started.append(spawn_side("raw", _raw_consumer, stack.redis.url, keys, members, batch))
        if fast:
            started.append(
                spawn_side("faststream", _faststream_consumer, stack.redis.url, keys, members, batch)
            )
        for side in started:
            side.signal(signal.SIGSTOP)
        yield started
    finally:
        for side in started:
            side.signal(signal.SIGCONT)
            side.stop()


def bench_throughput(stack: Stack, shards: int, members: int, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"tput{shards}"
    client = stack.client()
    keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(shards)]
    runs: dict[str, list[dict[str, float]]] = {}
    with sides(stack, prefix, shards, members, args.batch_size, not faststream_available()) as started:
        for rep in range(args.reps):
            produce_backlog(client, prefix, args.messages, rep)
            last = last_ids(client, keys)
            for side in started:
                messages = args.messages
                if side.name == "faststream":
                    messages = tail_backlog(client, keys, side.group, -(-args.faststream_messages // shards))
                runs.setdefault(side.name, []).append(measure(side, client, last, messages))
            line = ", ".join(f"{name} {r[-1]['msgs_per_s']:.0f}/s" for name, r in runs.items())
            print(f"throughput {shards} shards, {members} member(s), rep {rep + 1}: {line}", flush=True)
    result: dict[str, Any] = {"shards": shards, "members": members, "messages": args.messages,
                              "batch_size": args.batch_size, "repetitions": args.reps}  # fmt: skip
    for name, reps in runs.items():
        result[name] = rounded({k: statistics.median(r[k] for r in reps) for k in reps[0]})
        result[name]["runs_msgs_per_s"] = [round(r["msgs_per_s"]) for r in reps]
        result[name]["left_pending"] = sum(int(r["left_pending"]) for r in reps)
    for other in (name for name in runs if name != "e2e"):
        result[f"e2e_over_{other}"] = round(
            statistics.median(
                e["msgs_per_s"] / o["msgs_per_s"] for e, o in zip(runs["e2e"], runs[other], strict=True)
            ),
            3,
        )
    return result


# ------------------------------------------------------------------------------- 2. idle


def bench_idle(stack: Stack, seconds: float) -> dict[str, Any]:
    """One member holding 64 empty shards, with the runtime's default idle backoff and the group's default
    heartbeat interval: its CPU time over ``seconds``."""
    prefix, group, shards = "idle", "idle-g", 64
    stack.create_group(prefix, group, shard_count=shards)
    backoff_ms = Runtime().idle_backoff_max_ms
    side = start_members(stack, prefix, group, shards, 1, 16, E2E_IDLE_BACKOFF_MAX_MS=str(backoff_ms))
    try:
        time.sleep(3.0)  # past the take-over: every shard's ticket is idle
        cpu0, t0 = group_cpu_s(side.pgids), time.perf_counter()
        time.sleep(seconds)
        cpu = group_cpu_s(side.pgids) - cpu0
        elapsed = time.perf_counter() - t0
        config = stack.describe(prefix, group)["config"]
    finally:
        side.stop()
    return rounded(
        {
            "shards": shards,
            "seconds": elapsed,
            "cpu_s": cpu,
            "share_of_one_core_pct": 100 * cpu / elapsed,
            "idle_backoff_max_ms": backoff_ms,
            "heartbeat_interval_ms": config["heartbeat_interval_ms"],
        }
    )


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
    batch = max(5, int(rate_per_s / 200))  # at most about 200 sends a second from this process
    producer = ProducerLoop(
        stack.redis.url, prefix, keys=256, rate_per_s=rate_per_s, batch=batch, stamp=True
    ).start()
    try:
        time.sleep(seconds)  # the measurement window: steady production
        produced = producer.snapshot()
        logs.wait_all_handled(produced, timeout_s=120)
        first: dict[str, dict[str, Any]] = {}
        for row in sorted(logs.rows, key=lambda r: r["start_ns"]):
            first.setdefault(row["event_id"], row)
        latencies = [
            (first[p["event_id"]]["wall_ns"] - first[p["event_id"]]["sent_ns"]) / 1e6 for p in produced
        ]
        latency = rounded(
            {
                "messages": len(latencies),
                "target_rate_per_s": rate_per_s,
                "achieved_rate_per_s": len(produced) / seconds,
                "send_batch": batch,
                "members": 4,
                "shards": shards,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="also write the JSON result to this file")
    # 100,000: each side then consumes for 1-3 s; with 20,000 a run lasted 0.3-0.4 s and its start and
    # end (the SIGCONT, the 10 ms progress polls) moved single figures by up to a third.
    parser.add_argument("--messages", type=int, default=100_000, help="entries per repetition and side")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians are reported)")
    parser.add_argument(
        "--faststream-messages", type=int, default=4000, help="FastStream reads the last N of each backlog"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="entries per read, every side alike")
    parser.add_argument("--shard-counts", default="8,64")
    parser.add_argument("--member-counts", default="1,4")
    parser.add_argument("--latency-seconds", type=float, default=8.0, help="0: no latency and kill -9 runs")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--skip-rebalance", action="store_true", help="no rebalance section")
    args = parser.parse_args()

    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "faststream": faststream_available() or "measured",
    }
    with Stack(tick_interval_ms=TICK_INTERVAL_MS) as stack:
        results["redis"] = stack.client().info("server")["redis_version"]
        results["throughput"] = [
            bench_throughput(stack, int(shards), int(members), args)
            for shards in args.shard_counts.split(",")
            for members in args.member_counts.split(",")
        ]
        results["idle"] = bench_idle(stack, args.idle_seconds)
        print(f"idle: {results['idle']}", flush=True)
        rows = [r for r in results["throughput"] if r["shards"] == 8 and r["members"] == 4] or results[
            "throughput"
        ]
        rate = rows[0]["e2e"]["msgs_per_s"] / 2
        if args.latency_seconds > 0:  # 0: no latency and kill -9 sections
            results.update(bench_latency_and_kill(stack, 8, args.latency_seconds, rate))
        if not args.skip_rebalance:
            results["rebalance_3_to_6"] = bench_rebalance(stack, 12)
            print(f"rebalance 3 -> 6: {results['rebalance_3_to_6']}", flush=True)
    results["bench_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
