"""`make run`: the whole development stack in one foreground process.

    python -m config.devstack [--addr 127.0.0.1:8000] [--data-dir .run]
                                                      (make run RUN_ARGS="--addr 127.0.0.1:8001")

1. Reads `.env` like the settings do. Holds `<data dir>/lock` (a second `make run` on the same data dir
   is refused). If REDIS_URL is still unset, starts the embedded Redis (config.embedded_redis) with its
   data in `<data dir>/redis/` (append-only file: groups survive a restart) on a stable port: the one it
   used last time (`<data dir>/redis/port`), at first DEFAULT_REDIS_PORT; if another program holds it, a
   free one, said in the log and remembered. Its URL goes to every child process; the Celery broker
   uses database 1 of the same server (CELERY_BROKER_URL, unless set).
2. Sets the DEV ONLY API tokens RSC_MEMBER_TOKENS / RSC_ADMIN_TOKENS for the children when unset, and
   writes what commands beside the stack need (REDIS_URL, DEBUG, the tokens, ...) to
   `<data dir>/devstack.env`, which config/settings.py reads while this process holds the lock
   (config/devstack_env.py); removed at the stop.
3. Runs the system checks and `migrate`; when DEBUG is on and no superuser exists, creates the
   DEV ONLY superuser admin/admin. Then loads the data plane's Redis Functions library (`manage.py
   redis_functions load`: members and producers call it and send no Lua; docs/redis-acl.md), creates
   the demo group `demo` / `demo-workers` (4 shards) unless it exists or RSC_DEMO is off, through
   coordinator.operations like a management command (authorized, audited), and finds the listeners of
   the apps in RSC_EXTRA_APPS. The embedded Redis runs with `busy-reply-threshold` 1000 ms
   (config/embedded_redis.py says why).
4. Starts the processes listed by `services()`, each in its own process group, and supervises them:
   the API and admin pages on granian (`python -m config.serve`, the production server,
   docs/benchmarks.md "The HTTP server"; with `--reload`, so code changes restart its workers as
   runserver would), a Celery worker and Celery
   beat; then, once the web server answers HTTP (so
   no member meets a refused connection), the demo members and the demo producer (unless RSC_DEMO is
   off) and `run_member` for the RSC_EXTRA_APPS listeners, restarted when a Python file of those apps
   changes (checked every WATCH_INTERVAL_S; if it exits, a broken edit say, it waits for the next
   change). Ctrl-C, SIGTERM or any other child exiting stops all of them (SIGTERM to each one's own
   process, then what is left of its group), then the embedded Redis. Beat's schedule file lives in a
   temporary directory that is removed on exit.

To add a process, append a `Service` in `services()` (demo members: `demo_member_services()`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import environ
from django.core.management.base import CommandError

from config.embedded_redis import FORBIDDEN_PORT, RedisServer, RedisServerError, free_port, port_in_use
from coordinator.protocol.errors import CoordinatorError

BASE_DIR = Path(__file__).resolve().parent.parent
DEV_SUPERUSER = ("admin", "admin")
# Read by the API's authentication (RSC_MEMBER_TOKENS, RSC_ADMIN_TOKENS); set only when unset.
DEV_TOKENS = {"RSC_MEMBER_TOKENS": "dev-member-token", "RSC_ADMIN_TOKENS": "dev-admin-token"}
DEMO_STREAM_PREFIX, DEMO_CONSUMER_GROUP, DEMO_SHARD_COUNT = "demo", "demo-workers", 4
# What the demo group's audit row names (operations.actor_from_command): "command:devstack ...:<OS user>".
DEVSTACK_COMMAND = "devstack create-demo-group"
STOP_TIMEOUT_S = 10.0
# The embedded Redis's first port (then the one remembered in the data dir). Not 6379, the developer's
# own Redis; 6390 is registered to no well-known service.
DEFAULT_REDIS_PORT = 6390
DEFAULT_DATA_DIR = BASE_DIR / ".run"
# How long services that wait for the web server (the members) wait before starting anyway.
WEB_READY_TIMEOUT_S = 120.0
# How often the RSC_EXTRA_APPS apps' files are checked for changes (their members restart on one).
WATCH_INTERVAL_S = 1.0


class DevstackError(Exception):
    """make run cannot start (a message for the developer, no traceback)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """One supervised child process."""

    name: str
    argv: tuple[str, ...]
    # When set, the service is ready once this port answers HTTP; the supervisor then announces it.
    ready_port: int | None = None
    ready_message: str = ""
    # The name of a service (with a ready_port) that must answer before this one starts.
    after: str | None = None
    # Variables this service alone gets, on top of the stack's environment.
    env: tuple[tuple[str, str], ...] = ()
    # Directories whose Python files restart this service when they change (the RSC_EXTRA_APPS apps, for
    # their members); such a service that exits waits for the next change instead of stopping the stack.
    watch: tuple[Path, ...] = ()


