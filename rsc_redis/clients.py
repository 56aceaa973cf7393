"""Redis clients from a URL: one Redis, or a Redis Cluster (docs/cluster.md).

``redis://`` / ``rediss://`` / ``unix://`` build a ``redis.Redis``; ``redis+cluster://host:port/`` and
``rediss+cluster://host:port/`` build a ``redis.cluster.RedisCluster`` that discovers the cluster from
that seed node (one answering is enough; the client learns the others from ``CLUSTER SLOTS`` and
follows ``MOVED`` / ``ASK``). Several seeds, comma-separated (``redis+cluster://h1:6379,h2:6379/``),
are tried in turn, so a process also starts while one of them is down. The scheme travels with the
URL, so every process that is given ``REDIS_URL``
(the coordinator, the tick, run_member, a producer) picks the right client without a second setting.

Everything of one stream prefix shares the hash tag ``{P}`` (rsc_redis/keys.py), so it lives in one
slot: each script call and each MULTI of the store and the data plane touches one slot, and so one node.
The few global keys (``rsc:prefixes``, ``rsc:retention:cursor``, ``rsc:metrics``,
``rsc:credentials:generation``) are single keys, each in its own slot, never used together with a
prefix's keys in one command (docs/cluster.md lists them).

Script calls (the coordinator's store: ``EVALSHA``): :func:`run_scripts` and :func:`run_evalsha`
(pipelined, on one Redis or a cluster) and :class:`HotScript` (one call on a hot path). Function calls
(the data plane and the producer: ``FCALL`` of the Redis Functions library that the coordinator loads,
:mod:`rsc_redis.functions`): :func:`run_functions` (pipelined) and :class:`HotFunction` (one call on a
hot path). Django-free: the store and the data plane and the producer (``consumers``) use it alike.

The gate. Where Redis has the gate module loaded (rsc_redis/module/rsc_gate.c) and the client's Redis
user may use it, function calls go through the gate's commands (``RSC.FCALL_MEMBER``,
``RSC.FCALL_PRODUCER``, ``RSC.FCALL_RO``) instead of ``FCALL`` / ``FCALL_RO``: same arguments and
replies, but the functions' inner commands are not checked against the caller's ACL, so a member's or a
producer's user holds none of them (docs/redis-acl.md, "The gate module"). :func:`gated` finds out once
per client (one probe on its first function call) and remembers the answer on the client; every call
after that costs nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.connection import ConnectionPool
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    SlotNotCoveredError,
    TryAgainError,
)

from . import module

try:  # a dependency (pyproject.toml); redis-py itself works without it
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover
    _pack_command = None

# URL scheme -> the scheme redis-py's RedisCluster.from_url understands.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """The URL with its cluster scheme replaced by the plain one (``redis+cluster://h:p/`` ->
    ``redis://h:p/``): the (first) seed node's own URL. A plain URL is returned unchanged."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        return url
    userinfo, at, hosts = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(scheme=scheme, netloc=f"{userinfo}{at}{hosts.split(',')[0]}"))


