"""The data plane's Redis calls: its functions by name, and redis-py errors translated at this boundary.

Every operation of a member or a producer is a function of the data plane's Redis Functions library
(:mod:`consumers.dataplane.library`), called with ``FCALL``: :func:`function` for an operation called
now and then, :func:`hot_function` for the hot paths (a member's fetch, a producer's single send).
Nothing here loads the library: the coordinator does; a call that finds it missing raises
:class:`~consumers.errors.FunctionsNotLoaded` (nothing ran).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from consumers.errors import DataPlaneError, DataPlaneUnavailable, InvalidRequest
from rsc_redis import clients, errors, functions

from . import library


class Function:
    """One function of this version's library: ``function(keys=, args=)`` sends ``FCALL``, or the gate
    module's command where it serves this client (:func:`rsc_redis.clients.fcall_command`),
    routed to its first key's primary on a Redis Cluster."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = library.function_name(name)

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        if clients.is_cluster(self.client):
            (reply,) = clients.run_functions(self.client, self.name, [(len(keys), *keys, *args)])
            if isinstance(reply, Exception):
                raise reply
            return reply
        try:
            return self._send(keys, args)
        except redis.ResponseError as e:
            if not clients.forget_stale_gate(self.client, e):
                raise
        return self._send(keys, args)  # nothing ran: once more, with the gate asked again

    def _send(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        fcall = clients.fcall_command(self.client, self.name)
        return self.client.execute_command(fcall, self.name, len(keys), *keys, *args)


def function(client: Any, name: str) -> Function:
    return Function(client, name)


def hot_function(client: Any, name: str) -> clients.HotFunction:
    return clients.HotFunction(client, library.function_name(name))


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
    """No ``redis.*`` exception leaves the data plane (nor the cluster client's own, which do not derive
    from ``RedisError``): :func:`translate_reply_error` says which typed error each becomes."""
    try:
        yield
    except (redis.RedisError, RedisClusterException) as e:
        raise translate_reply_error(what, e) from e


def translate_reply_error(what: str, error: BaseException) -> DataPlaneUnavailable | DataPlaneError:
    """A redis-py error as the data plane's, by :func:`rsc_redis.errors.classify` (type and error code,
    never the message): ``FunctionsNotLoaded`` for ``Function not found`` (a new or flushed Redis:
    nothing ran), ``DataPlaneUnavailable`` for every transient one (unreachable, timed out, a failover's
    ``CLUSTERDOWN`` / ``MASTERDOWN`` / ``READONLY`` / ``MOVED`` / ``TRYAGAIN``, ``LOADING``, ``BUSY``,
    ``OOM``, ...), else ``DataPlaneError`` (a function's own error, an ACL refusal inside it: ``The
    user executing the script can't run this command``). ``details["redis_error"]`` is the Redis error
    code (None for a connection error or timeout)."""
    if functions.is_not_found(error):
        return library.not_loaded(what)
    kind = errors.classify(error)
    code = errors.error_code(error)
    message = errors.describe(error)
    if kind is errors.Kind.UNKNOWN_OUTCOME:
        return DataPlaneUnavailable(f"{what}: Redis is unreachable: {message}", redis_error=code)
    if kind is errors.Kind.NOT_NOW:
        return DataPlaneUnavailable(
            f"{what}: Redis cannot serve it right now: {message}", redis_error=code
        )
    return DataPlaneError(f"{what}: Redis refused it: {message}", redis_error=code)
