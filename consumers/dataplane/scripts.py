"""Loading the data plane's Lua scripts, and translating redis-py errors at this boundary.

The fenced scripts share one fence (``fence.lua``); Lua scripts cannot include one another, so the
fence's text is prepended to each of them here, once per process, and the result registered with
``register_script`` (EVALSHA, with the NOSCRIPT fallback built into redis-py). In front of the fence,
and of ``renew_lease.lua``, go the key helpers and the lease-record rule the coordinator's scripts share
too (:func:`rsc_redis.lua.lease_record_lua`: ``rsc_redis/keys.lua``, ``rsc_redis/lease_record.lua``);
``produce.lua`` starts with the key helpers alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import redis
from redis.commands.core import Script

from consumers.errors import DataPlaneError, DataPlaneUnavailable, InvalidRequest
from rsc_redis.lua import keys_lua, lease_record_lua

_DIR = Path(__file__).resolve().parent

FENCED_SCRIPTS = ("fetch", "read_new", "read_pending", "claim", "ack", "delete_ghosts", "dead_letter")
# Scripts that read the members' own lease renewals (docs/protocol.md section 5).
_LEASE_READERS = (*FENCED_SCRIPTS, "renew_lease")

# Replies that mean "not now", not "never": a failover, a loading replica, a long-running script.
_TRANSIENT_PREFIXES = ("BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY")


@cache
def script_text(name: str) -> str:
    """The source registered for ``name``: fenced scripts get ``fence.lua`` in front of them, and every
    script the key helpers (with the lease-record rule, for the scripts that read a lease)."""
    body = (_DIR / f"{name}.lua").read_text()
    if name in FENCED_SCRIPTS:
        body = (_DIR / "fence.lua").read_text() + "\n" + body
    if name in _LEASE_READERS:
        return lease_record_lua() + "\n" + body
    return keys_lua() + "\n" + body


def register(client: redis.Redis, name: str) -> Script:
    return client.register_script(script_text(name))


def require_bytes_client(client: redis.Redis) -> None:
    """Payloads are arbitrary bytes: a client that decodes replies would fail on them (or corrupt)."""
    # get_encoder() exists on Redis and RedisCluster alike (a cluster client has no connection kwargs).
    try:
        encoder = client.get_encoder()
    except AttributeError:  # not a redis-py client, or one built without its constructor (tests)
        encoder = None
    kwargs = client.get_connection_kwargs() if hasattr(client, "get_connection_kwargs") else {}
    if kwargs.get("decode_responses") or getattr(encoder, "decode_responses", False):
        raise InvalidRequest(
            "the data plane needs a redis client with decode_responses=False (payloads are bytes); "
            "create a separate client for it"
        )


@contextmanager
def translate_redis_errors(what: str) -> Iterator[None]:
    """No ``redis.*`` exception leaves the data plane: retriable ones become ``DataPlaneUnavailable``."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise DataPlaneUnavailable(f"{what}: Redis is unreachable: {e}") from e
    except redis.RedisError as e:
        raise translate_reply_error(what, e) from e


def translate_reply_error(what: str, error: Exception) -> DataPlaneUnavailable | DataPlaneError:
    message = str(error)
    if isinstance(error, redis.ReadOnlyError) or message.startswith(_TRANSIENT_PREFIXES):
        return DataPlaneUnavailable(f"{what}: Redis cannot serve it right now: {message}")
    return DataPlaneError(f"{what}: Redis refused it: {message}")
