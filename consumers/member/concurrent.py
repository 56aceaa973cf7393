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
* a worker runs a *drain task* of the shard: it takes ready entries (heads of different lanes: one at
  a time while handlers are slow, a few at a time once they are known to be fast), calls the handler,
  hands the ids of those that returned to the ack, and takes more, until none is ready or the task has
  had its share (``batch_size`` entries or ``DRAIN_SHARE_S`` of handler time), when it queues again
  behind the other shards' tasks. The dispatcher keeps one queued task per ready lane (running ones
  are not counted: one may be in a long job), at most the pool's size, and no more than it takes to
  run them within one share. So slow jobs spread over every free worker, one entry per task, while
  fast ones run back to back on one thread, and the dispatcher runs a batch of them itself in a
  worker's place when one is free (no hand-off at all). With an empty window too, it runs the batch
  *straight*, in stream order with no lanes, as a shard unit does (:meth:`ConcurrentUnit._run_straight`):
  stream order is every key's order, and only what is left after a failure, a stop, the lease in doubt
  or a turn past its share goes into the lanes. Each entry is acked on its own, whatever the
  others do: the ids ride in the shard's next fetch (the folded ack) or, while the window is full, in
  a plain fenced ack at most ``ACK_LINGER_S`` later. Workers do no I/O but the handler.

*Backpressure.* The window holds at most ``max(max_in_flight, batch_size)`` lanes (keys under "key",
entries under "none": what may run now, runs, or waits for a retry) and at most ``WAITING_FACTOR``
times as many entries in all: entries of a key waiting behind its own running or parked head count only
there, so one slow or failing key holds up no other key until that many wait behind it (a failing key
starving its shard is the classic complaint about ordered consumers). The dispatcher reads a shard again
only when a whole batch fits in both, and the take-over claims its next page of orphans only then too,
so what one shard holds in memory, and in the member's pending list apart from entries left pending on
purpose, is bounded.

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
from typing import Any

from consumers.listener import Ordering
from consumers.member.fetcher import Ticket
from consumers.member.lanes import Lanes
from consumers.member.policy import Next
from consumers.member.shard import ShardUnit, _lease_confirmed, _Stopped

log = logging.getLogger("consumers.member")

ACK_LINGER_S = 0.05  # while the window is full, finished entries wait at most this long for their ack
DRAIN_SHARE_S = 0.005  # a worker's turn on one shard: past this much handler time it queues again
WAITING_FACTOR = 10  # the window's entries: at most this many times its lanes (module docstring)
SAFETY_WAKE_S = 1.0  # the dispatcher's longest wait on its own condition (every wake-up is notified)


