"""Slow jobs (issue 27): a listener's ``ordering`` ("shard", "key", "none") against a Celery worker.

    python bench/jobs_bench.py [--out FILE] [--reps R] [--quick]

One run, one machine, one private Redis for the product (tests/e2e/stack.py: the coordinator API on
granian, the tick) and one private Redis for Celery's broker. Every consumer is a real process; every
figure comes from this run; every wait is bounded.

1. ``slow_jobs``: a handler that sleeps 50 ms, and one that sleeps 1 s. 8 shards, 2 member processes
   with 16 worker threads each (``RSC_RUNTIME = {"max_concurrency": 16}``, group ``max_concurrency``
   16: 32 workers), 256 partition keys. Sides:

   * ``shard``, ``key``, ``none``: ``manage.py run_member`` processes (this script's ``member`` mode: it
     declares the listener with that ``ordering`` and calls the ``run_member`` command), one consumer
     group per side on the same stream keys;
   * ``celery``: one Celery worker process, ``--pool threads -c 32``, consuming the same sleeping task
     through its Redis broker (its own server), Celery's defaults otherwise (early ack, prefetch
     multiplier 4; gossip, mingle and worker heartbeats off).

   Each repetition produces one backlog while every consumer process is stopped (SIGSTOP; a group's
   members are stopped only once it is STABLE, balanced, and has handled a warm-up entry of every
   key, so start-up, group formation and take-over are not timed), and enqueues the same jobs for
   Celery. Then one side at a time is let run (SIGCONT) until its backlog is done, as Redis reports it
   (every entry delivered and acked; for Celery: every job's handler returned), and stopped again.
   The ``shard`` side, which is capped at shards / job time, consumes only the newest
   ``--shard-fraction`` of the backlog (its group is moved past the rest), so that its window stays
   about as long as the others'. Per side: jobs/s, the ratio to the pool's ideal (workers / job time),
   the ratio to Celery (per repetition, then the median), client CPU per job (user + system time of
   the side's processes, /proc), Redis CPU per job (``INFO cpu`` of the side's server, which for the
   product includes heartbeats and the tick), the workers' mean occupancy (handler time summed over
   the window), and from the handlers' log the delivery checker's figures (tests/e2e/checker.py):
   lost, duplicates, per-key reorders (a first handling of a key's entry after a later-sent one).
   Every handler (ours and Celery's) writes one JSON line per job, the same line.
   The **bound** of a window is what the run's own split of the jobs allows with handlers taking
   exactly the job time: a member runs only its own shards' jobs (ceil(its jobs / its workers) job
   times), under "shard" a shard's jobs run one at a time, under "key" a key's; so "x bound" below 1 is
   the consumer's own overhead, and "x ideal" below "x bound" is the placement (keys on shards, shards
   on members).
2. ``failing_key``: ``ordering="key"``, ``on_error="redeliver"`` (``--redeliver-backoff-ms``,
   max_deliveries 1000), the 50 ms handler. Each repetition starts two fresh groups that read the same
   backlog: ``base``, and ``failing``, in which every delivery of ``k0`` raises. The other keys'
   throughput (their entries / the time until every one of them was handled, from the handlers' log)
   in ``failing`` over ``base``. After the last repetition the failing group gets a second backlog
   (``persisting``): the key's entries of both backlogs are read and wait behind its failing head.
3. ``fast_handlers``: a no-op handler (no log line), 8 shards, 4 members, ``--fast-messages`` entries
   per repetition, for each of ``--fast-workers`` (1: e2e_bench's shape; 16): ``key`` and ``none``
   against ``shard``, msgs/s (SIGCONT to every entry acked) and CPU per message.

A section that fails (a group that never forms or never handles its warm-up, within bounded waits) is
recorded with its error, naming the exceptions its processes logged, and the others still run. The
JSON states the commit and the product files changed on top of it; ``targets`` lists issue 27's
figures with this run's values: its throughput targets on the sustained load (the issue's own way of
measuring), and for the drains the consumer's share of the window (x bound), since a drain's x ideal
and x Celery are bounded by the placement of keys on members (docs/consumers.md, "What 'none' is
not"). ``--quick``: tiny sizes and one repetition (a smoke run).

Sides whose ``ordering`` the installed ``consumers.listener.Listener`` does not accept are skipped,
and the JSON says why. Figures from a loaded 2-core box are noisy: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

SHARDS, KEYS = 8, 256
LISTENER = "jobs"
CELERY_QUEUE, CELERY_TASK = "jobs", "jobs_bench.sleep"
# Consumers are stopped while the other sides run, so their lease must outlast that (as e2e_bench).
PAUSED_LEASE_TTL_MS, PAUSED_HEARTBEAT_INTERVAL_MS = 600_000, 1000
ORDERINGS = ("shard", "key", "none")
# A drain of a finite backlog is judged by the consumer's own share of it: the window the run's split of
# the jobs over members allows (its placement, which the fence fixes), over the window measured.
DRAIN_BOUND = 0.95


# ================================================================================ the member process
# ``jobs_bench.py member ...``: one run_member process whose listener is declared here.

_LOG_FD: int | None = None
_FAIL_KEY = ""
_NAME = ""


class JobFailed(RuntimeError):
    """The failing key's job: every delivery raises."""


def job(entry: Any) -> None:
    """The slow job: sleep the payload's ``ms``, write one JSON line (before returning, so before the
    ack), raise for the failing key (after its sleep: a job that ran and failed)."""
    start_ns = time.monotonic_ns()
    payload = entry.payload
    ms = payload.get("ms", 0)
    if ms:
        time.sleep(ms / 1000)
    if payload.get("warm"):
        return
    key = entry.partition_key
    failed = key == _FAIL_KEY
    if _LOG_FD is not None:
        row = {
            "event_id": entry.event_id,
            "partition_key": key,
            "routing_version": entry.routing_version,
            "shard": str(entry.shard),
            "seq": payload["seq"],
            "member_id": _NAME,
            "start_ns": start_ns,
            "end_ns": time.monotonic_ns(),
            "failed": failed,
        }
        os.write(_LOG_FD, (json.dumps(row, separators=(",", ":")) + "\n").encode())
    if failed:
        raise JobFailed(f"failing key {key}: seq {payload['seq']}")


def noop(entry: Any) -> None:
    """The fast handler: touches nothing (like e2e_bench's ``e2e_noop``)."""


def member_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="jobs_bench.py member")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--log", default="", help="the handled log ('' with --noop)")
    parser.add_argument("--workers", type=int, required=True, help="RSC_RUNTIME max_concurrency")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--ordering", default="", help="'' : the listener's default (no option passed)")
    parser.add_argument("--max-in-flight", type=int, default=0, help="0: the listener's default")
    parser.add_argument("--noop", action="store_true")
    parser.add_argument("--fail-key", default="")
    parser.add_argument("--redeliver-backoff-ms", type=int, default=0, help="0: on_error='keep'")
    parser.add_argument("--max-deliveries", type=int, default=1000)
    a = parser.parse_args(argv)

    global _LOG_FD, _FAIL_KEY, _NAME
    _NAME, _FAIL_KEY = a.name, a.fail_key
    if a.log:
        _LOG_FD = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from consumers.listener import Listener, default_registry

    settings.RSC_RUNTIME = {"max_concurrency": a.workers, "batch_size": a.batch_size}
    options: dict[str, Any] = {}
    if a.ordering:
        options["ordering"] = a.ordering
    if a.max_in_flight:
        options["max_in_flight"] = a.max_in_flight
    if a.redeliver_backoff_ms:
        options.update(
            on_error="redeliver", redeliver_backoff_ms=a.redeliver_backoff_ms, max_deliveries=a.max_deliveries
        )
    fn = noop if a.noop else job
    default_registry.register(
        Listener(fn, stream_prefix=a.prefix, consumer_group=a.group, name=LISTENER, **options)
    )
    call_command("run_member", LISTENER)


