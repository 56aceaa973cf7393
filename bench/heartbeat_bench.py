"""Coordinator heartbeat benchmark: `make bench` runs it (see docs/benchmarks.md for the last figures).

One run, one machine, one private Redis:
1. raw Redis round trips (redis-py PING) from the same number of client processes, as the ceiling;
2. steady-state heartbeats through the product's server (``config/serve.py``: granian, the heartbeat
   door, the fast-path Lua script) with 1, 100 and 1,000 members in the group: requests per second and
   p50 / p99 latency;
3. convergence: 100 members join at once (threads, heartbeating at the group's interval) and the time
   until the group is STABLE and balanced, with the compare-and-set conflicts and refusals on the way;
4. the HTTP server (issue 8, "chosen on measurements"): the same 100-member steady heartbeats through
   each candidate server that is installed (granian as config/serve.py runs it, gunicorn's gthread and
   gevent workers, uvicorn serving config.asgi; ``-no-door``: the door off; ``-floor``: the server alone
   answering ``{}``), with
   the same number of worker processes, 3 repetitions each, median rate and server CPU per request
   (every process of the server's process group, from /proc);
5. large groups (issue 8: "a 10,000-member group forms and stays stable, with the heartbeat interval
   scaled as Kafka scales it"): each of ``--large-members`` (default 2,000 and 10,000) on
   ``--large-clients`` client processes (default 32: each has one request in flight at a time, while
   10,000 real members are 10,000 loops, so fewer clients measure their own waiting: with 8, a join
   waited behind the client's own due heartbeats and the group formed no faster however cheap the
   server made a join), by default at Kafka's consumer-group defaults (KIP-848:
   heartbeat interval 5 s, session timeout 45 s, as the lease; ``--large-interval-ms``,
   ``--large-lease-ms``). Every member joins and heartbeats at the interval
   from then on, as the runtime does (heartbeats before joins, 429 / 503 retried after Retry-After):
   the time until every member is settled at one assignment epoch (given up after
   ``--large-form-limit-s``, saying how many had joined and settled), the server's CPU for it, then
   ``--large-seconds`` of the group as it stays: heartbeats per second, latency, server CPU per
   heartbeat, answers not steady, fences.

Everything is measured here, nothing is typed in: rerun it and compare.
"""

from __future__ import annotations

import argparse
import heapq
import http.client
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from config.embedded_redis import RedisServer, free_port  # noqa: E402
from config.serve import granian_argv  # noqa: E402
from rsc_redis.keys import METRICS_KEY  # noqa: E402

MEMBER_TOKEN = "bench-member-token"
ADMIN_TOKEN = "bench-admin-token"


class Api:
    """A keep-alive HTTP client for the coordinator API."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None)

    def heartbeat(self, prefix: str, group: str, body: dict[str, Any]) -> dict[str, Any]:
        status, payload = self.call("POST", f"/api/v1/groups/{prefix}/{group}/heartbeat", body)
        if status != 200:
            raise RuntimeError(f"heartbeat {status}: {payload}")
        return payload  # type: ignore[no-any-return]


class LeanApi:
    """The large groups' client: one keep-alive socket, the request line and headers encoded once,
    the response read for its status, Content-Length and body only. It sends what ``Api`` sends;
    http.client spent about as much CPU per request as the server's own work (the load generator runs
    on the same 2 cores as the server, and 10,000 members at a 5 s interval are 2,000 requests a
    second)."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.headers = (
            f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        ).encode()
        self.pending = b""

    def call(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        data = orjson.dumps(body)
        start = f"{method} {path} HTTP/1.1\r\n".encode()
        self.sock.sendall(b"%s%sContent-Length: %d\r\n\r\n%s" % (start, self.headers, len(data), data))
        while b"\r\n\r\n" not in self.pending:
            self.pending += self._recv()
        head, _, rest = self.pending.partition(b"\r\n\r\n")
        status, length = int(head[9:12]), None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"a response without Content-Length: {head!r}")
        while len(rest) < length:
            rest += self._recv()
        raw, self.pending = rest[:length], rest[length:]
        return status, (orjson.loads(raw) if raw else None)

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk


def owned(response: dict[str, Any]) -> list[str]:
    return [s["shard"] for s in response["shards"]]


