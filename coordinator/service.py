"""The coordinator's periodic work, shared by its entry points.

    coordinator.tasks.tick        Celery beat, every RSC_TICK_INTERVAL_MS (config/settings.py)
    manage.py run_tick            the same loop without Celery (TickLoop below)
    coordinator.tasks.retention   Celery beat, every RSC_RETENTION_INTERVAL_MS
    manage.py run_retention       the same loop without Celery (TickLoop over run_retention)

The tick entry points call :func:`run_tick`: one tick of ``MetadataStore.tick`` over every stream prefix
(docs/protocol.md section 5). The retention entry points call :func:`run_retention`: one bounded
retention pass (``MetadataStore.retention_pass``: trimming, retired streams) and the audit prune. The two
are separate tasks so that trimming streams can never delay lease expiry.

The tick is idempotent, because every change it makes is a compare-and-set commit decided on freshly
loaded state: two ticks at once (two beats, a beat and a ``run_tick``, a late replay of an old beat)
commit each expiry once, and the loser re-decides on the winner's state and finds nothing left to do.
The retention pass is idempotent too: every trim or deletion decides, inside its own script, on what
the stream holds at that moment. So no entry point needs a lock or leader election.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from coordinator import conf
from coordinator.protocol.errors import CoordinatorError
from coordinator.store import StoreTickReport, get_store
from coordinator.store.retention import RetentionReport

log = logging.getLogger(__name__)

# run_tick's longest wait between attempts while the store is unreachable: long enough not to spin,
# short enough that expiry resumes within a few seconds of Redis coming back.
BACKOFF_MAX_MS = 5_000


def run_tick() -> list[StoreTickReport]:
    """One tick over every stream prefix; logs what it changed. Raises StoreUnavailable and the like."""
    current = conf.settings()
    reports = get_store().tick(
        retention_ms=current.RSC_MEMBER_RETENTION_MS, max_ended_members=current.RSC_MAX_ENDED_MEMBERS
    )
    for report in reports:
        log_report(report)
    return reports


def run_retention() -> list[RetentionReport]:
    """One retention pass (at most RSC_RETENTION_MAX_STREAMS streams, continuing where the previous one
    stopped), then the audit prune if the operations layer provides one. Raises StoreUnavailable and the
    like; the store's per-prefix failures are in the reports (and logged)."""
    reports = get_store().retention_pass(max_streams=conf.settings().RSC_RETENTION_MAX_STREAMS)
    for report in reports:
        log_retention_report(report)
    prune_audit_once()
    return reports


def log_retention_report(report: RetentionReport) -> None:
    """One INFO line per prefix that changed, one WARNING per cap that dropped entries or failure."""
    prefix = report.stream_prefix
    if report.error is not None:
        log.warning("retention skipped a stream prefix: stream_prefix=%s error=%s", prefix, report.error)
    if report.trimmed:
        log.info(
            "streams trimmed: stream_prefix=%s streams=%d entries=%d",
            prefix,
            len(report.trimmed),
            sum(report.trimmed.values()),
        )
    if report.trimmed_by_caps:
        log.warning(
            "retention caps dropped entries regardless of consumption: stream_prefix=%s entries=%d",
            prefix,
            sum(report.trimmed_by_caps.values()),
        )
    for key in report.deleted_keys:
        log.info("retired stream deleted: stream_prefix=%s stream=%s", prefix, key)
    for reason in report.waiting:
        log.debug("retired streams kept: stream_prefix=%s reason=%s", prefix, reason)


def prune_audit_once() -> int:
    """``coordinator.operations.prune_audit()`` (the operations layer owns the audit; imported here, not
    at module level, so that the tick's module does not load the ORM models it never uses).

    Its failure (the database is down, say) is logged and does not fail the retention run: the Redis
    side is done, and the next run prunes again."""
    from coordinator.operations import prune_audit

    try:
        removed = int(prune_audit())
    except Exception:
        log.exception("audit prune failed; it is retried on the next retention run")
        return 0
    if removed:
        log.info("audit rows pruned: rows=%d", removed)
    return removed