# ================================================================================ the Celery worker
# ``jobs_bench.py celery-worker ...``: a real Celery worker (``celery worker --pool threads -c N``).


def celery_worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="jobs_bench.py celery-worker")
    parser.add_argument("--broker", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True, help="a file written once the worker is ready")
    parser.add_argument("--concurrency", type=int, required=True)
    a = parser.parse_args(argv)
    # A plain Celery app: no Django fix-up, and no CELERY_BROKER_URL from the environment (Celery would
    # prefer it to the broker given here: the stack's own broker, the tick's).
    for name in [n for n in os.environ if n == "DJANGO_SETTINGS_MODULE" or n.startswith("CELERY_")]:
        del os.environ[name]
    from celery import Celery, signals

    app = Celery("jobs_bench", broker=a.broker)
    app.conf.update(
        task_ignore_result=True, broker_connection_retry_on_startup=True, worker_hijack_root_logger=False
    )
    fd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @app.task(name=CELERY_TASK)
    def sleep_job(event_id: str, key: str, seq: int, ms: int) -> None:
        start_ns = time.monotonic_ns()
        if ms:
            time.sleep(ms / 1000)
        row = {
            "event_id": event_id,
            "partition_key": key,
            "routing_version": 1,
            "shard": "-",
            "seq": seq,
            "member_id": "celery",
            "start_ns": start_ns,
            "end_ns": time.monotonic_ns(),
            "failed": False,
        }
        os.write(fd, (json.dumps(row, separators=(",", ":")) + "\n").encode())

    def on_ready(**_: Any) -> None:
        Path(a.ready).write_text("ready\n")

    signals.worker_ready.connect(on_ready, weak=False)
    app.worker_main(
        [
            "worker",
            "--pool",
            "threads",
            "-c",
            str(a.concurrency),
            "-l",
            "warning",
            "-Q",
            CELERY_QUEUE,
            "-n",
            f"jobs-bench-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )


# ================================================================================ the benchmark

if __name__ == "__main__" and sys.argv[1:2] in (["member"], ["celery-worker"]):
    (member_main if sys.argv[1] == "member" else celery_worker_main)(sys.argv[2:])
    sys.exit(0)

import redis  # noqa: E402

from bench.e2e_bench import last_ids, progress, redis_cpu_s  # noqa: E402
from bench.heartbeat_bench import group_cpu_s  # noqa: E402
from config.embedded_redis import RedisServer  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from coordinator.protocol.model import Shard  # noqa: E402
from rsc_redis.keys import stream_key  # noqa: E402
from tests.e2e.checker import check  # noqa: E402
from tests.e2e.stack import (  # noqa: E402
    MEMBER_TOKEN,
    HandledLogs,
    Proc,
    Stack,
    produced_rows,
    stable_and_balanced,
    wait_until,
)


def listener_options() -> dict[str, str]:
    """The listener options this bench needs that the installed ``Listener`` lacks: option -> why."""
    from consumers.listener import Listener

    known = inspect.signature(Listener.__init__).parameters
    return {
        option: f"consumers.listener.Listener has no {option!r} option (issue 27 not implemented here)"
        for option in ("ordering", "max_in_flight")
        if option not in known
    }


def code_state() -> str:
    """The commit measured, and the product files changed on top of it (the tree may be in progress)."""
    import subprocess

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "consumers", "coordinator", "config").splitlines()
    files = ", ".join(line[3:] for line in changed)
    return git("rev-parse", "--short", "HEAD") + (f" with uncommitted changes to {files}" if files else "")


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def rounded(d: dict[str, Any], digits: int = 2) -> dict[str, Any]:
    return {k: round(v, digits) if isinstance(v, float) else v for k, v in d.items()}


# ------------------------------------------------------------------------------------------- sides


@dataclass
class Side:
    """One way of consuming: its processes (stopped between windows), its consumer group (none for
    Celery), the Redis server it uses, and its handlers' log directory."""

    name: str
    procs: list[Proc]
    server: redis.Redis
    group: str = ""
    log_dir: Path | None = None
    logs: HandledLogs | None = None
    skipped: str = ""  # why this side was not measured (set up front, or after a window that stalled)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pgids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def signal(self, signum: int) -> None:
        for proc in self.procs:
            proc.signal(signum)

    def stop(self) -> None:
        self.signal(signal.SIGSTOP)
        for proc in self.procs:
            proc.wait_stopped(10.0)

    def check_alive(self) -> None:
        for proc in self.procs:
            assert proc.alive, f"{proc.name} exited:\n{proc.output()[-4000:]}"


def start_members(
    stack: Stack,
    prefix: str,
    name: str,
    *,
    members: int,
    workers: int,
    log_root: Path,
    ordering: str,
    noop: bool = False,
    fail_key: str = "",
    redeliver_backoff_ms: int = 0,
    max_in_flight: int = 0,
    batch_size: int = 16,
) -> Side:
    """A consumer group ``<prefix>-<name>`` (created at the stream's end) and its member processes."""
    group = f"{prefix}-{name}"
    stack.create_group(
        prefix,
        group,
        shard_count=SHARDS,
        start_from="latest",
        max_concurrency=workers,
        lease_ttl_ms=PAUSED_LEASE_TTL_MS,
        heartbeat_interval_ms=PAUSED_HEARTBEAT_INTERVAL_MS,
    )
    log_dir = log_root / group
    log_dir.mkdir(parents=True, exist_ok=True)
    env = stack.env(
        DJANGO_SETTINGS_MODULE="config.settings",
        RSC_COORDINATOR_URL=f"http://127.0.0.1:{stack.api_port}",
        RSC_MEMBER_TOKEN=MEMBER_TOKEN,
        RSC_SHUTDOWN_TIMEOUT_S="10",
    )
    procs = []
    for i in range(members):
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "member",
            "--prefix",
            prefix,
            "--group",
            group,
            "--name",
            f"{group}-{i}",
            "--workers",
            str(workers),
            "--batch-size",
            str(batch_size),
            "--ordering",
            ordering,
            "--max-in-flight",
            str(max_in_flight),
            "--redeliver-backoff-ms",
            str(redeliver_backoff_ms),
            "--fail-key",
            fail_key,
        ]
        argv += ["--noop"] if noop else ["--log", str(log_dir / f"{group}-{i}.jsonl")]
        procs.append(stack.spawn(f"member-{group}-{i}", argv, env))
    return Side(name, procs, stack.client(), group=group, log_dir=log_dir, logs=HandledLogs(log_dir))


def process_errors(side: Side) -> str:
    """The first exception lines its processes logged (why a group does not form or handle)."""
    found: list[str] = []
    for proc in side.procs:
        for line in proc.output().splitlines():
            if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b.*", line) and line not in found:
                found.append(line)
    return "; ".join(found[:3]) or "no exception in their output"


@contextlib.contextmanager
def explained(side: Side) -> Iterator[None]:
    """An AssertionError (a bounded wait that ran out) says what the side's processes logged."""
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{e} (its processes: {process_errors(side)})") from None


