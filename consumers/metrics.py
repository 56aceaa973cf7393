"""A member process's Prometheus metrics, served on an opt-in port (docs/consumers.md, "Metrics").

``manage.py run_member LISTENER --metrics-port 9105`` (or ``RSC_MEMBER_METRICS_PORT``) starts an HTTP
server in the member process (prometheus-client's WSGI application, :func:`serve`); no port, no server
and next to no cost (the figures are still counted in memory). It listens on 127.0.0.1 unless given
another address (``--metrics-addr``, ``RSC_MEMBER_METRICS_ADDR``), and with a token
(``RSC_MEMBER_METRICS_TOKEN``) answers only scrapes that present it (``Authorization: Bearer <token>``;
401 otherwise). One process runs every member of the listener (``concurrency``): each series carries
``stream_prefix``, ``consumer_group`` and ``member_id``.

* ``rsc_member_handled_total`` / ``rsc_member_failed_total``: entries whose handler returned / raised;
* ``rsc_member_handler_seconds``: handler latency (histogram);
* ``rsc_member_fences_total``: times the member was fenced (it dropped every shard and rejoined);
* ``rsc_member_rebalances_total``: assignment changes the member applied (shards started or stopped);
* ``rsc_member_effective_concurrency``: worker threads the coordinator granted the member;
* ``rsc_member_shards``: shards the member is consuming now.
"""

from __future__ import annotations

import bisect
import contextlib
import hmac
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from consumers.client import is_local_host

log = logging.getLogger(__name__)

LABELS = ("stream_prefix", "consumer_group", "member_id")

