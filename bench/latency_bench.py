"""Produce-to-handle latency and idle cost of members (issue 28: wake on produce), beside a raw blocking
consumer on the same entries.

    python bench/latency_bench.py [--out FILE] [--reps R] [--seconds S] [--idle-seconds S]

One private Redis, one coordinator API, one tick (tests/e2e/stack.py), as bench/e2e_bench.py.

1. ``latency``: for 1 and 4 members on 8 and 64 shards:

   * the group's *measured maximum*: members stopped (SIGSTOP), a backlog of ``--backlog`` entries
     produced, members let go (SIGCONT) until every entry is delivered and acked (Redis's view); the
     median of ``--reps`` drains;
   * then at 10% and 50% of that maximum, ``--reps`` windows of ``--seconds`` s of steady production
     (``Producer.send_batch`` of a few entries every 5 ms, 256 keys, each payload stamped with the
     producer's wall clock just before the send), and per entry the time from that stamp to the start
     of its handler (``run_member`` processes, the e2e listener: it writes one line per entry);
   * ``raw``: beside them, on the SAME streams (a Redis consumer group of its own), in the same run,
     as many raw processes as members, each one blocking
     ``XREADGROUP COUNT b BLOCK ... STREAMS <its shards> >`` loop that decodes the envelope, writes the
     same line per entry and acks the streams read in one pipeline: what a plain blocking consumer
     achieves on this machine, the limit. It is one thread: where it falls behind, its latency is a
     queue's.

   Each window runs one side alone, the other stopped (SIGSTOP; it catches up afterwards, untimed):
   on 2 cores, two consumers of every entry at once would measure each other's CPU. The sides
   alternate, window by window. p50 / p90 / p99 / max per window; the figures are the medians over the
   windows.
2. ``idle``: 4 members holding 64 empty shards for ``--idle-seconds``: CPU per member process (share of
   a core) and Redis commands per second (all of them: heartbeats and ticks too, and the data plane's
   FCALL / XREAD / CLIENT alone), with the wake-up and with polling (``wake_on_append=False``, the
   runtime's default backoff 5 -> 100 ms), side by side.

3. ``signal_cost``: what the alternative to this design would cost Redis: a producer that signals every
   append on Pub/Sub (``PUBLISH`` to a channel 4 members subscribe to) against the plain ``XADD`` the
   wake-up needs, pipelined 100 at a time: Redis CPU per append (``INFO cpu``), medians of ``--reps``.

Everything is measured here, nothing is typed in; every wait is bounded. Figures from a loaded 2-core box
are noisy: compare the sides of one run.
"""

from __future__ import annotations

import argparse
import gc
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

from bench.e2e_bench import (  # noqa: E402
    PAUSED_HEARTBEAT_INTERVAL_MS,
    PAUSED_LEASE_TTL_MS,
    Side,
    last_ids,
    measure,
    percentile,
    produce_backlog,
    redis_cpu_s,
    rounded,
    spawn_side,
    timings,
)
from bench.heartbeat_bench import group_cpu_s  # noqa: E402
from consumers.runtime import Runtime  # noqa: E402
from coordinator.protocol.model import Shard  # noqa: E402
from rsc_redis.keys import stream_key  # noqa: E402
from tests.e2e.stack import HandledLogs, ProducerLoop, Stack, stable_and_balanced, wait_until  # noqa: E402

TICK_INTERVAL_MS = 200
BATCH = 16  # entries per read, both sides
RAW_BLOCK_MS = 1_000
SEND_EVERY_S = 0.005  # the producer sends a batch every 5 ms


