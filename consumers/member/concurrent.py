"""Shard units that run many entries of their shard at once: ``ordering="key"`` and ``ordering="none"``.

Theory of operation
-------------------
Under "shard" ordering a unit handles one batch at a time on its own thread
(:mod:`consumers.member.shard`), so a shard's throughput is one handler call at a time: with slow jobs
(an API call, a render) most of a member's workers sit idle. A :class:`ConcurrentUnit` keeps everything
a shard unit does on the data plane - the take-over, the fetcher's folded acks, resyncs, fence statuses,
the lease gate, the error policies - and changes only who runs the handler and when:

* its own thread is a *dispatcher* (``{label}-dispatch-{shard}``): it reads, puts every entry in the
  shard's *window*, in the lane of its key (:mod:`consumers.member.lanes`: the partition key under
  "key"; the entry's own id under "none", and for an entry with no partition key), and hands the head
  of every free lane to the member's worker threads (:class:`consumers.member.tasks.TaskPool`, as many
  as the member's effective concurrency, shared by its shards, first come first served);
* a worker calls the handler for one entry and, when it returns, hands the id to the ack and starts the
  next entry of that lane. Each entry is acked on its own, whatever the others do: the ids ride in the
  shard's next fetch (the folded ack) or, while the window is full, in a plain fenced ack at most
  ``ACK_LINGER_S`` later. Workers do no I/O but the handler.

*Backpressure.* The window holds at most ``max(max_in_flight, batch_size)`` entries (read, not yet
finished: queued, running, or waiting for a retry). The dispatcher reads a shard again only when a whole
batch fits, and the take-over claims its next page of orphans only then too, so what one shard holds
in memory, and in the member's pending list apart from entries left pending on purpose, is bounded.

*Waiting without polling.* While the dispatcher waits in the fetcher (an idle shard), its ticket carries
a ``recall`` event: a worker that finishes an entry sets it, and the ticket comes back at once, so the
ack goes out and the lane's next entry is read without waiting for new entries
(:mod:`consumers.member.fetcher`, "Recall"); the ticket also comes back by itself when a parked lane's
retry is due.

*Failures.* Under ``on_error="keep"`` a failed entry stays pending and is kept (a resync does not hand
it out again); its lane goes on. Under ``on_error="redeliver"`` its lane is *parked*: later entries of
that key wait, other lanes go on; after the backoff (from the entry's delivery count, so doubling per
delivery; with the listener's jitter and maximum) the dispatcher re-reads the entry, which bumps Redis's
delivery count, and runs it again; after ``max_deliveries`` it is dead-lettered or given up, and the
lane goes on. Nothing polls while a lane is parked.

*Re-reads.* A resync (a lost reply), an operator's redeliver or a rejoin re-read this member's pending
entries; those the window holds (queued, running, parked, handled and not acked yet) are left out, so
an entry is never run twice at once by one member and per-key order holds: what a resync brings back
has higher ids than anything of its key in the window.

*Stopping.* Told to drain (revoked, shutting down) or to abandon (fenced), the dispatcher reads nothing
more, no worker starts another entry of the shard, and the unit waits for the running ones to finish
(a revoke waits for them up to the group's revocation timeout: past it the coordinator expires the
member, which is fenced, and what finishes afterwards is not acked: it is counted in
``rsc_member_acks_fenced`` and logged, and the next owner handles those entries again). It then acks
what was handled (drain) and releases the shard. Entries not started stay pending for the next owner,
which re-reads them first. Every entry handed to a handler carries ``entry.revoked``, set from the
moment the shard is being given up, so a long job may stop early.

*The lease gate.* A worker checks the member's lease before each handler call; when it may have ended,
the entry goes back to the head of its lane and the dispatcher probes the fence until the lease is
renewed (or the member is fenced), as a shard unit does.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from functools import partial
from typing import Any

from consumers.listener import Ordering
from consumers.member.fetcher import Ticket
from consumers.member.lanes import Lanes
from consumers.member.policy import Next
from consumers.member.shard import ShardUnit, _lease_confirmed, _Stopped

log = logging.getLogger("consumers.member")

ACK_LINGER_S = 0.05  # while the window is full, finished entries wait at most this long for their ack
SAFETY_WAKE_S = 1.0  # the dispatcher's longest wait on its own condition (every wake-up is notified)


class ConcurrentUnit(ShardUnit):
    thread_role = "dispatch"  # the handler runs on the member's worker threads, not here

    def __init__(self, *, ordering: Ordering, max_in_flight: int, **unit: Any) -> None:
        super().__init__(**unit)
        self.by_key = ordering is Ordering.KEY
        self.capacity = max(max_in_flight, self.runtime.batch_size)
        self._lock = threading.Condition()
        # Guarded by _lock (workers and the dispatcher):
        self._lanes = Lanes()
        self._done: list[str] = []  # handled, not yet moved to _unacked (the dispatcher acks them)
        self._failed: dict[str, tuple[Any, str]] = {}  # failed, not yet decided by the dispatcher
        self._running = 0  # tasks handed to the pool and not over (ran, or not run)
        self._lease_doubt = False  # a worker found the lease may have ended
        self._pool_gone = False  # the pool refused a task: the member is finishing
        self._recall: threading.Event | None = None  # the ticket now in the fetcher
        self._shown = (0, 0)  # (in window, parked) as last added to the member's gauges

    def stop(self, *, abandon: bool) -> None:
        super().stop(abandon=abandon)
        with self._lock:
            self._lock.notify_all()

    # ---------------------------------------------------------------------------------------- dispatcher

    def _key(self, entry: Any) -> str:
        if self.by_key:
            return entry.partition_key or entry.entry_id
        return entry.entry_id

    def _process(self, entries: list[Any]) -> None:
        """Put ``entries`` (in stream order) in their lanes, start what may start, then wait for room."""
        with self._lock:
            for entry in entries:
                self._lanes.add(self._key(entry), entry)
            self._dispatch_ready()
            self._show_window()
        self._wait_for_room()

    def _before_read(self) -> None:
        self._wait_for_room()

    def _wait_for_room(self) -> None:
        """Serve the window (failures, retries due, the lease, acks) until a whole batch fits in it."""
        ack_due = math.inf
        while True:
            self._serve()
            with self._lock:
                if self._has_room():
                    return
                now = time.monotonic()
                if self._done and ack_due == math.inf:
                    ack_due = now + ACK_LINGER_S
                flush = bool(self._done) and now >= ack_due
                if not flush and not self._has_work(now):
                    due = min(ack_due, self._lanes.next_due() or math.inf)
                    self._lock.wait(min(max(0.0, due - now), SAFETY_WAKE_S))
                    continue
            if flush:
                self._flush_acks()
                ack_due = math.inf

    def _has_room(self) -> bool:
        return len(self._lanes) + self.runtime.batch_size <= self.capacity

    def _has_work(self, now: float) -> bool:
        """Something for :meth:`_serve` (caller holds the lock)."""
        due = self._lanes.next_due()
        return bool(
            self._failed
            or self._lease_doubt
            or self._pool_gone
            or self._stopping.is_set()
            or (due is not None and due <= now)
        )

    def _serve(self) -> None:
        """Decide failures, confirm the lease, re-read and restart retries that are due."""
        if self._stopping.is_set() or self._pool_gone:
            raise _Stopped()
        with self._lock:
            failed, self._failed = self._failed, {}
            lease_doubt = self._lease_doubt
        for entry, error in failed.values():
            self._decide(entry, error)
        if lease_doubt:
            self._call(_lease_confirmed)  # returns once renewed; raises _Stopped on stop or fence
            with self._lock:
                self._lease_doubt = False
                self._dispatch_ready()
        with self._lock:
            due = self._lanes.take_due(time.monotonic())
        for entry in due:
            again = self._reread(entry)  # bumps its delivery count; None: acked or skipped meanwhile
            with self._lock:
                again = self._lanes.resume(entry.entry_id, again)
                if again is not None:
                    self._submit(again)
                self._dispatch_ready()
                self._show_window()

    def _decide(self, entry: Any, error: str) -> None:
        """A failed entry, on the dispatcher (which may do I/O): keep, park, dead-letter or give up."""
        if not self.failures.policy.redeliver:
            self._keep([entry.entry_id])  # its lane went on already
            return
        decision = self.failures.decide(entry, by_deliveries=True)
        if decision.next is Next.REDELIVER:
            with self._lock:
                self._lanes.park(entry.entry_id, time.monotonic() + decision.backoff_s)
                self._show_window()
            return
        if decision.next is Next.DEAD_LETTER:
            self._dead_letter(entry, error)
        else:
            self._give_up(entry)
        with self._lock:
            self._lanes.finished(entry.entry_id)
            self._dispatch_ready()
            self._show_window()

    def _ticket(self) -> Ticket:
        with self._lock:
            self._move_done()
            self._recall = recall = threading.Event()
            due = self._lanes.next_due()
        ticket = super()._ticket()
        ticket.recall = recall
        ticket.recall_at_s = math.inf if due is None else due
        return ticket

    def _collect_handled(self) -> bool:
        with self._lock:
            return self._move_done()

    def _move_done(self) -> bool:
        """The caller holds the lock."""
        if not self._done:
            return False
        self._unacked += self._done
        self._done = []
        return True

    def _not_held(self, entries: Iterable[Any]) -> list[Any]:
        with self._lock:
            done = set(self._done)
            return [
                e for e in entries
                if e.entry_id not in self._lanes and e.entry_id not in self._failed and e.entry_id not in done
            ]  # fmt: skip

    def _settle(self) -> None:
        """No entry starts any more; the running ones finish; then ack what was handled (drain)."""
        self._stopping.set()
        with self._lock:
            while self._running:
                self._lock.wait(SAFETY_WAKE_S)
        super()._settle()
        with self._lock:
            self._lanes = Lanes()  # what never started stays pending for the next owner
            self._failed.clear()
            self._show_window()

    # ---------------------------------------------------------------------------------------- workers

    def _dispatch_ready(self) -> None:
        """Hand every lane head that may start to the pool (caller holds the lock)."""
        if self._stopping.is_set() or self._lease_doubt:
            return
        for entry in self._lanes.take_ready():
            self._submit(entry)

    def _submit(self, entry: Any) -> None:
        """Caller holds the lock; ``entry`` is its lane's head, marked running."""
        self._running += 1
        if not self.pool.submit(partial(self._run_entry, entry), partial(self._not_run, entry)):
            self._running -= 1
            self._lanes.put_back(entry.entry_id)
            self._pool_gone = True
            self._recall_dispatcher()

    def _run_entry(self, entry: Any) -> None:
        """On a worker thread: the handler for one entry, unless the shard is being given up or the lease
        may have ended."""
        if self._stopping.is_set():
            self._not_run(entry)
            return
        deadline = self.host.lease_deadline_ms(self.incarnation)
        if deadline is None or self.host.clock_ms() >= deadline:
            with self._lock:
                self._running -= 1
                self._lanes.put_back(entry.entry_id)
                self._lease_doubt = True
                self._recall_dispatcher()
            return
        entry.revoked = self._stopping
        self._run_hooks()
        error = None
        started = time.perf_counter()
        try:
            self.handler(entry)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            self._log_failure(entry)
        seconds = time.perf_counter() - started
        handled = error is None
        if self.metrics is not None:
            self.metrics.observe_batch((seconds,))
            self.metrics.count(int(handled), int(not handled))
        self.host.record(handled=int(handled), failed=int(not handled))
        self._run_hooks()
        self._finish(entry, error)

    def _finish(self, entry: Any, error: str | None) -> None:
        fenced = False
        with self._lock:
            self._running -= 1
            if error is None:
                self._lanes.finished(entry.entry_id)
                if self._abandoned.is_set():
                    fenced = True
                else:
                    self._done.append(entry.entry_id)
            else:
                if not self.failures.policy.redeliver:
                    self._lanes.finished(entry.entry_id)  # "keep": the lane goes on, the entry stays pending
                self._failed[entry.entry_id] = (entry, error)  # "redeliver": the lane waits for the decision
            self._dispatch_ready()
            self._show_window()
            self._recall_dispatcher()
        if fenced:
            self._count_fenced_acks([entry.entry_id])

    def _not_run(self, entry: Any) -> None:
        """The task did not run its handler (the shard is being given up, or the pool shut down): the
        entry stays pending, for the next owner."""
        with self._lock:
            self._running -= 1
            self._lanes.put_back(entry.entry_id)
            self._lock.notify_all()

    def _recall_dispatcher(self) -> None:
        """Wake the dispatcher: on its condition, or back from the fetcher (caller holds the lock)."""
        self._lock.notify_all()
        recall = self._recall
        if recall is not None and not recall.is_set():
            recall.set()
            self.fetcher.wake()

    def _show_window(self) -> None:
        """Add this unit's changes to the member's in-flight and parked gauges (caller holds the lock)."""
        if self.metrics is None:
            return
        now = (len(self._lanes), self._lanes.parked_count)
        shown, self._shown = self._shown, now
        if now != shown:
            self.metrics.window(now[0] - shown[0], now[1] - shown[1])

    def parked_keys(self) -> dict[str, float]:
        """Lanes waiting for a retry, and in how many seconds each is due (for the member's views)."""
        now = time.monotonic()
        with self._lock:
            return {str(key): max(0.0, until - now) for key, until in self._lanes.parked().items()}