def services(
    host: str,
    port: int,
    run_dir: Path,
    app_listeners: tuple[str, ...] = (),
    *,
    demo: bool = True,
    app_dirs: tuple[Path, ...] = (),
) -> list[Service]:
    """The processes `make run` runs, in start order (they are stopped in reverse).

    ``run_dir`` is a private temporary directory for state files (beat's schedule), removed on exit.
    ``app_listeners``: the listener names of the RSC_EXTRA_APPS apps, run by one `run_member` that
    restarts when a Python file under ``app_dirs`` (their directories) changes. ``demo`` (RSC_DEMO): the
    demo members and producer.
    """
    manage = (sys.executable, str(BASE_DIR / "manage.py"))
    celery = (sys.executable, "-m", "celery", "-A", "config")
    # solo pool: the worker only runs the tick, one at a time. No gossip / mingle / heartbeat: they only
    # matter with several workers and slow the start-up down.
    worker_options = ("--pool=solo", "-n", "devstack@%h", "--without-gossip", "--without-mingle",
                      "--without-heartbeat")  # fmt: skip
    return [
        Service(
            name="web",
            argv=web_argv(host, port),
            ready_port=port,
            ready_message=f"open http://{host}:{port}/admin/",
            # /metrics sums both workers' figures (docs/metrics.md); only the web server writes there.
            env=(("PROMETHEUS_MULTIPROC_DIR", str(run_dir / "metrics")),),
        ),
        Service(name="celery-worker", argv=(*celery, "worker", "-l", "info", *worker_options)),
        Service(
            name="celery-beat",
            argv=(*celery, "beat", "-l", "info", "--schedule", str(run_dir / "celerybeat-schedule")),
        ),
        *(demo_member_services(manage) if demo else ()),
        *app_member_services(manage, app_listeners, app_dirs),
    ]


def web_argv(host: str, port: int) -> tuple[str, ...]:
    """The API as production runs it (``python -m config.serve``: granian, the heartbeat door, the
    multiprocess /metrics directory emptied at start), with ``--reload``. With DEBUG on (make run's
    default) config/urls.py serves the admin's static files."""
    return (
        sys.executable, "-m", "config.serve", "--bind", f"{host}:{port}", "--workers", "2", "--threads", "2",
        "--reload", "--graceful-s", "5",
    )  # fmt: skip


def demo_member_services(manage: tuple[str, ...]) -> list[Service]:
    """The demo: `run_member demo` (the listener in consumers/demo/listeners.py, two members of
    DEMO_STREAM_PREFIX / DEMO_CONSUMER_GROUP) and `produce_demo` feeding it. Stop one member process
    (or start another `run_member demo`) to watch a rebalance in the admin pages."""
    return [
        Service(
            name="demo-members", argv=(*manage, "run_member", "demo", "--shutdown-timeout", "5"), after="web"
        ),
        Service(name="demo-producer", argv=(*manage, "produce_demo", "--interval-ms", "500"), after="web"),
    ]


