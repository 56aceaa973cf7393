"""Redis Functions: a library of Lua functions that the coordinator loads (``FUNCTION LOAD``) and that
clients call by name (``FCALL``), so that no client ever sends Lua text (docs/redis-acl.md, "No code
from clients").

A :class:`Library` is assembled once from Lua parts: a prelude (helpers every function shares, defined
once in the library) and one body per function, each body the text of a script that uses ``KEYS`` and
``ARGV`` (it becomes ``local function <name>(KEYS, ARGV) <body> end``). Functions cannot read the
globals ``KEYS`` and ``ARGV`` that ``EVAL`` sets, so a shared helper takes the keys it needs as
arguments.

Versions. The library's name is ``rsc_<digest>``, the digest being the first 12 hex digits of the SHA-1
of its *template* (the text before anything secret or per-deployment is put in), and each function is
named ``rsc_<digest>_<name>``. A client computes the names from its own copy of the code, so it calls
exactly the functions of its own version, and two versions of the code (a rolling upgrade) run side by
side, each with its own library: loading one never replaces the other. Old libraries are removed by
the operator (``manage.py redis_functions prune``) once no process of that version runs.

Rendering. The template holds placeholders ``{{NAME}}``: ``{{LIBRARY}}`` (the library's name),
``{{VERSION}}`` (what the version function returns: ``"<digest> <key id>"``) and the library's own
(the dead-letter MAC keys of the data plane's library). Only hex digits may be put in, so nothing
rendered can change the Lua around it, and the digest never depends on a secret: a client that knows
the version learns nothing about the keys, and a key change does not change the names.

Loading is the coordinator's (its Redis user has ``FUNCTION LOAD``); on a Redis Cluster on every
primary (functions replicate to replicas, so a promoted replica has them). The version function
(``rsc_<digest>_version``, flagged ``no-writes``) answers ``FCALL_RO``, which is all a member or a
producer needs to check at start that its library is loaded: they hold neither ``FUNCTION LIST`` nor
``FUNCTION DUMP``, which would show them the code and its keys.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .clients import fcall_ro_command, forget_stale_gate, is_cluster

LIBRARY_PREFIX = "rsc_"
DIGEST_CHARS = 12
VERSION = "version"
_PLACEHOLDER = re.compile(r"\{\{([A-Z0-9_]+)\}\}")
_HEX = re.compile(r"[0-9a-f]+")
# Redis's reply to an FCALL of a function no library defines (redis-py strips the ERR prefix).
NOT_FOUND = "Function not found"


def is_not_found(error: BaseException) -> bool:
    """The error reply of an ``FCALL`` whose function is not loaded: nothing ran."""
    return isinstance(error, redis.ResponseError) and str(error).startswith(NOT_FOUND)


@dataclass(frozen=True, slots=True)
class Function:
    """One function of a library: its short ``name`` (``fetch``), the Lua ``body`` of a script using
    ``KEYS`` and ``ARGV``, and whether it never writes (flag ``no-writes``: allowed by ``FCALL_RO``,
    on a replica, and killable with ``FUNCTION KILL``)."""

    name: str
    body: str
    no_writes: bool = False


class Library:
    """A versioned Redis Functions library (module docstring). ``placeholders``: the names, besides
    ``LIBRARY`` and ``VERSION``, that :meth:`render` must be given (hex values only)."""

    def __init__(
        self, title: str, prelude: str, functions: Sequence[Function], placeholders: Sequence[str] = ()
    ) -> None:
        names = [f.name for f in functions]
        if VERSION in names or len(set(names)) != len(names):
            raise ValueError(f"function names must be unique and not {VERSION!r}: {names}")
        for name in names:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"function name {name!r} must be lower-case letters, digits and _")
        parts = [
            "#!lua name={{LIBRARY}}",
            f"-- {title}",
            "-- Loaded by the coordinator (FUNCTION LOAD); generated from the project's Lua files, do not",
            "-- edit it on the server (rsc_redis/functions.py).",
            prelude,
        ]
        for f in functions:
            parts += [f"local function rsc_fn_{f.name}(KEYS, ARGV)", f.body, "end"]
        for f in functions:
            flags = ", flags = {'no-writes'}" if f.no_writes else ""
            parts.append(
                f"redis.register_function{{function_name = '{{{{LIBRARY}}}}_{f.name}', "
                f"callback = rsc_fn_{f.name}{flags}}}"
            )
        parts.append(
            f"redis.register_function{{function_name = '{{{{LIBRARY}}}}_{VERSION}', "
            "callback = function() return '{{VERSION}}' end, flags = {'no-writes'}}"
        )
        self.template = "\n".join(parts) + "\n"
        self.functions = tuple(functions)
        self.placeholders = tuple(placeholders)
        found = set(_PLACEHOLDER.findall(self.template))
        expected = {"LIBRARY", "VERSION", *self.placeholders}
        if found != expected:
            raise ValueError(f"the template's placeholders {sorted(found)} are not {sorted(expected)}")
        self.digest = hashlib.sha1(self.template.encode()).hexdigest()[:DIGEST_CHARS]
        self.name = f"{LIBRARY_PREFIX}{self.digest}"

    def function(self, name: str) -> str:
        """The server-side name of the function ``name``: ``rsc_<digest>_<name>``."""
        return f"{self.name}_{name}"

    @property
    def version_function(self) -> str:
        return self.function(VERSION)

    def version(self, key_id: str) -> str:
        """What the version function of a library rendered with keys of id ``key_id`` returns."""
        return f"{self.digest} {key_id}"

    def render(self, values: Mapping[str, str], key_id: str) -> str:
        """The library's text for ``FUNCTION LOAD``: the template with its placeholders filled in.
        Every value, and ``key_id``, must be lower-case hex."""
        if set(values) != set(self.placeholders):
            raise ValueError(f"render needs exactly {sorted(self.placeholders)}; got {sorted(values)}")
        for name, value in [*values.items(), ("key id", key_id)]:
            if not _HEX.fullmatch(value):
                raise ValueError(f"{name} must be lower-case hex digits")
        filled = {"LIBRARY": self.name, "VERSION": self.version(key_id), **values}
        return _PLACEHOLDER.sub(lambda m: filled[m.group(1)], self.template)


# ---------------------------------------------------------------------------------------- on the server


def primaries(client: Any) -> list[tuple[str, redis.Redis]]:
    """``(name, client)`` of every primary: the cluster's, or the one Redis itself."""
    if not is_cluster(client):
        kwargs = client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        return [(str(where), client)]
    return [(node.name, client.get_redis_connection(node)) for node in client.get_primaries()]