def wait_formed(stack: Stack, prefix: str, sides: list[Side], members: int) -> None:
    """Every group STABLE and balanced (its members hold their shards)."""
    for side in sides:

        def formed(side: Side = side) -> bool:
            side.check_alive()
            return stable_and_balanced(stack.describe(prefix, side.group), members, SHARDS)

        with explained(side):
            wait_until(formed, timeout_s=120, interval_s=0.2, what=f"{side.group}: {members} members stable")


def warm_up(stack: Stack, prefix: str, sides: list[Side], ms: int) -> None:
    """One entry of every key, a job of ``ms`` (not logged): every unit has taken its shard over and
    read, and every member has run handlers, before anything is timed; then every side is stopped.
    ``ms`` is the first measured job's time, so that the first window starts in the state it measures:
    a unit adapts how it runs handlers to their measured time (consumers/member/concurrent.py; before
    15f408f, after instant entries it ran a first batch of 50 ms jobs one at a time per shard)."""
    client = stack.client()
    warm = [(f"k{i}", {"warm": True, "seq": -1, "ms": ms}) for i in range(KEYS)]
    Producer(client).send_batch(prefix, warm)
    keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(SHARDS)]
    last = last_ids(client, keys)
    for side in sides:
        with explained(side):
            wait_until(
                lambda side=side: progress(client, last, side.group),
                lambda s: s == (True, 0),
                timeout_s=60,
                interval_s=0.05,
                what=f"{side.group}: warm-up handled (delivered, pending)",
            )
    for side in sides:
        side.stop()


def window(side: Side, done: Callable[[], bool], timeout_s: float, poll_s: float) -> dict[str, Any]:
    """Let ``side`` run (SIGCONT) until ``done()``, at most ``timeout_s``; stop it again (SIGSTOP)."""
    cpu0, redis0, t0 = group_cpu_s(side.pgids), redis_cpu_s(side.server), time.perf_counter()
    side.signal(signal.SIGCONT)
    finished = False
    while True:
        now = time.perf_counter()
        if done():
            finished = True
            break
        if now - t0 > timeout_s:
            break
        time.sleep(poll_s)
    side.stop()
    return {
        "seconds": now - t0,
        "cpu_s": group_cpu_s(side.pgids) - cpu0,
        "redis_cpu_s": redis_cpu_s(side.server) - redis0,
        "finished": finished,
    }


# ------------------------------------------------------------------------------------------- backlogs


class Backlog:
    """Produces keyed jobs round-robin over the 256 keys, with a per-key ``seq`` (increasing over the
    whole run); returns the produced records (the delivery checker's "acknowledged" messages)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.producer = Producer(client)
        self.seq = [0] * KEYS
        self.next_key = 0

    def next_job(self) -> tuple[str, int]:
        """The next key (round-robin) and its next ``seq``."""
        k = self.next_key % KEYS
        self.next_key += 1
        self.seq[k] += 1
        return f"k{k}", self.seq[k]

    def produce(self, jobs: int, ms: int) -> list[dict[str, Any]]:
        produced: list[dict[str, Any]] = []
        for start in range(0, jobs, 100):
            items = []
            for _ in range(min(100, jobs - start)):
                key, seq = self.next_job()
                items.append((key, {"seq": seq, "ms": ms}))
            results = self.producer.send_batch(self.prefix, items)
            produced += produced_rows(items, results)
        return produced


def skip_to_tail(client: redis.Redis, prefix: str, group: str, tail: list[dict[str, Any]]) -> None:
    """Move ``group`` (stopped, fully acked) so that only the entries of ``tail`` (the newest produced,
    in produce order) are new to it: on each shard, to the entry just before the tail's first one."""
    first: dict[str, str] = {}
    for row in tail:
        first.setdefault(row["shard"], row["entry_id"])
    for index in range(SHARDS):
        key = stream_key(prefix, Shard(version=1, index=index))
        shard = str(Shard(version=1, index=index))
        if shard in first:
            before = client.xrevrange(key, max=f"({first[shard]}", count=1)
            client.xgroup_setid(key, group, before[0][0] if before else "0-0")
        else:  # no entry of the tail on this shard: nothing of it is new
            client.xgroup_setid(key, group, "$")


