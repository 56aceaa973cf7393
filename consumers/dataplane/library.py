"""The members' and producers' side of the Redis Functions library (rsc_redis/dataplane/library.py, which
assembles it and names its functions): the start-up check that this code version's library is loaded,
and the error that says how to load it (docs/redis-acl.md, "No code from clients")."""

from __future__ import annotations

from typing import Any

from consumers.errors import FunctionsNotLoaded
from rsc_redis import functions
from rsc_redis.dataplane.library import (
    FENCED,
    FUNCTIONS,
    LOAD_COMMAND,
    expected_version,
    function_name,
    library,
    render,
)

__all__ = [
    "FENCED",
    "FUNCTIONS",
    "LOAD_COMMAND",
    "expected_version",
    "function_name",
    "library",
    "not_loaded",
    "render",
    "require_loaded",
]

def not_loaded(where: str) -> FunctionsNotLoaded:
    name = library().name
    return FunctionsNotLoaded(
        f"{where}: the Redis Functions library {name} of this code version is not loaded (a new or flushed "
        f"Redis, or only a coordinator of another version loaded its own): run `{LOAD_COMMAND}` with "
        "the coordinator's settings; a running coordinator of this version loads it on its next tick",
        library=name,
    )


def require_loaded(client: Any) -> None:
    """Raise :class:`~consumers.errors.FunctionsNotLoaded` unless this version's library answers on every
    primary of ``client`` (one ``FCALL_RO`` of its version function each: all a member's or a producer's
    Redis user may do to look). ``DataPlaneUnavailable`` if Redis does not answer, ``DataPlaneError``
    if it refuses (a Redis user without ``FCALL_RO``)."""
    from .scripts import translate_redis_errors  # scripts.py translates with not_loaded() above

    with translate_redis_errors("checking the Redis Functions library"):
        for name, node in functions.primaries(client):
            if functions.installed_version(node, library()) is None:
                raise not_loaded(f"Redis {name}")
