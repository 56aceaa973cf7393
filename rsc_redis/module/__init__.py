"""The gate module (``rsc_gate.c`` beside this file): ``RSC.FCALL_MEMBER``, ``RSC.FCALL_PRODUCER`` and
``RSC.FCALL_RO``, through which members and producers call the data plane's functions without holding
the raw commands those run (docs/redis-acl.md, "The gate module"). Which operation each command calls:
:data:`COMMANDS` (rsc_gate.c has the same lists; tests/test_redis_gate.py keeps them equal, and equal to
rsc_redis/dataplane/library.py's functions).

:func:`path` returns the compiled module for ``redis-server --loadmodule``, compiling it first when
needed: with the machine's C compiler (``$CC``, else ``cc``), into a per-user cache directory, under a
name that carries a digest of the C source and its header, so a changed source is compiled afresh and
two processes that compile at once each write their own file and move it into place. ``$RSC_GATE_MODULE``
names a module built elsewhere (a production Redis loads the file its operators built; this is for
the dev stack and the tests). ``python -m rsc_redis.module`` compiles it and prints its path (the
Makefile runs it).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

_DIR = Path(__file__).resolve().parent
SOURCES = (_DIR / "rsc_gate.c", _DIR / "redismodule.h")
ENV_VAR = "RSC_GATE_MODULE"
# The gate's commands (rsc_gate.c) and the operations of the data plane's library each one calls:
# a member's, a producer's, and the version check (FCALL_RO) that both make at start.
MEMBER = ("fetch", "read_new", "read_pending", "claim", "ack", "delete_ghosts", "dead_letter", "renew_lease")
PRODUCER = ("produce", "idempotent_produce")
READ_ONLY = ("version",)
FCALL_MEMBER, FCALL_PRODUCER, FCALL_RO = "RSC.FCALL_MEMBER", "RSC.FCALL_PRODUCER", "RSC.FCALL_RO"
COMMANDS = {FCALL_MEMBER: MEMBER, FCALL_PRODUCER: PRODUCER, FCALL_RO: READ_ONLY}
_NAME_HEAD = len("rsc_") + 12 + 1  # rsc_<digest>_ (rsc_redis/functions.py)
_CFLAGS = ("-O2", "-Wall", "-Werror", "-fPIC", "-shared", "-std=gnu99")


class ModuleBuildError(RuntimeError):
    """The gate module could not be compiled (no C compiler, or the compiler refused it)."""


def gate_command(function: str) -> str:
    """The gate's write command for ``function`` (``rsc_<digest>_<operation>``): the producer's for
    its operations, else the member's (which refuses anything not of :data:`MEMBER`)."""
    return FCALL_PRODUCER if function[_NAME_HEAD:] in PRODUCER else FCALL_MEMBER


def digest() -> str:
    """The first 12 hex digits of the SHA-256 of the module's sources: what its file name carries."""
    h = hashlib.sha256()
    for source in SOURCES:
        h.update(source.read_bytes())
    return h.hexdigest()[:12]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rsc-redis"


def path() -> Path:
    """The compiled module (``$RSC_GATE_MODULE``, else compiled here if not yet): see the module docstring."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    target = cache_dir() / f"rsc_gate-{digest()}.so"
    if not target.is_file():
        build(target)
    return target


def build(target: Path) -> None:
    """Compile the module into ``target`` (written beside it, then moved into place)."""
    compiler = shlex.split(os.environ.get("CC") or "cc")
    if shutil.which(compiler[0]) is None:
        raise ModuleBuildError(
            f"no C compiler ({compiler[0]!r}) to build the Redis gate module {SOURCES[0]}: install gcc, "
            f"set CC, or point {ENV_VAR} at a built rsc_gate.so"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [*compiler, *_CFLAGS, "-I", str(_DIR), "-o", partial, str(SOURCES[0])],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ModuleBuildError(f"compiling {SOURCES[0]} failed:\n{done.stderr.strip()}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def server_args() -> list[str]:
    """The ``redis-server`` arguments that load the gate module."""
    return ["--loadmodule", str(path())]