def _raw_block_consumer(url: str, keys: list[str], group: str, name: str, batch: int, ready: Any) -> None:
    """One blocking XREADGROUP over all its streams, XACK of what it read; per entry the same line as
    the e2e listener's (its ``event_id``, ``wall_ns`` at handling, the producer's ``sent_ns``)."""
    os.setpgid(0, 0)
    from consumers.dataplane.envelope import decode_fetched

    client = redis.Redis.from_url(url)
    log_path = os.environ["RAW_HANDLED_DIR"] + f"/{name}-{os.getpid()}.jsonl"
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    shard = Shard(1, 0)  # decode needs one; the line does not use it
    streams = dict.fromkeys(keys, ">")
    ready.set()
    while True:
        reply = client.xreadgroup(group, name, streams, count=batch, block=RAW_BLOCK_MS)
        if not reply:
            continue
        acks = client.pipeline(transaction=False)
        lines = []
        for key, entries in reply:
            wall_ns = time.time_ns()
            flat: list[Any] = []
            for entry_id, fields in entries:
                flat += [entry_id, fields[b"envelope"]]
            for entry in decode_fetched(flat, shard):
                payload = entry.payload if isinstance(entry.payload, dict) else {}
                row = {"event_id": entry.event_id, "wall_ns": wall_ns, "sent_ns": payload.get("sent_ns")}
                lines.append(json.dumps(row, separators=(",", ":")))
            acks.xack(key, group, *[entry_id for entry_id, _ in entries])
        os.write(fd, ("\n".join(lines) + "\n").encode())
        acks.execute()


def start_members(stack: Stack, prefix: str, group: str, shards: int, members: int, **extra: str) -> Side:
    env = {"E2E_STREAM_PREFIX": prefix, "E2E_CONSUMER_GROUP": group, "E2E_BATCH_SIZE": str(BATCH), **extra}
    procs = [stack.start_member(f"{group}-{i}", **env) for i in range(members)]
    wait_until(
        lambda: stable_and_balanced(stack.describe(prefix, group), members, shards),
        timeout_s=120,
        what=f"{members} members stable",
    )

    def stop() -> None:
        for proc in procs:
            proc.kill()

    return Side("e2e", group, [p.pid for p in procs], stop)


def latencies(logs: HandledLogs, produced: list[dict[str, Any]]) -> list[float]:
    """Per produced event, from the stamp in its payload to the start of its first handling."""
    ids = {p["event_id"] for p in produced}
    first: dict[str, float] = {}
    for row in logs.rows:
        if row["event_id"] in ids and row.get("sent_ns") is not None:
            ms = (row["wall_ns"] - row["sent_ns"]) / 1e6
            first[row["event_id"]] = min(first.get(row["event_id"], ms), ms)
    return list(first.values())


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 0.50),
        "p90_ms": percentile(values, 0.90),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values),
    }


def median_of(rows: list[dict[str, float]]) -> dict[str, float]:
    return rounded({k: statistics.median(r[k] for r in rows) for k in rows[0]})