class ConcurrentUnit(ShardUnit):
    thread_role = "dispatch"  # the handler runs on the member's worker threads, not here
    # A one-worker member's round thread may run a batch that may run straight (_run_inline); anything
    # else the dispatcher hands to the worker threads itself.
    inline_batches = True

    def __init__(self, *, ordering: Ordering, max_in_flight: int, **unit: Any) -> None:
        super().__init__(**unit)
        self.by_key = ordering is Ordering.KEY
        self.capacity = max(max_in_flight, self.runtime.batch_size)
        # One lock (a plain one: the hot path takes it once per entry) and a condition on it, notified only
        # while someone waits on it (the dispatcher, or the unit settling).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0
        # Guarded by _lock (workers and the dispatcher):
        self._lanes = Lanes()
        self._done: list[str] = []  # handled, not yet moved to _unacked (the dispatcher acks them)
        self._failed: dict[str, tuple[Any, str]] = {}  # failed, not yet decided by the dispatcher
        self._running = 0  # entries taken by workers and not over (finished, or given back)
        self._queued = 0  # drain tasks of this unit queued in the pool, not started yet
        self._mean_s: float | None = None  # the handler's mean time (a moving average; None: not known)
        self._lease_doubt = False  # a worker found the lease may have ended
        self._pool_gone = False  # the pool refused a task: the member is finishing
        self._recall: threading.Event | None = None  # the recall of the ticket now in the fetcher
        self._ticket_now: Ticket | None = None
        self._shown = (0, 0)  # (in window, parked) as last added to the member's gauges

    def stop(self, *, abandon: bool) -> None:
        super().stop(abandon=abandon)
        with self._lock:
            self._wake()

    # ---------------------------------------------------------------------------------------- dispatcher

    def _key(self, entry: Any) -> bytes | str:
        """The entry's lane: its partition key (bytes) under "key", else (or with no key) its own id."""
        if self.by_key:
            return entry.partition_key_bytes or entry.entry_id
        return entry.entry_id

    def _process(self, entries: list[Any], ran: Any = None) -> None:
        """Put ``entries`` (in stream order) in their lanes, start what may start, then wait for room.
        Fast handlers and an empty window: run them straight here first (:meth:`_run_straight`).
        ``ran``: what a round's straight run left of them (:meth:`_run_inline`), for the lanes."""
        if ran is not None:
            entries, straight = ran, False
        else:
            with self._lock:
                straight = not self._lanes and not self._failed and self._fast() and self.pool.try_claim()
        if straight:
            try:
                entries = self._run_straight(entries)
            finally:
                self.pool.unclaim()
            if not entries:
                return  # the window is still empty: room, and nothing to serve (the next read checks)
        keyed = [(self._key(entry), entry) for entry in entries]
        with self._lock:
            for key, entry in keyed:
                self._lanes.add(key, entry)
            inline = self._fast() and self.pool.try_claim()
            taken = self._take() if inline else []
            if not inline:
                self._dispatch_ready()
            self._show_window()
        if inline:
            try:
                if taken:
                    self._turn(taken)  # fast handlers: here, without a hand-off per batch
            finally:
                self.pool.unclaim()
            with self._lock:
                self._dispatch_ready()  # what this turn left (a key's next entries, its share used up)
        self._wait_for_room()

    def _run_straight(self, entries: list[Any]) -> list[Any]:
        """Fast handlers, nothing in the window (no lane running, parked or waiting), a worker's place
        taken: run the batch here in stream order, as a shard unit does, which keeps every key's order
        without lanes (no key is even read). Until something unusual happens: a failure under
        "redeliver" (the entry becomes its lane's failed head, for the dispatcher to decide), the lease
        in doubt, a stop, or the turn past its share (slower than the mean said). What was not run is
        returned, for the lanes. Caller holds a worker's place (:meth:`TaskPool.try_claim`)."""
        started = time.perf_counter()
        batch = self._run_batch(entries, started + DRAIN_SHARE_S)
        elapsed_s = time.perf_counter() - started
        rest = entries[batch.attempted :]
        fenced: list[str] = []
        with self._lock:
            if batch.attempted and self._mean_s is not None:
                self._mean_s = 0.8 * self._mean_s + 0.2 * elapsed_s / batch.attempted
            if self._abandoned.is_set():
                fenced = batch.handled
            else:
                self._done += batch.handled
            if batch.failure is not None:  # "redeliver": its lane waits for the decision (in _serve)
                entry, error = batch.failure
                self._lanes.add(self._key(entry), entry)
                self._lanes.take_one()  # the window was empty: its lane is the one ready
                self._running += 1
                self._finish(entry, error)
            elif batch.lease_doubt:
                self._lease_doubt = True  # the dispatcher probes the fence until the lease is renewed
        if batch.failed and batch.failure is None:
            self._keep(batch.failed)  # "keep": pending on purpose, the keys go on
        self._count_fenced_acks(fenced)
        return rest

    def _run_inline(self, ticket: Ticket, result: Any) -> bool:
        """On the member's waiter or fetcher thread, which read ``result`` for this unit while the
        dispatcher waits on ``ticket`` (consumers/member/fetcher.py, "Inline"): with one worker, fast
        handlers and an empty window, the batch runs straight here, in the worker's place, as a shard
        unit's does in a round (so a one-worker member under "key" or "none" costs what it costs under
        "shard"). True when it went through whole and the window is still empty (the ids go with the
        ticket to the next call); otherwise the ticket goes back to the dispatcher with what is left
        (``ticket.ran``: the entries not run, for the lanes), and it serves the rest (a failure, the
        lease in doubt) as after its own straight run. This thread acts for the dispatcher meanwhile
        (the ticket is the hand-over), including keeping failed entries under "keep"."""
        if not self._inline_allowed():
            return False
        if not self._straight_allowed() or not self.pool.claim(DRAIN_SHARE_S):
            return False  # (a place held longer than one share: the dispatcher serves it, as it would)
        if not self._straight_allowed():  # it changed while this thread waited for the place
            self.pool.unclaim()
            return False
        try:
            with self._as_unit():
                rest = self._run_straight(result.entries)
        finally:
            self.pool.unclaim()
        with self._lock:
            whole = not rest and not self._lanes and not self._failed and not self._lease_doubt
            if whole and not self._abandoned.is_set():
                ticket.ack_ids += self._done
                self._done = []
                return True
        ticket.ran = rest
        return False

    def _straight_allowed(self) -> bool:
        """A round may run a batch straight: the window empty (nothing running, parked, failed or in
        doubt) and the handler fast."""
        with self._lock:
            return not self._lanes and not self._failed and not self._lease_doubt and self._fast()

    def _fast(self) -> bool:
        """Handlers fast enough that a whole batch fits in one share: the dispatcher runs a batch itself
        (in a worker's place, :meth:`TaskPool.try_claim`) rather than hand it to another thread."""
        mean_s = self._mean_s
        return mean_s is not None and mean_s * self.runtime.batch_size < DRAIN_SHARE_S

    def _before_read(self) -> None:
        self._wait_for_room()

    def _wait_for_room(self) -> None:
        """Serve the window (failures, retries due, the lease, acks) until a whole batch fits in it."""
        if self._nothing_to_serve():
            return
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
                    self._wait(min(max(0.0, due - now), SAFETY_WAKE_S))
                    continue
            if flush:
                self._flush_acks()
                ack_due = math.inf

    def _nothing_to_serve(self) -> bool:
        """The common case, in one lock: not stopping, nothing failed, the lease not in doubt, no retry
        due, and room for a whole batch (so :meth:`_wait_for_room` has nothing to do)."""
        if self._stopping.is_set() or self._pool_gone:
            return False
        with self._lock:
            due = self._lanes.next_due()
            return (
                not self._failed
                and not self._lease_doubt
                and (due is None or due > time.monotonic())
                and self._has_room()
            )

    def _has_room(self) -> bool:
        """A whole batch fits: in the lanes (``max_in_flight``) and in the entries (``WAITING_FACTOR``
        times as many: entries of a key waiting behind its running or parked head count there only)."""
        batch = self.runtime.batch_size
        return (
            self._lanes.lane_count + batch <= self.capacity
            and len(self._lanes) + batch <= self.capacity * WAITING_FACTOR
        )

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
                self._lanes.resume(entry.entry_id, again)  # the fresh copy first, or the lane moves on
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
            self._show_window()
            self._recall = recall = threading.Event()
            due = self._lanes.next_due()
        ticket = super()._ticket()
        ticket.recall = recall
        ticket.recall_at_s = math.inf if due is None else due
        self._ticket_now = ticket
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
                self._wait(SAFETY_WAKE_S)
        super()._settle()
        with self._lock:
            self._lanes = Lanes()  # what never started stays pending for the next owner
            self._failed.clear()
            self._show_window()

    # ---------------------------------------------------------------------------------------- workers

    def _dispatch_ready(self) -> None:
        """Make sure enough workers come for this shard's ready lanes: one queued task per ready lane, at
        most as many as the pool has threads, and no more than it takes to run them all within one share
        at the handler's mean time so far (fast handlers: one task runs a whole batch, with no wake-up
        of another thread per entry; until a handler has returned, it is taken to be slow). Running
        tasks are not counted: one may be inside a long job. Caller holds the lock."""
        if self._stopping.is_set() or self._lease_doubt:
            return
        ready = self._lanes.ready_count
        if self._mean_s is not None:  # no more workers than it takes to run them within one share
            ready = min(ready, 1 + int(ready * self._mean_s / DRAIN_SHARE_S))
        wanted = min(ready, max(1, self.pool.size)) - self._queued
        for _ in range(wanted):
            self._queued += 1
            if not self.pool.submit(self._drain, self._drain_cancelled):
                self._queued -= 1
                self._pool_gone = True
                self._recall_dispatcher()
                return

    def _take(self) -> list[Any]:
        """The next ready entries for a worker (of different lanes), marked running: as many as fit in one
        share at the handler's mean time, at most a batch; one while that time is unknown; none when
        nothing is ready or may start. Caller holds the lock."""
        if self._stopping.is_set() or self._lease_doubt:
            return []
        mean_s = self._mean_s
        count = 1
        if mean_s is not None:
            count = min(self.runtime.batch_size, 1 + int(DRAIN_SHARE_S / (mean_s + 1e-9)))
        taken = []
        while len(taken) < count and (entry := self._lanes.take_one()) is not None:
            taken.append(entry)
        self._running += len(taken)
        return taken

    def _drain(self) -> None:
        """On a worker thread: run ready entries of this shard, each acked on its own, until none is ready,
        the shard is being given up, the lease may have ended, or this task has had its share
        (``batch_size`` entries or ``DRAIN_SHARE_S`` of handler time: then it queues again behind the
        other shards' tasks, so a busy shard does not keep the workers to itself). A slow job is one
        entry per task; fast ones are taken a few at a time (:meth:`_take`): one lock per few entries,
        and counters once per task."""
        with self._lock:
            self._queued -= 1
            entries = self._take()
        if entries:
            self._turn(entries)

    def _turn(self, entries: list[Any]) -> None:
        """Run ``entries`` (taken), then whatever :meth:`_take` gives, until this turn had its share."""
        deadline = self.host.lease_deadline_ms(self.incarnation)  # one lock per task, as per batch
        clock_ms, handler, stopping = self.host.clock_ms, self.handler, self._stopping
        seconds: list[float] = []
        failures = 0
        fenced: list[str] = []
        started = time.perf_counter()
        self._run_hooks()
        try:
            while entries:
                outcomes: list[tuple[Any, str | None]] = []
                for i, entry in enumerate(entries):
                    if stopping.is_set() or deadline is None or clock_ms() >= deadline:
                        self._give_back(entries[i:], lease=not stopping.is_set())
                        break
                    entry.revoked = stopping
                    error = None
                    t = time.perf_counter()
                    try:
                        handler(entry)
                    except Exception as e:
                        error = f"{type(e).__name__}: {e}"
                        failures += 1
                        self._log_failure(entry)
                    ended = time.perf_counter()
                    seconds.append(ended - t)
                    outcomes.append((entry, error))
                    if ended - started >= DRAIN_SHARE_S and i + 1 < len(entries):
                        # Slower than the mean said (the handler's time changed): the rest go back, for
                        # other workers, rather than wait here one after another.
                        self._give_back(entries[i + 1 :], lease=False)
                        break
                elapsed_s = time.perf_counter() - started
                had_share = len(seconds) >= self.runtime.batch_size or elapsed_s >= DRAIN_SHARE_S
                with self._lock:
                    for entry, error in outcomes:
                        if self._finish(entry, error):
                            fenced.append(entry.entry_id)
                    self._wake()
                    entries = [] if had_share or len(outcomes) < len(entries) else self._take()
                    if not entries:
                        self._dispatch_ready()  # had its share: the rest queues behind other shards
        finally:
            self._run_hooks()
            if self.metrics is not None:
                self.metrics.observe_batch(seconds)
                self.metrics.count(len(seconds) - failures, failures)
            self.host.record(handled=len(seconds) - failures, failed=failures)
            with self._lock:
                if seconds:
                    mean = sum(seconds) / len(seconds)
                    self._mean_s = mean if self._mean_s is None else 0.8 * self._mean_s + 0.2 * mean
                # Acks to send and room to read; failures to decide, or the lease in doubt, at once.
                self._recall_dispatcher(urgent=bool(failures) or self._lease_doubt)
            self._count_fenced_acks(fenced)

    def _finish(self, entry: Any, error: str | None) -> bool:
        """An entry's handler returned (or raised): True when its ack must be dropped (the unit was
        abandoned: the fence refuses it). Caller holds the lock (and wakes the waiters)."""
        self._running -= 1
        if error is not None:
            if not self.failures.policy.redeliver:
                self._lanes.finished(entry.entry_id)  # "keep": the lane goes on, the entry stays pending
            self._failed[entry.entry_id] = (entry, error)  # "redeliver": the lane waits for the decision
            return False
        self._lanes.finished(entry.entry_id)
        if self._abandoned.is_set():
            return True
        self._done.append(entry.entry_id)
        return False

    def _give_back(self, entries: list[Any], *, lease: bool) -> None:
        """Taken entries that did not start: back to the heads of their lanes, in order, pending for
        whoever runs them."""
        with self._lock:
            self._running -= len(entries)
            for entry in reversed(entries):
                self._lanes.put_back(entry.entry_id)
            if lease:
                self._lease_doubt = True  # the dispatcher probes the fence until the lease is renewed
            self._wake()

    def _drain_cancelled(self) -> None:
        """The pool shut down before this task ran (the member is finishing)."""
        with self._lock:
            self._queued -= 1
            self._wake()

    def _wait(self, timeout_s: float) -> None:
        """Wait for :meth:`_wake` (caller holds the lock)."""
        self._waiting += 1
        try:
            self._cond.wait(timeout_s)
        finally:
            self._waiting -= 1

    def _wake(self) -> None:
        """Wake whoever waits on the unit (caller holds the lock); nothing to do when nobody does."""
        if self._waiting:
            self._cond.notify_all()

    def _recall_dispatcher(self, *, urgent: bool = True) -> None:
        """Wake the dispatcher: on its condition, or back from the fetcher (caller holds the lock). The
        ticket's recall is set; the fetcher's thread is woken for it only while the ticket waits idle
        there, or when ``urgent`` (a failure, the lease in doubt): a ticket in flight comes back with its
        result, and one that goes idle just after this look is seen by the fetcher as it parks it
        (``Fetcher._rearm`` looks at the recall after it sets ``idle_s``)."""
        self._wake()
        recall, ticket = self._recall, self._ticket_now
        if recall is None or recall.is_set():
            return
        recall.set()  # a ticket in flight comes back with its result instead of waiting idle
        if urgent or ticket is None or ticket.idle_s > 0:
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
            return {_text(key): max(0.0, until - now) for key, until in self._lanes.parked().items()}


def _text(key: object) -> str:
    """A lane's key as text: a partition key (bytes, shown as ``Entry.partition_key`` shows it) or an
    entry id."""
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)
