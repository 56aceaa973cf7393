"""Producer benchmark: ``Producer.send`` / ``send_batch`` against raw redis-py XADD of the same envelope,
and the data plane's functions (``FCALL``) against the same Lua run as scripts (``EVALSHA``).

    python bench/producer_bench.py --out FILE [--messages N] [--batches B] [--batch-size S]
                                   [--repetitions R] [--calls C]

One private Redis (config/embedded_redis.py, a free port, never 6379), one stream prefix with 8 shards
created by the real store, one client per side built the same way (``consumers.dataplane.redis_client``).

What is compared (docs/producer.md, "Performance"):

* **single**: ``producer.send(prefix, key, payload)`` against ``client.xadd(stream, fields)``;
* **batch**: ``producer.send_batch(prefix, 100 items)`` against a pipeline of 100 ``XADD`` of the same
  entries (``transaction=False``), already encoded;
* **idempotency** (docs/producer.md, "Enqueue once"): ``send`` and ``send_batch`` with a new
  idempotency key per entry against the same producer without keys (:func:`idempotency_cost`).

Fairness: the raw side is the limit, so it does only what it must. Its entries are encoded *before*
the timed loop, with the standard library only (no project helper): a key string, the payload through
``json.dumps``, a uuid4 hex ``event_id``, the key's bytes and ``{}`` headers, packed into the one
``envelope`` field (docs/producer.md, "Envelope") by one bytes formatting, with the numbers the
producer's entries carry in front, so the entries are the same one field of the same size; the timed
loop only sends them (``XADD``, or a pipeline of 100 ``XADD``). The producer's inputs (the key strings
and payload dicts) are built before the timed loop too; its timed work is ``send`` / ``send_batch``
itself: encoding, routing (murmur2 of the key), the call with its sealed-version check inside Redis,
the results. That is the price measured. The raw side picks its stream round-robin.

Per case and repetition: messages per second (wall clock), client CPU µs per message
(``time.process_time``) and Redis CPU µs per message (``INFO cpu`` used_cpu_sys + used_cpu_user
deltas: everything the server spent, sockets included), plus the top-level command's own time from
``INFO commandstats`` (``fcall`` for the producer, ``xadd`` for the raw side). In each repetition the
two sides of a comparison run in alternating chunks (500 sends, or 10 batches; the side that goes first
alternates too), so that a change in the machine's load hits both sides of a ratio alike. Ratios are
producer / raw messages per second per repetition; the medians over the repetitions are reported.

**FCALL against EVALSHA** (docs/redis-acl.md, "No code from clients": members and producers call a
Redis Functions library instead of sending scripts). The same Lua, the same arguments, the same
client-side call (``rsc_redis.clients.HotFunction`` against ``HotScript``, or one plain pipeline), on
the same Redis, in alternating chunks as above, ``--calls`` operations per side and repetition:

* **single produce**: ``Producer.send`` as it is (``FCALL``), and with its hot call swapped for a
  ``HotScript`` of ``rsc_redis/keys.lua`` + ``produce_route.lua`` + ``produce.lua`` (``EVALSHA``);
* **pipelined batch**: one pipeline of 100 single-entry ``produce`` calls, ``FCALL`` against
  ``EVALSHA`` (the per-call cost, with no round trip per call);
* **fenced fetch**: ``DataPlane.fetch`` of a member's 8 shards with nothing new (a member's idle poll:
  the fence of every shard, one ``XREADGROUP`` of all), as it is against its hot call swapped for a
  ``HotScript`` of the lease-record rule + ``fence.lua`` + ``fetch.lua``.

Per case: operations per second, client CPU µs per operation, Redis CPU µs per operation and the
command's own µs per call (``cmdstat_fcall`` / ``cmdstat_evalsha``); medians of the repetitions, and the
ratio FCALL / EVALSHA of each (below 1: FCALL costs less).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from config.embedded_redis import FORBIDDEN_PORT, RedisServer  # noqa: E402
from consumers.dataplane import DataPlane, library, redis_client  # noqa: E402
from consumers.dataplane.plane import ShardFetch  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from coordinator.protocol.commands import CreateGroup  # noqa: E402
from coordinator.protocol.group import Heartbeat  # noqa: E402
from coordinator.protocol.model import GroupConfig, Shard  # noqa: E402
from coordinator.store.redis_store import MetadataStore  # noqa: E402
from rsc_redis.clients import HotScript  # noqa: E402
from rsc_redis.dead_letter_mac import MacKeys  # noqa: E402
from rsc_redis.keys import meta_key, stream_key  # noqa: E402
from rsc_redis.lua import keys_lua, lease_record_lua  # noqa: E402

PREFIX = "pbench"
GROUP = "pbench-g"
SHARDS = 8
# The benchmark's own dead-letter MAC keys: the library must be loaded (as the coordinator does); no
# dead letter is written here.
BENCH_KEYS = [MacKeys.derive("producer_bench")]
DATAPLANE = ROOT / "rsc_redis" / "dataplane"  # the library's Lua (rsc_redis/dataplane/library.py)
RAW_STREAMS = [f"raw:{{{PREFIX}}}:{i}" for i in range(SHARDS)]
PRODUCER_STREAMS = [stream_key(PREFIX, Shard(version=1, index=i)) for i in range(SHARDS)]
JSON = b"application/json"


def payload_for(i: int) -> dict[str, Any]:
    """About 80 bytes of JSON: a small business event."""
    return {"order": i, "customer": f"customer-{i % 1000}", "total": 12.5, "items": ["sku-1", "sku-2"]}


def raw_fields(i: int) -> dict[str, Any]:
    """The packed envelope the producer writes, encoded here with the standard library."""
    key = f"customer-{i % 1000}".encode()
    event_id = uuid.uuid4().hex.encode()
    payload = json.dumps(payload_for(i), separators=(",", ":"), ensure_ascii=False).encode()
    envelope = b"1 0 %d %d %d 2\n%b%b%b{}%b" % (  # version 1, produced_at_ms not written (the id's ms)
        len(event_id),
        len(key),
        len(JSON),
        event_id,
        key,
        JSON,
        payload,
    )
    return {"envelope": envelope}


class Probe:
    """Adds up wall time, client CPU, Redis CPU and one command's calls and time over timed chunks."""

    def __init__(self, admin: redis.Redis, command: str) -> None:
        self.admin = admin
        self.command = command
        self.totals = dict.fromkeys(("messages", "wall_s", "cpu_s", "redis_cpu_s", "usec", "calls"), 0.0)

    def _redis(self) -> tuple[float, tuple[int, int]]:
        cpu = self.admin.info("cpu")
        stat = self.admin.info("commandstats").get(f"cmdstat_{self.command}", {"calls": 0, "usec": 0})
        return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), (
            int(stat["calls"]),
            int(stat["usec"]),
        )

    def measure(self, loop: Callable[[int, int], None], start: int, stop: int, messages: int) -> None:
        redis_cpu0, (calls0, usec0) = self._redis()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        loop(start, stop)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        redis_cpu1, (calls1, usec1) = self._redis()
        t = self.totals
        t["messages"] += messages
        t["wall_s"] += wall
        t["cpu_s"] += cpu
        t["redis_cpu_s"] += redis_cpu1 - redis_cpu0
        t["usec"] += usec1 - usec0
        t["calls"] += calls1 - calls0

    def row(self) -> dict[str, float]:
        t, n = self.totals, self.totals["messages"]
        return {
            "msgs_per_s": round(n / t["wall_s"], 1),
            "client_cpu_us_per_msg": round(t["cpu_s"] * 1e6 / n, 2),
            "redis_cpu_us_per_msg": round(t["redis_cpu_s"] * 1e6 / n, 2),
            f"redis_{self.command}_us_per_msg": round(t["usec"] / n, 2),
            f"{self.command}_calls": int(t["calls"]),
            "messages": int(n),
        }