def delivery(produced: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The checker over one window's jobs (only successful handlings), how busy the workers were, and
    how the jobs were split: the most any one member process, shard and key handled."""
    ids = {p["event_id"] for p in produced}
    mine = [r for r in rows if r["event_id"] in ids and not r.get("failed")]
    report = check(produced, mine)
    durations = sorted(r["end_ns"] - r["start_ns"] for r in mine)
    first = {r["event_id"]: r for r in sorted(mine, key=lambda r: r["start_ns"], reverse=True)}
    split = {
        what: max(Counter(r[field] for r in first.values()).values(), default=0)
        for what, field in (("member", "member_id"), ("shard", "shard"), ("key", "partition_key"))
    }
    shard_of_id = {p["event_id"]: p["shard"] for p in produced}
    return {
        "lost": len(report.lost),
        "lost_by_shard": dict(sorted(Counter(shard_of_id[e] for e in report.lost).items())),
        "duplicates": len(report.duplicates),
        "reorders": len(report.out_of_order),
        "handler_busy_s": sum(durations) / 1e9,
        "handler_p50_ms": durations[len(durations) // 2] / 1e6 if durations else 0.0,
        "handler_max_ms": durations[-1] / 1e6 if durations else 0.0,
        "most_jobs_of": split,
    }


def bound_seconds(run: dict[str, Any], ordering: str, workers: int, ms: int) -> float:
    """The shortest window this run's split of the jobs allows, handlers taking exactly ``ms``: a member
    runs its own jobs only (ceil(its jobs / its workers) rounds); under "shard" a shard's jobs run one
    at a time, under "key" a key's. For Celery (one pool) that is the pool's ideal."""
    most = run["most_jobs_of"]
    rounds = -(-most["member"] // workers)
    if ordering == "shard":
        rounds = max(rounds, most["shard"])
    if ordering in ("shard", "key"):
        rounds = max(rounds, most["key"])
    return rounds * ms / 1000


# ------------------------------------------------------------------------------------------- Celery


class CeleryBaseline:
    """A Celery worker process (``--pool threads -c N``) on its own Redis server as broker."""

    def __init__(self, stack: Stack, workdir: Path, concurrency: int) -> None:
        from celery import Celery

        self.redis = RedisServer()
        self.redis.start()
        self.url = self.redis.url
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.app = Celery("jobs_bench_client", broker=self.url)
        self.app.conf.update(broker_connection_retry_on_startup=True, task_ignore_result=True)
        self.log_dir = workdir / "celery"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ready = self.log_dir / "ready"
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "celery-worker",
            "--broker",
            self.url,
            "--log",
            str(self.log_dir / "celery.jsonl"),
            "--ready",
            str(ready),
            "--concurrency",
            str(concurrency),
        ]
        env = {
            k: v
            for k, v in stack.env().items()
            if not k.startswith("CELERY_") and k != "DJANGO_SETTINGS_MODULE"
        }
        proc = stack.spawn("celery-jobs", argv, env)
        self.side = Side("celery", [proc], self.client, log_dir=self.log_dir, logs=HandledLogs(self.log_dir))
        self.concurrency = concurrency

        def is_ready() -> bool:
            self.side.check_alive()
            return ready.exists()

        wait_until(is_ready, timeout_s=60, interval_s=0.05, what="the Celery worker is ready")
        warm = [{"event_id": f"warm-{i}", "partition_key": "warm", "seq": i} for i in range(concurrency)]
        self.enqueue(warm, 0)
        assert self.side.logs is not None
        self.side.logs.wait_all_handled(warm, timeout_s=60)
        self.side.stop()

    def enqueue(self, produced: list[dict[str, Any]], ms: int) -> None:
        with self.app.producer_or_acquire() as producer:
            for p in produced:
                self.app.send_task(
                    CELERY_TASK,
                    args=[p["event_id"], p["partition_key"], p["seq"], ms],
                    queue=CELERY_QUEUE,
                    producer=producer,
                )

    def encoded(self, produced: list[dict[str, Any]], ms: int) -> list[bytes]:
        """The broker messages ``enqueue`` would push for ``produced``, made now (kombu's encoding costs
        about 0.5 ms of CPU a task, which on 2 cores would be taken from the worker while a window runs):
        sent by the same ``send_task`` to the same queue name in another database of the broker, where
        no worker listens, and taken back from there, oldest first."""
        from celery import Celery

        scratch_url = self.url.rsplit("/", 1)[0] + "/1"
        app = Celery("jobs_bench_encoder", broker=scratch_url)
        app.conf.update(broker_connection_retry_on_startup=True, task_ignore_result=True)
        scratch = redis.Redis.from_url(scratch_url, socket_timeout=10)
        try:
            scratch.delete(CELERY_QUEUE)
            with app.producer_or_acquire() as producer:
                for p in produced:
                    app.send_task(CELERY_TASK, args=[p["event_id"], p["partition_key"], p["seq"], ms],
                                  queue=CELERY_QUEUE, producer=producer)  # fmt: skip
            messages = scratch.lrange(CELERY_QUEUE, 0, -1)[::-1]  # LPUSHed: the oldest is last
            scratch.delete(CELERY_QUEUE)
        finally:
            scratch.close()
        assert len(messages) == len(produced), f"{len(messages)} messages for {len(produced)} tasks"
        return list(messages)

    def push(self, messages: list[bytes]) -> None:
        """What kombu's Redis transport does with each: ``LPUSH`` to the queue's list (one command here)."""
        if messages:
            self.client.lpush(CELERY_QUEUE, *messages)

    def close(self) -> None:
        for proc in self.side.procs:
            proc.kill()
        self.client.close()
        self.redis.stop()


# ------------------------------------------------------------------------------------------- 1. slow jobs


def handled_count(side: Side, ids: set[str]) -> Callable[[], int]:
    """How many of ``ids`` the side's handlers have handled successfully (reads its log incrementally)."""
    assert side.logs is not None
    logs, seen, offset = side.logs, set(), [0]

    def count() -> int:
        rows = logs.refresh()
        for row in rows[offset[0] :]:
            if row["event_id"] in ids and not row.get("failed"):
                seen.add(row["event_id"])
        offset[0] = len(rows)
        return len(seen)

    return count


def measure_product(
    side: Side, client: redis.Redis, keys: list[str], produced: list[dict[str, Any]], timeout_s: float
) -> dict[str, Any]:
    """One window of a product side over ``produced`` (the entries new to its group): until every one
    is delivered and acked (Redis's view)."""
    last = last_ids(client, keys)
    _, pending0 = progress(client, last, side.group)
    result = window(side, lambda: progress(client, last, side.group) == (True, pending0), timeout_s, 0.02)
    assert side.logs is not None
    return finish({**result, **delivery(produced, side.logs.refresh())}, produced)


def measure_celery(
    celery: CeleryBaseline, produced: list[dict[str, Any]], timeout_s: float
) -> dict[str, Any]:
    ids = {p["event_id"] for p in produced}
    count = handled_count(celery.side, ids)
    result = window(celery.side, lambda: count() >= len(ids), timeout_s, 0.02)
    assert celery.side.logs is not None
    return finish({**result, **delivery(produced, celery.side.logs.refresh())}, produced)


def finish(run: dict[str, Any], produced: list[dict[str, Any]]) -> dict[str, Any]:
    """A window's job count and what was handled (for a window that ran out of time, not all)."""
    run["jobs"] = len(produced)
    run["handled"] = len(produced) - run["lost"]
    return run


def rate(run: dict[str, Any]) -> float:
    """Jobs handled per second in a window (a window that ran out of time counts what it did)."""
    return float(run["handled"] / run["seconds"])


def over(runs: list[dict[str, Any]], base: list[dict[str, Any]]) -> float | None:
    """The median over repetitions of rate(run) / rate(base's run of the same repetition)."""
    by_rep = {r["rep"]: r for r in base}
    pairs = [rate(r) / rate(by_rep[r["rep"]]) for r in runs if r["rep"] in by_rep and rate(by_rep[r["rep"]])]
    return round(median(pairs), 3) if pairs else None


def summarize(runs: list[dict[str, Any]], ideal: float) -> dict[str, Any]:
    """Medians over the repetitions (a window that ran out of time counts with what it did, and is
    listed under ``unfinished``); sums of the checker's counts over the finished ones."""
    if not runs:
        return {}
    done = [r for r in runs if r["finished"]]
    out: dict[str, Any] = {
        "repetitions": len(runs),
        "all_finished": len(done) == len(runs),
        "runs_jobs_per_s": [round(rate(r), 1) for r in runs],
        "runs_client_cpu_us_per_job": [round(r["cpu_s"] * 1e6 / max(1, r["handled"])) for r in runs],
        "jobs": int(median([r["jobs"] for r in runs])),
        "jobs_per_s": median([rate(r) for r in runs]),
        "of_ideal": round(median([rate(r) / ideal for r in runs]), 3),
        "of_bound": round(median([r["bound_s"] * r["handled"] / r["jobs"] / r["seconds"] for r in runs]), 3),
        "bound_jobs_per_s": median([r["jobs"] / r["bound_s"] for r in runs]),
        "seconds": median([r["seconds"] for r in runs]),
        "client_cpu_us_per_job": median([r["cpu_s"] * 1e6 / max(1, r["handled"]) for r in runs]),
        "redis_cpu_us_per_job": median([r["redis_cpu_s"] * 1e6 / max(1, r["handled"]) for r in runs]),
        "mean_busy_workers": median([r["handler_busy_s"] / r["seconds"] for r in runs]),
        "handler_p50_ms": median([r["handler_p50_ms"] for r in runs]),
        "handler_max_ms": max(r["handler_max_ms"] for r in runs),
        "reorders": sum(r["reorders"] for r in runs),
        "lost": sum(r["lost"] for r in done),
        "duplicates": sum(r["duplicates"] for r in runs),
    }
    if len(done) < len(runs):
        out["not_done_by_shard"] = [r["lost_by_shard"] for r in runs if not r["finished"]]
        out["unfinished"] = [
            f"repetition {r['rep'] + 1}: {r['handled']} of {r['jobs']} jobs done when the window ended "
            f"after {r['seconds']:.0f} s"
            for r in runs
            if not r["finished"]
        ]
    return rounded(out)


@contextlib.contextmanager
def running(sides: list[Side], extra: Callable[[], None] | None = None) -> Iterator[None]:
    try:
        yield
    finally:
        for side in sides:
            for proc in side.procs:
                proc.kill()
        if extra is not None:
            extra()


def window_timeout_s(jobs: int, per_s: float) -> float:
    """How long a window may last: 3x what it takes at ``per_s`` (the best the side can do), at least 30 s."""
    return max(30.0, 3 * jobs / per_s)


def report_line(what: str, run: dict[str, Any], ideal: float) -> None:
    done = "" if run["finished"] else f" (RAN OUT OF TIME: {run['handled']} of {run['jobs']} done)"
    of_bound = run["bound_s"] * run["handled"] / run["jobs"] / run["seconds"]
    busy = run["handler_busy_s"] / run["seconds"]
    print(
        f"{what}: {run['jobs']} jobs in {run['seconds']:.2f} s = {rate(run):.1f}/s ({rate(run) / ideal:.2f} "
        f"of ideal, {of_bound:.2f} of this split's bound), reorders {run['reorders']}, busy workers "
        f"{busy:.1f}{done}",
        flush=True,
    )


def start_orderings(
    stack: Stack,
    args: argparse.Namespace,
    missing: dict[str, str],
    log_root: Path,
    prefix: str,
    *,
    members: int,
    workers: int,
    noop: bool = False,
    only: tuple[str, ...] = ORDERINGS,
) -> list[Side]:
    """One group and its members per ordering the product has (``shard`` only, when it has none)."""
    wanted = [o for o in str(args.orderings).split(",") if o in only]
    orderings = [o for o in ORDERINGS if o in wanted and (o == "shard" or "ordering" not in missing)]
    return [
        start_members(
            stack,
            prefix,
            o,
            members=members,
            workers=workers,
            log_root=log_root,
            noop=noop,
            ordering=o if "ordering" not in missing else "",
            max_in_flight=args.max_in_flight if o != "shard" else 0,
            batch_size=args.batch_size,
        )
        for o in orderings
    ]


def bench_slow(
    stack: Stack, args: argparse.Namespace, missing: dict[str, str], log_root: Path
) -> dict[str, Any]:
    prefix, members, workers = "slow", 2, args.workers
    total_workers = members * workers
    sides = start_orderings(stack, args, missing, log_root, prefix, members=members, workers=workers)
    celery: CeleryBaseline | None = None
    with running(sides, lambda: celery.close() if celery is not None else None):
        wait_formed(stack, prefix, sides, members)
        warm_up(stack, prefix, sides, 50)  # the first jobs measured
        celery = CeleryBaseline(stack, log_root, total_workers)
        client = stack.client()
        keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(SHARDS)]
        backlog = Backlog(client, prefix)
        results = []
        for ms, jobs in ((50, args.jobs_50ms), (1000, args.jobs_1s)):
            ideal = total_workers * 1000 / ms
            runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in [*sides, celery.side]}
            for rep in range(args.reps):
                produced = backlog.produce(jobs, ms)
                celery.enqueue(produced, ms)
                order = [*sides, celery.side]
                order = (
                    order[rep % len(order) :] + order[: rep % len(order)]
                )  # a different side first each time
                for side in order:
                    if side.skipped:
                        continue
                    if side is celery.side:
                        run = measure_celery(celery, produced, window_timeout_s(len(produced), ideal))
                        run["bound_s"] = bound_seconds(run, "none", total_workers, ms)
                    else:
                        mine = produced
                        if side.name == "shard":
                            mine = produced[-max(1, round(len(produced) * args.shard_fraction)) :]
                            skip_to_tail(client, prefix, side.group, mine)
                        best = min(ideal, SHARDS * 1000 / ms) if side.name == "shard" else ideal
                        run = measure_product(side, client, keys, mine, window_timeout_s(len(mine), best))
                        run["bound_s"] = bound_seconds(run, side.name, workers, ms)
                    run["rep"] = rep
                    if not run["finished"]:  # its group is behind now: the next windows would not compare
                        side.skipped = (
                            f"stopped after repetition {rep + 1} of the {ms} ms jobs, which ran out of time"
                        )
                    runs[side.name].append(run)
                    report_line(f"slow {ms} ms, rep {rep + 1}, {side.name}", run, ideal)
            row: dict[str, Any] = {"job_ms": ms, "backlog": jobs, "ideal_jobs_per_s": ideal, "sides": {}}
            for name, side_runs in runs.items():
                row["sides"][name] = summarize(side_runs, ideal)
                if name != "celery" and side_runs:
                    row["sides"][name]["over_celery"] = over(side_runs, runs["celery"])
            for o in ORDERINGS:
                if o not in runs:
                    row["sides"][o] = {"skipped": missing.get("ordering", "not run")}
            results.append(row)
    return {
        "shards": SHARDS,
        "members": members,
        "workers_per_member": workers,
        "workers": total_workers,
        "keys": KEYS,
        "shard_fraction": args.shard_fraction,
        "repetitions": args.reps,
        "batch_size": args.batch_size,
        "max_in_flight": args.max_in_flight or "listener default",
        "celery": {
            "pool": "threads",
            "concurrency": total_workers,
            "acks": "acks early (Celery's default)",
            "prefetch_multiplier": 4,
            "broker": "its own Redis server",
        },
        "rows": results,
    }


