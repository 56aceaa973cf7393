"""A private, throw-away PostgreSQL server for the test suite (the way tests start their own Redis).

``PostgresServer`` runs ``initdb`` into a temporary directory and ``pg_ctl start`` on a free port bound to
127.0.0.1 (its socket in the same directory), with durability off (``fsync=off``: test data). It never
touches the machine's shared server on 5432.

Binaries: ``initdb`` / ``pg_ctl`` / ``postgres`` from $RSC_TEST_PG_BINDIR, else from PATH, else the
highest Debian install under /usr/lib/postgresql/<version>/bin. PostgreSQL refuses to run as root; when
the suite runs as root (CI does), the server runs as the ``postgres`` system user (or ``nobody``) and
its directory is handed to that user.

``python -m tests.postgres [pytest args]`` is the PostgreSQL pass of ``make test``: it starts a server,
points ``DATABASE_URL`` at it and runs pytest with ``RSC_TEST_DB_ONLY=1`` (only the tests that use the
database: tests/conftest.py). Without binaries it says so and exits 0, so a machine without PostgreSQL
still runs the SQLite suite; ``.ci/run`` installs PostgreSQL first, so CI always runs this pass.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from config.embedded_redis import free_port

BINDIR_ENV_VAR = "RSC_TEST_PG_BINDIR"
SHARED_PORT = 5432
DATABASE = "rsc"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries here: the PostgreSQL tests cannot run on this machine."""


def find_bindir() -> Path:
    override = os.environ.get(BINDIR_ENV_VAR)
    if override:
        return Path(override)
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(os.path.realpath(on_path)).parent
    installs = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version_key)
    if installs:
        return Path(installs[-1]).parent
    raise PostgresUnavailable(
        "no PostgreSQL binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin: "
        "install PostgreSQL (Debian: apt-get install postgresql) to run the PostgreSQL tests"
    )


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parts[-3]
    return tuple(int(p) for p in version.split(".") if p.isdigit())


class PostgresServer:
    """``with PostgresServer() as pg: pg.url`` -> ``postgres://postgres@127.0.0.1:<port>/rsc``."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.port = free_port()
        assert self.port != SHARED_PORT
        self.dir = Path(tempfile.mkdtemp(prefix="rsc-pg-"))
        self.data = self.dir / "data"
        self._user = _run_as_user()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> PostgresServer:
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off " \
                  "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"  # fmt: skip
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"), "-w",
                  "-t", "60", "start")  # fmt: skip
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", DATABASE)
        return self

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                self._argv("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60,
            )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _argv(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bindir / tool), *args]
        if self._user is not None:
            user = self._user
            argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]
        return argv

    def _run(self, tool: str, *args: str) -> None:
        argv = self._argv(tool, *args)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            log = (self.dir / "server.log").read_text(errors="replace")[-2000:] if tool == "pg_ctl" else ""
            raise PostgresUnavailable(f"{tool} failed ({result.returncode}): {result.stderr.strip()}\n{log}")


def _run_as_user() -> pwd.struct_passwd | None:
    """PostgreSQL will not run as root: run it as ``postgres`` (or ``nobody``) then."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and neither a 'postgres' nor a 'nobody' user exists")


def main(argv: list[str]) -> int:
    try:
        server = PostgresServer()
    except PostgresUnavailable as e:
        print(f"PostgreSQL pass skipped: {e}", flush=True)
        return 0
    with server:
        env = {**os.environ, "DATABASE_URL": server.url, "RSC_TEST_DB_ONLY": "1"}
        print(f"PostgreSQL pass: private server {server.bindir} on port {server.port}", flush=True)
        return subprocess.run([sys.executable, "-m", "pytest", *argv], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