def bench_config(stack: Stack, shards: int, members: int, args: argparse.Namespace) -> dict[str, Any]:
    prefix, group = f"lat{shards}x{members}", f"lat{shards}x{members}-g"
    keys = [stream_key(prefix, Shard(1, i)) for i in range(shards)]
    client = stack.client()
    stack.create_group(prefix, group, shard_count=shards, start_from="latest",
                       **timings(PAUSED_LEASE_TTL_MS, PAUSED_HEARTBEAT_INTERVAL_MS))  # fmt: skip
    e2e_dir = stack.handled_dir / prefix
    e2e_dir.mkdir(exist_ok=True)
    members_side = start_members(
        stack, prefix, group, shards, members, E2E_HANDLED_LOG=str(e2e_dir / "m.jsonl")
    )
    raw_dir = stack.dir / f"raw-{prefix}"
    raw_dir.mkdir(exist_ok=True)
    os.environ["RAW_HANDLED_DIR"] = str(raw_dir)
    raw = spawn_side("rawblock", _raw_block_consumer, stack.redis.url, keys, members, BATCH)
    try:
        # The measured maximum: the members drain a backlog (the raw side is stopped meanwhile, then
        # drains it too, untimed, so that both start the latency windows from empty streams).
        drains = []
        for rep in range(args.reps):
            members_side.signal(signal.SIGSTOP)
            raw.signal(signal.SIGSTOP)
            produce_backlog(client, prefix, args.backlog, rep)
            last = last_ids(client, keys)
            drains.append(measure(members_side, client, last, args.backlog))
            members_side.signal(signal.SIGCONT)
            raw.signal(signal.SIGCONT)
            wait_until(lambda last=last: _drained(client, last, raw.group), timeout_s=120, what="raw drained")
        maximum = statistics.median(d["msgs_per_s"] for d in drains)
        print(f"{shards} shards, {members} members: maximum {maximum:.0f}/s", flush=True)
        result: dict[str, Any] = {"shards": shards, "members": members, "maximum_per_s": round(maximum)}
        e2e_logs, raw_logs = HandledLogs(e2e_dir), HandledLogs(raw_dir)
        sides = {"e2e": (e2e_logs, raw), "raw": (raw_logs, members_side)}  # each: its logs, the other side
        for load in (0.10, 0.50):
            rate = load * maximum
            windows: dict[str, list[dict[str, float]]] = {"e2e": [], "raw": []}
            for _ in range(args.reps):
                for name, (logs, other) in sides.items():
                    # One side at a time, the other stopped: on 2 cores two consumers of every entry
                    # would measure each other's CPU. The stopped side catches up afterwards, untimed.
                    other.signal(signal.SIGSTOP)
                    windows[name].append(_window(stack, prefix, keys, rate, args.seconds, name, logs))
                    other.signal(signal.SIGCONT)
                    wait_until(
                        lambda other=other: _drained(client, last_ids(client, keys), other.group),
                        timeout_s=120,
                        what=f"the other side caught up after the {name} window",
                    )
            result[f"at_{round(load * 100)}pct"] = {
                "rate_per_s": round(rate),
                "e2e": median_of(windows["e2e"]),
                "raw_block": median_of(windows["raw"]),
            }
            print(f"  at {load:.0%}: {result[f'at_{round(load * 100)}pct']}", flush=True)
        return result
    finally:
        members_side.signal(signal.SIGCONT)
        raw.signal(signal.SIGCONT)
        members_side.stop()
        raw.stop()
        client.close()


def _window(
    stack: Stack, prefix: str, keys: list[str], rate: float, seconds: float, name: str, logs: HandledLogs
) -> dict[str, float]:
    """``seconds`` of steady production at ``rate``, then the produce -> handler-start latencies of what
    the running side handled."""
    batch = max(1, round(rate * SEND_EVERY_S))
    producer = ProducerLoop(stack.redis.url, prefix, keys=256, rate_per_s=rate, batch=batch, stamp=True)
    # The load generator's own pauses are not the consumers' latency. This process keeps every record
    # produced and handled so far (millions of objects by the last configuration), and CPython's full
    # collection of them stopped the producer's thread for 70-210 ms, after which it caught up in a burst
    # (in a run of 8x4 with the collections logged, each gap of over 50 ms in handling, on either side,
    # began with one). So no collection in a window (its own records: a few hundred thousand objects).
    gc.collect()
    gc.disable()
    try:
        producer.start()
        time.sleep(seconds)
        producer.stop()
    finally:
        gc.enable()
    produced = producer.snapshot()
    wait_until(lambda: not logs.missing(produced), timeout_s=120, what=f"{name} handled")
    return summary(latencies(logs, produced))


def _drained(client: redis.Redis, last: dict[str, bytes], group: str) -> bool:
    pipe = client.pipeline(transaction=False)
    for key in last:
        pipe.xinfo_groups(key)
    for key, groups in zip(last, pipe.execute(), strict=True):
        [info] = [g for g in groups if g["name"] in (group, group.encode())]
        if info["last-delivered-id"] != last[key] or int(info["pending"]):
            return False
    return True


def _commands(client: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()}


