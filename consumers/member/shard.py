"""The fetch loop of one shard (a *unit*): a thin loop over the fenced data plane.

Theory of operation
-------------------
A unit runs on its own thread from the moment the member decides to take a shard until it is told to
stop. It

1. takes over what previous owners read and did not ack (``claim_orphans`` until the cursor is back at
   ``0-0``), deletes their now-empty Redis consumers, and re-reads its own pending entries (a member
   that kept its id across a fence or a reconnect) - all in stream order, before anything new. The
   first claim also gives the unit the shard's redeliver token to start from (below);
2. then fetches new entries through the member's :class:`~consumers.member.fetcher.Fetcher`, which
   reads for every shard of the member in one fenced call and keeps an empty shard's ticket itself
   until its stream has news (:mod:`consumers.member.waiter`; an idle unit's thread sleeps).

Each batch runs on the unit's own thread once the member's :class:`~consumers.member.pool.WorkerPool`
grants it a slot (the pool bounds how many batches of the member run at once: its effective
concurrency); the handler is called entry by entry, and the unit hands the ids it handled to its next
fetch, whose script acks them before it reads the next batch (the *folded ack*). So a shard is handled
in stream order, one batch at a time, while different shards run in parallel up to the concurrency.
No thread hand-off per batch but the fetcher's; and none at all when the member runs one batch at a
time and the waiter's or the fetcher's thread read the batch: that thread then runs it itself, acting
for the unit while the unit's thread waits on its ticket (:mod:`consumers.member.fetcher`, "Inline").

*Unacked ids.* What was handled and not yet acked is kept (``_unacked``) until a call acks it: the next
fetch, or a plain fenced ack sent first by any other call of the unit (a claim, a re-read of pending
entries, a dead letter, a lease probe), so that no re-read hands out again what was handled, and
before the unit stops (ack-on-revoke, drain on shutdown: the shard is released only once they are
acked). A fetch whose outcome is unknown gives them back, and they are sent again (an ack is
idempotent).

*Resync.* A call that raises ``DataPlaneUnavailable`` (a connection error or a timeout) has an unknown
outcome: a read script may have run and moved entries into this member's pending list, with the reply
lost on the way (the client never re-sends it: :mod:`consumers.dataplane.connection`). Those entries
would be stranded, and later entries of their keys handled first, if the unit simply read on. So any
such failure marks the unit "resync needed", a read of entries that failed is not retried as such, and
before the next read of new entries the unit re-reads its own pending entries in id order and handles
them. In the take-over, a lost claim is retried at the same cursor, and the unit then re-reads only its
own pending entries in the window that claim scanned (the lost run's are among them): its own entries
beyond that window (a rejoin's) must still wait for the older orphans of the next pages. Calls made
*during* a resync need no second one: a re-read of pending entries only re-delivers what is already
pending (it is retried as it was), and acks and dead letters move nothing into the pending list. The
same re-read happens when the shard's *redeliver token* (returned by every claim and read of new
entries) differs from the one the unit started from: an operator asked for it.

Handler failures follow the listener's :class:`~consumers.listener.ErrorPolicy`, decided by a
:class:`~consumers.member.policy.FailurePolicy` (no I/O; it also bounds what the unit remembers):

* ``keep`` (the default): the error is logged with its traceback and counted, the entry stays pending,
  the batch goes on. The unit keeps the entry (within a bound) so that a resync after a connection
  error does not hand it out again (only a take-over, a rejoin or an operator's redeliver does).
* ``redeliver``: the worker stops at the failed entry; the unit acks what was handled before it, waits
  the backoff (interruptible by a stop), re-reads that one entry from its pending list (which bumps
  Redis's delivery count) and carries on from it with the rest of the batch, still in order. Once the
  entry's delivery count has reached ``max_deliveries`` and it fails again, the unit gives up on it:
  it dead-letters it (``dead_letter=True``: copy and ack in one fenced script) or keeps it pending
  with one ERROR, and goes on with the later entries.

Told to *drain* (revoked, shutting down): the unit reads nothing more (its ticket comes back from the
fetcher at once), the worker stops after the entry in flight, the unit acks what was handled and stops;
the unhandled rest of the batch stays pending for the next owner to claim. Told to *abandon* (fenced):
the same, minus the ack.

While the member cannot be sure its lease holds (no heartbeat accepted for the lease TTL), the unit
starts no handler call and reads nothing; it probes the fence (an ack of no entries) until the lease is
renewed or the data plane says the member is fenced. A batch cut short that way resumes where it
stopped, in order.

Fence statuses go to the member (its state machine decides); ``STALE_EPOCH`` and ``NOT_READABLE`` are
retried after a pause. ``DataPlaneUnavailable`` (every transient Redis error: a failover's
``CLUSTERDOWN`` as much as a refused connection, rsc_redis/errors.py) never stops a unit: it resyncs as
after a lost reply and retries after a short back-off, reset as soon as Redis answers any unit of the
member again; the member logs one WARNING per outage, no traceback (:mod:`consumers.member.outage`).
Any other exception is a bug or a broken stream: logged with its traceback, and the unit stops (the
member restarts it after its next heartbeat).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from consumers import logcontext
from consumers.dataplane import FenceStatus
from consumers.errors import DataPlaneUnavailable
from consumers.listener import ErrorPolicy
from consumers.member.fetcher import Fetcher, Ticket, Wake
from consumers.member.outage import Outage, pause_s
from consumers.member.policy import FailurePolicy, Next, deliveries
from consumers.member.pool import PoolClosed
from consumers.member.state import ShardStart
from consumers.metrics import MemberMetrics
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard, entry_id_key

log = logging.getLogger("consumers.member")

STALE_EPOCH_PAUSE_S = 0.02  # a heartbeat is on its way; the next try will likely carry the new epoch
LEASE_PAUSE_S = 0.1  # the lease may have ended: probe the fence at this pace until it is renewed
NOT_READABLE_PAUSE_S = 0.25  # strict ordering: the old shards this one waits for are still draining
MAX_SEQ = 2**64 - 1  # the largest sequence part of a stream entry id


class UnitHost(Protocol):
    """What a unit needs from its member (thread-safe)."""

    member_id: str
    label: str

    def epoch_for(self, incarnation: int) -> int | None: ...
    def lease_valid(self, incarnation: int) -> bool: ...
    def lease_deadline_ms(self, incarnation: int) -> int | None: ...
    def clock_ms(self) -> int: ...
    def report_member_fenced(self, incarnation: int) -> None: ...
    def report_not_owner(self, shard: Shard, incarnation: int) -> None: ...
    def report_stale_epoch(self, incarnation: int) -> None: ...
    def record(
        self, handled: int = 0, failed: int = 0, acked: int = 0, dead_lettered: int = 0, redelivered: int = 0
    ) -> None: ...
    def unit_stopped(self, unit: ShardUnit, failed: bool) -> None: ...


class _Stopped(Exception):
    """The unit must stop (told to, or the data plane said so)."""


@dataclass(slots=True)
class _Batch:
    """What a worker did with a batch."""

    handled: list[str] = field(default_factory=list)  # ids whose handler returned (to ack)
    failed: list[str] = field(default_factory=list)  # ids whose handler raised
    attempted: int = 0  # entries handed to the handler (a prefix of the batch)
    failure: tuple[Any, str] | None = None  # "redeliver": the entry the batch stopped at, and its error
    lease_doubt: bool = False  # it stopped early because the lease may have ended (not told to stop)


class ShardUnit:
    thread_role = "worker"  # this unit's thread runs the handler
    inline_batches = True  # the waiter or fetcher thread may run a batch (module docstring, "Inline")

    def __init__(
        self,
        *,
        host: UnitHost,
        start: ShardStart,
        dataplane: Any,
        fetcher: Fetcher,
        pool: Any,  # a WorkerPool; a TaskPool for units of consumers.member.concurrent
        handler: Callable[[Any], Any],
        runtime: Runtime,
        policy: ErrorPolicy | None = None,
        batch_hooks: Sequence[Callable[[], None]] = (),
        metrics: MemberMetrics | None = None,
        log_fields: Mapping[str, str] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.host = host
        self.outage = outage if outage is not None else Outage(host.label)  # the member's, shared
        self.metrics = metrics
        self.shard = start.shard
        self.incarnation = start.incarnation
        self.dataplane = dataplane
        self.fetcher = fetcher
        self.pool = pool
        self.handler = handler
        self.runtime = runtime
        self.failures = FailurePolicy(policy or ErrorPolicy())
        self.batch_hooks = tuple(batch_hooks)
        self._stopping = threading.Event()  # drain or abandon: read nothing more
        self._abandoned = threading.Event()  # fenced: ack nothing either
        # Unit-thread state (only the unit's own thread touches these).
        self._resync_needed = False  # a call failed with an unknown outcome: re-read own pending first
        self._token: str | None = None  # the shard's redeliver token, as first seen
        self._unacked: list[str] = []  # handled, not acked yet (the next call acks them first)
        self._unavailable = 0  # consecutive DataPlaneUnavailable failures
        # "-worker-" when this thread runs the handler (logs and the e2e handler's label read it);
        # "-dispatch-" for a unit whose handler runs on the member's worker threads (concurrent.py).
        name = f"{host.label}-{self.thread_role}-{self.shard}"
        fields = {**(log_fields or {}), "shard": str(self.shard)}
        self._log_fields = fields
        self._ran: _Batch | None = None  # what an inline run of the last result did, when not whole
        self.thread = threading.Thread(target=logcontext.bound(self._run, **fields), name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, *, abandon: bool) -> None:
        if abandon:
            self._abandoned.set()
        self._stopping.set()
        self.fetcher.wake()

    # ---------------------------------------------------------------------------------------- the loop

    def _run(self) -> None:
        failed = False
        try:
            try:
                self._take_over()
                self._consume()
            finally:
                self._settle()
        except _Stopped:
            pass
        except Exception:
            log.exception("%s: shard %s: its fetch loop failed; stopping it", self.host.label, self.shard)
            failed = True
        finally:
            self.host.unit_stopped(self, failed)

    def _take_over(self) -> None:
        cursor = "0-0"
        while True:
            claimed = self._call(self.dataplane.claim_orphans, self.runtime.batch_size, cursor, read=True)
            if claimed is None:
                continue  # retried at the same cursor, and recovered below
            result, next_cursor = claimed
            if self._redeliver_requested(result.redeliver_token):
                self.failures.kept.clear()  # asked during the take-over: its final re-read hands them out
            if self._resync_needed:
                self._resync_claim_window(cursor, next_cursor)
            else:
                self._process(result.entries)
            cursor = next_cursor
            if cursor == "0-0":
                break
        deleted = self._call(self.dataplane.delete_ghost_consumers)
        if deleted:
            log.debug("%s: shard %s: deleted %d idle consumers", self.host.label, self.shard, deleted)
        self._resync()  # a rejoin keeps the member id: what its previous incarnation read is ours

    def _consume(self) -> None:
        while True:
            if self._resync_needed:
                self._resync("a call failed and its outcome is unknown")
            self._before_read()
            result = self._fetch()
            if result is None:
                continue  # refused, or failed: the fetch may have delivered entries (resync first)
            if self._redeliver_requested(result.redeliver_token):
                self.failures.kept.clear()  # the operator asks for every pending entry, kept ones too
                first_new = result.entries[0].entry_id if result.entries else None
                self._resync("an operator asked to redeliver", below=first_new)
            if result.entries:
                ran, self._ran = self._ran, None
                if ran is None:
                    self._process(result.entries)
                else:
                    self._process(result.entries, ran)

    def _before_read(self) -> None:
        """Nothing here: a batch was handled before this thread came back to read."""

    def _fetch(self) -> Any | None:
        """The next batch through the member's fetcher, which acks the ids handled so far in the same
        call; None when there is nothing to handle now (a refusal acted on, the lease in doubt, or a
        failed call: the unit is marked "resync needed" and has waited out the backoff)."""
        if not self.host.lease_valid(self.incarnation):
            self._call(_lease_confirmed)  # acks first, then probes until renewed (or raises _Stopped)
        ticket = self._ticket()
        self._unacked = []
        self.fetcher.fetch(ticket)
        self._unacked = ticket.ack_ids  # what was not acked comes back (an unknown outcome: again)
        self._ran = ticket.ran
        if ticket.wake is Wake.STOPPED:
            raise _Stopped()
        if ticket.wake is Wake.UNAVAILABLE:
            self._resync_needed = True
            self._wait_out_unavailable(ticket.error, ack=False)  # type: ignore[arg-type]
            return None
        if ticket.wake is Wake.ERROR:
            raise ticket.error  # type: ignore[misc]
        self._available_again()
        if ticket.result is None:  # Wake.LEASE (the next _fetch probes), or Wake.RECALLED
            return None
        if ticket.result.ok:
            return ticket.result
        self._on_refusal(ticket.result.status, ack=False)
        return None

    def _ticket(self) -> Ticket:
        """The fetcher's ticket for the next read, carrying what was handled and not acked yet."""
        ticket = Ticket(self.shard, self.incarnation, self._unacked, self._token, self._stopping)
        if self.inline_batches:
            ticket.inline = self._run_inline
        return ticket

    def _run_inline(self, ticket: Ticket, result: Any) -> bool:
        """On the member's waiter or fetcher thread, which read ``result`` for this unit while the unit's
        own thread waits on ``ticket`` (so this thread acts for it; consumers/member/fetcher.py, "Inline"):
        run the batch when the member runs one batch at a time, once the slot is this thread's (in turn:
        after the units already waiting for it). True when the whole batch was handled (its ids go with
        the ticket to the next call); otherwise the ticket goes back to the unit with what was done
        (``ticket.ran``, None when nothing ran), and the unit carries on."""
        if not self._inline_allowed():
            return False
        try:
            with self._as_unit():
                batch = self.pool.run(self._run_batch, result.entries)
        except PoolClosed:
            return False
        whole = batch.attempted == len(result.entries) and not batch.failed and batch.failure is None
        if whole and not self._abandoned.is_set():
            ticket.ack_ids += batch.handled
            return True
        ticket.ran = batch
        return False

    def _inline_allowed(self) -> bool:
        """A round may run this unit's batch: the member runs one at a time, and the unit has nothing of
        its own to do first (a resync, a stop)."""
        return not self._resync_needed and not self._stopping.is_set() and self.pool.size == 1

    @contextlib.contextmanager
    def _as_unit(self) -> Iterator[None]:
        """Another thread acting for this unit (a round's, "Inline"): handlers see the unit's thread
        name and log with its fields (the member's and its shard) meanwhile."""
        thread = threading.current_thread()
        name, thread.name = thread.name, self.thread.name
        try:
            with logcontext.bind(**self._log_fields):
                yield
        finally:
            thread.name = name

    def _resync_claim_window(self, cursor: str, next_cursor: str) -> None:
        """A claim whose reply was lost made the entries it claimed our own pending ones. They lie in the
        window the claim retried at the same cursor has just scanned (the same pending entries: only the
        owner changes them), so re-read our own pending entries of that window, in id order (this
        claim's included), and not beyond: orphans in later windows come first."""
        below = None if next_cursor == "0-0" else _successor(next_cursor)
        self._resync("a claim failed", after=cursor, below=below)

    def _redeliver_requested(self, token: str) -> bool:
        """True when the shard's redeliver token differs from the one this unit first saw (its first
        claim's, taken before the take-over hands anything out: that re-read serves older requests)."""
        if not token or token == self._token:
            return False
        first = self._token is None
        self._token = token
        return not first

    def _resync(self, reason: str = "", *, after: str = "0-0", below: str | None = None) -> None:
        """Hand this member's own pending entries of the shard to the handler again, in id order (those
        with ids above ``after`` and below ``below`` only), except the kept ones; a complete pass also
        forgets kept entries that are no longer pending."""
        if reason:
            log.info("%s: shard %s: %s; re-reading own pending entries", self.host.label, self.shard, reason)
        complete = after == "0-0" and below is None
        limit = entry_id_key(below) if below else None
        kept = self.failures.kept
        still_kept: list[str] = []
        while True:
            result = self._call(self.dataplane.read_own_pending, self.runtime.batch_size, after)
            page = [e for e in result.entries if limit is None or entry_id_key(e.entry_id) < limit]
            self._process(self._not_held(e for e in page if e.entry_id not in kept))
            still_kept += [e.entry_id for e in page if e.entry_id in kept]  # kept before, or just now
            if not page or len(page) < len(result.entries):
                break
            after = page[-1].entry_id
        if complete:
            kept.retain(still_kept)
        self._resync_needed = False  # what failed during it was retried as it was (module docstring)

    def _not_held(self, entries: Iterable[Any]) -> list[Any]:
        """Of re-read pending entries, those this unit does not hold: all of them here (a batch runs on
        this thread, so nothing is in flight during a re-read); a unit with a window keeps out what it
        holds (:mod:`consumers.member.concurrent`)."""
        return list(entries)

    # ---------------------------------------------------------------------------------------- batches

    def _process(self, entries: list[Any], ran: _Batch | None = None) -> None:
        """Handle ``entries`` (in stream order) in a worker slot; what was handled is acked by the next
        call (the next fetch, in steady state). A batch cut short
        because the lease may have ended resumes once the lease is renewed (still in order); one cut
        short by a stop stays pending for the next owner; one stopped by a failed entry under the
        "redeliver" policy resumes from that entry after the backoff. ``ran``: what the waiter's thread
        already did with ``entries`` (an inline run that did not go through whole)."""
        while entries:
            if ran is not None:
                batch, ran = ran, None
            else:
                try:
                    batch = self.pool.run(self._run_batch, entries)
                except PoolClosed:
                    raise _Stopped() from None  # the member is finishing: its pool is gone
            if batch.handled and not self._abandoned.is_set():
                self._unacked += batch.handled  # acked by the next call (the fetch, in steady state)
            elif batch.handled:
                self._count_fenced_acks(batch.handled)
            entries = entries[batch.attempted :]
            if batch.failure is not None:
                entries = self._after_failure(*batch.failure, entries)
                continue
            self._keep(batch.failed)  # "keep": pending on purpose
            if entries:
                self._call(_lease_confirmed)  # returns once renewed; raises _Stopped on stop or fence

    def _run_batch(self, entries: list[Any], until_s: float = math.inf) -> _Batch:
        """In a worker slot: the handler, entry by entry, until done, told to stop, the lease may have
        ended, (under "redeliver") an entry failed, or ``time.perf_counter()`` passed ``until_s`` after
        an entry (a unit with other workers to give the rest to, :mod:`consumers.member.concurrent`)."""
        self._run_hooks()
        batch = _Batch()
        # The lease check of every handler call, against the deadline as of now: one lock per batch, not
        # per entry. A renewal during the batch only ends it early; the unit then checks and goes on.
        deadline = self.host.lease_deadline_ms(self.incarnation)
        clock_ms, handler, stopping = self.host.clock_ms, self.handler, self._stopping
        seconds: list[float] = []  # each call's latency, observed once the batch is over
        try:
            ended = 0.0
            for entry in entries:
                if stopping.is_set():
                    break
                if deadline is None or clock_ms() >= deadline:
                    batch.lease_doubt = True
                    break
                if ended >= until_s:
                    break
                batch.attempted += 1
                entry.revoked = stopping
                started = time.perf_counter()
                try:
                    handler(entry)
                except Exception as e:
                    ended = time.perf_counter()
                    seconds.append(ended - started)
                    batch.failed.append(entry.entry_id)
                    self._log_failure(entry)
                    if self.failures.stops_batch:
                        batch.failure = (entry, f"{type(e).__name__}: {e}")
                        break
                else:
                    ended = time.perf_counter()
                    seconds.append(ended - started)
                    batch.handled.append(entry.entry_id)
        finally:
            if self.metrics is not None:
                self.metrics.observe_batch(seconds)
                self.metrics.count(len(batch.handled), len(batch.failed))
            self.host.record(handled=len(batch.handled), failed=len(batch.failed))
            self._run_hooks()
        return batch

    def _log_failure(self, entry: Any) -> None:
        """Called in the handler's ``except`` block, so the traceback goes with it."""
        log.exception(
            "%s: handler failed on entry %s of shard %s (event %s); %s",
            self.host.label,
            entry.entry_id,
            self.shard,
            getattr(entry, "event_id", "?"),
            self.failures.what_next(entry),
        )

    def _run_hooks(self) -> None:
        for hook in self.batch_hooks:
            try:
                hook()
            except Exception:
                log.exception("%s: batch hook %r failed", self.host.label, hook)

    # ---------------------------------------------------------------------------------------- failures

    def _after_failure(self, entry: Any, error: str, rest: list[Any]) -> list[Any]:
        """The "redeliver" policy, after ``entry`` failed: what to hand out next (``rest`` follows it)."""
        self._flush_acks()  # what was handled before it, before the backoff
        decision = self.failures.decide(entry)
        if decision.next is Next.DEAD_LETTER:
            self._dead_letter(entry, error)
            return rest
        if decision.next is Next.GIVE_UP:
            self._give_up(entry)
            return rest
        if self._stopping.wait(decision.backoff_s):
            raise _Stopped()  # the entry and the rest stay pending for the next owner
        again = self._reread(entry)
        return [again, *rest] if again is not None else rest

    def _give_up(self, entry: Any) -> None:
        """``max_deliveries`` reached without ``dead_letter``: the entry stays pending, kept."""
        self._keep([entry.entry_id])
        log.error(
            "%s: shard %s: entry %s (event %s) gave up after %d deliveries; it stays pending: skip it "
            "or fix the handler",
            self.host.label, self.shard, entry.entry_id, getattr(entry, "event_id", "?"), deliveries(entry),
        )  # fmt: skip

    def _keep(self, entry_ids: list[str]) -> None:
        """Leave ``entry_ids`` pending on purpose: a resync does not hand them out again (within a bound:
        :mod:`consumers.member.policy`)."""
        kept = self.failures.kept
        first = kept.dropped == 0
        if kept.add(entry_ids) and first:
            log.warning(
                "%s: shard %s: more than %d failed entries are pending for this member; it remembers %d, "
                "and a resync after a connection error hands the others out again",
                self.host.label, self.shard, kept.limit, kept.limit,
            )  # fmt: skip

    def _reread(self, entry: Any) -> Any | None:
        """``entry`` again, from this member's pending list: the read bumps its delivery count in Redis,
        which is what ``max_deliveries`` is checked against (it survives restarts). Only this one
        entry is read, so the rest of the batch (still in memory) is not counted as redelivered."""
        result = self._call(self.dataplane.read_own_pending, 1, _predecessor(entry.entry_id))
        if result.entries and result.entries[0].entry_id == entry.entry_id:
            self.host.record(redelivered=1)
            return result.entries[0]
        log.info(
            "%s: shard %s: entry %s is no longer pending for this member (acked or skipped meanwhile)",
            self.host.label, self.shard, entry.entry_id,
        )  # fmt: skip
        return None

    def _dead_letter(self, entry: Any, error: str) -> None:
        """Give up on ``entry`` by dead-lettering it. Fenced like an ack (allowed while the shard drains):
        it finishes the entry."""
        result = self._call(self.dataplane.dead_letter, entry.entry_id, error, ack=True)
        if result.dead_lettered:
            self.host.record(dead_lettered=1)
            log.warning(
                "%s: shard %s: entry %s (event %s) dead-lettered after %d deliveries as %s",
                self.host.label, self.shard, entry.entry_id, getattr(entry, "event_id", "?"),
                result.deliveries, result.dead_letter_id,
            )  # fmt: skip
            return
        # NOT_PENDING after a retried call most likely means the first try did it and its reply was lost.
        log.info(
            "%s: shard %s: entry %s not dead-lettered by this call: %s (acked or skipped meanwhile, or "
            "dead-lettered by an earlier try whose reply was lost)",
            self.host.label, self.shard, entry.entry_id, result.outcome,
        )  # fmt: skip

    # ---------------------------------------------------------------------------------------- data plane

    def _collect_handled(self) -> bool:
        """Move what other threads handled into ``_unacked``; True if anything moved. Nothing here: this
        unit's handler runs on its own thread (:mod:`consumers.member.concurrent` overrides it)."""
        return False

    def _flush_acks(self) -> None:
        """Ack what was handled and not acked yet, with a plain fenced ack (retried until it goes through,
        is refused, or the unit is abandoned); what could not be acked stays for the next try."""
        self._collect_handled()
        if not self._unacked:
            return
        ids, self._unacked = self._unacked, []
        try:
            self._call(self.dataplane.ack, ids, ack=True, settle=False)
        except BaseException:
            self._unacked = ids + self._unacked
            raise
        self.host.record(acked=len(ids))

    def _settle(self) -> None:
        """On the way out: ack-on-revoke and drain. A draining unit acks what it handled before the member
        may release the shard; an abandoned (fenced) one acks nothing."""
        with contextlib.suppress(_Stopped):  # abandoned meanwhile, or refused: nothing to ack with
            self._flush_acks()
        self._count_fenced_acks(self._unacked)
        self._unacked = []

    def _count_fenced_acks(self, entry_ids: Sequence[str]) -> None:
        """Entries handled whose ack the fence refused (the member was fenced, or the revocation timeout
        passed while they ran): the next owner handles them again. Counted and logged."""
        if not entry_ids:
            return
        if self.metrics is not None:
            self.metrics.acks_fenced(len(entry_ids))
        log.warning(
            "%s: shard %s: %d handled entries were not acked (the member was fenced or the shard taken "
            "away while they ran); the next owner handles them again",
            self.host.label, self.shard, len(entry_ids),
        )  # fmt: skip

    def _call(
        self,
        operation: Callable[..., Any],
        *args: Any,
        ack: bool = False,
        read: bool = False,
        settle: bool = True,
    ) -> Any:
        """One fenced data-plane call at the member's current epoch; returns its result once OK.

        Acks go on while draining (the data plane allows acking a shard being revoked); everything
        else stops as soon as the unit is told to. While the lease may have ended (no heartbeat accepted
        for its TTL) nothing is read: the unit only *probes* the fence (an ack of no entries, which
        changes nothing) until the heartbeat thread renews the lease or the data plane says we are
        fenced.

        ``DataPlaneUnavailable`` marks the unit "resync needed" and is retried after a backoff, except
        for a ``read`` (of new entries or orphans): that returns None after the backoff, so the caller
        re-reads its own pending entries before it reads anything else.

        Any other call first acks what was handled (``settle``): a re-read must not hand it out again.
        """
        if settle and (self._unacked or self._collect_handled()):
            self._flush_acks()
        while True:
            if self._abandoned.is_set() or (self._stopping.is_set() and not ack):
                raise _Stopped()
            epoch = self.host.epoch_for(self.incarnation)
            if epoch is None:
                raise _Stopped()
            probing = not ack and not self.host.lease_valid(self.incarnation)
            try:
                if probing:
                    result = self.dataplane.ack(self.host.member_id, epoch, self.shard, [])
                else:
                    result = operation(self.host.member_id, epoch, self.shard, *args)
            except DataPlaneUnavailable as e:
                self._resync_needed = True
                self._wait_out_unavailable(e, ack=ack)
                if read:
                    return None
                continue
            self._available_again()
            status = _status(result)
            if status is FenceStatus.OK:
                if probing:
                    self._pause(LEASE_PAUSE_S)
                    continue
                return result
            self._on_refusal(status, ack=ack)

    def _on_refusal(self, status: FenceStatus, *, ack: bool) -> None:
        if status is FenceStatus.MEMBER_FENCED:
            self.host.report_member_fenced(self.incarnation)
            raise _Stopped()
        if status is FenceStatus.NOT_OWNER:
            self.host.report_not_owner(self.shard, self.incarnation)
            raise _Stopped()
        if status is FenceStatus.STALE_EPOCH:
            self.host.report_stale_epoch(self.incarnation)
            self._pause(STALE_EPOCH_PAUSE_S, ack=ack)
        else:  # NOT_READABLE
            self._pause(NOT_READABLE_PAUSE_S, ack=ack)

    def _wait_out_unavailable(self, error: DataPlaneUnavailable, *, ack: bool) -> None:
        """Back off after a transient failure (:mod:`consumers.member.outage`): the member's one WARNING
        per outage, then a pause bounded by the lease, cut short when Redis answers another unit."""
        self._unavailable += 1
        self.outage.failed(f"shard {self.shard}", error.message)
        deadline_ms = self.host.lease_deadline_ms(self.incarnation)
        pause = pause_s(
            self._unavailable,
            backoff_max_ms=self.runtime.retry_backoff_max_ms,
            lease_left_ms=None if deadline_ms is None else deadline_ms - self.host.clock_ms(),
        )
        log.debug("%s: shard %s: retry %d in %.0f ms", self.host.label, self.shard, self._unavailable,
                  pause * 1000)  # fmt: skip
        self.outage.pause(pause, self._abandoned if ack else self._stopping)

    def _available_again(self) -> None:
        self._unavailable = 0
        self.outage.answered()

    def _pause(self, seconds: float, *, ack: bool = False) -> None:
        """Sleep, waking early when the unit must stop (an ack retry wakes only when abandoned)."""
        (self._abandoned if ack else self._stopping).wait(seconds)


def _lease_confirmed(member_id: str, epoch: int, shard: Shard) -> FenceStatus:
    """A no-op "operation" for :meth:`ShardUnit._call`: it runs once the lease is known valid again."""
    return FenceStatus.OK


def _status(result: Any) -> FenceStatus:
    if isinstance(result, FenceStatus):
        return result
    if isinstance(result, tuple):  # claim_orphans: (ReadResult, cursor)
        return _status(result[0])
    if isinstance(result, int):  # delete_ghost_consumers: a count (0 when fenced)
        return FenceStatus.OK
    return FenceStatus(result.status)  # ReadResult, DeadLetterResult


def _successor(entry_id: str) -> str:
    """The smallest id above ``entry_id``."""
    ms, seq = entry_id_key(entry_id)
    return f"{ms}-{seq + 1}" if seq < MAX_SEQ else f"{ms + 1}-0"


def _predecessor(entry_id: str) -> str:
    """The largest id below ``entry_id``: reading pending entries "after" it starts at ``entry_id``."""
    ms, seq = entry_id_key(entry_id)
    if seq:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{MAX_SEQ}" if ms else "0-0"