def app_member_services(
    manage: tuple[str, ...], names: tuple[str, ...], app_dirs: tuple[Path, ...] = ()
) -> list[Service]:
    """`run_member` for the listeners of the apps in RSC_EXTRA_APPS (none: no process), restarted when
    their code changes. It names no listener and runs without the demo app (RSC_DEMO=false for it alone):
    every listener the apps declare, so a listener added by an edit runs after the restart too."""
    if not names:
        return []
    argv = (*manage, "run_member", "--shutdown-timeout", "5")
    return [Service(name="app-members", argv=argv, after="web", env=(("RSC_DEMO", "false"),), watch=app_dirs)]


def log(message: str) -> None:
    print(f"[devstack] {message}", flush=True)


class Supervisor:
    """Starts services in their own process groups and stops whole groups (the API server forks workers,
    Celery its pool; killing only the parent would orphan them)."""

    def __init__(self, host: str, env: dict[str, str]) -> None:
        self._host = host
        self._env = env
        self._running: list[tuple[Service, subprocess.Popen[bytes]]] = []
        self._announced: set[str] = set()
        # Per watching service: the modification times of its watched files when it (re)started.
        self._watched: dict[str, dict[Path, int]] = {}
        # Watching services that exited: restarted on the next change, not a reason to stop.
        self._waiting_for_change: set[str] = set()

    def start(self, service: Service) -> None:
        log(f"starting {service.name}: {' '.join(service.argv)}")
        _Interrupts.deferring = True
        try:
            env = {**self._env, **dict(service.env)}
            if service.watch:
                self._watched[service.name] = _snapshot(service.watch)
            process = subprocess.Popen(service.argv, cwd=BASE_DIR, env=env, start_new_session=True)
            self._running = [(s, p) for s, p in self._running if s.name != service.name]
            self._running.append((service, process))
        finally:
            _Interrupts.deferring = False
        _raise_if_interrupted()

    def restart_changed(self) -> None:
        """Restart each watching service whose watched Python files changed since it started (also one
        that exited meanwhile, a syntax error say, waiting for the fix)."""
        for service, process in list(self._running):
            if not service.watch or _snapshot(service.watch) == self._watched.get(service.name):
                continue
            log(f"{service.name}: {', '.join(str(p) for p in service.watch)} changed; restarting it")
            self._stop([(service, process)])
            self._waiting_for_change.discard(service.name)
            self.start(service)

    def start_all(self, stack: list[Service]) -> bool:
        """Start the services in order, each one's ``after`` answering first. False if one exited."""
        for service in stack:
            _raise_if_interrupted()
            if service.after is not None and not self.wait_ready(service.after, WEB_READY_TIMEOUT_S):
                if self.first_exited() is not None:
                    return False
                log(f"{service.after} did not answer within {WEB_READY_TIMEOUT_S:.0f}s; starting "
                    f"{service.name} anyway")  # fmt: skip
            self.start(service)
        return True

    def wait_ready(self, name: str, timeout_s: float) -> bool:
        """Wait until the running service ``name`` answers HTTP; False on timeout or if any exited."""
        deadline = time.monotonic() + timeout_s
        while name not in self._announced:
            _raise_if_interrupted()
            if self.first_exited() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def first_exited(self) -> tuple[Service, int] | None:
        """The first service that has exited, with its exit code; announces newly ready ones. A watching
        service that exits is said once and waits for a change of its code instead."""
        for service, process in self._running:
            code = process.poll()
            if code is not None and service.watch:
                if service.name not in self._waiting_for_change:
                    self._waiting_for_change.add(service.name)
                    log(f"{service.name} exited with code {code}; it restarts when its code changes")
                continue
            if code is not None:
                return service, code
            waiting = service.ready_port is not None and service.name not in self._announced
            if waiting and _answers_http(self._host, service.ready_port or 0):
                self._announced.add(service.name)
                log(f"{service.name} is up: {service.ready_message}")
        return None

    def stop_all(self) -> None:
        """Stop the services that wait for another (the members) first, and wait for them: they leave
        their groups through the web server, which must still answer. Then the rest."""
        dependents = [(s, p) for s, p in self._running if s.after is not None]
        others = [(s, p) for s, p in self._running if s.after is None]
        for tier in (dependents, others):
            self._stop(tier)
        self._running.clear()

    def _stop(self, running: list[tuple[Service, subprocess.Popen[bytes]]]) -> None:
        # SIGTERM to each service's own process, not its whole group: the API server (granian) stops its
        # workers itself; a worker signalled directly exits first, and granian reports that as an
        # "Unexpected exit from worker-1" error. What is left of the group is killed once it has exited.
        for service, process in reversed(running):
            if process.poll() is None:
                log(f"stopping {service.name}")
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for service, process in reversed(running):
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{service.name} ignored SIGTERM for {STOP_TIMEOUT_S}s; killing it")
                process.kill()
                process.wait()
            # The group may still hold children (an API server worker, say).
            _signal_group(process, signal.SIGKILL)


