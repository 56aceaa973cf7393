"""A consumer process: every member of a set of listeners, started and stopped together.

``concurrency = N`` on a listener means N independent members (docs/protocol.md: member fan-out), each
with its own member id, coordinator client (its own keep-alive connection), heartbeat thread, units
and worker pool. They share the process's :class:`consumers.Runtime`, one Redis connection pool and one
data plane per listener.

Usable without Django::

    import consumers
    from myapp.listeners import bill

    consumers.run([bill], coordinator_url="http://coordinator:8000", token="...",
                  redis_url="redis://redis:6379/0", runtime=consumers.Runtime(max_concurrency=4))

On a Redis Cluster, ``redis_url="redis+cluster://node:6379/"`` (docs/cluster.md).

``run`` blocks until SIGTERM / SIGINT: the first one stops gracefully (every member finishes its
in-flight work, acks it and leaves the group, bounded by ``shutdown_timeout_s``), a second one exits at
once.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType
from typing import Any

from consumers import conf
from consumers.client import CoordinatorClient, HttpCoordinatorClient
from consumers.listener import Listener, apply_concurrency_overrides
from consumers.member.member import Member
from consumers.runtime import Runtime, load_runtime

log = logging.getLogger("consumers.process")

DEFAULT_SHUTDOWN_TIMEOUT_S: float = conf.default("RSC_SHUTDOWN_TIMEOUT_S")
# Beyond the shutdown timeout: a leave's own retries (MemberConfig.leave_timeout_ms) and one heartbeat.
_LEAVE_ALLOWANCE_S = 2.0


class ConsumerProcess:
    """The members of ``listeners``. ``coordinator`` is a factory called once per member (so each has
    its own connection); ``dataplane_factory(stream_prefix, consumer_group)`` builds one data plane per
    listener."""

    def __init__(
        self,
        listeners: Iterable[Listener],
        *,
        coordinator: Callable[[], CoordinatorClient],
        dataplane_factory: Callable[[str, str], Any],
        runtime: Runtime | None = None,
        concurrency: Mapping[str, int | str] | None = None,
        batch_hooks: Sequence[Callable[[], None]] = (),
        instance: str | None = None,
        leave_group: bool = False,
    ) -> None:
        """``instance``: static membership (docs/consumers.md): the name of the place this process runs
        (a pod name); member ``i`` of listener ``L`` joins with instance id ``<instance>.<L>.<i>``, and
        a clean stop leaves for now (epoch -2) unless ``leave_group``. None: dynamic members."""
        self.runtime = runtime or Runtime()
        self.listeners = apply_concurrency_overrides(listeners, concurrency)
        if not self.listeners:
            raise ValueError("no listeners to run")
        self.members: list[Member] = []
        for item in self.listeners:
            dataplane = dataplane_factory(item.stream_prefix, item.consumer_group)
            for index in range(item.concurrency):
                self.members.append(
                    Member(
                        listener=item,
                        index=index,
                        coordinator=coordinator(),
                        dataplane=dataplane,
                        runtime=self.runtime,
                        batch_hooks=batch_hooks,
                        instance=instance,
                        leave_group=leave_group,
                    )
                )
        self._stop_requested = threading.Event()

    def start(self) -> None:
        for member in self.members:
            member.start()

    def stop(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> bool:
        """Stop every member gracefully and wait for them; True if all finished in time."""
        for member in self.members:
            member.stop(timeout_s)
        deadline = time.monotonic() + timeout_s + _LEAVE_ALLOWANCE_S + self.runtime.heartbeat_timeout_s
        return all(m.wait(max(0.0, deadline - time.monotonic())) for m in self.members)

    def request_stop(self) -> None:
        self._stop_requested.set()

    def serve(
        self, shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S, *, install_signal_handlers: bool = True
    ) -> bool:
        """Start, block until a stop is requested (a signal, or :meth:`request_stop`), stop gracefully.

        Returns True if every member finished within the shutdown timeout."""
        restore = self._install_signal_handlers() if install_signal_handlers else {}
        try:
            self.start()
            if self.runtime.freeze_heap:
                freeze_heap()
            while not self._stop_requested.wait(1.0):
                if all(m.finished for m in self.members):
                    log.error("every member has finished on its own; exiting")
                    return False
            log.info("stopping %d members (at most %.1f s)", len(self.members), shutdown_timeout_s)
            clean = self.stop(shutdown_timeout_s)
            log.info("stopped %s", "cleanly" if clean else "with members still running (timeout)")
            return clean
        finally:
            for signum, handler in restore.items():
                signal.signal(signum, handler)

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._stop_requested.is_set():
                log.warning("second signal (%s): exiting at once", signal.Signals(signum).name)
                raise SystemExit(1)
            log.info(
                "signal %s: stopping gracefully (send it again to exit at once)", signal.Signals(signum).name
            )
            self._stop_requested.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, on_signal)
        return previous


def freeze_heap() -> None:
    """Leave every object alive now out of the cyclic garbage collector's passes (``gc.freeze``), after a
    last full collection. A long-running process's start-up objects (Django, the installed apps' and
    the listeners' modules, the members) live as long as it does, but CPython's full (generation 2)
    collection traverses all of them each time: about 120,000 objects in ``run_member``, a stall of
    every thread of 50-60 ms, every few seconds under load (measured with ``gc.callbacks`` in a member
    on 64 shards at 27,000 entries/s on 2 cores, where it set the p99 of docs/benchmarks.md, "Latency
    and idle cost"). Frozen, a full pass scans what came after start (a few thousand objects: 1 ms).
    Objects frozen are still freed by reference counting; only a reference cycle among them that
    becomes garbage later is never collected (``gc.unfreeze`` undoes this), so it is done once, when
    the process's long-lived state is built. Off with ``Runtime(freeze_heap=False)``."""
    gc.collect()
    gc.freeze()


def dataplane_factory_for(redis_client: Any) -> Callable[[str, str], Any]:
    from consumers.dataplane import DataPlane

    return lambda stream_prefix, consumer_group: DataPlane(redis_client, stream_prefix, consumer_group)


def require_functions(redis_client: Any) -> None:
    """At a consumer process's start: the data plane's Redis Functions library of this code version must
    be loaded (the coordinator loads it), else :class:`consumers.errors.FunctionsNotLoaded`, naming the
    command that loads it, before any member joins. A Redis that does not answer yet is only logged:
    the members retry their calls as they always do (and would meet the same error then)."""
    from consumers.dataplane.library import require_loaded
    from consumers.errors import DataPlaneUnavailable, FunctionsNotLoaded

    try:
        require_loaded(redis_client)
    except FunctionsNotLoaded:
        raise
    except DataPlaneUnavailable as e:
        log.warning("could not check the data plane's Redis Functions library at start: %s", e.message)


def redis_client_for(url: str) -> Any:
    """The data plane's Redis client: bytes replies (payloads are bytes), bounded timeouts, and no
    re-sends after a connection error (:mod:`consumers.dataplane.connection` says why). A
    ``redis+cluster://`` URL gives a Redis Cluster client with the same properties (docs/cluster.md)."""
    from consumers.dataplane.connection import redis_client

    return redis_client(url)


def run(
    listeners: Iterable[Listener],
    *,
    coordinator_url: str | None = None,
    token: str = "",
    allow_insecure_url: bool = False,
    redis_url: str | None = None,
    redis_client: Any = None,
    coordinator: Callable[[], CoordinatorClient] | None = None,
    runtime: Runtime | Mapping[str, Any] | str | None = None,
    concurrency: Mapping[str, int | str] | None = None,
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    batch_hooks: Sequence[Callable[[], None]] = (),
    install_signal_handlers: bool = True,
) -> bool:
    """Run ``listeners`` in this process until SIGTERM / SIGINT (see the module docstring).

    The coordinator is ``coordinator_url`` + ``token`` (HTTP) or ``coordinator``, a factory of clients
    (e.g. ``lambda: StoreCoordinatorClient(store)``); the data plane is ``redis_url`` or ``redis_client``.
    A plain ``http://`` ``coordinator_url`` to another machine is refused (ValueError: the token would
    travel in clear) unless ``allow_insecure_url``.
    """
    resolved = load_runtime(runtime)
    if coordinator is None:
        if not coordinator_url:
            raise ValueError("run() needs coordinator_url (with token) or coordinator")
        url = coordinator_url
        HttpCoordinatorClient(url, token, allow_insecure=allow_insecure_url)  # refuse it now, not per member

        def coordinator() -> CoordinatorClient:
            return HttpCoordinatorClient(
                url, token, timeout_s=resolved.heartbeat_timeout_s, allow_insecure=allow_insecure_url
            )

    if redis_client is None:
        if not redis_url:
            raise ValueError("run() needs redis_url or redis_client (the stream data plane)")
        redis_client = redis_client_for(redis_url)
    require_functions(redis_client)
    process = ConsumerProcess(
        listeners,
        coordinator=coordinator,
        dataplane_factory=dataplane_factory_for(redis_client),
        runtime=resolved,
        concurrency=concurrency,
        batch_hooks=batch_hooks,
    )
    return process.serve(shutdown_timeout_s, install_signal_handlers=install_signal_handlers)