def bench_idle(stack: Stack, seconds: float, wake: bool) -> dict[str, Any]:
    prefix = f"idle{'w' if wake else 'p'}"
    group, shards, members = f"{prefix}-g", 64, 4
    stack.create_group(prefix, group, shard_count=shards)
    poll = Runtime()
    extra = {
        "E2E_WAKE_ON_APPEND": "true" if wake else "false",
        "E2E_IDLE_BACKOFF_MIN_MS": str(poll.idle_backoff_min_ms),
        "E2E_IDLE_BACKOFF_MAX_MS": str(poll.idle_backoff_max_ms),
        "E2E_HANDLED_LOG": "",
    }
    side = start_members(stack, prefix, group, shards, members, **extra)
    client = stack.client()
    try:
        time.sleep(3.0)  # past the take-over: every shard idle
        cpu0 = {pid: group_cpu_s([pid]) for pid in side.pgids}
        commands0, t0 = _commands(client), time.perf_counter()
        time.sleep(seconds)
        elapsed = time.perf_counter() - t0
        commands1 = _commands(client)
        cpu = [group_cpu_s([pid]) - cpu0[pid] for pid in side.pgids]
    finally:
        side.stop()
        client.close()

    def per_s(*names: str) -> float:
        return sum(commands1.get(n, 0) - commands0.get(n, 0) for n in names) / elapsed

    return rounded(
        {
            "wake_on_append": wake,
            "shards": shards,
            "members": members,
            "seconds": elapsed,
            "member_cpu_pct_of_a_core": [round(100 * c / elapsed, 3) for c in cpu],
            "member_cpu_pct_median": 100 * statistics.median(cpu) / elapsed,
            "redis_commands_per_s": per_s(*commands1),
            "fcall_per_s": per_s("fcall"),
            "xread_per_s": per_s("xread"),
            "client_per_s": per_s("client|id", "client|unblock"),
            "idle_wait_ms": Runtime().idle_wait_ms if wake else None,
            "idle_backoff_ms": None if wake else [poll.idle_backoff_min_ms, poll.idle_backoff_max_ms],
        }
    )


def bench_signal_cost(stack: Stack, reps: int, appends: int = 20_000) -> dict[str, Any]:
    """Redis CPU per append: XADD alone, and XADD + PUBLISH to a channel with 4 subscribers that read
    every message (what a per-append signal would cost; the XREAD wake-up costs the producer nothing)."""
    import threading

    client = stack.client()
    key, channel, value = "signal-bench:{s}:v1:0", "signal-bench:{s}:wake", b"x" * 100
    subscribers = [stack.client().pubsub(ignore_subscribe_messages=True) for _ in range(4)]
    stop = threading.Event()
    readers = []
    for sub in subscribers:
        sub.subscribe(channel)
        reader = threading.Thread(
            target=lambda s=sub: [s.get_message(timeout=0.1) for _ in iter(stop.is_set, True)], daemon=True
        )
        reader.start()
        readers.append(reader)
    runs: dict[str, list[float]] = {"xadd": [], "xadd_and_publish": []}
    try:
        for _ in range(reps):
            for mode in runs:
                cpu0 = redis_cpu_s(client)
                for _ in range(appends // 100):
                    pipe = client.pipeline(transaction=False)
                    for _i in range(100):
                        pipe.xadd(key, {"envelope": value}, maxlen=1000, approximate=True)
                        if mode == "xadd_and_publish":
                            pipe.publish(channel, b"0")
                    pipe.execute()
                runs[mode].append((redis_cpu_s(client) - cpu0) * 1e6 / appends)
    finally:
        stop.set()
        for reader in readers:
            reader.join(5)  # before its subscriber is closed under it
        for sub in subscribers:
            sub.close()
        client.delete(key)
        client.close()
    return rounded({f"{mode}_redis_us_per_append": statistics.median(v) for mode, v in runs.items()})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="one latency window")
    parser.add_argument("--backlog", type=int, default=20_000, help="entries drained for the maximum")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--configs", default="8x1,8x4,64x1,64x4", help="shards x members, comma-separated")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    with Stack(tick_interval_ms=TICK_INTERVAL_MS) as stack:
        results["redis_version"] = stack.client().info("server")["redis_version"]
        results["latency"] = []
        for config in args.configs.split(","):
            shards, members = (int(x) for x in config.split("x"))
            results["latency"].append(bench_config(stack, shards, members, args))
        results["signal_cost"] = bench_signal_cost(stack, args.reps)
        print(f"signal cost: {results['signal_cost']}", flush=True)
        if args.idle_seconds > 0:
            results["idle"] = [bench_idle(stack, args.idle_seconds, wake) for wake in (True, False)]
            print(f"idle: {results['idle']}", flush=True)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    main()