def cluster_seeds(url: str) -> list[tuple[str, int]]:
    """The seed nodes of a cluster URL, in order: ``redis+cluster://h1:6379,h2:6379,[::1]:7000/`` names
    three (a port left out is 6379). Any one that answers is enough to learn the cluster; they are
    tried in turn, so a process starts while one of them is down."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    seeds = []
    for item in hosts.split(","):
        host, port = _host_port(item.strip())
        if not host:
            raise ValueError(f"{url!r}: an empty seed node in {hosts!r}")
        seeds.append((host, port))
    return seeds


def _host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):  # [IPv6]:port
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = item.partition(":")
    try:
        return host, int(port) if port else 6379
    except ValueError:
        raise ValueError(f"a seed node's port is not a number: {item!r}") from None


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def client_from_url(url: str, **options: Any) -> redis.Redis | RedisCluster:
    """``redis.Redis.from_url`` or, for a cluster URL, ``RedisCluster.from_url`` (database 0 only:
    a cluster has no other) seeded with every node the URL names (:func:`cluster_seeds`). ``retry``,
    for a cluster, is the cluster client's own command retry (its node connections never retry:
    redis-py builds them with ``Retry(NoBackoff(), 0)``)."""
    if not is_cluster_url(url):
        return redis.Redis.from_url(url, **options)
    parts = urlsplit(url)
    database = parts.path.strip("/")
    if database not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0; {url!r} names database {database!r}")
    for key in ("retry_on_error", "db"):  # not node connection options on a cluster
        options.pop(key, None)
    more = [ClusterNode(host, port) for host, port in cluster_seeds(url)[1:]]
    return RedisCluster.from_url(node_url(url), startup_nodes=more, **options)


# What the gate is asked when a client looks for it: a name of the gate's shape (rsc_<digest>_version)
# that no library defines, so an answer changes nothing and "Function not found" means the gate ran.
_GATE_PROBE = (module.FCALL_RO, "rsc_000000000000_version", 0)


def gated(client: Any) -> bool:
    """Whether ``client``'s function calls go through the gate module: Redis has it loaded and this
    client's user may use it (``RSC.FCALL_RO``). Found out by one probe on one primary the first time,
    and remembered on the client (two threads may both probe: same answer) until a call is refused in
    a way that says the answer is out of date (:func:`forget_stale_gate`). A connection error or a
    transient refusal (``LOADING``, ...) raises, and the next call asks again."""
    found: bool | None = getattr(client, "rsc_gated", None)
    if found is None:
        found = client.rsc_gated = _gate_answers(client)
    return found


def forget_stale_gate(client: Any, error: BaseException) -> bool:
    """True, and the next call asks :func:`gated` again, when Redis refused a function call before it
    ran because ``client``'s answer is out of date: ``NOPERM`` for the command (the user's rules
    changed) or ``unknown command`` (the module came or went). The callers then send the call once more:
    nothing ran, so that is no re-send of something that did. A refusal of the keys (``NOPERM`` ...
    keys) says nothing about the gate: False."""
    text = str(error)
    if (isinstance(error, redis.exceptions.NoPermissionError) and "permissions to run" in text) or (
        isinstance(error, redis.ResponseError) and text.lower().startswith("unknown command")
    ):
        client.rsc_gated = None
        return True
    return False


def fcall_command(client: Any, function: str) -> str:
    """``FCALL``, or the gate's command for ``function`` where the gate serves ``client``."""
    return module.gate_command(function) if gated(client) else "FCALL"


def fcall_ro_command(client: Any) -> str:
    """``FCALL_RO``, or ``RSC.FCALL_RO`` where the gate serves ``client``."""
    return module.FCALL_RO if gated(client) else "FCALL_RO"


def _gate_answers(client: Any) -> bool:
    if is_cluster(client):  # one primary answers for all: every node loads the module, or none
        _refresh_if_stale(client)
        try:
            return _gate_answers(client.get_redis_connection(client.get_primaries()[0]))
        except (redis.ConnectionError, redis.TimeoutError):
            mark_slot_map_stale(client)  # that primary may be gone: the next call asks another
            raise
    try:
        client.execute_command(*_GATE_PROBE)
    except redis.exceptions.NoPermissionError:  # the module is there, this user may not use it
        return False
    except redis.ResponseError as e:
        if str(e).startswith("Function not found"):  # the gate ran, and found no such function
            return True
        if str(e).lower().startswith("unknown command"):  # no gate module on this Redis
            return False
        raise
    return True


# Replies that say the command did not run on that node: it is safe to send it again elsewhere.
_REDIRECTED = (MovedError, AskError, TryAgainError)


