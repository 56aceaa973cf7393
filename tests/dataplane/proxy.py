"""A TCP proxy between a Redis client and the test Redis that can lose the *reply* of a script call.

A real fault, not a mock: the command reaches Redis and runs there, then the proxy drops the reply and
closes the client's connection, so the client sees a ``ConnectionError`` (exactly what a network cut
after the request looks like); or, with ``swallow=True``, it keeps the connection open and silent, so
the client's read times out (a ``TimeoutError``). Threads and sockets only; it listens on 127.0.0.1 on a
free port.

Usage::

    with LossyProxy(redis_port) as proxy:
        client = redis_client(proxy.url)
        proxy.lose_replies(script_sha, times=2, when=has_entries)   # arm
        ...
        assert proxy.cuts == 2

It recognises a call of a script by the script's SHA1 in the bytes the client sends (EVALSHA carries it
as a bulk string); the next bytes Redis sends on that connection are that call's reply, since a
redis-py connection waits for each reply before it sends the next command (no pipelining here).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType

import hiredis

_CHUNK = 65_536


def has_entries(reply: bytes) -> bool:
    """A data-plane read reply ``{'OK', entries, ...}`` with at least one entry (RESP2)."""
    head = b"$2\r\nOK\r\n*"  # a Lua string in a script reply is a bulk string
    at = reply.find(head)
    return at != -1 and not reply[at + len(head) :].startswith(b"0\r\n")


def fetch_has_entries(reply: bytes) -> bool:
    """A ``fetch.lua`` reply ``{'OK', {{i, status, acked, entries, token[, last id]}, ...}}`` in which
    some shard got at least one entry (RESP2). A reply longer than one chunk holds entries."""
    reader = hiredis.Reader()
    reader.feed(reply)
    parsed = reader.gets()
    if parsed is False:
        return True
    return parsed[0] == b"OK" and any(len(part) > 3 and part[3] for part in parsed[1])


class _Link:
    """One client connection and its upstream connection to Redis."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.awaiting_watched_reply = False
        self.muted = False  # a reply was swallowed: nothing more reaches the client on this link
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class LossyProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)  # closing a socket does not wake a blocked accept(): poll instead
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._watch = b""
        self._cuts_left = 0
        self._when: Callable[[bytes], bool] = lambda reply: True
        self._swallow = False
        self._links: set[_Link] = set()
        self._closed = threading.Event()
        self.calls_seen = 0  # calls of the watched script forwarded to Redis
        self.cuts = 0  # replies lost so far
        self._acceptor = threading.Thread(target=self._accept_loop, name="lossy-proxy", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_replies(
        self, sha: str, times: int, when: Callable[[bytes], bool] | None = None, *, swallow: bool = False
    ) -> None:
        """Lose the reply of the next ``times`` calls of the script ``sha`` whose reply satisfies
        ``when`` (every reply by default): cut the connection, or (``swallow``) leave it open and
        silent. Count every call of the script from now on."""
        with self._lock:
            self._watch = sha.lower().encode()
            self._cuts_left = times
            self._when = when or (lambda reply: True)
            self._swallow = swallow
            self.calls_seen = 0
            self.cuts = 0

    def close(self) -> None:
        self._closed.set()
        self._acceptor.join(5)
        self._server.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ threads

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.add(link)
            threading.Thread(target=self._requests, args=(link,), daemon=True).start()
            threading.Thread(target=self._replies, args=(link,), daemon=True).start()

    def _requests(self, link: _Link) -> None:
        """Client -> Redis: forward everything, noting calls of the watched script."""
        tail = b""
        try:
            while data := link.client.recv(_CHUNK):
                with self._lock:
                    watch = self._watch
                    # A SHA split over two reads is found in the previous read's tail (one byte shorter
                    # than a SHA, so no call is counted twice).
                    calls = (tail + data).count(watch) if watch else 0
                    if calls:
                        self.calls_seen += calls
                        link.awaiting_watched_reply = True  # set before Redis can even see the call
                tail = data[-(len(watch) - 1) :] if watch else b""
                link.upstream.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(link)

    def _replies(self, link: _Link) -> None:
        """Redis -> client: forward everything, except a reply chosen to be lost (then cut the link)."""
        try:
            while data := link.upstream.recv(_CHUNK):
                if link.muted:
                    continue
                if link.awaiting_watched_reply:
                    link.awaiting_watched_reply = False
                    with self._lock:
                        lose = self._cuts_left > 0 and self._when(data)
                        if lose:
                            self._cuts_left -= 1
                            self.cuts += 1
                    if lose and self._swallow:
                        link.muted = True  # the client waits for a reply that never comes
                        continue
                    if lose:
                        return  # Redis ran the call; its reply never reaches the client
                link.client.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        link.close()
        with self._lock:
            self._links.discard(link)