def items_for(start: int, stop: int) -> list[tuple[str, dict[str, Any]]]:
    """The producer's inputs: ``(partition key, payload)``, built before the timed loop."""
    return [(f"customer-{i % 1000}", payload_for(i)) for i in range(start, stop)]


def single_producer(producer: Producer, items: list[tuple[str, Any]]) -> Callable[[int, int], None]:
    def loop(start: int, stop: int) -> None:
        send = producer.send
        for key, payload in items[start:stop]:
            send(PREFIX, key, payload)

    return loop


def single_raw(client: redis.Redis, entries: list[tuple[str, dict[str, Any]]]) -> Callable[[int, int], None]:
    """``entries``: ``(stream, fields)``, encoded before the timed loop (:func:`raw_entries`)."""

    def loop(start: int, stop: int) -> None:
        xadd = client.xadd
        for stream, fields in entries[start:stop]:
            xadd(stream, fields)

    return loop


def batch_producer(producer: Producer, items: list[tuple[str, Any]], size: int) -> Callable[[int, int], None]:
    def loop(start: int, stop: int) -> None:
        send_batch = producer.send_batch
        for b in range(start, stop):
            send_batch(PREFIX, items[b * size : (b + 1) * size])

    return loop


def keyed_single(
    producer: Producer, items: list[tuple[str, Any]], keys: list[str]
) -> Callable[[int, int], None]:
    """``send`` with an idempotency key per entry (docs/producer.md, "Enqueue once")."""

    def loop(start: int, stop: int) -> None:
        send = producer.send
        for (key, payload), once in zip(items[start:stop], keys[start:stop], strict=True):
            send(PREFIX, key, payload, idempotency_key=once)

    return loop


