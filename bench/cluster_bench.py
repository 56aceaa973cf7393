"""Redis Cluster benchmark: many groups over 3 primaries against one coordinator (docs/cluster.md).

One run, one machine, one private 3-primary Redis Cluster (tests/cluster/harness.py) and one
coordinator (``config.serve``, ``REDIS_URL=redis+cluster://...``):

1. setup (not measured as throughput): ``--groups`` groups (default 1,000) of ``--members`` members
   (default 10) and as many shards, on ``--prefixes`` stream prefixes (default 100) spread over the
   primaries by their hash tags; members join and converge through the store, in ``--setup-procs``
   processes;
2. steady heartbeats through the coordinator's HTTP API from ``--clients`` processes, each cycling over
   every member of the run (after one warm-up heartbeat per member, whose full-path commit records the
   sender's identity): requests per second, p50 / p99 latency, and each primary's Redis CPU
   (``used_cpu_user + used_cpu_sys`` delta per wall second) and commands processed meanwhile;
3. the tick (every prefix, every group: expiry, garbage collection, drain detection), run ``--ticks``
   times: seconds per tick, and each primary's Redis CPU during the ticks.

Writes JSON (``--out``) and prints it. Run: ``.venv/bin/python bench/cluster_bench.py --out
bench/results/cluster.json`` (a few minutes at the defaults on 2 cores; ``--groups 100`` for a smoke
run).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.heartbeat_bench import ADMIN_TOKEN, MEMBER_TOKEN, Api, emit  # noqa: E402
from config.embedded_redis import free_port  # noqa: E402
from coordinator.protocol.commands import CreateGroup  # noqa: E402
from coordinator.protocol.group import Heartbeat  # noqa: E402
from coordinator.protocol.model import GroupConfig, Shard  # noqa: E402
from coordinator.store import MetadataStore  # noqa: E402
from rsc_redis.dead_letter_mac import MacKeys  # noqa: E402
from tests.cluster.harness import LocalCluster  # noqa: E402
from tests.cluster.helpers import prefixes_on_every_primary  # noqa: E402

# The store's dead-letter MAC keys (without Django settings): its ticks load the data plane's library
# with them, as a coordinator does (coordinator/store/functions.py).
BENCH_KEYS = [MacKeys.derive("cluster_bench")]

Member = tuple[str, str, str, int, list[str]]  # prefix, group, member id, epoch, owned shards


# ------------------------------------------------------------------------------------------ setup


def _setup_worker(url: str, jobs: list[tuple[str, str]], members: int, out: Any) -> None:
    """Create each (prefix, group) and converge its members through the store; put their views."""
    store = MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS)
    config = GroupConfig(lease_ttl_ms=3_600_000, heartbeat_interval_ms=1_000, revocation_timeout_ms=3_600_000)
    found: list[Member] = []
    for prefix, group in jobs:
        store.create_group(
            CreateGroup(stream_prefix=prefix, consumer_group=group, shard_count=members, config=config)
        )
        views = {
            f"m{i}": store.heartbeat(prefix, group, Heartbeat(member_id=f"m{i}", member_epoch=0, capacity=1))
            for i in range(members)
        }
        for _round in range(20):
            for mid, view in views.items():
                owned = frozenset(Shard.parse(s["shard"]) for s in view["shards"])
                hb = Heartbeat(member_id=mid, member_epoch=view["member_epoch"], owned=owned)
                views[mid] = store.heartbeat(prefix, group, hb)
            if all(v["member_state"] == "STABLE" for v in views.values()) and (
                len({v["assignment_epoch"] for v in views.values()}) == 1
            ):
                break
        found += [
            (prefix, group, mid, v["member_epoch"], [s["shard"] for s in v["shards"]])
            for mid, v in views.items()
        ]
    out.put(found)
    store.client.close()


def setup(url: str, cluster: LocalCluster, args: argparse.Namespace) -> list[Member]:
    prefixes = prefixes_on_every_primary(cluster, per_primary=-(-args.prefixes // 3), stem="bench")
    prefixes = prefixes[: args.prefixes]
    jobs = [(prefixes[g % len(prefixes)], f"g{g}") for g in range(args.groups)]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_setup_worker, args=(url, jobs[i :: args.setup_procs], args.members, queue))
        for i in range(args.setup_procs)
    ]
    for p in procs:
        p.start()
    members = [m for _ in procs for m in queue.get(timeout=3600)]
    for p in procs:
        p.join()
    return members


# ------------------------------------------------------------------------------------------ load


def _heartbeat_worker(port: int, members: list[Member], seconds: float, out: Any) -> None:
    api = Api(port, MEMBER_TOKEN)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline:
        prefix, group, member, epoch, shards = members[i % len(members)]
        i += 1
        t0 = time.perf_counter()
        api.heartbeat(prefix, group, {"member_id": member, "member_epoch": epoch, "owned_shards": shards})
        latencies.append(time.perf_counter() - t0)
    out.put(latencies)


def _warm_worker(port: int, members: list[Member], out: Any) -> None:
    api = Api(port, MEMBER_TOKEN)
    for prefix, group, member, epoch, shards in members:
        api.heartbeat(prefix, group, {"member_id": member, "member_epoch": epoch, "owned_shards": shards})
    out.put([])


def warm_up(port: int, members: list[Member], clients: int) -> float:
    """One heartbeat per member through the API before measuring: the first records the sender's
    identity (a full-path commit); the steady state is what the measured window should see."""
    started = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_warm_worker, args=(port, members[i::clients], queue)) for i in range(clients)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        queue.get(timeout=3600)
    for p in procs:
        p.join()
    return time.perf_counter() - started


def heartbeats(port: int, members: list[Member], clients: int, seconds: float) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_heartbeat_worker, args=(port, members[i::clients], seconds, queue))
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    latencies = sorted(x for _ in procs for x in queue.get(timeout=seconds + 120))
    for p in procs:
        p.join()
    return {
        "requests": len(latencies),
        "per_second": len(latencies) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


# ------------------------------------------------------------------------------------------ Redis CPU


def redis_usage(cluster: LocalCluster) -> dict[int, tuple[float, int]]:
    """Per primary port: (CPU seconds used so far, commands processed so far)."""
    usage = {}
    for server in cluster.primaries():
        with cluster.node(server) as client:
            cpu, stats = client.info("cpu"), client.info("stats")
        usage[server.port] = (
            float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            int(stats["total_commands_processed"]),
        )
    return usage


def usage_between(
    before: dict[int, tuple[float, int]], after: dict[int, tuple[float, int]], seconds: float
) -> dict[str, dict[str, float]]:
    return {
        str(port): {
            "cpu_percent": round(100 * (after[port][0] - before[port][0]) / seconds, 1),
            "commands_per_second": round((after[port][1] - before[port][1]) / seconds, 1),
        }
        for port in before
    }


# ------------------------------------------------------------------------------------------ coordinator


def start_coordinator(url: str, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": url,
        "RSC_MEMBER_TOKENS": MEMBER_TOKEN,
        "RSC_ADMIN_TOKENS": ADMIN_TOKEN,
        "RSC_HEARTBEAT_FLOOR_MS": "1",  # a load test: every member heartbeats as often as the clients can
        "RSC_HEARTBEAT_BURST": "10000",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": f"sqlite:///{tempfile.mkdtemp(prefix='rsc-cluster-bench-')}/bench.sqlite3",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    argv = [
        sys.executable, "-m", "config.serve", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
        "--threads", "4",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env)
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.1)


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--prefixes", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--setup-procs", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "primaries": 3,
        "groups": args.groups,
        "members_per_group": args.members,
        "members": args.groups * args.members,
        "prefixes": args.prefixes,
        "clients": args.clients,
        "workers": args.workers,
        "seconds": args.seconds,
    }
    with LocalCluster(masters=3) as cluster:
        url = cluster.url
        t0 = time.perf_counter()
        members = setup(url, cluster, args)
        results["setup_seconds"] = round(time.perf_counter() - t0, 1)
        results["keys_per_primary"] = {}
        for server in cluster.primaries():
            with cluster.node(server) as client:
                results["keys_per_primary"][str(server.port)] = int(client.dbsize())
        print(f"setup: {len(members)} members in {results['setup_seconds']} s", flush=True)

        api, port = start_coordinator(url, args.workers)
        try:
            results["warm_up_seconds"] = round(warm_up(port, members, args.clients), 1)
            before, t1 = redis_usage(cluster), time.perf_counter()
            results["heartbeats"] = heartbeats(port, members, args.clients, args.seconds)
            results["heartbeats"]["redis_per_primary"] = usage_between(
                before, redis_usage(cluster), time.perf_counter() - t1
            )
            print(f"heartbeats: {results['heartbeats']}", flush=True)
        finally:
            api.terminate()
            api.wait(timeout=30)

        store = MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS)
        durations = []
        before, t1 = redis_usage(cluster), time.perf_counter()
        for _ in range(args.ticks):
            started = time.perf_counter()
            reports = store.tick()
            durations.append(time.perf_counter() - started)
            assert len(reports) == args.prefixes and all(r.error is None for r in reports)
        results["tick"] = {
            "runs": args.ticks,
            "mean_seconds": round(statistics.mean(durations), 3),
            "max_seconds": round(max(durations), 3),
            "redis_per_primary": usage_between(before, redis_usage(cluster), time.perf_counter() - t1),
        }
        store.client.close()
    emit(results, args.out)


if __name__ == "__main__":
    main()
