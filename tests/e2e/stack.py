"""The whole product as real processes, for the end-to-end tests and bench/e2e_bench.py.

A :class:`Stack` owns, in its own temporary directory:

* a private Redis (:class:`config.embedded_redis.RedisServer`): the metadata store, the stream data plane
  and (database 1) the Celery broker;
* the coordinator API: ``python -m config.serve`` (granian serving ``config.wsgi``) on a free port, over
  a SQLite file migrated first, with one member and one admin token from the environment
  (``RSC_MEMBER_TOKENS`` / ``RSC_ADMIN_TOKENS``);
* the tick: one Celery worker with embedded beat (``celery -A config worker -B --pool=solo``), as the
  product runs it, every ``tick_interval_ms``;
* members: one ``manage.py run_member e2e`` process each (``DJANGO_SETTINGS_MODULE=tests.e2e.settings``),
  whose handler appends a JSON line per handled entry to its own log (tests/e2e/e2eapp/listeners.py).

Every child runs in its own process group (signals reach the whole group: granian's and Celery's own
children too) and is SIGKILLed by the kernel if the thread that started it dies, so not even a SIGKILLed
pytest leaves processes behind. :meth:`Stack.close` kills whatever is still running.

:class:`ProducerLoop` produces keyed events with a per-key ``seq`` from a thread of the test process and
records only the sends that returned; :class:`HandledLogs` reads the members' logs incrementally.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import redis

from config.embedded_redis import RedisServer, _die_with_parent_hook, free_port
from consumers.producer import Producer
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
MEMBER_TOKEN = "e2e-member-token"
ADMIN_TOKEN = "e2e-admin-token"
SECRET_KEY = secrets.token_urlsafe(64)  # one per test run, shared by all its processes
PREFIX, GROUP = "e2e", "e2e-workers"
LIVE_STATES = ("STABLE", "UNREVOKED_SHARDS", "UNRELEASED_SHARDS")

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------- processes


class Proc:
    """A child in its own process group, its output in ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent_hook(),
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def wait_stopped(self, timeout_s: float = 5.0) -> None:
        """Until every thread of the process is stopped (after a SIGSTOP). kill() returns once the signal
        is sent; a thread running on the other core may go on for a moment, so a timestamp taken right
        after it is not yet "frozen": a handler call could still start after it."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = []
            for task in os.listdir(f"/proc/{self.pid}/task"):
                path = f"/proc/{self.pid}/task/{task}/stat"
                with contextlib.suppress(FileNotFoundError, ProcessLookupError), open(path) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            if states and all(state in ("T", "t") for state in states):
                return
            assert time.monotonic() < deadline, f"{self.name} not stopped after {timeout_s} s: {states}"
            time.sleep(0.001)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL the whole group (also a stopped one) and reap it."""
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def terminate(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (after SIGCONT, in case it is stopped); SIGKILL if it outlives ``timeout_s``."""
        if self.alive:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout_s)
        code = self.process.poll()
        self.kill()  # anything the process left behind in its group
        return code

    def __repr__(self) -> str:
        return f"<Proc {self.name} pid={self.pid} {'alive' if self.alive else self.process.returncode}>"


# ---------------------------------------------------------------------------------------------- HTTP


class Api:
    """A tiny JSON client of the coordinator API (a fresh connection per call: the server may restart)."""

    def __init__(self, port: int, token: str = ADMIN_TOKEN, timeout_s: float = 10.0) -> None:
        self.port, self.token, self.timeout_s = port, token, timeout_s

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, "/api/v1/" + path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = self.call(method, path, body)
        if not 200 <= status < 300:
            raise AssertionError(f"{method} {path}: HTTP {status}: {payload}")
        return payload


# ---------------------------------------------------------------------------------------------- the stack


class Stack:
    def __init__(
        self,
        workdir: Path | None = None,
        *,
        tick_interval_ms: int = 200,
        api_workers: int = 1,
        api_threads: int = 8,
        member_env: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self._own_dir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="rsc-e2e-")) if workdir is None else workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tick_interval_ms = tick_interval_ms
        self.api_workers, self.api_threads = api_workers, api_threads
        self.member_env = dict(member_env or {})
        self.extra_env = dict(env or {})  # every process: API, tick and members (e.g. RSC_RETENTION_*)
        self.redis = RedisServer()
        self.api_port = free_port()
        self.api_proc: Proc | None = None
        self.tick_proc: Proc | None = None
        self.members: dict[str, Proc] = {}
        self._all: list[Proc] = []
        self._runs: dict[str, int] = {}
        self._client: redis.Redis | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> Stack:
        self.redis.start()
        self._migrate()
        self.start_api(wait=False)
        self.start_tick(wait=False)
        self.wait_api()
        self.wait_tick()
        return self

    def close(self) -> None:
        """Kill every child (SIGKILL: a test that failed needs no grace), then Redis."""
        for proc in reversed(self._all):
            proc.kill()
        if self._client is not None:
            self._client.close()
        self.redis.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Stack:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "CELERY_", "E2E_"))}
        base.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            PYTHONPATH=str(REPO),
            PYTHONUNBUFFERED="1",
            REDIS_URL=self.redis.url,
            CELERY_BROKER_URL=self.redis.url.rsplit("/", 1)[0] + "/1",
            DATABASE_URL=f"sqlite:///{self.dir / 'coordinator.sqlite3'}",
            RSC_MEMBER_TOKENS=MEMBER_TOKEN,
            RSC_ADMIN_TOKENS=ADMIN_TOKEN,
            RSC_TICK_INTERVAL_MS=str(self.tick_interval_ms),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DEBUG="false",
            # With DEBUG off the app refuses to start without a strong key (config/settings.py), and
            # redirects plain HTTP to HTTPS unless told otherwise: the stack speaks plain HTTP.
            SECRET_KEY=SECRET_KEY,
            SECURE_SSL_REDIRECT="false",
            LOG_LEVEL="INFO",
        )
        base.update(self.extra_env)
        base.update(extra)
        return base

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        run = self._runs.get(name, 0) + 1
        self._runs[name] = run
        proc = Proc(name, argv, env, self.dir / f"{name}.{run}.log")
        self._all.append(proc)
        return proc

    def _migrate(self) -> None:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0", "--no-input"],
            cwd=REPO, env=self.env(), check=True, timeout=120,
        )  # fmt: skip
        # The data plane's Redis Functions library, as `make run` loads it before its members start
        # (run_member checks it at start; the tick would load it too, a tick later).
        subprocess.run(
            [sys.executable, "manage.py", "redis_functions", "load"],
            cwd=REPO, env=self.env(), check=True, timeout=120, capture_output=True,
        )  # fmt: skip

    # -- the coordinator API ------------------------------------------------------------------------

    def start_api(self, *, wait: bool = True) -> Proc:
        argv = [
            sys.executable, "-m", "config.serve", "--bind", f"127.0.0.1:{self.api_port}",
            "--workers", str(self.api_workers), "--threads", str(self.api_threads), "--graceful-s", "5",
        ]  # fmt: skip
        # RSC_EXIT_WITH_PARENT: granian's workers exit once its main process is gone (config/serve.py),
        # which the kernel kills if this test run dies.
        self.api_proc = self.spawn("api", argv, self.env(RSC_EXIT_WITH_PARENT="1"))
        if wait:
            self.wait_api()
        return self.api_proc

    def wait_api(self, timeout_s: float = 60.0) -> None:
        def probe() -> bool:
            assert self.api_proc is not None and self.api_proc.alive, self._dead("api", self.api_proc)
            try:
                return self.admin.call("GET", "admin/groups")[0] == 200
            except OSError:
                return False

        wait_until(probe, timeout_s=timeout_s, interval_s=0.05, what="the coordinator API answers")

    def stop_api(self) -> None:
        """The coordinator API goes away at once (SIGKILL: connections are refused from now on)."""
        assert self.api_proc is not None
        self.api_proc.kill()

    def pause_api(self) -> None:
        """SIGSTOP every process of the API server: the kernel still accepts connections, nothing answers (a
        hung coordinator); :meth:`resume_api` brings it back at once, with no restart to wait for."""
        assert self.api_proc is not None
        self.api_proc.signal(signal.SIGSTOP)

    def resume_api(self) -> None:
        assert self.api_proc is not None
        self.api_proc.signal(signal.SIGCONT)

    @property
    def admin(self) -> Api:
        return Api(self.api_port, ADMIN_TOKEN)

    # -- the tick -----------------------------------------------------------------------------------

    def start_tick(self, *, wait: bool = True) -> Proc:
        run = self._runs.get("tick", 0) + 1
        argv = [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-B", "--pool=solo", "-l", "info",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"e2e-tick-{run}@%h",
            "-s", str(self.dir / "celerybeat-schedule"),
        ]  # fmt: skip
        self.tick_proc = self.spawn("tick", argv, self.env())
        if wait:
            self.wait_tick()
        return self.tick_proc

    def wait_tick(self, timeout_s: float = 60.0) -> None:
        def probe() -> bool:
            assert self.tick_proc is not None and self.tick_proc.alive, self._dead("tick", self.tick_proc)
            return " ready." in self.tick_proc.output()

        wait_until(probe, timeout_s=timeout_s, interval_s=0.05, what="the Celery worker with beat is ready")

    def stop_tick(self) -> None:
        assert self.tick_proc is not None
        self.tick_proc.kill()

    # -- members ------------------------------------------------------------------------------------

    def start_member(self, name: str, listener: str = "e2e", **extra: str) -> Proc:
        """``manage.py run_member <listener>`` as process ``name`` (one member: the listener's concurrency
        is 1). ``extra`` overrides the environment (``E2E_HANDLED_LOG=""``: a no-op handler)."""
        settings = {
            "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
            "RSC_COORDINATOR_URL": f"http://127.0.0.1:{self.api_port}",
            "RSC_MEMBER_TOKEN": MEMBER_TOKEN,
            "RSC_SHUTDOWN_TIMEOUT_S": "10",
            "E2E_MEMBER_NAME": name,
            "E2E_HANDLED_LOG": str(self.handled_log(name)),
        }
        env = self.env(**{**settings, **self.member_env, **extra})
        if not env["E2E_HANDLED_LOG"]:
            del env["E2E_HANDLED_LOG"]
        proc = self.spawn(f"member-{name}", [sys.executable, "manage.py", "run_member", listener], env)
        self.members[name] = proc
        return proc

    def handled_log(self, name: str) -> Path:
        return self.handled_dir / f"{name}.jsonl"

    @property
    def handled_dir(self) -> Path:
        path = self.dir / "handled"
        path.mkdir(exist_ok=True)
        return path

    def live_members(self) -> dict[str, Proc]:
        return {name: proc for name, proc in self.members.items() if proc.alive}

    # -- groups -------------------------------------------------------------------------------------

    def create_group(
        self, prefix: str = PREFIX, group: str = GROUP, *, shard_count: int, **config: Any
    ) -> dict[str, Any]:
        body = {"stream_prefix": prefix, "consumer_group": group, "shard_count": shard_count, **config}
        status, payload = self.admin.call("POST", "admin/groups", body)
        assert status == 201, payload
        return dict(payload)

    def describe(self, prefix: str = PREFIX, group: str = GROUP) -> dict[str, Any]:
        return dict(self.admin.ok("GET", f"admin/groups/{prefix}/{group}"))

    def describe_from_store(self, prefix: str = PREFIX, group: str = GROUP) -> dict[str, Any]:
        """The same view straight from the metadata store, for while the API is down."""
        from coordinator.store.redis_store import MetadataStore

        client = redis.Redis.from_url(self.redis.url, socket_timeout=10)
        try:
            return dict(MetadataStore(client).describe_group(prefix, group))
        finally:
            client.close()

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis.url, socket_timeout=10)
        return self._client

    def _dead(self, what: str, proc: Proc | None) -> str:
        output = proc.output()[-3000:] if proc is not None else ""
        return f"the {what} process exited:\n{output}"


# ---------------------------------------------------------------------------------------------- views


def live(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in view["members"] if m["state"] in LIVE_STATES]


def owners(view: dict[str, Any]) -> dict[str, str]:
    """shard -> member id, from the live members' current assignments (asserts one owner each)."""
    found: dict[str, str] = {}
    for member in live(view):
        for item in member["current_assignment"]:
            assert item["shard"] not in found, f"{item['shard']} owned twice: {view}"
            found[item["shard"]] = member["member_id"]
    return found


def stable_and_balanced(view: dict[str, Any], members: int, shards: int) -> bool:
    """STABLE, ``members`` live members, every shard owned by exactly one of them, sizes within one."""
    members_live = live(view)
    counts = [len(m["current_assignment"]) for m in members_live]
    owned = [i["shard"] for m in members_live for i in m["current_assignment"]]
    return (
        view["state"] == "STABLE"
        and len(members_live) == members
        and len(owned) == len(set(owned)) == shards
        and not view["pending_revocations"]
        and not view["unreleased_shards"]
        and max(counts) - min(counts) <= 1
    )


def member_by_pid(view: dict[str, Any], pid: int, states: Iterable[str] = LIVE_STATES) -> dict[str, Any]:
    wanted = set(states)
    found = [m for m in view["members"] if m["client"]["pid"] == pid and m["state"] in wanted]
    assert len(found) == 1, f"pid {pid}: {found}"
    return found[0]


# ---------------------------------------------------------------------------------------------- producer


def produced_rows(items: list[tuple[str, dict[str, Any]]], results: list[Any]) -> list[dict[str, Any]]:
    """The delivery checker's produced log (tests/e2e/checker.py) of a ``send_batch`` of (key, payload
    with a ``seq``) items and its results."""
    return [
        {
            "event_id": r.event_id,
            "partition_key": key,
            "routing_version": r.routing_version,
            "seq": payload["seq"],
            "shard": str(r.shard),
            "entry_id": r.entry_id,
        }
        for (key, payload), r in zip(items, results, strict=True)
    ]


class ProducerLoop:
    """Produces ``{"seq": n}`` events for ``keys`` (a count, or the keys themselves) round-robin, about
    ``rate_per_s`` a second, from a thread.

    Each batch is one ``Producer.send_batch`` (entries of one key keep their order); only the sends
    that returned are recorded in :attr:`produced` (the checker's "acknowledged" messages). A send that
    raised is counted in :attr:`failures` and not recorded: its outcome is unknown (at-least-once)."""

    def __init__(
        self,
        redis_url: str,
        prefix: str = PREFIX,
        *,
        keys: int | list[str] = 32,
        rate_per_s: float = 300.0,
        batch: int = 8,
        stamp: bool = False,
    ) -> None:
        self.client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.producer = Producer(self.client)
        self.prefix = prefix
        self.keys = [f"k{i}" for i in range(keys)] if isinstance(keys, int) else list(keys)
        self.interval_s = batch / rate_per_s
        self.batch = batch
        self.stamp = stamp  # put the wall clock of the send in each payload ("sent_ns")
        self.produced: list[dict[str, Any]] = []
        self.failures = 0
        self._seq = dict.fromkeys(self.keys, 0)
        self._next_key = 0
        self._lock = threading.Lock()
        self._running = threading.Event()  # cleared: paused
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2e-producer", daemon=True)

    def start(self) -> ProducerLoop:
        self._running.set()
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop producing; returns once no batch is in flight."""
        self._running.clear()
        with self._lock:
            pass

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join(timeout=30)
        self.client.close()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.produced)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.produced)

    def send_now(self, n: int) -> list[dict[str, Any]]:
        """Produce ``n`` events right now (also while paused); returns their records."""
        with self._lock:
            return self._send_locked(n)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            if not self._running.is_set():
                self._running.wait()
                due = time.monotonic()
                continue
            with self._lock:
                if self._running.is_set() and not self._stop.is_set():
                    self._send_locked(self.batch)
            due += self.interval_s
            time.sleep(max(0.0, due - time.monotonic()))

    def _send_locked(self, n: int) -> list[dict[str, Any]]:
        items = []
        for _ in range(n):
            key = self.keys[self._next_key % len(self.keys)]
            self._next_key += 1
            self._seq[key] += 1
            payload: dict[str, int] = {"seq": self._seq[key]}
            if self.stamp:
                payload["sent_ns"] = time.time_ns()
            items.append((key, payload))
        try:
            results = self.producer.send_batch(self.prefix, items)
        except Exception:
            self.failures += 1
            return []
        rows = produced_rows(items, results)
        self.produced.extend(rows)
        return rows


# ---------------------------------------------------------------------------------------------- handled logs


class HandledLogs:
    """Every member log of a directory, read incrementally (only complete lines)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.rows: list[dict[str, Any]] = []
        self._offsets: dict[Path, int] = {}
        self._event_ids: set[str] = set()

    def refresh(self) -> list[dict[str, Any]]:
        for path in sorted(self.directory.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.rows.append(row)
                    self._event_ids.add(row["event_id"])
            self._offsets[path] = offset + end
        return self.rows

    def missing(self, produced: Iterable[dict[str, Any]]) -> list[str]:
        self.refresh()
        return [p["event_id"] for p in produced if p["event_id"] not in self._event_ids]

    def wait_all_handled(
        self, produced: list[dict[str, Any]], timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        wait_until(
            lambda: len(self.missing(produced)), lambda n: n == 0, timeout_s=timeout_s, interval_s=0.1,
            what=f"all {len(produced)} produced events handled (the value: how many are missing)",
        )  # fmt: skip
        return self.rows

    def by(self, member: str) -> list[dict[str, Any]]:
        return [r for r in self.refresh() if r["member_id"].split("/", 1)[0] == member]