def keyed_batch(
    producer: Producer, items: list[tuple[str, Any]], keys: list[str], size: int
) -> Callable[[int, int], None]:
    """``send_batch`` with an idempotency key per item."""

    def loop(start: int, stop: int) -> None:
        send_batch = producer.send_batch
        for b in range(start, stop):
            send_batch(
                PREFIX, items[b * size : (b + 1) * size], idempotency_keys=keys[b * size : (b + 1) * size]
            )

    return loop


def batch_raw(
    client: redis.Redis, entries: list[tuple[str, dict[str, Any]]], size: int
) -> Callable[[int, int], None]:
    def loop(start: int, stop: int) -> None:
        for b in range(start, stop):
            pipe = client.pipeline(transaction=False)
            for stream, fields in entries[b * size : (b + 1) * size]:
                pipe.xadd(stream, fields)
            pipe.execute()

    return loop


def raw_entries(count: int) -> list[tuple[str, dict[str, Any]]]:
    """The raw side's ``count`` entries, encoded once, before any timed loop: round-robin streams."""
    return [(RAW_STREAMS[i % SHARDS], raw_fields(i)) for i in range(count)]


def compare(
    admin: redis.Redis,
    sides: tuple[tuple[Callable[[int, int], None], str], tuple[Callable[[int, int], None], str]],
    units: int,
    chunk: int,
    per_unit: int,
) -> list[dict[str, float]]:
    """One repetition: ``units`` loop steps per side, in chunks that alternate between the sides (and
    which side goes first), so that a change in the machine's load hits both alike."""
    probes = [Probe(admin, command) for _, command in sides]
    for n, start in enumerate(range(0, units, chunk)):
        stop = min(units, start + chunk)
        order = (0, 1) if n % 2 == 0 else (1, 0)
        for side in order:
            probes[side].measure(sides[side][0], start, stop, (stop - start) * per_unit)
    for stream in RAW_STREAMS + PRODUCER_STREAMS:  # memory stays flat across repetitions
        admin.xtrim(stream, maxlen=0)
    return [p.row() for p in probes]