def _snapshot(directories: tuple[Path, ...]) -> dict[Path, int]:
    """The modification time of every Python file under ``directories`` (none: an empty mapping)."""
    found: dict[Path, int] = {}
    for directory in directories:
        for path in directory.rglob("*.py"):
            with contextlib.suppress(OSError):  # removed meanwhile
                found[path] = path.stat().st_mtime_ns
    return found


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _answers_http(host: str, port: int) -> bool:
    """Any HTTP answer counts (the API's catch-all answers 404): the server is serving requests, not
    merely listening (the server binds a moment before its workers answer)."""
    connection = http.client.HTTPConnection(host, port, timeout=2)
    try:
        connection.request("GET", "/api/")
        connection.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def lock_data_dir(data_dir: Path) -> int:
    """Hold ``<data_dir>/lock`` for this process's lifetime (the kernel releases it at exit); a second
    dev stack on the same data dir would run a second Redis on the same append-only file."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DevstackError(
            f"another `make run` is using {data_dir} (it holds {data_dir / 'lock'}); stop it first, or give "
            "this one its own: make run RUN_ARGS='--data-dir .run2 --addr 127.0.0.1:8001'"
        ) from None
    return fd


def start_embedded_redis(data_dir: Path) -> RedisServer:
    """The persistent embedded Redis in ``<data_dir>/redis`` on its remembered (or default) port."""
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    port_file = redis_dir / "port"
    remembered = _read_port(port_file)
    wanted = remembered or DEFAULT_REDIS_PORT
    port = wanted
    if port_in_use(wanted):
        port = free_port()
        origin = "the port of the last run" if remembered else "the default port"
        log(f"embedded Redis: {wanted} ({origin}) is taken by another program; using {port} instead "
            f"(remembered in {port_file} for the next runs)")  # fmt: skip
    server = RedisServer(port, data_dir=redis_dir).start()
    port_file.write_text(f"{port}\n")
    return server


def _read_port(port_file: Path) -> int | None:
    try:
        port = int(port_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 and port != FORBIDDEN_PORT else None


class _Interrupts:
    """Ctrl-C / SIGTERM / SIGHUP raise KeyboardInterrupt, except while a child is being started: a
    signal between fork and the bookkeeping would leave a child nobody stops. There it is held and
    raised once the child is recorded."""

    deferring = False
    # A signal came. Raised again where the launcher starts or waits for something (a signal held while
    # a child starts, or whose KeyboardInterrupt code that catches BaseException swallowed).
    received = False


def _raise_interrupt(signum: int, frame: object) -> None:
    _Interrupts.received = True
    if not _Interrupts.deferring:
        raise KeyboardInterrupt


def _raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a signal that came earlier. The handler raises it where the signal
    lands; code that catches BaseException (a library's clean-up, say) can swallow it there, and the
    launcher would then run on after a Ctrl-C."""
    if _Interrupts.received:
        raise KeyboardInterrupt