# ------------------------------------------------------------------------------------------- 2. failing key


def failing_keys_window(
    side: Side, produced: list[dict[str, Any]], fail_key: str, ideal: float, workers: int, ms: int, rep: int
) -> dict[str, Any]:
    """One window of a failing-key group: until every entry of the other keys is handled (the handlers'
    log), at most 3x the ideal's time."""
    others = [p for p in produced if p["partition_key"] != fail_key]
    ids = {p["event_id"] for p in others}
    count = handled_count(side, ids)
    run = window(side, lambda: count() >= len(ids), window_timeout_s(len(others), ideal), 0.02)
    assert side.logs is not None
    rows = side.logs.refresh()
    finish(run.update(delivery(others, rows)) or run, others)
    run["bound_s"] = bound_seconds(run, "key", workers, ms)
    run["rep"] = rep
    fail_ids = {p["event_id"] for p in produced if p["partition_key"] == fail_key}
    run["failing_key_jobs"] = len(fail_ids)
    run["failing_key_attempts"] = sum(1 for r in rows if r["event_id"] in fail_ids and r.get("failed"))
    return run


def bench_failing(
    stack: Stack, args: argparse.Namespace, missing: dict[str, str], log_root: Path
) -> dict[str, Any]:
    """Each repetition on two fresh groups (so the failing key's entries of one repetition do not
    carry into the next): ``base`` (no failing key) and ``failing`` (every delivery of ``k0`` raises),
    same listener options. After the last repetition the failing group gets a second backlog: the
    failing key's entries of both are then in its shard's window (``persisting``)."""
    if "ordering" in missing:
        return {"skipped": missing["ordering"]}
    prefix, members, workers, ms, fail_key = "fail", 2, args.workers, 50, "k0"
    ideal = members * workers * 1000 / ms
    common = dict(
        members=members,
        workers=workers,
        log_root=log_root,
        ordering="key",
        batch_size=args.batch_size,
        redeliver_backoff_ms=args.redeliver_backoff_ms,
        max_in_flight=args.max_in_flight,
    )
    client = stack.client()
    backlog = Backlog(client, prefix)
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "failing": [], "persisting": []}
    for rep in range(args.reps):
        sides = [
            start_members(stack, prefix, f"base{rep + 1}", **common),
            start_members(stack, prefix, f"failing{rep + 1}", fail_key=fail_key, **common),
        ]
        with running(sides):
            wait_formed(stack, prefix, sides, members)
            warm_up(stack, prefix, sides, ms)
            produced = backlog.produce(args.jobs_50ms, ms)
            for side in sides if rep % 2 == 0 else sides[::-1]:
                name = side.name.rstrip("0123456789")
                run = failing_keys_window(side, produced, fail_key, ideal, workers, ms, rep)
                runs[name].append(run)
                report_line(f"failing key, rep {rep + 1}, {name} (other keys)", run, ideal)
            if rep == args.reps - 1 and runs["failing"][-1]["finished"]:
                produced = backlog.produce(args.jobs_50ms, ms)
                run = failing_keys_window(sides[1], produced, fail_key, ideal, workers, ms, rep)
                runs["persisting"].append(run)
                report_line("failing key, a second backlog on the same group (other keys)", run, ideal)
    result: dict[str, Any] = {
        "job_ms": ms,
        "shards": SHARDS,
        "members": members,
        "workers": members * workers,
        "keys": KEYS,
        "failing_key": fail_key,
        "failing_key_shard": shard_of(fail_key),
        "backlog": args.jobs_50ms,
        "repetitions": args.reps,
        "on_error": "redeliver",
        "redeliver_backoff_ms": args.redeliver_backoff_ms,
        "max_deliveries": 1000,
        "max_in_flight": args.max_in_flight or "listener default",
        "ideal_jobs_per_s": ideal,
        "base": summarize(runs["base"], ideal),
        "failing": summarize(runs["failing"], ideal),
        "failing_key_jobs_per_rep": [r["failing_key_jobs"] for r in runs["failing"]],
        "failing_key_attempts_per_rep": [r["failing_key_attempts"] for r in runs["failing"]],
    }
    ratio = over(runs["failing"], runs["base"])
    if ratio is not None:
        result["failing_over_base"] = ratio
        result["cost"] = round(1 - ratio, 3)
    if runs["persisting"]:
        persisting = runs["persisting"][0]
        result["persisting"] = {
            **summarize(runs["persisting"], ideal),
            "failing_key_entries_in_window": 2 * persisting["failing_key_jobs"],
            "over_base": round(rate(persisting) / rate(runs["base"][-1]), 3),
        }
    return result