def idempotency_cost(
    admin: redis.Redis,
    producer: Producer,
    single_items: list[tuple[str, Any]],
    batch_items: list[tuple[str, Any]],
    size: int,
    repetitions: int,
) -> dict[str, Any]:
    """What an idempotency key costs (docs/producer.md, "Enqueue once"): keyed ``send`` / ``send_batch``
    against the same producer's plain ones, in alternating chunks as :func:`compare` runs them. Every
    key is new (a uuid4 hex per entry and repetition, made before the timed loop, as a job id would be):
    each keyed entry is looked up, appended and recorded, the generations closing at the default cap as
    they would under that load. Ratios: keyed / plain messages per second per repetition."""
    messages, batches = len(single_items), len(batch_items) // size
    names = ("single_keyed", "single_plain", f"batch_{size}_keyed", f"batch_{size}_plain")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    plain_single, plain_batch = (
        single_producer(producer, single_items),
        batch_producer(producer, batch_items, size),
    )
    for _ in range(repetitions):
        single_keys = [uuid.uuid4().hex for _ in range(messages)]
        batch_keys = [uuid.uuid4().hex for _ in range(batches * size)]
        single = ((keyed_single(producer, single_items, single_keys), "fcall"), (plain_single, "fcall"))
        batch = ((keyed_batch(producer, batch_items, batch_keys, size), "fcall"), (plain_batch, "fcall"))
        compare_both(admin, (single, batch), (messages, batches, size), names, runs)
    return {
        "medians": {name: median_row(rows) for name, rows in runs.items()},
        "ratios": {
            "single_keyed_over_plain": ratio_summary(runs, *names[:2]),
            f"batch_{size}_keyed_over_plain": ratio_summary(runs, *names[2:]),
        },
        "runs": runs,
    }


def compare_both(
    admin: redis.Redis,
    sides: tuple[Any, Any],
    counts: tuple[int, int, int],
    names: tuple[str, ...],
    runs: dict[str, list[dict[str, float]]],
) -> None:
    """One repetition of a single-send and a batch comparison (``sides``: their two pairs of sides;
    ``counts``: messages, batches, batch size); each side's row goes to ``runs`` under its name
    (``names``: the single comparison's two, then the batch's two)."""
    (single, batch), (messages, batches, size) = sides, counts
    for (a, b), rows in zip(
        (names[:2], names[2:]),
        (compare(admin, single, messages, 500, 1), compare(admin, batch, batches, 10, size)),
        strict=True,
    ):
        runs[a].append(rows[0])
        runs[b].append(rows[1])


def ratio_summary(runs: dict[str, list[dict[str, float]]], a: str, b: str) -> dict[str, Any]:
    """Per repetition, ``a``'s messages per second over ``b``'s, and their median."""
    ratios = [round(x["msgs_per_s"] / y["msgs_per_s"], 3) for x, y in zip(runs[a], runs[b], strict=True)]
    return {"median": statistics.median(ratios), "runs": ratios}