def installed_version(node: redis.Redis, library: Library) -> str | None:
    """What ``library``'s version function answers on ``node`` (``"<digest> <key id>"``), or None when
    that library is not loaded there. ``FCALL_RO``, or ``RSC.FCALL_RO`` through the gate module
    (:func:`rsc_redis.clients.fcall_ro_command`)."""
    for attempt in range(2):
        try:
            reply = node.execute_command(fcall_ro_command(node), library.version_function, 0)
            break
        except redis.ResponseError as e:
            if is_not_found(e):
                return None
            if attempt or not forget_stale_gate(node, e):  # else: the gate asked again, once more
                raise
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def ensure_loaded(client: Any, library: Library, text: str, version: str) -> list[str]:
    """Load ``text`` (``library`` rendered) on every primary whose version function does not answer
    ``version`` (missing, or rendered with other keys); returns the names of the primaries loaded.
    Idempotent: two processes loading at once load the same text (``FUNCTION LOAD REPLACE``)."""
    loaded = []
    for name, node in primaries(client):
        if installed_version(node, library) != version:
            node.execute_command("FUNCTION", "LOAD", "REPLACE", text)
            loaded.append(name)
    return loaded


def load(client: Any, text: str) -> list[str]:
    """``FUNCTION LOAD REPLACE text`` on every primary; their names."""
    done = []
    for name, node in primaries(client):
        node.execute_command("FUNCTION", "LOAD", "REPLACE", text)
        done.append(name)
    return done


def installed_libraries(client: Any) -> dict[str, list[str]]:
    """Per primary, the names of the libraries of this project loaded there (``rsc_*``)."""
    found: dict[str, list[str]] = {}
    for name, node in primaries(client):
        rows = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", f"{LIBRARY_PREFIX}*")  # a pattern
        found[name] = sorted(_text(_field(row, "library_name")) for row in rows)
    return found


def installed_text(node: redis.Redis, library: Library) -> str | None:
    """The code of ``library`` as loaded on ``node`` (``FUNCTION LIST ... WITHCODE``), or None."""
    rows = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", library.name, "WITHCODE")
    for row in rows:
        if _text(_field(row, "library_name")) == library.name:
            return _text(_field(row, "library_code"))
    return None


def delete_libraries(client: Any, names: Sequence[str]) -> dict[str, list[str]]:
    """``FUNCTION DELETE`` each of ``names`` (all ``rsc_*``) on every primary where it is loaded."""
    if any(not n.startswith(LIBRARY_PREFIX) for n in names):
        raise ValueError(f"only this project's libraries ({LIBRARY_PREFIX}*) are deleted here")
    deleted: dict[str, list[str]] = {}
    installed = installed_libraries(client)
    for name, node in primaries(client):
        gone = [n for n in names if n in installed.get(name, [])]
        for library_name in gone:
            node.execute_command("FUNCTION", "DELETE", library_name)
        deleted[name] = gone
    return deleted


def _field(row: Any, name: str) -> Any:
    """A field of a ``FUNCTION LIST`` row: a flat list (RESP2) or a map (RESP3)."""
    if isinstance(row, dict):
        return row.get(name.encode(), row.get(name))
    for i in range(0, len(row) - 1, 2):
        if _text(row[i]) == name:
            return row[i + 1]
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