def _app_listeners() -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """The names of the listeners that the RSC_EXTRA_APPS apps declare (importing their listeners.py:
    a broken one fails here, before anything starts), and the apps' directories (watched: an edit there
    restarts their members)."""
    from django.apps import apps
    from django.conf import settings

    from consumers.listener import autodiscover_listeners

    # This project's own switch (config/settings.py defines it, from the environment), not a package
    # setting: the dev stack runs config.settings.
    extra = tuple(settings.RSC_EXTRA_APPS)
    if not extra:
        return (), ()
    names = tuple(
        item.name
        for item in autodiscover_listeners().all()
        if not getattr(item.fn, "__module__", "").startswith("consumers.demo")
    )
    dirs = tuple(
        Path(config.path)
        for config in apps.get_app_configs()
        if any(entry == config.name or entry.startswith(f"{config.name}.") for entry in extra)
    )
    if names:
        log(f"RSC_EXTRA_APPS ({', '.join(extra)}): running listeners {', '.join(names)}; an edit under "
            f"{', '.join(map(str, dirs))} restarts their members")  # fmt: skip
    else:
        log(f"RSC_EXTRA_APPS ({', '.join(extra)}): no @listener in their listeners.py, so no members "
            "(restart make run once they have one)")  # fmt: skip
    return names, dirs