def threaded_sends(url: str, admin: redis.Redis, linger_ms: float | None, threads: int, each: int) -> dict:
    """``threads`` threads, each sending ``each`` events with one shared producer; wall clock, script
    calls and per-send latency (not a ratio: linger trades latency for calls, see docs/producer.md)."""
    client = redis_client(url, max_connections=threads + 1)
    producer = Producer(client, linger_ms=linger_ms)
    producer.send(PREFIX, "warm-up", 0)
    latencies: list[float] = []
    start = threading.Barrier(threads + 1)

    def sender(t: int) -> None:
        mine = []
        start.wait()
        for i in range(t * each, (t + 1) * each):
            t0 = time.perf_counter()
            producer.send(PREFIX, f"customer-{i % 1000}", payload_for(i))
            mine.append(time.perf_counter() - t0)
        latencies.extend(mine)

    workers = [threading.Thread(target=sender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    calls0 = int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
    start.wait()
    wall0 = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - wall0
    calls = int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)) - calls0
    client.close()
    latencies.sort()
    n = threads * each
    return {
        "msgs_per_s": round(n / wall, 1),
        "script_calls_per_msg": round(calls / n, 3),
        "p50_ms": round(latencies[n // 2] * 1e3, 3),
        "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1e3, 3),
    }


def median_row(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}


# ------------------------------------------------------------------------------- FCALL against EVALSHA


def script_text(name: str) -> str:
    """The Lua of ``name`` as a script for EVALSHA, as the data plane registered it before the library:
    the shared helpers in front of the operation's file."""
    body = (DATAPLANE / f"{name}.lua").read_text()
    if name in library.FENCED:
        return lease_record_lua() + "\n" + (DATAPLANE / "fence.lua").read_text() + "\n" + body
    if name in ("produce", "idempotent_produce"):  # the route check they share
        return keys_lua() + "\n" + (DATAPLANE / "produce_route.lua").read_text() + "\n" + body
    return keys_lua() + "\n" + body


def as_scripts(producer: Producer, plane: DataPlane, client: redis.Redis) -> tuple[Producer, DataPlane]:
    """The same objects, whose hot calls run the same Lua as scripts (EVALSHA) instead of functions."""
    producer._hot = HotScript(client, script_text("produce"))  # type: ignore[assignment]
    plane._fetch = HotScript(client, script_text("fetch"))  # type: ignore[assignment]
    return producer, plane


def fetch_loop(plane: DataPlane, epoch: int) -> Callable[[int, int], None]:
    shards = [ShardFetch(Shard(version=1, index=i), epoch, token="0") for i in range(SHARDS)]

    def loop(start: int, stop: int) -> None:
        fetch = plane.fetch
        for _ in range(start, stop):
            fetch("bench-m", shards, 10)

    return loop


def pipelined_calls(client: redis.Redis, head: tuple[str, str], size: int) -> Callable[[int, int], None]:
    """``size`` single-entry produce calls (``*head`` = FCALL name or EVALSHA sha) in one pipeline."""
    meta = meta_key(PREFIX)

    def loop(start: int, stop: int) -> None:
        for b in range(start, stop):
            pipe = client.pipeline(transaction=False)
            for i in range(b * size, (b + 1) * size):
                index = i % SHARDS
                value = json.dumps(payload_for(i)).encode()
                pipe.execute_command(*head, 2, meta, PRODUCER_STREAMS[index], "1", SHARDS, index, 1, value)
            pipe.execute()

    return loop


def join_member(store: MetadataStore) -> int:
    """One member of the group, stable and owning every shard; its epoch."""
    r = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="bench-m", member_epoch=0, capacity=1))
    for _ in range(5):
        owned = frozenset(Shard.parse(x["shard"]) for x in r["shards"])
        r = store.heartbeat(
            PREFIX, GROUP, Heartbeat(member_id="bench-m", member_epoch=r["member_epoch"], owned=owned)
        )
    return int(r["member_epoch"])