def converge(api: Api, prefix: str, group: str, views: dict[str, dict[str, Any]]) -> None:
    for _ in range(10):
        for member, view in views.items():
            body = {"member_id": member, "member_epoch": view["member_epoch"], "owned_shards": owned(view)}
            views[member] = api.heartbeat(prefix, group, body)
        # Every member answered STABLE since the last bump (docs/protocol.md section 4: a member's own
        # epoch is the one its assignment last moved at).
        stable = all(v["member_state"] == "STABLE" for v in views.values())
        if stable and len({v["assignment_epoch"] for v in views.values()}) == 1:
            return
    raise RuntimeError("the group did not converge")


# ------------------------------------------------------------------------------------------ load


def _heartbeat_worker(
    port: int, prefix: str, group: str, members: list[tuple[str, int, list[str]]], seconds: float, out: Any
) -> None:
    api = Api(port, MEMBER_TOKEN)
    latencies: list[float] = []
    cpu0 = time.process_time()
    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline:
        member, epoch, shards = members[i % len(members)]
        i += 1
        t0 = time.perf_counter()
        api.heartbeat(prefix, group, {"member_id": member, "member_epoch": epoch, "owned_shards": shards})
        latencies.append(time.perf_counter() - t0)
    out.put((latencies, time.process_time() - cpu0))


def _ping_worker(url: str, seconds: float, out: Any) -> None:
    client = redis.Redis.from_url(url)
    latencies: list[float] = []
    cpu0 = time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        client.ping()
        latencies.append(time.perf_counter() - t0)
    out.put((latencies, time.process_time() - cpu0))