def run_scripts(
    client: Any, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once per ``(keys, args)`` call, pipelined; the replies in order, an error reply
    returned as its exception. Each call is atomic on its own, not the batch. See :func:`run_evalsha`."""
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for keys, args in calls:
            script(keys=list(keys), args=list(args), client=pipe)
        return list(pipe.execute(raise_on_error=False)) if calls else []
    packed = [(len(keys), *keys, *args) for keys, args in calls]
    return run_evalsha(client, script.sha, script.script, packed)


def run_evalsha(client: Any, sha: str, text: Any, calls: Sequence[Sequence[Any]]) -> list[Any]:
    """``EVALSHA sha *call`` for each call (``numkeys, key..., arg...``), pipelined, on a cluster
    client; the replies in order, an error reply returned as its exception.

    redis-py's ClusterPipeline refuses ``evalsha``, and it re-sends a command whose reply a connection
    error cut, so the calls are grouped by the primary of their first key's slot and sent to it as
    plain pipelines, which never re-send: a connection error raises, the outcome of every call of that
    node unknown. A call answered ``NOSCRIPT`` (a restarted or promoted node) loads the script on that
    node and runs again; one answered ``MOVED``, ``ASK`` or ``TRYAGAIN`` (a slot on the move) runs again
    alone through the cluster client, which follows the redirection. Those replies say the call did not
    run, so neither is a re-send of something that ran.
    """
    return _run_grouped(client, ("EVALSHA", sha), calls, text)


def run_functions(
    client: Any, function: str, calls: Sequence[Sequence[Any]], *, again: bool = True
) -> list[Any]:
    """``FCALL function *call`` (the gate's command where it serves, :func:`fcall_command`) for each call
    (``numkeys, key..., arg...``), pipelined, on one Redis or a cluster; the replies in order, an
    error reply returned as its exception (``Function not found`` included: nothing ran; the library is
    loaded by the coordinator, never from here).

    On a cluster, grouped by the primary of each call's first key as :func:`run_evalsha` does (plain
    pipelines that never re-send; a redirected call runs again alone through the cluster client).
    Calls refused because the gate answer was out of date (:func:`forget_stale_gate`: nothing ran) are
    sent once more (``again``)."""
    if not calls:
        return []
    fcall = fcall_command(client, function)
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(fcall, function, *call)
        replies = list(pipe.execute(raise_on_error=False))
    else:
        replies = _run_grouped(client, (fcall, function), calls, None)
    stale = _stale_gate_refusals(client, replies) if again else []
    if stale:
        retried = run_functions(client, function, [calls[i] for i in stale], again=False)
        for i, reply in zip(stale, retried, strict=True):
            replies[i] = reply
    return replies


def _stale_gate_refusals(client: Any, replies: Sequence[Any]) -> list[int]:
    """The indices of ``replies`` refused because the gate answer was out of date (forgotten now)."""
    return [
        i
        for i, reply in enumerate(replies)
        if isinstance(reply, redis.ResponseError) and forget_stale_gate(client, reply)
    ]


# The slot map is suspect after these: the node that served the slot may be gone or demoted.
_STALE_MAP_REPLIES = (MovedError, ClusterDownError)


def mark_slot_map_stale(client: Any) -> None:
    """The next grouped call on ``client`` reads the cluster's slot map afresh first
    (:func:`_refresh_if_stale`)."""
    if is_cluster(client):
        client.rsc_slot_map_stale = True


def _refresh_if_stale(client: Any) -> None:
    """Read the slot map afresh (``CLUSTER SLOTS`` from a reachable node) when the last grouped call
    found it suspect: a connection error or timeout on a node, ``CLUSTERDOWN``, ``MOVED``.

    Why before the next call rather than right after the error (redis-py's own command path refreshes
    right after a connection error): in a failover the error comes *before* the promotion, so a map
    read then still names the dead primary, and the retry after the back-off would go there again. Read
    just before the retry, the map names the promoted replica as soon as the cluster does: recovery
    takes one back-off, not two. redis-py's ``initialize`` skips a refresh another thread has just
    made."""
    if getattr(client, "rsc_slot_map_stale", False):
        client.rsc_slot_map_stale = False
        try:
            client.nodes_manager.initialize()
        except BaseException:
            client.rsc_slot_map_stale = True  # still suspect: the next call tries again
            raise


def run_functions_replicated(
    client: Any,
    function: str,
    calls: Sequence[Sequence[Any]],
    replicas: int,
    timeout_ms: int,
    *,
    again: bool = True,
) -> list[tuple[Any, int | None]]:
    """:func:`run_functions`, each node's pipeline followed by ``WAIT replicas timeout_ms`` on the same
    connection (``WAIT`` waits for the writes of the connection it is sent on, so it cannot go on
    another): per call, its reply and how many replicas acknowledged it within the timeout. ``None``:
    not known, for a call that a ``MOVED`` / ``ASK`` sent to another node through the cluster client,
    whose connection this code does not hold (rare: a slot on the move)."""
    acks: list[int | None] = [None] * len(calls)
    wait = (replicas, timeout_ms, acks)
    fcall = fcall_command(client, function) if calls else "FCALL"
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(fcall, function, *call)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        *replies, acked = pipe.execute(raise_on_error=False) if calls else [None]
        if isinstance(acked, Exception):
            raise acked
        pairs: list[tuple[Any, int | None]] = [(reply, int(acked)) for reply in replies]
    else:
        replies = _run_grouped(client, (fcall, function), calls, None, wait)
        pairs = list(zip(replies, acks, strict=True))
    stale = _stale_gate_refusals(client, [reply for reply, _ in pairs]) if again else []
    if stale:  # nothing of those ran: once more, with the gate asked again (run_functions)
        retried = run_functions_replicated(
            client, function, [calls[i] for i in stale], replicas, timeout_ms, again=False
        )
        for i, pair in zip(stale, retried, strict=True):
            pairs[i] = pair
    return pairs


def _run_grouped(
    client: Any,
    head: tuple[str, str],
    calls: Sequence[Sequence[Any]],
    script: Any,
    wait: tuple[int, int, list[int | None]] | None = None,
) -> list[Any]:
    """``*head, *call`` for each call on a cluster client, grouped by node (:func:`run_evalsha`).
    ``script``: the text to load after ``NOSCRIPT`` (EVALSHA), or None (FCALL: no reload). ``wait``:
    ``(replicas, timeout_ms, acks)``, a ``WAIT`` after each node's calls, its answer put in ``acks``.

    A connection error, a timeout, ``CLUSTERDOWN`` or ``MOVED`` marks the slot map stale, and the next
    call reads it afresh before it sends anything (:func:`_refresh_if_stale`)."""
    _refresh_if_stale(client)
    replies: list[Any] = [None] * len(calls)
    by_node: dict[str, tuple[Any, list[int]]] = {}
    try:
        for i, call in enumerate(calls):
            node = client.get_node_from_key(call[1])
            by_node.setdefault(node.name, (node, []))[1].append(i)
        for node, indices in by_node.values():
            _run_on_node(client.get_redis_connection(node), head, script, calls, indices, replies, wait)
    except (redis.ConnectionError, redis.TimeoutError, SlotNotCoveredError):
        mark_slot_map_stale(client)
        raise
    if any(isinstance(reply, _STALE_MAP_REPLIES) for reply in replies):
        mark_slot_map_stale(client)
    for i, reply in enumerate(replies):
        if isinstance(reply, _REDIRECTED):
            if wait is not None:
                wait[2][i] = None  # run again on a connection of the cluster client's: not known
            try:
                try:
                    replies[i] = client.execute_command(*head, *calls[i])
                except NoScriptError:
                    client.script_load(script)
                    replies[i] = client.execute_command(*head, *calls[i])
            except redis.ResponseError as e:
                replies[i] = e
    return replies


def _run_on_node(
    node: redis.Redis,
    head: tuple[str, str],
    script: Any,
    calls: Sequence[Sequence[Any]],
    indices: list[int],
    replies: list[Any],
    wait: tuple[int, int, list[int | None]] | None = None,
) -> None:
    todo = indices
    for attempt in range(2):
        pipe = node.pipeline(transaction=False)
        for i in todo:
            pipe.execute_command(*head, *calls[i])
        if wait is not None:  # FCALL only (script is None): no second attempt
            pipe.execute_command("WAIT", wait[0], wait[1])
        answers = pipe.execute(raise_on_error=False)
        if wait is not None:
            acked = answers.pop()
            if isinstance(acked, Exception):
                raise acked
            for i in todo:
                wait[2][i] = int(acked)
        missing = []
        for i, reply in zip(todo, answers, strict=True):
            replies[i] = reply
            if isinstance(reply, NoScriptError):
                missing.append(i)
        if not missing or attempt or script is None:
            return
        node.script_load(script)
        todo = missing


class _HotCall:
    """A call on a hot path with less work per call on one Redis (:class:`HotScript`,
    :class:`HotFunction`).

    redis-py's call checks a connection out of the pool and back in on every command (a lock each way
    and a ``poll()`` to make sure the connection holds no stray reply), and goes through its retry and
    argument-deprecation wrappers: about 20 µs of CPU per call, a tenth of a steady heartbeat. This
    object keeps the connections it used in a list of its own instead (``list.pop`` and ``append`` are
    atomic), so a call is one command sent and its reply read on a connection no other thread holds:

    * a connection goes back to the list only after a whole reply was read (a reply or an error reply),
      so it never holds a stray reply; after anything else (a connection error, a timeout, an
      interrupt) it is disconnected and handed back to the pool, and the error raised as redis-py
      raises it;
    * it never re-sends after a connection error or a timeout, as the clients of this project never do
      (consumers/dataplane/connection.py);
    * the connections stay checked out of the client's pool, so ``client.close()`` still disconnects
      them (they reconnect on their next use), and they are never more than the threads that called at
      once; in a forked child the list starts empty (the parent's sockets are not ours to use).

    The command is packed by hiredis itself (the RESP bytes redis-py's packer makes, without its
    per-argument pass in Python: a tenth of a single send's client CPU, a few percent of a 100-entry
    batch's): the hot calls send only ``str``, ``bytes`` and ``int`` arguments, which both pack alike.

    Anything else (a Redis Cluster, a client with a single connection or another pool class) takes
    redis-py's own call (:meth:`_fallback`).
    """

    def __init__(self, client: Any) -> None:
        pool = getattr(client, "connection_pool", None)
        self._pool = (
            pool
            if type(client) is redis.Redis and client.connection is None and type(pool) is ConnectionPool
            else None
        )
        self._free: list[Any] = []
        self._pid = os.getpid()

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        if self._pool is None:
            return self._fallback(keys, args)
        if self._pid != os.getpid():
            self._free, self._pid = [], os.getpid()
        try:
            connection = self._free.pop()
        except IndexError:
            connection = self._pool.get_connection()
        try:
            reply = self._send(connection, keys, args)
        except redis.ResponseError:  # an error reply, read whole: the connection is in step
            self._free.append(connection)
            raise
        except BaseException:
            connection.disconnect()
            self._pool.release(connection)
            raise
        self._free.append(connection)
        return reply

    def _fallback(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        raise NotImplementedError

    def _send(self, connection: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        raise NotImplementedError

    @staticmethod
    def _command(connection: Any, *command: Any) -> None:
        """Send one command (``str``, ``bytes`` and ``int`` arguments) on ``connection``."""
        if _pack_command is None:
            connection.send_command(*command)
        else:
            connection.send_packed_command([_pack_command(command)])


class HotScript(_HotCall):
    """A script called on a hot path (a steady heartbeat): ``script(keys=, args=)`` like redis-py's
    :class:`Script`, with less work per call on one Redis (:class:`_HotCall`). ``NOSCRIPT`` (a restarted
    or flushed Redis: nothing ran) loads the script and sends it again once."""

    def __init__(self, client: Any, text: str) -> None:
        super().__init__(client)
        self._script = client.register_script(text)
        self.sha: str = self._script.sha
        self.script = text

    def _fallback(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return self._script(keys=list(keys), args=list(args))

    def _send(self, connection: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        self._command(connection, "EVALSHA", self.sha, len(keys), *keys, *args)
        try:
            return connection.read_response()
        except NoScriptError:
            self._command(connection, "SCRIPT", "LOAD", self.script)
            connection.read_response()
            self._command(connection, "EVALSHA", self.sha, len(keys), *keys, *args)
            return connection.read_response()


class HotFunction(_HotCall):
    """A function of a loaded Redis Functions library called on a hot path (a member's fetch, a
    producer's single send): ``function(keys=, args=)``, one ``FCALL`` or the gate's command
    (:func:`fcall_command`; :class:`_HotCall`). Nothing is
    loaded from here: ``Function not found`` raises as the error reply it is (nothing ran). On a cluster
    the call goes to its first key's primary as :func:`run_functions` sends it (redis-py's own routing of
    ``FCALL`` asks the server for the keys first: a round trip more)."""

    def __init__(self, client: Any, function: str) -> None:
        super().__init__(client)
        self.client = client
        self.function = function
        # The command by the answer of gated(client): one dict look-up per call.
        self._fcall = {True: module.gate_command(function), False: "FCALL"}

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        try:
            return super().__call__(keys, args)
        except redis.ResponseError as e:
            if not forget_stale_gate(self.client, e):
                raise
        return super().__call__(keys, args)  # nothing ran: once more, with the gate asked again

    def _fallback(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        if is_cluster(self.client):
            (reply,) = run_functions(self.client, self.function, [(len(keys), *keys, *args)])
            if isinstance(reply, Exception):
                raise reply
            return reply
        fcall = self._fcall[gated(self.client)]
        return self.client.execute_command(fcall, self.function, len(keys), *keys, *args)

    def _send(self, connection: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        self._command(connection, self._fcall[gated(self.client)], self.function, len(keys), *keys, *args)
        return connection.read_response()