def shard_of(key: str) -> str:
    from coordinator.protocol.routing import shard_index

    return str(Shard(version=1, index=shard_index(key, SHARDS)))


# ---------------------------------------------------------------------------------------- 4. sustained load


class Offer:
    """Jobs offered at a steady rate to one side: the product's (``send_batch`` to the prefix) or
    Celery's (``send_task``), in small sends every ``SEND_EVERY_S``; keys round-robin over the 256 keys,
    with a per-key ``seq``."""

    SEND_EVERY_S = 0.02
    serial = 0  # Celery's event ids: unique over the whole run (the handled logs are read by id)

    def __init__(self, backlog: Backlog, celery: CeleryBaseline | None) -> None:
        self.backlog, self.celery = backlog, celery
        self._rows: list[dict[str, Any]] = []  # Celery: the jobs made before the window, and their
        self._messages: list[bytes] = []  # broker messages (CeleryBaseline.encoded), sent in order

    def prepare(self, per_s: float, seconds: float, ms: int) -> None:
        """Celery: make every message the window may send before it starts (the product's producer
        encodes in the window: it costs microseconds per entry, docs/producer.md)."""
        if self.celery is None:
            return
        self._rows = []
        for _ in range(int(per_s * seconds) + 1):
            key, seq = self.backlog.next_job()
            Offer.serial += 1
            self._rows.append({"event_id": f"sustained-{Offer.serial}", "partition_key": key, "seq": seq,
                               "routing_version": 1, "shard": "-"})  # fmt: skip
        self._messages = self.celery.encoded(self._rows, ms)

    def run(self, per_s: float, seconds: float, ms: int) -> list[dict[str, Any]]:
        produced: list[dict[str, Any]] = []
        started = time.monotonic()
        while (now := time.monotonic()) - started < seconds:
            due = int((now - started) * per_s) - len(produced)
            if due > 0:
                produced += self._send(due, ms)
            time.sleep(max(0.0, self.SEND_EVERY_S - (time.monotonic() - now)))
        return produced

    def _send(self, jobs: int, ms: int) -> list[dict[str, Any]]:
        if self.celery is None:
            return self.backlog.produce(jobs, ms)
        rows, self._rows = self._rows[:jobs], self._rows[jobs:]
        messages, self._messages = self._messages[:jobs], self._messages[jobs:]
        assert len(rows) == jobs, "more jobs due than prepared"
        self.celery.push(messages)
        return rows


def busy_in(rows: list[dict[str, Any]], ids: set[str], start_ns: int, end_ns: int) -> tuple[float, int]:
    """Handler seconds that fall inside [start_ns, end_ns] (successful handlings of ``ids``), and how many
    of them ended inside it."""
    busy, ended = 0, 0
    for r in rows:
        if r["event_id"] not in ids or r.get("failed"):
            continue
        busy += max(0, min(r["end_ns"], end_ns) - max(r["start_ns"], start_ns))
        ended += start_ns <= r["end_ns"] <= end_ns
    return busy / 1e9, ended


def sustained_window(
    side: Side, offer: Offer, client: redis.Redis, prefix: str, ms: int, per_s: float, seconds: float,
    warm_s: float, ideal: float,
) -> dict[str, Any]:
    """Jobs offered at ``per_s`` for ``seconds`` to ``side`` (which starts with nothing to do); what its
    handlers did in the window after ``warm_s``; then it works off what is left, untimed."""
    if side.group:
        skip_to_tail(client, prefix, side.group, [])  # only what is offered from now on is new to it
    cpu0 = group_cpu_s(side.pgids)
    side.signal(signal.SIGCONT)
    t0 = time.monotonic_ns()
    produced = offer.run(per_s, seconds, ms)
    t1 = time.monotonic_ns()
    cpu_s = group_cpu_s(side.pgids) - cpu0
    ids = {p["event_id"] for p in produced}
    count = handled_count(side, ids)
    wait_until(lambda: count() >= len(ids), timeout_s=max(60.0, 3 * len(ids) / ideal), interval_s=0.05,
               what=f"{side.name}: the offered jobs handled")  # fmt: skip
    side.stop()
    assert side.logs is not None
    rows = side.logs.refresh()
    start_ns = t0 + int(warm_s * 1e9)
    busy_s, ended = busy_in(rows, ids, start_ns, t1)
    window_s = (t1 - start_ns) / 1e9
    report = delivery(produced, rows)
    return {
        "offered": len(produced),
        "window_s": round(window_s, 2),
        "busy_workers": busy_s / window_s,
        "jobs_per_s": busy_s / window_s / (ms / 1000),
        "ended_in_window": ended,
        "client_cpu_us_per_job": cpu_s * 1e6 / max(1, len(produced)),
        "lost": report["lost"],
        "reorders": report["reorders"],
    }