def run_load(target: Any, args: tuple[Any, ...], clients: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, queue)) for _ in range(clients)]
    seconds = args[-1]
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for lat, _cpu in results for x in lat)
    return {
        "requests": len(latencies),
        # the load generator's own CPU (every client process), per request
        "client_cpu_us_per_request": 1e6 * sum(cpu for _lat, cpu in results) / max(1, len(latencies)),
        "per_second": len(latencies) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


# ------------------------------------------------------------------------------------------ scenarios


def setup_group(
    port: int, prefix: str, group: str, members: int, shards: int
) -> list[tuple[str, int, list[str]]]:
    create_group(port, prefix, group, members, shards)
    api = Api(port, MEMBER_TOKEN)
    views = {
        f"bench-{i}": api.heartbeat(
            prefix, group, {"member_id": f"bench-{i}", "member_epoch": 0, "capacity": 1}
        )
        for i in range(members)
    }
    converge(api, prefix, group, views)
    return [(m, v["member_epoch"], owned(v)) for m, v in views.items()]


def create_group(
    port: int,
    prefix: str,
    group: str,
    members: int,
    shards: int,
    lease_ttl_ms: int = 3_600_000,
    heartbeat_interval_ms: int = 1_000,
) -> None:
    admin = Api(port, ADMIN_TOKEN)
    body = {
        "stream_prefix": prefix,
        "consumer_group": group,
        "shard_count": shards,
        "lease_ttl_ms": lease_ttl_ms,
        "heartbeat_interval_ms": heartbeat_interval_ms,
        "revocation_timeout_ms": 3_600_000,
        "max_members": max(members, 1),
    }
    status, payload = admin.call("POST", "/api/v1/admin/groups", body)
    if status != 201:
        raise RuntimeError(f"create group {status}: {payload}")


def convergence(port: int, members: int, shards: int, interval_ms: int, redis_url: str) -> dict[str, Any]:
    """``members`` members join at once (threads behind a barrier) and heartbeat at the interval, as the
    runtime does (a 429 or 503 is retried after its Retry-After); the time until the group is STABLE
    and balanced, and how the joins fared: compare-and-set conflicts (commits that lost a race and were
    decided again, the store's ``cas_conflicts`` counter) and answers other than 200 by error code
    (``CONCURRENT_UPDATE`` is a give-up after 64 conflicting attempts)."""
    counters = redis.Redis.from_url(redis_url)
    conflicts_before = float(counters.hget(METRICS_KEY, "cas_conflicts") or 0)
    refusals: dict[str, int] = {}
    refusals_lock = threading.Lock()
    prefix, group = "conv", f"conv-{members}"
    admin = Api(port, ADMIN_TOKEN)
    body = {
        "stream_prefix": prefix,
        "consumer_group": group,
        "shard_count": shards,
        "lease_ttl_ms": 30_000,
        "heartbeat_interval_ms": interval_ms,
    }
    status, payload = admin.call("POST", "/api/v1/admin/groups", body)
    if status != 201:
        raise RuntimeError(f"create group {status}: {payload}")
    start = threading.Barrier(members + 1)
    stop = threading.Event()
    heartbeats = [0]

    def send(api: Api, body: dict[str, Any]) -> dict[str, Any]:
        while True:
            status, payload = api.call("POST", f"/api/v1/groups/{prefix}/{group}/heartbeat", body)
            if status == 200:
                return payload  # type: ignore[no-any-return]
            code = (payload or {}).get("code", str(status))
            with refusals_lock:
                refusals[code] = refusals.get(code, 0) + 1
            if status not in (429, 503):
                raise RuntimeError(f"heartbeat {status}: {payload}")
            time.sleep(min(1.0, float((payload or {}).get("details", {}).get("retry_after_ms", 100)) / 1000))

    def member(i: int) -> None:
        api = Api(port, MEMBER_TOKEN)
        name = f"conv-{i}"
        start.wait()
        view = send(api, {"member_id": name, "member_epoch": 0, "capacity": 1, "join_seq": 1})
        while not stop.is_set():
            time.sleep(view["heartbeat_interval_ms"] / 1000)
            body = {"member_id": name, "member_epoch": view["member_epoch"], "owned_shards": owned(view)}
            view = send(api, body)
            heartbeats[0] += 1

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    while True:
        status, view = admin.call("GET", f"/api/v1/admin/groups/{prefix}/{group}")
        live = [
            m for m in view["members"] if m["state"] in ("STABLE", "UNREVOKED_SHARDS", "UNRELEASED_SHARDS")
        ]
        counts = [len(m["current_assignment"]) for m in live]
        if (
            view["state"] == "STABLE"
            and len(live) == members
            and sum(counts) == shards
            and max(counts) - min(counts) <= 1
        ):
            elapsed = time.perf_counter() - t0
            break
        if time.perf_counter() - t0 > 300:
            raise RuntimeError("no convergence within 300 s")
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    conflicts = float(counters.hget(METRICS_KEY, "cas_conflicts") or 0) - conflicts_before
    counters.close()
    return {
        "seconds": elapsed,
        "group_epoch": view["group_epoch"],
        "heartbeats": heartbeats[0],
        "cas_conflicts": int(conflicts),
        "refusals": refusals,
    }


# Kafka's consumer-group defaults (KIP-848): group.consumer.heartbeat.interval.ms and
# group.consumer.session.timeout.ms, the time a silent member keeps its partitions (our lease).
KAFKA_HEARTBEAT_INTERVAL_MS, KAFKA_SESSION_TIMEOUT_MS = 5_000, 45_000


def _large_group_worker(
    port: int, prefix: str, group: str, names: list[str], state: Any, slot: int, phase: Any, out: Any
) -> None:
    """Members ``names`` of the large group, as the runtime drives them: each joins, then heartbeats
    every interval (a due heartbeat goes before the next join); 429 / 503 are retried after their
    Retry-After, any other refusal is a fence (the member joins again). ``state[4 * slot]`` is 1 while
    every member is joined and was last answered STABLE at one and the same assignment epoch (settled
    since the last bump: docs/protocol.md section 4; its own epoch is the one its assignment last
    moved at), ``state[4 * slot + 1]`` that assignment epoch, ``state[4 * slot + 2]`` how many are
    joined, ``state[4 * slot + 3]`` how many of them were last answered STABLE. While ``phase``
    is 1 (the steady window) it records each heartbeat's latency and whether it was answered steady
    (STABLE, the epoch it sent); at 2 it reports and stops."""
    api = LeanApi(port, MEMBER_TOKEN)
    path = f"/api/v1/groups/{prefix}/{group}/heartbeat"
    views: dict[str, dict[str, Any]] = {}
    waiting = list(reversed(names))  # not yet joined (popped from the end: names[0] first)
    fences = retried = not_steady = 0
    latencies: list[float] = []
    cpu0 = 0.0
    behind = 0.0  # the latest a due heartbeat was sent in the steady window, s

    def call(body: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal retried
        while True:
            status, payload = api.call("POST", path, body)
            if status == 200:
                return payload  # type: ignore[no-any-return]
            if status not in (429, 503):
                return None
            retried += 1
            retry_ms = float((payload or {}).get("details", {}).get("retry_after_ms", 100))
            time.sleep(min(1.0, retry_ms / 1000))

    queue: list[tuple[float, str]] = []  # (due, member), a heap
    checked = 0.0
    while phase.value != 2:
        now = time.perf_counter()
        if queue and queue[0][0] <= now:
            planned, member = heapq.heappop(queue)
            view = views[member]
            body = {"member_id": member, "member_epoch": view["member_epoch"], "owned_shards": owned(view)}
            measuring = phase.value == 1
            if measuring and cpu0 == 0.0:
                cpu0 = time.process_time()
            t0 = time.perf_counter()
            answer = call(body)
            if measuring:
                latencies.append(time.perf_counter() - t0)
                behind = max(behind, t0 - planned)
            if answer is None:  # fenced: join again
                fences += 1
                del views[member]
                waiting.append(member)
                continue
            steady = answer["member_state"] == "STABLE" and answer["member_epoch"] == body["member_epoch"]
            not_steady += measuring and not steady
            views[member] = answer
            heapq.heappush(queue, (planned + answer["heartbeat_interval_ms"] / 1000, member))
        elif waiting:
            member = waiting.pop()
            answer = call({"member_id": member, "member_epoch": 0, "capacity": 1, "join_seq": 1})
            if answer is None:
                raise RuntimeError(f"join of {member} refused")
            views[member] = answer
            heapq.heappush(queue, (time.perf_counter() + answer["heartbeat_interval_ms"] / 1000, member))
        else:
            time.sleep(max(0.0, min(0.05, queue[0][0] - now)) if queue else 0.05)
        if now - checked > 0.2:  # every member joined and settled at one epoch (a scan: not per request)
            checked = now
            epochs = {v["assignment_epoch"] for v in views.values()}
            settled = sum(v["member_state"] == "STABLE" for v in views.values())
            stable = not waiting and len(epochs) == 1 and settled == len(views)
            at = 4 * slot
            state[at], state[at + 1] = int(stable), (epochs.pop() if stable else 0)
            state[at + 2], state[at + 3] = len(views), settled
    out.put(
        {
            "latencies": latencies,
            "cpu": time.process_time() - cpu0 if cpu0 else 0.0,
            "fences": fences,
            "retried": retried,
            "not_steady": not_steady,
            "behind_s": behind,
        }
    )


def large_group(
    port: int,
    server_pgid: int,
    members: int,
    clients: int,
    seconds: float,
    form_limit_s: float,
    interval_ms: int = KAFKA_HEARTBEAT_INTERVAL_MS,
    lease_ms: int = KAFKA_SESSION_TIMEOUT_MS,
    redis_url: str = "",
) -> dict[str, Any]:
    """Section 5: form a group of ``members`` at Kafka's defaults (given up after ``form_limit_s``,
    saying how far it got), then let it stay for ``seconds``. With ``redis_url``, also the
    compare-and-set conflicts while it formed (the store's ``cas_conflicts`` counter)."""
    counters = redis.Redis.from_url(redis_url) if redis_url else None
    conflicts_before = float(counters.hget(METRICS_KEY, "cas_conflicts") or 0) if counters else 0.0
    prefix, group, shards = "large", f"large-{members}", 64
    create_group(
        port, prefix, group, members, shards,
        lease_ttl_ms=lease_ms, heartbeat_interval_ms=interval_ms,
    )  # fmt: skip
    ctx = multiprocessing.get_context("fork")
    state, phase, out = ctx.Array("q", 4 * clients), ctx.Value("i", 0), ctx.Queue()
    names = [f"large-{i}" for i in range(members)]
    procs = [
        ctx.Process(
            target=_large_group_worker, args=(port, prefix, group, names[c::clients], state, c, phase, out)
        )
        for c in range(clients)
    ]
    result: dict[str, Any] = {
        "members": members,
        "shards": shards,
        "clients": clients,
        "heartbeat_interval_ms": interval_ms,
        "lease_ttl_ms": lease_ms,
        "form_limit_s": form_limit_s,
    }
    cpu0, t0 = group_cpu_s([server_pgid]), time.perf_counter()
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    try:
        while True:  # formed: every client's members settled at one and the same assignment epoch
            flags, epochs = state[0::4], set(state[1::4])
            elapsed = time.perf_counter() - t0
            if all(flags) and len(epochs) == 1:
                break
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError(f"a client of the {members}-member group failed")
            if elapsed > form_limit_s:
                break
            time.sleep(0.1)
        result["formed"] = all(state[0::4]) and len(set(state[1::4])) == 1
        result["form_seconds"] = elapsed
        result["form_server_cpu_s"] = group_cpu_s([server_pgid]) - cpu0
        result["joined"], result["settled"] = sum(state[2::4]), sum(state[3::4])
        if counters is not None:
            conflicts = float(counters.hget(METRICS_KEY, "cas_conflicts") or 0) - conflicts_before
            result["form_cas_conflicts"] = int(conflicts)
        if not result["formed"]:
            return result
        epoch = state[1]
        phase.value = 1
        cpu1, t1 = group_cpu_s([server_pgid]), time.perf_counter()
        time.sleep(seconds)
        phase.value = 2
        window = time.perf_counter() - t1
        server_cpu = group_cpu_s([server_pgid]) - cpu1
        reports = [out.get(timeout=120) for _ in procs]
        result["stayed_stable"] = all(state[0::4]) and set(state[1::4]) == {epoch}
        result["group_epoch"] = epoch
    finally:
        phase.value = 2
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    latencies = sorted(x for r in reports for x in r["latencies"])
    n = max(1, len(latencies))
    result.update(
        {
            "seconds": window,
            "heartbeats": len(latencies),
            "per_second": len(latencies) / window,
            "offered_per_second": members / (interval_ms / 1000),
            "p50_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan"),
            "server_cpu_us_per_request": 1e6 * server_cpu / n,
            "client_cpu_us_per_request": 1e6 * sum(r["cpu"] for r in reports) / n,
            "not_steady": sum(r["not_steady"] for r in reports),
            "fences": sum(r["fences"] for r in reports),
            "retried": sum(r["retried"] for r in reports),
            "max_behind_ms": 1000 * max(r["behind_s"] for r in reports),
        }
    )
    return result


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgids: list[int]) -> float:
    """User + system CPU seconds of every live process in these process groups (threads included)."""
    total = 0
    wanted = set(pgids)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in wanted:  # fields[2]: pgrp; [11], [12]: utime, stime
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