def _prepare_database() -> None:
    """migrate, then the DEV ONLY superuser. Runs in this process, after REDIS_URL is exported."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    # Fail fast: a web server would only log check errors per request, and call_command() skips
    # migrate's own checks.
    call_command("check")
    call_command("migrate", interactive=False, verbosity=1)

    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    if user_model.objects.filter(is_superuser=True).exists():
        log("a superuser already exists; not creating the dev one")
        return
    if not settings.DEBUG:
        log("DEBUG is off: not creating the admin/admin dev superuser (use manage.py createsuperuser)")
        return
    username, password = DEV_SUPERUSER
    user_model.objects.create_superuser(username=username, email="admin@localhost", password=password)
    banner = "!" * 72
    log(banner)
    log(f"DEV ONLY: created superuser {username!r} with password {password!r}.")
    log("Never use this database or these credentials outside local development.")
    log(banner)


def _export_dev_environment(redis_server: RedisServer | None) -> None:
    """Environment for this process (the demo group) and every child: broker URL and DEV ONLY tokens."""
    if redis_server is not None and not os.environ.get("CELERY_BROKER_URL"):
        # Same server, its own database: `redis-cli -n 0` then shows only the coordinator's keys.
        os.environ["CELERY_BROKER_URL"] = redis_server.url.rsplit("/", 1)[0] + "/1"
    log(f"Celery broker: {os.environ.get('CELERY_BROKER_URL') or os.environ['REDIS_URL']}")
    defaulted = {name: value for name, value in DEV_TOKENS.items() if not os.environ.get(name)}
    os.environ.update(defaulted)
    # The demo (consumers/demo) runs in the children: its members present the first member token.
    os.environ.setdefault("RSC_DEMO", "true")
    os.environ.setdefault("RSC_MEMBER_TOKEN", os.environ["RSC_MEMBER_TOKENS"].split(",")[0])
    if not defaulted:
        log("API tokens: RSC_MEMBER_TOKENS and RSC_ADMIN_TOKENS taken from the environment")
        return
    banner = "!" * 72
    log(banner)
    log("DEV ONLY API tokens (set these variables yourself to replace them):")
    for name, value in defaulted.items():
        log(f"    {name}={value}    (HTTP header: Authorization: Bearer {value})")
    log("They are public knowledge: never use them outside local development.")
    log(banner)


def _demo_enabled() -> bool:
    """RSC_DEMO as the settings read it (make run defaults it to true; `RSC_DEMO=false make run` runs
    the rest of the stack)."""
    from django.conf import settings

    return bool(settings.RSC_DEMO)


def _share_environment(data_dir: Path) -> Path:
    """Write what the commands beside this stack need (config/devstack_env.py) and say how to use it."""
    from config import devstack_env

    path = devstack_env.write(data_dir, os.environ)
    beside = "" if data_dir == DEFAULT_DATA_DIR else f"DEVSTACK_DIR={data_dir} "
    log(f"commands beside this stack take its settings from {path} while it runs, e.g. "
        f"{beside}.venv/bin/python manage.py consumer_groups list")  # fmt: skip
    return path


def _load_functions() -> None:
    """``manage.py redis_functions load``: the library the demo members and producer call (the
    coordinator's tick would load it too, a tick later than the first member wants it)."""
    from django.core.management import call_command

    call_command("redis_functions", "load")


def _export_coordinator_url(host: str, port: int) -> None:
    """The members' RSC_COORDINATOR_URL (unless set): this machine's API over plain HTTP. A server bound
    to every interface is reached on the loopback; one bound to another address of this machine is
    reached there, which a member refuses over plain HTTP unless allowed (consumers.E005: the token
    would travel in clear), so the dev stack allows it (its tokens are DEV ONLY, on this machine)."""
    if "RSC_COORDINATOR_URL" in os.environ:
        return
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    literal = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = os.environ["RSC_COORDINATOR_URL"] = f"http://{literal}:{port}"
    from consumers.client import insecure_url_problem

    if insecure_url_problem(url) is not None and "RSC_ALLOW_INSECURE_COORDINATOR_URL" not in os.environ:
        os.environ["RSC_ALLOW_INSECURE_COORDINATOR_URL"] = "true"
        log(f"the members reach the API at {url}: plain HTTP to a non-loopback address, allowed for make run")


def _create_demo_group() -> None:
    """The group demo members consume: `demo` / `demo-workers`, 4 shards, the settings' group defaults.

    Created through the operations layer, like every operator change: it acts as a management command
    (an admin actor naming this command and the OS user) and leaves an audit row. Idempotent: an
    existing group is left as it is (even with other settings); finding it is a read, so a restart
    writes no audit row.
    """
    from django.conf import settings

    from coordinator import operations
    from coordinator.protocol.commands import CreateGroup
    from coordinator.protocol.errors import GroupAlreadyExists, GroupNotFound, ShardCountConflict
    from coordinator.store import get_store, reset_store
    from coordinator.store.redis_store import default_config_from_settings
    from rsc_redis.keys import meta_key

    name = f"{DEMO_STREAM_PREFIX}/{DEMO_CONSUMER_GROUP}"
    command = CreateGroup(
        stream_prefix=DEMO_STREAM_PREFIX,
        consumer_group=DEMO_CONSUMER_GROUP,
        shard_count=DEMO_SHARD_COUNT,
        config=default_config_from_settings(settings),
    )
    try:
        try:
            get_store().describe_group(DEMO_STREAM_PREFIX, DEMO_CONSUMER_GROUP)
        except GroupNotFound:
            operations.create_group(operations.actor_from_command(DEVSTACK_COMMAND), command)
            log(f"created the demo group {name} ({DEMO_SHARD_COUNT} shards)")
        else:
            log(f"the demo group {name} already exists")
    except GroupAlreadyExists:  # created in between, by another process
        log(f"the demo group {name} already exists")
    except ShardCountConflict as exc:  # a `demo` prefix of someone else's, in a shared REDIS_URL
        log(f"not creating the demo group {name}: {exc}")
    finally:
        reset_store()  # the children open their own connections
    log(f"inspect it: redis-cli -u {settings.REDIS_URL} hgetall '{meta_key(DEMO_STREAM_PREFIX)}'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.devstack", description=__doc__.split("\n")[0])
    parser.add_argument("--addr", default="127.0.0.1:8000", help="web server address (default %(default)s)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="the embedded Redis's data (append-only file, port) lives in DATA_DIR/redis (default: .run)",
    )
    args = parser.parse_args(argv)
    host, _, port_text = args.addr.rpartition(":")
    host, port = host or "127.0.0.1", int(port_text)
    with tempfile.TemporaryDirectory(prefix="rsc-devstack-") as run_dir:
        return _run(host, port, Path(run_dir), args.data_dir.resolve())


def _run(host: str, port: int, run_dir: Path, data_dir: Path = DEFAULT_DATA_DIR) -> int:
    web = services(host, port, run_dir)[0]
    if web.ready_port is not None and _accepts(host, web.ready_port):
        # else the readiness probe would mistake the other server for ours
        log(f"{host}:{web.ready_port} is already in use; {web.name} cannot start (try --addr)")
        return 1

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    environ.Env.read_env(BASE_DIR / ".env")  # same rule as settings: the real environment wins
    # DEBUG on is development mode too (config/settings.py: DEVELOPMENT defaults to DEBUG): the
    # development SECRET_KEY and plain HTTP, which make run needs.
    os.environ.setdefault("DEBUG", "true")
    # SIGTERM / SIGHUP take the same clean path as Ctrl-C. SIGINT is set explicitly because a shell
    # starts background jobs with it ignored, and Python then never installs its own handler.
    _Interrupts.received = False
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)

    redis_server: RedisServer | None = None
    supervisor: Supervisor | None = None
    shared_env: Path | None = None
    exit_code = 0
    try:
        # Held for this process's lifetime: one stack per data dir, and while it is held the commands
        # beside this stack read its settings (devstack_env.FILE_NAME, written below).
        lock_data_dir(data_dir)
        if os.environ.get("REDIS_URL"):
            log(f"using REDIS_URL={os.environ['REDIS_URL']}")
        else:
            redis_server = start_embedded_redis(data_dir)
            os.environ["REDIS_URL"] = redis_server.url
            log(
                f"embedded Redis ({redis_server.binary}) at {redis_server.url}: private, persisted in "
                f"{redis_server.directory} (append-only file; delete the directory to start afresh)"
            )
        _export_dev_environment(redis_server)
        _export_coordinator_url(host, port)
        shared_env = _share_environment(data_dir)
        _prepare_database()
        _load_functions()
        demo = _demo_enabled()
        if demo:
            _create_demo_group()
        else:
            log("RSC_DEMO is off: no demo group, demo members or demo producer")
        names, app_dirs = _app_listeners()
        stack = services(host, port, run_dir, names, demo=demo, app_dirs=app_dirs)
        _raise_if_interrupted()
        supervisor = Supervisor(host, env=dict(os.environ))
        if not supervisor.start_all(stack):
            log("a service exited during start-up")
        next_scan = time.monotonic() + WATCH_INTERVAL_S
        while True:
            exited = supervisor.first_exited()
            if exited is not None:
                service, code = exited
                log(f"{service.name} exited with code {code}; stopping everything")
                exit_code = code or 1
                break
            _raise_if_interrupted()
            if time.monotonic() >= next_scan:
                supervisor.restart_changed()
                next_scan = time.monotonic() + WATCH_INTERVAL_S
            time.sleep(0.25)
    except KeyboardInterrupt:
        log("interrupted; stopping everything")
    except CommandError as exc:  # includes SystemCheckError from migrate (rsc.E00x, ...)
        log(f"setup failed:\n{exc}")
        exit_code = 1
    except CoordinatorError as exc:  # the demo group: Redis unreachable, say
        log(f"setup failed: {exc!r}")
        exit_code = 1
    except (DevstackError, RedisServerError) as exc:
        log(f"cannot start: {exc}")
        exit_code = 1
    finally:
        # A second Ctrl-C must not cut the shutdown short; it is bounded by STOP_TIMEOUT_S anyway.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if supervisor is not None:
            supervisor.stop_all()
        if shared_env is not None:
            shared_env.unlink(missing_ok=True)
        if redis_server is not None:
            redis_server.stop()
            log("embedded Redis stopped")
    return exit_code


if __name__ == "__main__":
    code = main()
    if _Interrupts.received:  # every interrupt ends in _run's clean stop
        # CPython 3.11 marks a KeyboardInterrupt as unhandled when it escapes an exec() (a dataclass's
        # generated __init__, say, while an import runs), even though it was caught further up; at exit
        # it then kills the process with SIGINT, after everything stopped cleanly. Exit with our code
        # instead, skipping interpreter finalization (every service, Redis and the run directory are
        # already gone).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
