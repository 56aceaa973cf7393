"""Waiting for new entries without polling: one blocking ``XREAD`` per member, on its own connection.

Theory of operation
-------------------
The fenced read is a function, and a function cannot block. So a member does not wait *in* the read:
it waits for a *hint* that a read will find something, then makes the fenced read as before. The hint
is a plain ``XREAD BLOCK <ms> STREAMS <its idle shards' streams> <the group's last-delivered id on
each>``: it returns as soon as one of those streams has an entry after that id, which is exactly an
entry the group has not been given yet. It moves nothing (it is not ``XREADGROUP``), takes no entry and
fences nothing, so it cannot break the fence; a member that is no longer the owner wakes for nothing
and its fenced read is refused as always. The id comes from the fenced read itself (``fetch.lua``,
read ``'2'``), atomically with the read that found nothing: an entry appended after that read is after
that id, so no entry can slip between the empty read and the wait.

Why this and not a signal from the producer (Pub/Sub, a signal stream): ``XADD`` already wakes the
clients blocked on its stream, inside Redis, at no cost when nobody waits; the producer's path is
unchanged (no extra command per append), a busy member is not sent a message per entry, and every key
of a prefix is in the prefix's hash slot (``rsc:{P}:...``), so one ``XREAD`` over many shards works on a
Redis Cluster. The measurements are in docs/benchmarks.md.

The one difficulty: the set of streams to wait on changes while the ``XREAD`` is blocked (a shard
whose batch was handled goes idle again). :meth:`EntryWait.interrupt` ends the wait at once with
``CLIENT UNBLOCK`` from another connection; the caller then waits again on the new set. Each wait sends
``CLIENT ID`` and the ``XREAD`` in one write, so the id is known before the ``XREAD`` can return.

One :class:`EntryWait` serves one member's waiting thread; :meth:`interrupt` may be called from any
thread. Errors are translated as the data plane's (``DataPlaneUnavailable``, ``DataPlaneError``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from rsc_redis import clients

from . import scripts
from .envelope import _text

UNBLOCK_ATTEMPTS = 50  # the XREAD may still be on its way when CLIENT UNBLOCK arrives: try again
UNBLOCK_PAUSE_S = 0.0005
READ_MARGIN_S = 2.0  # past the BLOCK timeout, a silent connection is a dead one


class EntryWait:
    def __init__(self, client: Any, anchor_key: str, probe_key: str) -> None:
        """``anchor_key``: a key of the prefix (its slot names the node to wait on, on a cluster);
        ``probe_key``: a stream key of the prefix (:meth:`probe`)."""
        self.client = client
        self.anchor_key = anchor_key
        self.probe_key = probe_key
        self._lock = threading.Lock()
        self._node: Any = None  # the redis.Redis of the node the connection is on
        self._connection: Any = None
        self._client_id: int | None = None  # the connection's CLIENT ID while its XREAD may be blocked
        self._armed = False  # a wait is about to start or in progress
        self._pending = False  # interrupted before its CLIENT ID was known
        self._closed = False

    def arm(self) -> None:
        """Say a :meth:`wait` is about to start: an :meth:`interrupt` from now on ends it, even one that
        comes before the ``XREAD`` reached Redis. The caller arms while it still holds whatever lock
        guards the set it is about to wait on, so no change of that set can fall between the two."""
        with self._lock:
            self._armed, self._pending = True, False

    def wait(self, after: Mapping[str, str], timeout_ms: int) -> list[str]:
        """Block until one of the streams ``after`` names has an entry after the id given for it, or
        ``timeout_ms`` passed, or :meth:`interrupt`. The keys with new entries ([] for the other two).
        Call :meth:`arm` first."""
        try:
            if not after:
                return []
            return self._wait(after, timeout_ms)
        finally:
            with self._lock:
                self._armed, self._client_id = False, None
                if self._closed:
                    self._drop()

    def _wait(self, after: Mapping[str, str], timeout_ms: int) -> list[str]:
        node = self._node_client()
        with self._lock:
            if self._closed:
                return []
            if self._connection is None or self._node is not node:
                self._drop()
                self._node, self._connection = node, node.connection_pool.get_connection()
            connection = self._connection
        command = ("XREAD", "COUNT", 1, "BLOCK", timeout_ms, "STREAMS", *after.keys(), *after.values())
        with scripts.translate_redis_errors(f"wait for new entries on {len(after)} streams"):
            try:
                connection.send_packed_command(connection.pack_commands([("CLIENT", "ID"), command]))
                client_id = int(connection.read_response())
                with self._lock:
                    self._client_id, pending = client_id, self._pending
                if pending:  # interrupted before its XREAD could be: end it now
                    _unblock(node, client_id, lambda: bool(connection.can_read(0)))
                reply = connection.read_response(timeout=timeout_ms / 1000 + READ_MARGIN_S)
            except BaseException:  # an error reply to CLIENT ID leaves the XREAD's unread: start afresh
                with self._lock:
                    self._drop()
                raise
        return _streams_of(reply)

    def news_later(self, after: Mapping[str, str]) -> Callable[[], list[str]]:
        """Which of the streams ``after`` names have an entry after the id given for it: a plain ``XREAD``
        that does not block, on a pooled connection (the wait's own one stays for waits), split in two
        so that it overlaps another call. It is sent now; the function returned reads its answer (call
        it exactly once: it gives the connection back to the pool; it raises ``DataPlaneUnavailable``
        and the like, as any call does)."""
        if not after:
            return lambda: []
        node = self._node_client()
        pool = node.connection_pool
        connection = pool.get_connection()
        command = ("XREAD", "COUNT", 1, "STREAMS", *after.keys(), *after.values())
        what = f"look for new entries on {len(after)} streams"
        try:
            with scripts.translate_redis_errors(what):
                connection.send_command(*command)
        except BaseException:
            connection.disconnect()
            pool.release(connection)
            raise

        def answer() -> list[str]:
            try:
                with scripts.translate_redis_errors(what):
                    return _streams_of(connection.read_response())
            except BaseException:
                connection.disconnect()  # its reply may still be on the way: never reuse it
                raise
            finally:
                pool.release(connection)

        return answer

    def interrupt(self) -> bool:
        """End the armed wait, if one is (its :meth:`wait` returns []). False when none is armed. Never
        raises: an interrupt that fails leaves the wait to end by its timeout."""
        with self._lock:
            if not self._armed:
                return False
            client_id, node = self._client_id, self._node
            if client_id is None:  # its XREAD is not sent yet: wait() ends it once it is
                self._pending = True
                return True

        def over() -> bool:
            with self._lock:
                return self._client_id != client_id

        return _unblock(node, client_id, over)

    def probe(self) -> None:
        """Check, changing nothing, that this Redis user may wait: ``CLIENT ID``, ``CLIENT UNBLOCK``,
        ``XREAD`` and ``XINFO GROUPS`` (which the fetch function runs for a read that asks for a last
        id) on the prefix's streams (``stream_key``: one of them, which need not exist). Raises
        ``DataPlaneError`` when it may not (an ACL profile from before the wake-up), and
        ``DataPlaneUnavailable`` when Redis cannot be reached."""
        node = self._node_client()
        with scripts.translate_redis_errors("check that this user may wait for new entries"):
            node.execute_command("CLIENT", "ID")
            node.execute_command("CLIENT", "UNBLOCK", 0)  # no client has id 0: unblocks nothing
            node.execute_command("XREAD", "COUNT", 1, "STREAMS", self.probe_key, "$")
            try:
                node.execute_command("XINFO", "GROUPS", self.probe_key)
            except redis.exceptions.NoPermissionError:
                raise
            except redis.ResponseError:
                pass  # "no such key": allowed, and nothing to show

    def close(self) -> None:
        """Interrupt the wait in progress; the connection is dropped once it is over."""
        self.interrupt()
        with self._lock:
            self._closed = True
            if not self._armed:
                self._drop()

    def _node_client(self) -> Any:
        if clients.is_cluster(self.client):
            return self.client.get_redis_connection(self.client.get_node_from_key(self.anchor_key))
        return self.client

    def _drop(self) -> None:
        """The lock is held."""
        if self._connection is not None:
            self._connection.disconnect()
            self._node.connection_pool.release(self._connection)
        self._connection = self._node = None


def _streams_of(reply: Any) -> list[str]:
    """The stream names of an ``XREAD`` reply (None: none had anything)."""
    if isinstance(reply, dict):  # RESP3: {stream: entries}
        return [_text(key) for key in reply]
    return [_text(stream[0]) for stream in reply or ()]  # RESP2: [[stream, entries], ...]


def _unblock(node: Any, client_id: int, over: Any) -> bool:
    """``CLIENT UNBLOCK`` until it unblocks something or ``over()``: the XREAD may still be on its way
    (``CLIENT UNBLOCK`` then answers 0) or have ended by itself."""
    try:
        for _ in range(UNBLOCK_ATTEMPTS):
            if node.execute_command("CLIENT", "UNBLOCK", client_id):
                return True
            if over():
                return False
            time.sleep(UNBLOCK_PAUSE_S)
    except redis.RedisError:
        pass
    return False
