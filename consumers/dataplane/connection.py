"""Redis clients for the data plane and the producer: a command is sent once, never re-sent blindly.

redis-py re-sends a command after a ``ConnectionError`` / ``TimeoutError`` when the client's ``retry``
policy allows it: ``redis.Redis(host=...)`` re-sends up to 10 times by default in redis-py 8, while
``Redis.from_url(...)`` without a ``retry`` argument does not (the connection's own default is
``Retry(NoBackoff(), 0)``). Which one a caller gets is an accident of how the client was built, and a
re-send is not harmless here: the error may have cut the *reply*, after the script ran. A re-sent
``read_new.lua`` then moves the next entries into the member's pending list as well and returns only
those, so the first run's entries are stranded (never handled until a take-over) and later entries of
the same keys are handled first. A re-sent append writes the event twice.

So the decision is: these clients never re-send (``retry=Retry(NoBackoff(), 0)``, no ``retry_on_error``,
no ``retry_on_timeout``); the error reaches our code as ``DataPlaneUnavailable``, whose outcome is
unknown, and the caller recovers in a way that is safe for that operation (a member re-reads its own
pending entries before reading anything new; an ack is idempotent and retried; the producer re-routes
only refusals, which wrote nothing, and leaves an ambiguous append to its caller).

A :class:`consumers.dataplane.DataPlane` refuses a client that would re-send (it would strand entries);
a :class:`consumers.producer.Producer` accepts one with a warning (a re-send only duplicates an event,
with the same ``event_id``, which at-least-once allows).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from consumers.errors import InvalidRequest
from rsc_redis.clients import client_from_url

log = logging.getLogger("consumers.dataplane")


def redis_client(
    url: str,
    *,
    socket_timeout: float = 5.0,
    socket_connect_timeout: float = 2.0,
    health_check_interval: int = 30,
    **options: Any,
) -> redis.Redis | RedisCluster:
    """A client for the data plane or the producer: bytes replies (payloads are bytes), bounded
    timeouts, and no re-sends (see the module docstring). ``options`` go to ``Redis.from_url``; retry
    options among them are overridden.

    A ``redis+cluster://`` URL gives a ``RedisCluster`` (docs/cluster.md) whose own command retry is off
    as well (``retry=Retry(NoBackoff(), 0)``; redis-py builds its node connections without retries). It
    still follows ``MOVED`` and ``ASK``: those are replies saying the command did not run on that node,
    so sending it to the node they name is not a re-send. A connection error or timeout on the node
    raises (the client refreshes its slot map on the next command), like on one Redis."""
    options.update(
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout,
        health_check_interval=health_check_interval,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        retry_on_timeout=False,
    )
    return client_from_url(url, **options)


def resends(client: Any) -> int:
    """How many times ``client`` re-sends a command after a connection error or timeout (-1: forever),
    worked out from its connection settings the way ``redis.connection.AbstractConnection`` does, and,
    for a ``RedisCluster``, from its own command retry as well (``retry``: up to 10 re-sends by default,
    on top of its connections'). A client whose settings cannot be read counts as 0: nothing to go on."""
    per_connection = _connection_resends(client)
    if not isinstance(client, RedisCluster):
        return per_connection
    per_command = int(client.retry.get_retries())
    if per_connection < 0 or per_command < 0:
        return -1
    return (per_connection + 1) * (per_command + 1) - 1


def _connection_resends(client: Any) -> int:
    getter = getattr(client, "get_connection_kwargs", None)
    kwargs = getter() if callable(getter) else None
    if not isinstance(kwargs, dict):
        return 0
    retry = kwargs.get("retry")
    on_error = list(kwargs.get("retry_on_error") or ())
    if kwargs.get("retry_on_timeout"):
        on_error.append(redis.TimeoutError)
    if retry is None:
        return 1 if on_error else 0  # redis-py's Retry(NoBackoff(), 1) when only errors are listed
    errors = tuple(getattr(retry, "_supported_errors", ())) + tuple(on_error)
    return int(retry.get_retries()) if errors else 0


def _advice(count: int) -> str:
    times = "forever" if count < 0 else f"up to {count} times"
    return (
        f"this Redis client re-sends a command after a connection error or timeout ({times}); build it "
        "with consumers.dataplane.redis_client(url), or pass retry=Retry(NoBackoff(), 0)"
    )


def refuse_resending_client(client: Any) -> None:
    count = resends(client)
    if count:
        raise InvalidRequest(
            f"the data plane needs a client that sends each command once: {_advice(count)}. A re-sent read "
            "script whose first reply was lost strands the entries that first run delivered."
        )


def warn_if_resending(client: Any, who: str) -> None:
    count = resends(client)
    if count:
        log.warning("%s: %s. A re-sent append writes the event twice (same event_id).", who, _advice(count))