HANDLED = Counter("rsc_member_handled", "Entries whose handler returned.", LABELS)
FAILED = Counter("rsc_member_failed", "Entries whose handler raised.", LABELS)
HANDLER_SECONDS = Histogram(
    "rsc_member_handler_seconds",
    "Handler latency, seconds.",
    LABELS,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
FENCES = Counter("rsc_member_fences", "Times the member was fenced and rejoined.", LABELS)
LEASE_RENEWALS = Counter(
    "rsc_member_lease_renewals",
    "Leases the member renewed in Redis while the coordinator did not answer.",
    LABELS,
)
REBALANCES = Counter("rsc_member_rebalances", "Assignment changes applied (shards started, stopped).", LABELS)
CONCURRENCY = Gauge("rsc_member_effective_concurrency", "Worker threads granted by the coordinator.", LABELS)
SHARDS = Gauge("rsc_member_shards", "Shards the member is consuming.", LABELS)
ACKS_FENCED = Counter(
    "rsc_member_acks_fenced",
    "Handled entries whose ack the fence refused (fenced, or the shard taken while they ran).",
    LABELS,
)
PARKED_KEYS = Gauge(
    "rsc_member_parked_keys",
    'Lanes (ordering "key" or "none") waiting for the retry of a failed entry.',
    LABELS,
)
IN_FLIGHT = Gauge(
    "rsc_member_in_flight",
    'Entries read and not yet finished, over the shards of ordering "key" or "none".',
    LABELS,
)


@dataclass(frozen=True, slots=True)
class MemberMetrics:
    """The series of one member. The per-entry series are bound once (a labelled child is a lock and a
    dict lookup away otherwise), and added to once per batch: the handled count (:meth:`count`) and the
    handler latencies (:meth:`observe_batch`: one observation per handler call, as :meth:`observe` would
    make them, but with one lock per histogram bucket touched instead of two per call)."""

    stream_prefix: str
    consumer_group: str
    member_id: str
    _handled: Any = field(init=False, repr=False, compare=False)
    _failed: Any = field(init=False, repr=False, compare=False)
    _seconds: Any = field(init=False, repr=False, compare=False)
    _in_flight: Any = field(init=False, repr=False, compare=False)
    _parked: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        labels = (self.stream_prefix, self.consumer_group, self.member_id)
        object.__setattr__(self, "_handled", HANDLED.labels(*labels))
        object.__setattr__(self, "_failed", FAILED.labels(*labels))
        object.__setattr__(self, "_seconds", HANDLER_SECONDS.labels(*labels))
        object.__setattr__(self, "_in_flight", IN_FLIGHT.labels(*labels))
        object.__setattr__(self, "_parked", PARKED_KEYS.labels(*labels))

    def observe(self, seconds: float) -> None:
        """One handler call's latency (returned or raised)."""
        self._seconds.observe(seconds)

    def observe_batch(self, seconds: Sequence[float]) -> None:
        """Handler calls' latencies, each observed as :meth:`observe` does, at the cost of one (C) bisect
        per call. prometheus-client has no public call for many values: this adds to the child's own
        bucket and sum values (the ones its ``observe`` adds to; in multiprocess mode too), and falls back
        to ``observe`` per value on a version that keeps them elsewhere."""
        child = self._seconds
        bounds = getattr(child, "_upper_bounds", None)
        buckets = getattr(child, "_buckets", None)
        total = getattr(child, "_sum", None)
        if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
            for value in seconds:
                child.observe(value)
            return
        if not seconds:
            return
        # observe() counts a value in the first bucket whose upper bound is >= it: bisect_left's index.
        counts = [0] * len(bounds)
        for value in seconds:
            counts[bisect.bisect_left(bounds, value)] += 1
        for bucket, calls in zip(buckets, counts, strict=True):
            if calls:
                bucket.inc(calls)
        total.inc(sum(seconds))

    def count(self, handled: int, failed: int) -> None:
        """A batch's entries whose handler returned / raised."""
        if handled:
            self._handled.inc(handled)
        if failed:
            self._failed.inc(failed)

    def fenced(self) -> None:
        FENCES.labels(self.stream_prefix, self.consumer_group, self.member_id).inc()

    def lease_renewed(self) -> None:
        LEASE_RENEWALS.labels(self.stream_prefix, self.consumer_group, self.member_id).inc()

    def rebalanced(self, shards: int) -> None:
        labels = (self.stream_prefix, self.consumer_group, self.member_id)
        REBALANCES.labels(*labels).inc()
        SHARDS.labels(*labels).set(shards)

    def acks_fenced(self, entries: int) -> None:
        ACKS_FENCED.labels(self.stream_prefix, self.consumer_group, self.member_id).inc(entries)

    def window(self, in_flight: int, parked: int) -> None:
        """Changes of one unit's window (deltas: the member's shards add up)."""
        if in_flight:
            self._in_flight.inc(in_flight)
        if parked:
            self._parked.inc(parked)

    def concurrency(self, threads: int) -> None:
        CONCURRENCY.labels(self.stream_prefix, self.consumer_group, self.member_id).set(threads)

    def forget(self) -> None:
        """A member that stopped: its gauges go (its counters stay, as Prometheus expects)."""
        labels = (self.stream_prefix, self.consumer_group, self.member_id)
        for gauge in (CONCURRENCY, SHARDS, PARKED_KEYS, IN_FLIGHT):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


DEFAULT_ADDR = "127.0.0.1"  # RSC_MEMBER_METRICS_ADDR's default: this machine only
REALM = "rsc-member-metrics"

_Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def metrics_app(token: str = "", registry: Any = REGISTRY) -> _Wsgi:
    """prometheus-client's WSGI application; with ``token``, only for requests that present it as
    ``Authorization: Bearer <token>`` (compared in constant time), 401 for any other."""
    app: _Wsgi = make_wsgi_app(registry)
    if not token:
        return app
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, presented = str(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        # WSGI hands headers over as latin-1 text: back to the bytes that were sent.
        given = presented.strip().encode("latin-1", "replace")
        if scheme.lower() == "bearer" and hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", f'Bearer realm="{REALM}"')],
        )
        return [b"this scrape needs Authorization: Bearer <RSC_MEMBER_METRICS_TOKEN>\n"]

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per scrape on stderr is noise; refusals show as 401s in Prometheus's target page


def start_server(port: int, addr: str = DEFAULT_ADDR, token: str = "") -> WSGIServer:
    """A metrics server on ``addr``:``port`` (0: any free port), serving in a daemon thread; the caller
    owns it (``shutdown()`` and ``server_close()`` stop it)."""
    family, host = _family(addr, port)

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(host, port, metrics_app(token), Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="member-metrics", daemon=True).start()
    return server


def _family(addr: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and host of ``addr`` (an IPv6 literal, with or without brackets, binds AF_INET6)."""
    host = addr.strip("[]")
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _type, _proto, _name, sockaddr = info[0]
    return family, str(sockaddr[0])


_server_lock = threading.Lock()
_server_port: int | None = None


def serve(port: int, addr: str = DEFAULT_ADDR, token: str = "") -> int:
    """Start the metrics HTTP server once per process; returns the port it listens on."""
    global _server_port
    with _server_lock:
        if _server_port is None:
            server = start_server(port, addr, token)
            _server_port = int(server.server_port)
            log.info(
                "member metrics on http://%s:%d/metrics%s",
                f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr,
                _server_port,
                " (bearer token required)" if token else "",
            )
            if not token and not is_local_host(addr.strip("[]")):
                log.warning(
                    "member metrics served on %s without RSC_MEMBER_METRICS_TOKEN: anyone who reaches "
                    "that address can read them (member ids, groups, throughput)",
                    addr,
                )
        return _server_port