PRODUCT_SERVER = "granian"  # what config/serve.py runs: the rows of sections 2 and 3, the base of section 4

# Variants of a server (the part of the kind after the server's name): "-no-door" serves config.wsgi with
# the heartbeat door off (RSC_HEARTBEAT_DOOR=false: every heartbeat through Django's handler, as before
# the door), "-floor" serves bench/floor_app.py (the server's own cost per request, no Django at all).
VARIANTS = ("-no-door", "-floor")


def server_argv(kind: str, port: int, workers: int, threads: int) -> list[str] | None:
    """The command line of HTTP server ``kind`` serving config.wsgi, or None if it is not installed."""
    for variant in VARIANTS:
        if kind.endswith(variant):
            argv = server_argv(kind.removesuffix(variant), port, workers, threads)
            if argv is not None and variant == "-floor":
                argv = [("bench.floor_app:application" if a.startswith("config.") else a) for a in argv]
            return argv
    if kind == "gunicorn-gthread":
        if not _installed("gunicorn"):
            return None
        return [
            sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}",
            "-w", str(workers), "-k", "gthread", "--threads", str(threads), "--log-level", "warning",
        ]  # fmt: skip
    if kind == "granian":  # the product's server, exactly as config/serve.py starts it
        return granian_argv("127.0.0.1", port, workers=workers, threads=threads)
    if kind == "gunicorn-gevent":  # the same gunicorn, green threads: each worker serves up to 100 at once
        if not _installed("gevent"):
            return None
        return [
            sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}",
            "-w", str(workers), "-k", "gevent", "--worker-connections", "100", "--log-level", "warning",
        ]  # fmt: skip
    if kind == "uvicorn-asgi":  # config.asgi: Django runs the (synchronous) views in a worker thread
        if not _installed("uvicorn"):
            return None
        return [
            sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
    raise ValueError(f"unknown server {kind!r}")


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def start_server(argv: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the server in a process group of its own; returns once it accepts connections."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{argv[:4]} did not start listening on {port}") from None
            time.sleep(0.1)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


ROW_KEYS = ("per_second", "p50_ms", "p99_ms", "server_cpu_us_per_request", "client_cpu_us_per_request")


def compare_servers(env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Steady heartbeats of 100 members through each installed candidate server: median of 3 runs."""
    rows: dict[str, Any] = {}
    for row in args.servers.split(","):
        kind, _, threads = row.partition("@")  # granian@4: granian with 4 threads per worker
        group = row.replace("@", "-t")  # a group of its own
        port = free_port()
        argv = server_argv(kind, port, args.workers, int(threads or args.threads))
        if argv is None:
            rows[row] = {"skipped": "not installed"}
            continue
        server_env = {**env, "RSC_HEARTBEAT_DOOR": "false"} if kind.endswith("-no-door") else env
        proc = start_server(argv, port, server_env)
        try:
            if kind.endswith("-floor"):  # any request gets {}: the members are only names
                members = [(f"bench-{i}", 1, []) for i in range(100)]
            else:
                members = setup_group(port, "servers", group, 100, shards=64)
            runs = []
            for _ in range(3):
                cpu0 = group_cpu_s([proc.pid])
                load = run_load(
                    _heartbeat_worker, (port, "servers", group, members, args.seconds), args.clients
                )
                cpu = group_cpu_s([proc.pid]) - cpu0
                runs.append({**load, "server_cpu_us_per_request": 1e6 * cpu / max(1, load["requests"])})
        finally:
            stop_server(proc)
        rows[row] = {key: statistics.median(run[key] for run in runs) for key in ROW_KEYS}
        rows[row]["runs"] = runs
        print(f"{row}: {rows[row]}", flush=True)
    return rows


def emit(results: dict[str, Any], out: str | None) -> None:
    """Print the results as JSON and, with --out, write them there (report.py reads that file)."""
    text = json.dumps(results, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument(
        "--threads", type=int, default=2, help="threads per server worker process (config/serve.py's default)"
    )
    parser.add_argument(
        "--servers",
        default=(
            "granian,granian@1,granian@4,granian-no-door,granian-floor,gunicorn-gthread,"
            "gunicorn-gthread-floor,gunicorn-gevent,uvicorn-asgi"
        ),
        help="compared HTTP servers ('' none); KIND@N: N threads per worker instead of --threads",
    )
    parser.add_argument("--large-members", default="2000,10000", help="section 5's groups ('' none)")
    parser.add_argument("--large-form-limit-s", type=float, default=300.0, help="give a group up after")
    parser.add_argument("--large-interval-ms", type=int, default=KAFKA_HEARTBEAT_INTERVAL_MS)
    parser.add_argument("--large-lease-ms", type=int, default=KAFKA_SESSION_TIMEOUT_MS)
    parser.add_argument("--large-clients", type=int, default=32)
    parser.add_argument("--large-seconds", type=float, default=30.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    results: dict[str, Any] = {
        "clients": args.clients,
        "seconds": args.seconds,
        "workers": args.workers,
        "threads": args.threads,
    }
    with RedisServer() as server:
        results["raw_redis_ping"] = run_load(_ping_worker, (server.url, args.seconds), args.clients)
        port = free_port()
        env = {
            **os.environ,
            "REDIS_URL": server.url,
            "RSC_MEMBER_TOKENS": MEMBER_TOKEN,
            "RSC_ADMIN_TOKENS": ADMIN_TOKEN,
            # The "1 member" row drives one member id as fast as the clients can (a load test, not a
            # member), far above any floor the settings allow for long (1 ms, bursts of 10,000: about
            # 15,000 heartbeats in its 5 s; a faster run was refused 429 there), so the floor is off.
            "RSC_HEARTBEAT_FLOOR_MS": "0",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(64),  # DEBUG off refuses to start without a real key
            "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "DATABASE_URL": f"sqlite:///{tempfile.mkdtemp(prefix='rsc-bench-')}/bench.sqlite3",
        }
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        argv = server_argv(PRODUCT_SERVER, port, args.workers, args.threads)
        assert argv is not None
        api = start_server(argv, port, env)
        try:
            for size in sizes:
                t0 = time.perf_counter()
                members = setup_group(port, "bench", f"g{size}", size, shards=64)
                setup_s = time.perf_counter() - t0
                load = run_load(
                    _heartbeat_worker, (port, "bench", f"g{size}", members, args.seconds), args.clients
                )
                results[f"heartbeat_{size}"] = {**load, "setup_seconds": setup_s}
                print(f"{size} members: {load}", flush=True)
            results["convergence_100"] = convergence(port, 100, 64, interval_ms=100, redis_url=server.url)
            results["large_groups"] = []
            for size in (int(x) for x in args.large_members.split(",") if x):
                row = large_group(
                    port, api.pid, size, args.large_clients, args.large_seconds, args.large_form_limit_s,
                    args.large_interval_ms, args.large_lease_ms, server.url,
                )  # fmt: skip
                results["large_groups"].append(row)
                print(f"large group: {row}", flush=True)
        finally:
            stop_server(api)
        if args.servers:
            results["servers"] = {
                "workers": args.workers,
                "threads": args.threads,
                "members": 100,
                "base": PRODUCT_SERVER,  # the row report.py compares every other row with
                "rows": compare_servers(env, args),
            }
    emit(results, args.out)


if __name__ == "__main__":
    main()