def log_report(report: StoreTickReport) -> None:
    """One INFO line per change, as key=value pairs (grep-friendly). A tick that changed nothing is silent."""
    prefix = report.stream_prefix
    for group, member_id in report.expired:
        log.info(
            "member expired, its shards are free: stream_prefix=%s consumer_group=%s member_id=%s",
            prefix,
            group,
            member_id,
        )
    for group, member_id in report.collected:
        log.info(
            "ended member forgotten (retention or RSC_MAX_ENDED_MEMBERS): stream_prefix=%s "
            "consumer_group=%s member_id=%s",
            prefix,
            group,
            member_id,
        )
    for group, shard in report.drained:
        log.info("shard drained: stream_prefix=%s consumer_group=%s shard=%s", prefix, group, shard)
    for version in report.retired_versions:
        log.info("routing version retired, migration complete: stream_prefix=%s version=%d", prefix, version)


def is_retriable(error: BaseException) -> bool:
    """StoreUnavailable, ConcurrentUpdate: the next tick may well succeed."""
    return isinstance(error, CoordinatorError) and error.retriable


def backoff_ms(interval_ms: int, failures: int, maximum_ms: int = BACKOFF_MAX_MS) -> int:
    """Wait after the ``failures``-th failed tick in a row: the interval, doubled each time, capped."""
    return min(interval_ms * 2 ** min(failures - 1, 30), max(interval_ms, maximum_ms))


class TickLoop:
    """``manage.py run_tick``: :func:`run_tick` every ``interval_ms`` until :meth:`stop` (and
    ``manage.py run_retention``: the same loop over :func:`run_retention`).

    Fixed rate, not fixed delay: the next tick is due one interval after the previous one was *due*, so
    the rate does not drift by the tick's own duration; a tick that overran skips the beats it missed
    rather than running them in a burst (they would find nothing more to do). A retriable error (the
    store is down) is logged and retried with exponential backoff; anything else is a bug and propagates:
    retrying it forever would hide that expiry has stopped. stop() is safe from a signal handler or another
    thread and takes effect between ticks (a tick in progress is bounded by the store's socket timeout).
    """

    def __init__(
        self,
        interval_ms: int,
        *,
        backoff_max_ms: int = BACKOFF_MAX_MS,
        tick: Callable[[], object] | None = None,
        name: str = "tick",
    ) -> None:
        self.interval_ms = interval_ms
        self.name = name  # what the log lines call one run: "tick", "retention pass"
        self.backoff_max_ms = backoff_max_ms
        self._tick = tick if tick is not None else run_tick
        self._stopping = threading.Event()
        self.ticks = 0  # successful ticks, for tests and the exit message
        self.failures = 0  # consecutive failed ticks

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        interval_s = self.interval_ms / 1000
        due = time.monotonic()
        while not self._stopping.is_set():
            if self.tick_once():
                due = max(due + interval_s, time.monotonic())
                self._stopping.wait(due - time.monotonic())
            else:
                self._stopping.wait(backoff_ms(self.interval_ms, self.failures, self.backoff_max_ms) / 1000)
                due = time.monotonic()

    def tick_once(self) -> bool:
        """One tick; False (logged) if it failed with a retriable error."""
        try:
            self._tick()
        except Exception as error:
            if not is_retriable(error):
                raise
            self.failures += 1
            delay_ms = backoff_ms(self.interval_ms, self.failures, self.backoff_max_ms)
            log.warning("%s failed (%s); retrying in %d ms", self.name, error, delay_ms)
            return False
        if self.failures:
            log.info("%s succeeded again after %d failed attempts", self.name, self.failures)
        self.failures = 0
        self.ticks += 1
        return True


@contextmanager
def stopped_by_signals(loop: TickLoop) -> Iterator[list[str]]:
    """While inside: SIGTERM and SIGINT stop ``loop`` after its current run (``manage.py run_tick`` and
    ``run_retention``). Yields the list the names of the signals received are appended to; the
    previous handlers are back on exit.

    Only the main thread may set handlers: from another thread nothing is installed, and the loop stops
    through ``loop.stop()``. The handler only records and sets a flag: no logging or I/O in signal
    context.
    """
    received: list[str] = []
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        loop.stop()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, stop)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