def bench_sustained(
    stack: Stack, args: argparse.Namespace, missing: dict[str, str], log_root: Path
) -> dict[str, Any]:
    """The issue's own measurement: jobs offered steadily above what the pool can do (``--offer`` x the
    ideal), one side at a time; the rate is the handlers' busy time in the window after the warm-up over
    the job time (no quantization by job length, as counting completions would have at 1 s)."""
    prefix, members, workers = "sustained", 2, args.workers
    total = members * workers
    sides = start_orderings(stack, args, missing, log_root, prefix, members=members, workers=workers,
                            only=("key", "none"))  # fmt: skip
    celery: CeleryBaseline | None = None
    with running(sides, lambda: celery.close() if celery is not None else None):
        wait_formed(stack, prefix, sides, members)
        warm_up(stack, prefix, sides, 50)
        celery = CeleryBaseline(stack, log_root / "sustained", total)
        client = stack.client()
        backlog = Backlog(client, prefix)
        rows = []
        for ms, seconds, warm_s in ((50, args.sustained_s, args.sustained_s / 3),
                                    (1000, 2 * args.sustained_s, 2 * args.sustained_s / 3)):  # fmt: skip
            ideal = total * 1000 / ms
            per_s = args.offer * ideal
            runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in [*sides, celery.side]}
            for rep in range(args.reps):
                order = [*sides, celery.side]
                order = order[rep % len(order) :] + order[: rep % len(order)]
                for side in order:
                    offer = Offer(backlog, celery if side is celery.side else None)
                    offer.prepare(per_s, seconds, ms)
                    run = sustained_window(side, offer, client, prefix, ms, per_s, seconds, warm_s, ideal)
                    run["rep"] = rep
                    runs[side.name].append(run)
                    print(f"sustained {ms} ms, rep {rep + 1}, {side.name}: {run['jobs_per_s']:.1f} jobs/s "
                          f"({run['jobs_per_s'] / ideal:.3f} x ideal), busy {run['busy_workers']:.1f}",
                          flush=True)  # fmt: skip
            row: dict[str, Any] = {
                "job_ms": ms, "offered_per_s": per_s, "seconds": seconds, "warm_s": warm_s,
                "ideal_jobs_per_s": ideal, "sides": {},
            }  # fmt: skip
            for name, side_runs in runs.items():
                by_rep = {r["rep"]: r for r in runs["celery"]}
                summary = {
                    "jobs_per_s": median([r["jobs_per_s"] for r in side_runs]),
                    "runs_jobs_per_s": [round(r["jobs_per_s"], 1) for r in side_runs],
                    "of_ideal": round(median([r["jobs_per_s"] / ideal for r in side_runs]), 3),
                    "busy_workers": median([r["busy_workers"] for r in side_runs]),
                    "client_cpu_us_per_job": median([r["client_cpu_us_per_job"] for r in side_runs]),
                    "offered": median([r["offered"] for r in side_runs]),
                    "lost": sum(r["lost"] for r in side_runs),
                    "reorders": sum(r["reorders"] for r in side_runs),
                }
                if name != "celery":
                    summary["over_celery"] = round(
                        median([r["jobs_per_s"] / by_rep[r["rep"]]["jobs_per_s"] for r in side_runs]), 3
                    )
                row["sides"][name] = rounded(summary, 3)
            rows.append(row)
    return {
        "members": members, "workers": total, "offer": args.offer, "repetitions": args.reps, "rows": rows,
    }  # fmt: skip


# ------------------------------------------------------------------------------------------- 3. fast handlers


def bench_fast(
    stack: Stack, args: argparse.Namespace, missing: dict[str, str], log_root: Path
) -> dict[str, Any]:
    rows = [bench_fast_one(stack, args, missing, log_root, int(w)) for w in str(args.fast_workers).split(",")]
    return {
        "shards": SHARDS,
        "members": 4,
        "messages": args.fast_messages,
        "repetitions": args.reps,
        "rows": rows,
    }


def bench_fast_one(
    stack: Stack, args: argparse.Namespace, missing: dict[str, str], log_root: Path, workers: int
) -> dict[str, Any]:
    prefix, members = f"fast{workers}", 4
    sides = start_orderings(
        stack, args, missing, log_root, prefix, members=members, workers=workers, noop=True
    )
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    with running(sides):
        wait_formed(stack, prefix, sides, members)
        warm_up(stack, prefix, sides, 0)
        client = stack.client()
        keys = [stream_key(prefix, Shard(version=1, index=i)) for i in range(SHARDS)]
        backlog = Backlog(client, prefix)
        for rep in range(args.reps):
            backlog.produce(args.fast_messages, 0)
            last = last_ids(client, keys)
            order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
            for side in order:
                if side.skipped:
                    continue
                _, pending0 = progress(client, last, side.group)

                def drained(
                    side: Side = side, last: dict[str, bytes] = last, pending0: int = pending0
                ) -> bool:
                    return progress(client, last, side.group) == (True, pending0)

                run = window(side, drained, 120.0, 0.01)
                run.update(rep=rep, jobs=args.fast_messages, handled=args.fast_messages)
                if not run["finished"]:
                    side.skipped = f"repetition {rep + 1}: not drained in {run['seconds']:.0f} s"
                    run["handled"] = 0  # not counted: nothing says how far it got
                runs[side.name].append(run)
                print(
                    f"fast, {workers} worker(s) per member, rep {rep + 1}, {side.name}: "
                    f"{rate(run):.0f} msgs/s",
                    flush=True,
                )
    result: dict[str, Any] = {"workers_per_member": workers, "sides": {}}
    for name, side_runs in runs.items():
        done = [r for r in side_runs if r["finished"]]
        result["sides"][name] = rounded(
            {
                "msgs_per_s": median([rate(r) for r in done]) if done else None,
                "client_cpu_us_per_msg": median([r["cpu_s"] * 1e6 / r["jobs"] for r in done])
                if done
                else None,
                "redis_cpu_us_per_msg": median([r["redis_cpu_s"] * 1e6 / r["jobs"] for r in done])
                if done
                else None,
                "runs_msgs_per_s": [round(rate(r)) for r in side_runs],
                "all_finished": len(done) == len(side_runs),
            }
        )
        if name != "shard" and "shard" in runs:
            result["sides"][name]["over_shard"] = over(side_runs, runs["shard"])
    for o in ORDERINGS:
        if o not in runs:
            result["sides"][o] = {"skipped": missing.get("ordering", "not run")}
    return result


