"""One coordinator member: the thin loop around :class:`consumers.member.state.MemberStateMachine`.

Theory of operation
-------------------
Three kinds of threads, one lock:

* the *heartbeat thread* asks the state machine what is due, sends it (outside the lock), and feeds the
  answer back; it sleeps on the member's condition until the next deadline or until any input arrives;
* one *unit* thread per shard (:class:`consumers.member.shard.ShardUnit`) takes the shard over, runs
  its batches' handlers and reports fence statuses and its own end;
* the *fetcher* thread (:class:`consumers.member.fetcher.Fetcher`) acks and reads for every unit in
  steady state, all shards in one fenced call (an idle unit's thread sleeps);
* the *worker pool* (:class:`consumers.member.pool.WorkerPool`) is not a thread: its slots bound how
  many units run a batch at once, to the state machine's worker count (``min(runtime max concurrency,
  the response's max_concurrency)``).

Every input goes through the state machine under the member's lock; the resulting
:class:`~consumers.member.state.Decisions` are carried out at once (start / stop units, resize the pool,
log) - all non-blocking, so the lock is never held across I/O. The state machine is the only place that
decides; this module only wires it to threads, a clock and the network.

Failures: a heartbeat that fails keeps the member consuming (the state machine schedules the retry);
the data plane's ``DataPlaneUnavailable`` is retried inside the units. Nothing here ends the process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from consumers import logcontext
from consumers.client import CoordinatorClient, CoordinatorRequestError
from consumers.errors import DataPlaneUnavailable
from consumers.listener import DEFAULT_MAX_IN_FLIGHT, ErrorPolicy, Ordering
from consumers.member.concurrent import ConcurrentUnit
from consumers.member.fetcher import Fetcher
from consumers.member.ids import host_address, make_instance_id, make_member_id
from consumers.member.outage import Outage
from consumers.member.pool import WorkerPool
from consumers.member.shard import ShardUnit
from consumers.member.state import (
    CLIENT_ERROR,
    Decisions,
    Grant,
    HeartbeatRequest,
    MemberConfig,
    MemberStateMachine,
    Phase,
)
from consumers.member.tasks import TaskPool
from consumers.member.values import RENEWED, UNAVAILABLE
from consumers.metrics import MemberMetrics
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard

log = logging.getLogger("consumers.member")

# A heartbeat's parked-keys report names up to this many keys per shard, each cut to this length (the
# coordinator's limits: coordinator/store/parked_reports.py; tests/consumers/test_parked_report.py).
PARKED_KEYS_REPORTED = 16
PARKED_KEY_CHARS = 256
PARKED_SHARDS_REPORTED = 256


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("redis-stream-coordinator")[:64]
    except Exception:
        return ""


@dataclass(slots=True)
class MemberStats:
    handled: int = 0  # handler calls that returned
    failed: int = 0  # handler calls that raised (left pending, or redelivered under on_error="redeliver")
    acked: int = 0
    redelivered: int = 0  # failed entries handed out again (on_error="redeliver")
    dead_lettered: int = 0  # entries copied to the dead-letter stream and acked (dead_letter=True)
    heartbeats: int = 0
    heartbeat_failures: int = 0
    fenced: int = 0  # times the member was fenced (by the coordinator or the data plane) and rejoined
    lease_renewals: int = 0  # leases renewed in Redis, without the coordinator (its API did not answer)


class Member:
    """One member of ``listener``'s group: its own id, heartbeat, epoch, assignment and workers."""

    def __init__(
        self,
        *,
        listener: Any,  # consumers.listener.Listener (name, stream_prefix, consumer_group, fn, error_policy)
        index: int,
        coordinator: CoordinatorClient,
        dataplane: Any,
        runtime: Runtime,
        member_id: str | None = None,
        instance: str | None = None,
        leave_group: bool = False,
        batch_hooks: Sequence[Callable[[], None]] = (),
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.listener = listener
        self.index = index
        self.member_id = member_id or make_member_id(listener.name, index)
        # Static membership (docs/consumers.md): ``instance`` is the process's (a pod name); each member
        # joins with its own instance id derived from it.
        self.instance_id = make_instance_id(instance, listener.name, index) if instance else None
        self.stream_prefix = listener.stream_prefix
        self.consumer_group = listener.consumer_group
        # The listener's on_error / max_deliveries / dead_letter options, applied by every shard unit.
        self.error_policy: ErrorPolicy = getattr(listener, "error_policy", None) or ErrorPolicy()
        self.label = f"{listener.name}[{index}]"
        self.coordinator = coordinator
        self.dataplane = dataplane
        self.runtime = runtime
        self.batch_hooks = tuple(batch_hooks)
        self._clock_ms = clock_ms
        self._cond = threading.Condition()
        self._units: dict[Shard, ShardUnit] = {}
        self.stats = MemberStats()
        # "shard" ordering: units run their batches on their own threads, the pool bounds how many at once;
        # "key" / "none": the member's worker threads run single entries (consumers/member/concurrent.py).
        self.ordering: Ordering = getattr(listener, "ordering", Ordering.SHARD)
        self.max_in_flight: int = getattr(listener, "max_in_flight", DEFAULT_MAX_IN_FLIGHT)
        # Its log lines carry these fields (consumers/logcontext.py).
        self.log_fields = {
            "member_id": self.member_id,
            "consumer_group": self.consumer_group,
            "stream_prefix": self.stream_prefix,
        }
        self.pool: WorkerPool | TaskPool
        if self.ordering is Ordering.SHARD:
            self.pool = WorkerPool(self.label)
        else:
            self.pool = TaskPool(self.label, self.log_fields)
        self.fetcher = Fetcher(host=self, dataplane=dataplane, runtime=runtime)
        self.outage = Outage(self.label)  # the units' data-plane outages (one WARNING each)
        client_info = {
            "host": host_address()[:255],
            "pid": os.getpid(),
            "listener": listener.name[:255],
            "version": _version(),
        }
        config = MemberConfig(
            member_id=self.member_id,
            capacity=runtime.max_concurrency,
            client=client_info,
            retry_backoff_max_ms=runtime.retry_backoff_max_ms,
            instance_id=self.instance_id,
            leave_group=leave_group,
        )
        self._sm = MemberStateMachine(config, clock_ms())
        self._incarnation = self._sm.incarnation
        # (incarnation, report) of the last parked-keys report the coordinator accepted
        self._parked_reported: tuple[int, Any] | None = None
        self.metrics = MemberMetrics(self.stream_prefix, self.consumer_group, self.member_id)
        self._thread = threading.Thread(
            target=logcontext.bound(self._heartbeat_loop, **self.log_fields),
            name=f"{self.label}-heartbeat",
            daemon=True,
        )
        # Renews the lease in Redis when the coordinator does not answer (docs/protocol.md section 5).
        self._lease_thread = threading.Thread(
            target=logcontext.bound(self._lease_loop, **self.log_fields),
            name=f"{self.label}-lease",
            daemon=True,
        )
        self._done = threading.Event()

    # ---------------------------------------------------------------------------------------- control

    def start(self) -> None:
        log.info(
            "%s: starting member %s%s of %s/%s (runtime max concurrency %d, on_error %s, ordering %s)",
            self.label,
            self.member_id,
            f" (instance id {self.instance_id})" if self.instance_id else "",
            self.stream_prefix,
            self.consumer_group,
            self.runtime.max_concurrency,
            self.error_policy.on_error,
            self.ordering,
        )
        self.fetcher.start()
        self._thread.start()
        self._lease_thread.start()

    def stop(self, timeout_s: float) -> None:
        """Graceful stop, without waiting: finish in-flight work (at most ``timeout_s``), then leave."""
        if self._thread.ident is None:  # never started: nothing to finish
            self._done.set()
            return
        with self._cond:
            self._apply(self._sm.request_stop(self._clock_ms(), int(timeout_s * 1000)))

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once the member has finished (left the group, or gave up leaving)."""
        return self._done.wait(timeout_s)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    # ---------------------------------------------------------------------------------------- views

    @property
    def phase(self) -> Phase:
        with self._cond:
            return self._sm.phase

    @property
    def member_epoch(self) -> int:
        with self._cond:
            return self._sm.member_epoch

    @property
    def assignment(self) -> frozenset[Shard]:
        """The shards the coordinator's last response assigned to this member."""
        with self._cond:
            return frozenset(self._sm.assigned)

    @property
    def grants(self) -> dict[Shard, Grant]:
        """The last response's assignment: shard -> its assignment epoch and readability."""
        with self._cond:
            return dict(self._sm.assigned)

    @property
    def running_shards(self) -> frozenset[Shard]:
        with self._cond:
            return frozenset(self._units)

    @property
    def concurrency(self) -> int:
        with self._cond:
            return self._sm.concurrency

    # ---------------------------------------------------------------------------------------- for units

    def epoch_for(self, incarnation: int) -> int | None:
        with self._cond:
            return self._sm.epoch_for(incarnation)

    def lease_valid(self, incarnation: int) -> bool:
        with self._cond:
            return self._sm.lease_valid(incarnation, self._clock_ms())

    def lease_deadline_ms(self, incarnation: int) -> int | None:
        with self._cond:
            return self._sm.lease_deadline_ms(incarnation)

    def clock_ms(self) -> int:
        return self._clock_ms()

    def report_member_fenced(self, incarnation: int) -> None:
        with self._cond:
            self._apply(self._sm.on_member_fenced(incarnation, self._clock_ms()))

    def report_not_owner(self, shard: Shard, incarnation: int) -> None:
        with self._cond:
            self._apply(self._sm.on_not_owner(shard, incarnation, self._clock_ms()))

    def report_stale_epoch(self, incarnation: int) -> None:
        with self._cond:
            self._apply(self._sm.on_stale_epoch(incarnation, self._clock_ms()))

    def record(
        self, handled: int = 0, failed: int = 0, acked: int = 0, dead_lettered: int = 0, redelivered: int = 0
    ) -> None:
        with self._cond:
            self.stats.handled += handled
            self.stats.failed += failed
            self.stats.acked += acked
            self.stats.dead_lettered += dead_lettered
            self.stats.redelivered += redelivered

    def unit_stopped(self, unit: ShardUnit, failed: bool) -> None:
        with self._cond:
            if self._units.get(unit.shard) is unit:
                del self._units[unit.shard]
            self._apply(self._sm.on_unit_stopped(unit.shard, self._clock_ms(), failed=failed))

    # ---------------------------------------------------------------------------------------- the loop

    def _heartbeat_loop(self) -> None:
        try:
            while True:
                with self._cond:
                    now = self._clock_ms()
                    self._apply(self._sm.on_timer(now))
                    if self._sm.finished:
                        return
                    request = self._sm.poll_heartbeat(now)
                    if request is None:
                        wake = self._sm.next_wakeup_ms()
                        self._cond.wait(None if wake is None else max(0, wake - now) / 1000)
                        continue
                self._send(self._with_parked_keys(request))
        except Exception:
            log.exception("%s: the member loop failed; abandoning every shard", self.label)
        finally:
            with self._cond:
                for unit in self._units.values():
                    unit.stop(abandon=True)
            self.fetcher.close()
            self.pool.shutdown()
            try:
                self.coordinator.close()
            except Exception:
                log.debug("%s: closing the coordinator client failed", self.label, exc_info=True)
            self._done.set()
            self.metrics.forget()
            log.info("%s: member %s finished (%s)", self.label, self.member_id, self.stats)

    def _lease_loop(self) -> None:
        """Renew the lease in Redis whenever the state machine says one is due (no renewal accepted for
        half the lease TTL), until the member finishes. One call at a time, outside the lock."""
        while not self._done.is_set():
            with self._cond:
                if self._sm.finished:
                    return
                now = self._clock_ms()
                request = self._sm.poll_lease_renewal(now)
                if request is None:
                    due = self._sm.lease_renewal_due_ms()
                    wait_ms = 1_000 if due is None else min(1_000, max(1, due - now))
                    self._cond.wait(wait_ms / 1000)
                    continue
            outcome, ttl_ms = UNAVAILABLE, 0
            try:
                renewal = self.dataplane.renew_lease(request.member_id, request.member_epoch)
                outcome, ttl_ms = renewal.outcome.value, renewal.ttl_ms
            except DataPlaneUnavailable as e:
                log.debug("%s: renewing the lease in Redis failed: %s", self.label, e)
            except Exception:
                log.exception("%s: renewing the lease in Redis failed", self.label)
            with self._cond:
                if outcome == RENEWED:
                    self.stats.lease_renewals += 1
                    self.metrics.lease_renewed()
                self._apply(self._sm.on_lease_renewal(request, outcome, ttl_ms, self._clock_ms()))

    def _send(self, request: HeartbeatRequest) -> None:
        try:
            body = self.coordinator.heartbeat(self.stream_prefix, self.consumer_group, request)
        except CoordinatorRequestError as e:
            with self._cond:
                self.stats.heartbeat_failures += 1
                decisions = self._sm.on_heartbeat_error(
                    request,
                    str(e.code),
                    self._clock_ms(),
                    message=e.message,
                    retriable=bool(e.retriable),
                    retry_after_ms=e.retry_after_ms,
                    jitter=random.random(),
                    details=e.problem_details,
                )
                self._apply(decisions)
        except Exception as e:
            log.exception("%s: the coordinator client raised unexpectedly", self.label)
            with self._cond:
                self.stats.heartbeat_failures += 1
                self._apply(
                    self._sm.on_heartbeat_error(
                        request, CLIENT_ERROR, self._clock_ms(), message=repr(e), jitter=random.random()
                    )
                )
        else:
            with self._cond:
                self.stats.heartbeats += 1
                if request.parked_keys is not None:  # what the coordinator now shows for that incarnation
                    self._parked_reported = (request.incarnation, request.parked_keys)
                self._apply(self._sm.on_heartbeat_response(request, body, self._clock_ms()))

    def _unit(self, **unit: Any) -> ShardUnit:
        if self.ordering is Ordering.SHARD:
            return ShardUnit(**unit)
        return ConcurrentUnit(ordering=self.ordering, max_in_flight=self.max_in_flight, **unit)

    def _with_parked_keys(self, request: HeartbeatRequest) -> HeartbeatRequest:
        """A renewal carries the parked keys when they changed since the coordinator last accepted a
        report of this incarnation (none yet: unknown, so a report is sent, even an empty one, which
        clears what an earlier incarnation reported under the same member id)."""
        if request.member_epoch <= 0:
            return request
        report = {
            shard: {
                "count": len(keys),
                "keys": [k[:PARKED_KEY_CHARS] for k in sorted(keys)][:PARKED_KEYS_REPORTED],
            }
            for shard, keys in sorted(self.parked_keys().items(), key=lambda item: Shard.parse(item[0]))[
                :PARKED_SHARDS_REPORTED
            ]
        }
        with self._cond:
            if self._parked_reported == (request.incarnation, report):
                return request
        return dataclasses.replace(request, parked_keys=report)

    def parked_keys(self) -> dict[str, dict[str, float]]:
        """Per shard, the keys (lanes) waiting for the retry of a failed entry and in how many seconds
        each is due (``ordering="key"`` / ``"none"`` with ``on_error="redeliver"``)."""
        with self._cond:
            units = list(self._units.items())
        return {
            str(shard): parked
            for shard, unit in units
            if isinstance(unit, ConcurrentUnit) and (parked := unit.parked_keys())
        }

    def _apply(self, decisions: Decisions) -> None:
        """Carry out decisions (caller holds the lock). Everything here returns at once."""
        for notice in decisions.notices:
            log.log(notice.level, "%s (%s): %s", self.label, self.member_id, notice.message)
        if self._sm.incarnation != self._incarnation:  # every fence starts a new incarnation
            self.stats.fenced += self._sm.incarnation - self._incarnation
            for _ in range(self._sm.incarnation - self._incarnation):
                self.metrics.fenced()
            self._incarnation = self._sm.incarnation
        if decisions.concurrency is not None:
            log.info("%s (%s): %d workers", self.label, self.member_id, decisions.concurrency)
            self.pool.resize(decisions.concurrency)
            self.metrics.concurrency(decisions.concurrency)
        for stop in decisions.stop:
            unit = self._units.get(stop.shard)
            if unit is not None:
                unit.stop(abandon=stop.abandon)
        for start in decisions.start:
            unit = self._unit(
                host=self,
                start=start,
                dataplane=self.dataplane,
                fetcher=self.fetcher,
                pool=self.pool,
                handler=self.listener.fn,
                runtime=self.runtime,
                policy=self.error_policy,
                batch_hooks=self.batch_hooks,
                metrics=self.metrics,
                log_fields=self.log_fields,
                outage=self.outage,
            )
            self._units[start.shard] = unit
            unit.start()
        if decisions.start or decisions.stop:
            stopping = {stop.shard for stop in decisions.stop}
            self.metrics.rebalanced(sum(1 for shard in self._units if shard not in stopping))
        self._cond.notify_all()