def functions_vs_scripts(
    url: str, admin: redis.Redis, store: MetadataStore, calls: int, repetitions: int
) -> dict:
    """FCALL against EVALSHA of the same operation (module docstring); medians and ratios."""
    epoch = join_member(store)
    fcall_client, eval_client = redis_client(url), redis_client(url)
    producer_f, plane_f = Producer(fcall_client), DataPlane(fcall_client, PREFIX, GROUP)
    producer_e, plane_e = as_scripts(
        Producer(eval_client), DataPlane(eval_client, PREFIX, GROUP), eval_client
    )
    produce_sha = eval_client.script_load(script_text("produce"))
    batch = 100
    items = items_for(0, calls)
    cases = {
        "single_produce": (
            (single_producer(producer_f, items), "fcall"),
            (single_producer(producer_e, items), "evalsha"),
            calls,
            max(1, calls // 10),
            1,
        ),
        f"pipelined_{batch}_produce": (
            (pipelined_calls(fcall_client, ("FCALL", library.function_name("produce")), batch), "fcall"),
            (pipelined_calls(eval_client, ("EVALSHA", produce_sha), batch), "evalsha"),
            max(1, calls // batch),
            max(1, calls // batch // 10),
            batch,
        ),
        f"fenced_fetch_{SHARDS}_shards": (
            (fetch_loop(plane_f, epoch), "fcall"),
            (fetch_loop(plane_e, epoch), "evalsha"),
            calls,
            max(1, calls // 10),
            1,
        ),
    }
    runs: dict[str, dict[str, list[dict[str, float]]]] = {c: {"fcall": [], "evalsha": []} for c in cases}
    for sides_f, sides_e, units, chunk, per_unit in cases.values():  # warm-up: connections, caches
        compare(admin, (sides_f, sides_e), min(units, 2 * chunk), chunk, per_unit)
    for _ in range(repetitions):
        for case, (side_f, side_e, units, chunk, per_unit) in cases.items():
            rows = compare(admin, (side_f, side_e), units, chunk, per_unit)
            runs[case]["fcall"].append(rows[0])
            runs[case]["evalsha"].append(rows[1])
    for c in (fcall_client, eval_client):
        c.close()
    result: dict[str, Any] = {"calls": calls, "repetitions": repetitions, "cases": {}}
    for case, sides in runs.items():
        medians = {side: median_row(rows) for side, rows in sides.items()}
        f, e = medians["fcall"], medians["evalsha"]
        result["cases"][case] = {
            "medians": medians,
            "ratios_fcall_over_evalsha": {
                "ops_per_s": round(f["msgs_per_s"] / e["msgs_per_s"], 3),
                "client_cpu_us_per_op": round(f["client_cpu_us_per_msg"] / e["client_cpu_us_per_msg"], 3),
                "redis_cpu_us_per_op": round(f["redis_cpu_us_per_msg"] / e["redis_cpu_us_per_msg"], 3),
                "command_us_per_op": round(f["redis_fcall_us_per_msg"] / e["redis_evalsha_us_per_msg"], 3),
            },
        }
    return result


def durability_levels(sends: int, batches: int, size: int) -> dict[str, Any]:
    """Each durability level of the producer (docs/producer.md, "Durability") on a primary with one
    replica on the same machine: single sends and batches of ``size``, one thread, the levels in
    alternating chunks; entries/s and the p50 / p99 latency of one call."""
    from config.embedded_redis import HOST

    with (
        RedisServer() as primary,
        RedisServer(extra_args=["--replicaof", HOST, str(primary.port)]) as replica,
    ):
        admin = redis.Redis.from_url(primary.url)
        with redis.Redis.from_url(replica.url, decode_responses=True) as r:
            while r.info("replication").get("master_link_status") != "up":
                time.sleep(0.05)
        store = MetadataStore(admin, dead_letter_keys=BENCH_KEYS)
        store.functions.ensure()
        config = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)
        store.create_group(
            CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=SHARDS, config=config)
        )
        client = redis_client(primary.url)
        producers = {level: Producer(client, durability=level) for level in ("primary", "replicated")}
        seconds: dict[str, dict[str, list[float]]] = {lv: {"single": [], "batch": []} for lv in producers}
        for chunk in range(max(1, sends // 500)):
            for level, producer in producers.items():
                for i in range(500):
                    started = time.perf_counter()
                    producer.send(PREFIX, f"key-{chunk}-{i}", payload_for(i))
                    seconds[level]["single"].append(time.perf_counter() - started)
        for chunk in range(max(1, batches // 10)):
            for level, producer in producers.items():
                for _ in range(10):
                    items = [(f"key-{chunk}-{i}", payload_for(i)) for i in range(size)]
                    started = time.perf_counter()
                    producer.send_batch(PREFIX, items)
                    seconds[level]["batch"].append(time.perf_counter() - started)
        version = admin.info("server")["redis_version"]
        client.close()
        admin.close()

    def row(samples: list[float], per_call: int) -> dict[str, float]:
        ordered = sorted(samples)
        return {
            "entries_per_s": round(per_call * len(samples) / sum(samples)),
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
            "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3),
        }

    return {
        "redis": version,
        "setting": "primary + 1 replica on the same machine, one sending thread",
        "levels": {
            level: {"single": row(cases["single"], 1), f"batch_{size}": row(cases["batch"], size)}
            for level, cases in seconds.items()
        },
    }


def code_state() -> str:
    """The commit measured, and the product files changed on top of it (the tree may be in progress)."""
    import subprocess

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "consumers", "coordinator", "rsc_redis", "config")
    files = ", ".join(line[3:] for line in changed.splitlines())
    return git("rev-parse", "--short", "HEAD") + (f" with uncommitted changes to {files}" if files else "")


def run(messages: int, batches: int, size: int, repetitions: int, calls: int = 5_000) -> dict[str, Any]:
    names = (
        "single_producer",
        "single_raw_xadd",
        f"batch_{size}_producer",
        f"batch_{size}_raw_pipelined_xadd",
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    code, started_at = code_state(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with RedisServer() as server:
        assert server.port != FORBIDDEN_PORT
        admin = redis.Redis.from_url(server.url)
        # A long lease: the fetch case's member stays live through the whole run without heartbeats.
        config = GroupConfig(lease_ttl_ms=3_600_000, heartbeat_interval_ms=1_000)
        create = CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=SHARDS, config=config)
        store = MetadataStore(admin, dead_letter_keys=BENCH_KEYS)
        store.functions.ensure()  # the data plane's library, as the coordinator loads it
        store.create_group(create, start_from="latest")
        producer_client, raw_client = redis_client(server.url), redis_client(server.url)
        producer = Producer(producer_client)
        producer.require_functions()
        # Inputs and raw entries for every loop, built once here: nothing of it is timed.
        single_items, batch_items = items_for(0, messages), items_for(0, batches * size)
        single_entries, batch_entries = raw_entries(messages), raw_entries(batches * size)
        single = (
            (single_producer(producer, single_items), "fcall"),
            (single_raw(raw_client, single_entries), "xadd"),
        )
        batch = (
            (batch_producer(producer, batch_items, size), "fcall"),
            (batch_raw(raw_client, batch_entries, size), "xadd"),
        )
        # Warm-up: connections, the producer's route cache, the streams.
        compare(admin, single, min(500, messages), 500, 1)
        compare(admin, batch, min(5, batches), 5, size)
        for _ in range(repetitions):
            compare_both(admin, (single, batch), (messages, batches, size), names, runs)
        linger = {
            f"{threads}_threads_linger_{ms or 'off'}": threaded_sends(server.url, admin, ms, threads, 2_000)
            for threads in (1, 8)
            for ms in (None, 1)
        }
        keyed = idempotency_cost(admin, producer, single_items, batch_items, size, repetitions)
        versus = functions_vs_scripts(server.url, admin, store, calls, repetitions)
        version = admin.info("server")["redis_version"]
        for c in (admin, producer_client, raw_client):
            c.close()

    return {
        "code": code,
        "run_at": started_at,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "redis": version,
        "settings": {
            "shards": SHARDS,
            "single_messages": messages,
            "batches": batches,
            "batch_size": size,
            "repetitions": repetitions,
        },
        "medians": {name: median_row(rows) for name, rows in runs.items()},
        "ratios": {
            "single_over_raw_xadd": ratio_summary(runs, *names[:2]),
            f"batch_{size}_over_pipelined_xadd": ratio_summary(runs, *names[2:]),
        },
        "targets": {"single_over_raw_xadd": 0.8, f"batch_{size}_over_pipelined_xadd": 0.9},
        "runs": runs,
        "linger": linger,
        "idempotency": keyed,
        "functions_vs_scripts": versus,
        "durability": durability_levels(messages // 4, batches // 4, size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON results here (default: stdout only)")
    parser.add_argument("--messages", type=int, default=20_000, help="single sends per repetition and side")
    parser.add_argument("--batches", type=int, default=400, help="batches per repetition and side")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--calls",
        type=int,
        default=5_000,
        help="FCALL against EVALSHA: operations per case, side and repetition",
    )
    args = parser.parse_args()
    results = run(args.messages, args.batches, args.batch_size, args.repetitions, args.calls)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    versus = {c: v["ratios_fcall_over_evalsha"] for c, v in results["functions_vs_scripts"]["cases"].items()}
    print(json.dumps({"durability": results["durability"]}, indent=2))
    print(
        json.dumps(
            {
                "medians": results["medians"],
                "ratios": results["ratios"],
                "idempotency": results["idempotency"]["ratios"],
                "fcall_over_evalsha": versus,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