# ------------------------------------------------------------------------------------------- targets


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 27's figures, each with what this run measured and whether it is met (None: not measured;
    a figure from a window that ran out of time never meets its target)."""
    out: list[dict[str, Any]] = []

    def add(what: str, figures: dict[str, Any], field: str, goal: float, higher: bool = True) -> None:
        value = figures.get(field)
        met = None if value is None else (value >= goal if higher else value <= goal)
        if met and figures.get("all_finished") is False:
            met = False
        out.append({"target": what, "measured": value, "met": met})

    for row in results.get("sustained", {}).get("rows", []):
        ms = row["job_ms"]
        for name, floor in (("key", 0.9), ("none", 0.95)):
            side = row["sides"].get(name, {})
            what = f"sustained, {ms} ms jobs: ordering={name!r}"
            add(f"{what} >= {floor} x the pool's ideal", side, "of_ideal", floor)
            add(f"{what} >= 1.0 x Celery", side, "over_celery", 1.0)
    # The drain of a finite backlog: its x ideal and x Celery are bounded by the placement of keys on
    # shards and shards on members, which the fence fixes (docs/consumers.md, "What 'none' is not"), so
    # what is judged is the consumer's own share: the window its placement allows over the one measured.
    for row in results.get("slow_jobs", {}).get("rows", []):
        ms = row["job_ms"]
        for name in ("key", "none"):
            side = row["sides"].get(name, {})
            add(f"drain, {ms} ms jobs: ordering={name!r} >= {DRAIN_BOUND} x its placement's bound", side,
                "of_bound", DRAIN_BOUND)  # fmt: skip
    failing = results.get("failing_key", {})
    if failing:
        finished = {"all_finished": failing.get("failing", {}).get("all_finished", False)}
        add("a failing key costs the other keys <= 5% (cost)", {**failing, **finished}, "cost", 0.05, False)
        if "persisting" in failing:
            persisting = failing["persisting"]
            add(
                "... and with a second backlog on the same group (other keys, x the group without)",
                {**persisting, "value": persisting["over_base"]},
                "value",
                0.95,
            )
    for row in results.get("fast_handlers", {}).get("rows", []):
        for name in ("key", "none"):
            add(
                f"fast handlers, {row['workers_per_member']} worker(s) per member: "
                f"ordering={name!r} >= 0.9 x 'shard'",
                row["sides"].get(name, {}),
                "over_shard",
                0.9,
            )
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{key}: FAILED: {results[key]['error']}"
        for key in ("slow_jobs", "failing_key", "fast_handlers", "sustained")
        if "error" in (results.get(key) or {})
    ]
    slow = results.get("slow_jobs", {})
    for row in slow.get("rows", []):
        lines.append(
            f"{row['job_ms']} ms jobs, backlog {row['backlog']}, ideal {row['ideal_jobs_per_s']:.0f}/s:"
        )
        lines.append(
            f"  {'side':<7} {'jobs/s':>8} {'x ideal':>8} {'x bound':>8} {'x celery':>8} {'cpu us/job':>10} "
            f"{'busy wkrs':>9} {'reorders':>8}"
        )
        for name, s in row["sides"].items():
            if "jobs_per_s" not in s:
                lines.append(f"  {name:<7} {s.get('skipped', '-')}")
                continue
            late = "" if s["all_finished"] else "  (a window ran out of time)"
            lines.append(
                f"  {name:<7} {s['jobs_per_s']:>8.1f} {s['of_ideal']:>8.3f} {s['of_bound']:>8.3f} "
                f"{s.get('over_celery', '-')!s:>8} {s['client_cpu_us_per_job']:>10.0f} "
                f"{s['mean_busy_workers']:>9.1f} {s['reorders']:>8}{late}"
            )
    failing = results.get("failing_key", {})
    if "error" in failing:
        pass  # listed at the top
    elif failing.get("skipped"):
        lines.append(f"failing key: skipped: {failing['skipped']}")
    elif failing:
        lines.append(
            f"failing key: other keys {failing['failing'].get('jobs_per_s', '-')}/s vs "
            f"{failing['base'].get('jobs_per_s', '-')}/s without; cost {failing.get('cost', '-')}"
        )
        if "persisting" in failing:
            p = failing["persisting"]
            lines.append(
                f"  second backlog on the same group: other keys {p['jobs_per_s']}/s "
                f"({p['over_base']} x without){'' if p['all_finished'] else ', RAN OUT OF TIME'}"
            )
    for row in results.get("fast_handlers", {}).get("rows", []):
        for name, s in row["sides"].items():
            what = f"fast, {row['workers_per_member']} worker(s) per member, {name}"
            if "skipped" in s:
                lines.append(f"{what}: skipped: {s['skipped']}")
            else:
                lines.append(
                    f"{what}: {s['msgs_per_s']} msgs/s, {s['client_cpu_us_per_msg']} us/msg client"
                    + (f", {s['over_shard']} x shard" if s.get("over_shard") else "")
                )
    for t in results.get("targets", []):
        state = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        lines.append(f"target: {t['target']}: {t['measured']} ({state})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="also write the JSON result to this file")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians are reported)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition: a smoke run")
    parser.add_argument(
        "--jobs-50ms", type=int, default=6400, help="backlog of 50 ms jobs (10 s at the ideal)"
    )
    parser.add_argument("--jobs-1s", type=int, default=384, help="backlog of 1 s jobs (12 s at the ideal)")
    parser.add_argument(
        "--shard-fraction",
        type=float,
        default=0.25,
        help="the 'shard' side consumes only this newest part of each backlog",
    )
    parser.add_argument("--workers", type=int, default=16, help="worker threads per member (2 members)")
    parser.add_argument(
        "--max-in-flight", type=int, default=0, help="listener max_in_flight (0: its default)"
    )
    parser.add_argument("--redeliver-backoff-ms", type=int, default=100, help="failing key: first backoff")
    parser.add_argument("--batch-size", type=int, default=16, help="RSC_RUNTIME batch_size (the default 16)")
    parser.add_argument("--fast-messages", type=int, default=1_000_000, help="fast handlers: entries per rep")
    parser.add_argument(
        "--fast-workers",
        default="1,16",
        help="fast handlers: workers per member, comma-separated (1: e2e_bench's shape)",
    )
    parser.add_argument(
        "--sections",
        default="slow,failing,fast,sustained",
        help="comma-separated: slow,failing,fast,sustained",
    )
    parser.add_argument(
        "--offer", type=float, default=1.25, help="sustained: jobs offered per second, x the ideal"
    )
    parser.add_argument(
        "--sustained-s",
        type=float,
        default=12.0,
        help="sustained: seconds offered (50 ms jobs; 1 s jobs: twice as long)",
    )
    parser.add_argument(
        "--orderings", default=",".join(ORDERINGS), help="slow and fast: the sides to run (comma-separated)"
    )
    parser.add_argument(
        "--workdir", default="", help="keep the processes' logs here (default: a temporary dir)"
    )
    args = parser.parse_args()
    if args.quick:
        args.reps, args.jobs_50ms, args.jobs_1s, args.fast_messages = 1, 640, 64, 40_000

    started = time.perf_counter()
    missing = listener_options()
    import celery

    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "celery_version": celery.__version__,
        "listener_options_missing": missing,
        "command": " ".join(["bench/jobs_bench.py", *sys.argv[1:]]),
        "code": code_state(),
    }
    sections = set(args.sections.split(","))
    with contextlib.ExitStack() as cleanup:
        tmp = args.workdir or cleanup.enter_context(tempfile.TemporaryDirectory(prefix="rsc-jobs-"))
        log_root = Path(tmp)
        stack_dir = log_root / "stack" if args.workdir else None
        stack = cleanup.enter_context(Stack(stack_dir, tick_interval_ms=200))
        results["redis"] = stack.client().info("server")["redis_version"]
        for section, key, bench in (
            ("slow", "slow_jobs", bench_slow),
            ("failing", "failing_key", bench_failing),
            ("fast", "fast_handlers", bench_fast),
            ("sustained", "sustained", bench_sustained),
        ):
            if section not in sections:
                continue
            try:
                results[key] = bench(stack, args, missing, log_root)
            except Exception as e:  # one section that breaks does not lose the others' figures
                text = "".join(traceback.format_exception(e)[-3:])
                print(f"section {section} failed:\n{text}", file=sys.stderr, flush=True)
                results[key] = {"error": f"{type(e).__name__}: {e}"}
    results["targets"] = targets(results)
    if code_state() != results["code"]:  # the tree changed under the run: later sections ran other code
        results["code_at_end"] = code_state()
        print(f"the code changed during the run: {results['code']} -> {results['code_at_end']}", flush=True)
    results["bench_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    print(table(results))


if __name__ == "__main__":
    main()
