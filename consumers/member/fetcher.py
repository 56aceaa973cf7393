"""The member's fetcher: acks and reads for every shard of the member, many shards per call.

Theory of operation
-------------------
A shard unit in its steady state (take-over done, nothing to re-read) does not read for itself. It
hands the fetcher a :class:`Ticket` - its shard, the ids it handled since its last fetch, the redeliver
token it knows - and waits on it. The tickets that are due go together in one
:meth:`consumers.dataplane.DataPlane.fetch`: per shard, the ack of the previous batch and the read of
the next one, each shard fenced on its own inside Redis (``fetch.lua``). So the ack of batch n rides in
the read of batch n+1, and a member with many shards makes one call where it made one per shard.

One call is in flight at a time. A unit that hands in a ticket while none is makes the call itself, on
its own thread, taking along every other due ticket (a thread hand-off there and back would cost more
than the call). Tickets handed in while a call is in flight wait for the next one. When that call
returns and one ticket waits, a busy shard's, the thread that made it hands the next call to that
ticket's unit (``LEAD``), which makes it on its own thread: one wake-up, where waking the fetcher's
thread to make the call and then the unit for its result took two (a member with few shards: 2 shards
per member, 4 members on 2 cores). When several wait, the fetcher's own thread makes the next call, all
of them together, and goes on making calls back to back while tickets keep coming (a member with many
busy shards). The fetcher's thread also makes the calls of idle shards (below).

A ticket goes back to its unit only when there is something to act on: entries, a refusal, a changed
redeliver token, a failed call, the lease in doubt, or the unit being told to stop. An empty read keeps
the ticket here. *Waking*: with the wake-up on (``Runtime.wake_on_append``), the read asked for the
group's last-delivered id on the shard (``ShardFetch.wait``), and the ticket is *parked*: the member's
waiter (:mod:`consumers.member.waiter`) blocks on one ``XREAD`` over every parked ticket's stream from
that id, and makes the ticket due when its stream has news; it is due anyway after ``idle_wait_ms`` (the
safety net). The call a wake makes reads the member's other parked shards too (*riders*): a producer's
call that appends to several shards wakes the wait at its first (Redis 7.0 hands a blocked ``XREAD`` the
first stream that has news), and the others' entries are then in the same reply, a round trip sooner
than the next round's look would find them. A rider asks for no last-delivered id: a shard read with
nothing new is left out of the reply (and costs Redis its fence and a place in the one ``XREADGROUP``),
and stays parked from the id it waited from, which only its owner's reads move. Without the wake-up
(off, or the wait failing) it is due again after the shard's idle backoff (``idle_backoff_min_ms``
doubling up to ``idle_backoff_max_ms``). A call takes along every waiting ticket that is at least
half-way through its wait or backoff, so idle shards line up and cost one call between them, and no
thread but the fetcher's (or the waiter's) wakes up.

*Inline.* A member that runs one batch at a time (``max_concurrency`` 1, the default) gains nothing from a
thread per batch: the thread that made a call for tickets it took up itself - the waiter's, which woke for
a shard, or the fetcher's, which makes the calls of several due tickets - runs the batches that call read,
one after the other, in the member's one worker slot (in turn: after the units already waiting for it),
under each unit's thread name and log fields, while the units' own threads stay asleep on their tickets
(the ticket is the hand-over: whoever holds it acts for the unit). A whole batch's ids go with the ticket
into the next call, which that thread makes at once (with every other due ticket) when none is in flight:
so a woken shard costs the wait, the read, the handlers and the next read (its acks folded in), on one
thread, as a plain blocking consumer does; what that call reads runs there too, round after round, until
every ticket is parked again. Under steady load on many shards the same holds for the fetcher's thread:
one thread reads, runs and reads again, where a hand-off to each shard's thread and back cost several
thread wake-ups per batch (docs/benchmarks.md, "Latency and idle cost"). Each round's call goes out with a
look (one ``XREAD`` that does not block, on another connection, sent just before the call) for news on the
parked tickets' streams, which join the next round's call: a shard that stays busy cannot keep the others
waiting. The call in flight is released before a batch runs. Anything else (a failure, a stop, the lease
in doubt, a resync pending) sends the ticket back to its unit with what was done (``Ticket.ran``), and the
unit carries on from there as if it had run the batch itself. A unit's own thread that makes a call
(``submit``, ``LEAD``) runs no other unit's batch and takes no ``carried`` ticket (one whose batch ran in
a round) along: it must stay free to act for its own shard (a stop, a revocation), and a carried ticket's
unit would have to wake for its result. While the fetcher's thread runs a batch, a unit told to stop gets
its waiting ticket back from :meth:`Fetcher.wake`, on its own thread. A member with more slots keeps a
thread per batch (the waiter must stay free to wake the other shards). Under ``ordering="key"``/``"none"``
a round runs a batch only when it may run straight (fast handlers, the shard's window empty: its unit's
``_run_inline``); anything else the unit's dispatcher feeds to the worker threads.

*Drained.* A batch shorter than ``count`` read its shard to the end, so the group's last-delivered id
there is that batch's last entry id: once the batch ran whole in a round, the ticket parks on that id at
once, with the batch's ids still to ack, instead of making the call that would only ack them and find
nothing new (a call per round, and per shard ``XINFO GROUPS``). Its acks ride the member's next call:
a wake's (it rides along, or it is the one woken), a round's after half of ``ACK_LINGER_S``, or, when
nothing else comes, its own after ``ACK_LINGER_S`` (20 ms), which reads '2' and parks it as usual. So
under steady load each round costs one call, not two, and an idle member acks its last batch 20 ms
later than before, in a call it made anyway. A stopping unit gets the ticket back with the acks at
once (``wake``), as any waiting ticket.

What the unit keeps doing itself: per-shard order (it hands out one ticket at a time and handles a
batch before the next), the take-over, resyncs, failure policies and fence statuses. What the fetcher
guarantees it:

* acks travel with the ticket and come back with it when they were not applied: a refused shard, a
  unit told to stop, or ``DataPlaneUnavailable`` (outcome unknown: the unit sends them again, an ack is
  idempotent, before it re-reads its own pending entries, so nothing it handled is handed out again);
* no read while the member cannot be sure of its lease (``FetcherHost.lease_valid``): the acks go out
  alone and the ticket goes back (``LEASE``), and the unit probes the fence as it always did;
* the epoch of a ticket is the member's epoch for the unit's incarnation at the moment of the call.

*Recall.* A unit that runs many entries of its shard at once (``ordering="key"`` or ``"none"``,
:mod:`consumers.member.concurrent`) has work of its own while its ticket waits here: entries finished
(to ack), a retry due, a failure to decide. It gives its ticket a ``recall`` event, which it sets (and
:meth:`Fetcher.wake` s the fetcher) when such work comes, and a ``recall_at_s`` for its next retry: a
waiting ticket that is recalled, or whose time came, goes back at once without a call (``RECALLED``),
its acks unsent; the unit then does that work and hands in a new ticket with them. A recalled ticket
whose call is in flight goes back with its result, even an empty read. (The unit wakes this thread for
a recall only while its ticket waits idle: a recall that comes just as the ticket goes idle is seen at
the ticket's next due time.)

Connection errors are the units' to handle (each backs off and resyncs); anything else fails the units
of that call, which stop with their traceback as a failed per-shard call did. Closing the fetcher (the
member finishing) sends every waiting ticket back as ``STOPPED``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from consumers import logcontext
from consumers.dataplane import FetchResult, ShardFetch
from consumers.errors import DataPlaneUnavailable
from consumers.member.waiter import Waiter
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard

log = logging.getLogger("consumers.member")

# A drained shard's ticket parks with its acks (module docstring, "Drained"): any call the member makes
# after half of this takes them along, and after all of it the ticket makes one itself.
ACK_LINGER_S = 0.02


class Wake(Enum):
    """Why a ticket went back to its unit."""

    RESULT = "result"  # ``result`` holds what the fetch did (entries, a refusal, a new token)
    LEAD = "lead"  # not back yet: the unit makes the next call itself (:meth:`Fetcher.fetch` does)
    STOPPED = "stopped"  # the unit is stopping (or its incarnation is gone): nothing sent for it
    LEASE = "lease"  # the lease is in doubt: acks sent (if any), nothing read
    UNAVAILABLE = "unavailable"  # ``error`` is the DataPlaneUnavailable: outcome unknown
    ERROR = "error"  # ``error`` is what the call raised
    RECALLED = "recalled"  # the unit asked for it back (its ``recall``): nothing sent for it


class FetcherHost(Protocol):
    member_id: str
    label: str

    def epoch_for(self, incarnation: int) -> int | None: ...
    def lease_valid(self, incarnation: int) -> bool: ...
    def record(self, *, acked: int = 0) -> None: ...


@dataclass(slots=True, eq=False)
class Ticket:
    """One unit's request: ack ``ack_ids``, then read new entries of ``shard``."""

    shard: Shard
    incarnation: int
    ack_ids: list[str]  # what the fetcher did not apply comes back here
    token: str | None  # the redeliver token the unit knows (None: not yet seen)
    stopping: threading.Event  # the unit's: set when it is told to stop
    recall: threading.Event | None = None  # set by the unit: give the ticket back now (module docstring)
    recall_at_s: float = math.inf  # time.monotonic() at which it goes back by itself
    idle_s: float = 0.0  # the current idle backoff: 0 until a read came back empty
    wait_key: str = ""  # parked on the wait (module docstring, "Waking"): its stream ...
    wait_id: str = ""  # ... and the group's last-delivered id on it ("": not parked)
    due_s: float = 0.0  # time.monotonic() at which it is sent
    # Set by a unit whose batches the waiter's or fetcher's thread may run (module docstring, "Inline"):
    # ``inline(ticket, result)`` runs the batch of ``result`` and says whether it went through whole
    inline: Callable[[Ticket, FetchResult], bool] | None = None
    ran: Any = None  # what an inline run that did not go through whole did (its unit carries on from it)
    carried: bool = False  # its batch ran inline and its unit's thread sleeps: rounds, not its unit, call
    rider: bool = False  # parked, and read along with a wake (module docstring, "Waking"): keeps its wait
    wake: Wake | None = None
    result: FetchResult | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Fetcher:
    def __init__(self, *, host: FetcherHost, dataplane: Any, runtime: Runtime) -> None:
        self.host = host
        self.dataplane = dataplane
        self.count = runtime.batch_size
        self._idle_min_s = runtime.idle_backoff_min_ms / 1000
        self._idle_max_s = runtime.idle_backoff_max_ms / 1000
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # the fetcher's thread waits on this one ...
        self._wait_cond = threading.Condition(lock)  # ... and the waiter's on this one
        self._tickets: list[Ticket] = []
        self._sending = False  # a call is in flight (one at a time: what comes meanwhile waits for the next)
        self._closed = False
        self._thread = threading.Thread(
            target=self._run_in_context, name=f"{host.label}-fetcher", daemon=True
        )
        self._waiter = (
            Waiter(self, dataplane.entry_wait(), runtime.idle_wait_ms)
            if runtime.wake_on_append and hasattr(dataplane, "entry_wait")
            else None
        )

    def start(self) -> None:
        self._thread.start()
        if self._waiter is not None:
            self._waiter.start()

    def close(self) -> None:
        """Every waiting ticket goes back ``STOPPED``, and so does every later one; the threads end."""
        with self._cond:
            self._closed = True
            tickets, self._tickets = self._tickets, []
            self._cond.notify_all()
            self._wait_cond.notify_all()
        if self._waiter is not None:
            self._waiter.close()
        for ticket in tickets:
            _finish(ticket, Wake.STOPPED)

    def submit(self, ticket: Ticket) -> Ticket:
        """Hand in a unit's ticket. When no call is in flight, the calling unit's thread makes it at once,
        with every other due ticket: no wake-up of this thread and back (its own result needs no
        hand-off). Otherwise the ticket waits for the next call, made as soon as the one in flight
        returns, with every ticket due then (so tickets that come in meanwhile go together): by the
        fetcher's thread, or, when it is the only one waiting, by its own unit, which gets it back as
        ``LEAD`` (:meth:`fetch` acts on it)."""
        ticket.due_s = time.monotonic()
        with self._cond:
            if self._closed:
                batch = None
            elif self._sending:
                # No wake-up: the fetcher's thread can do nothing before the call in flight returns, and
                # its end wakes it (_send_and_release).
                self._tickets.append(ticket)
                return ticket
            else:
                self._sending = True
                batch = [ticket, *self._take_due(ticket.due_s, carried=False)]
        if batch is None:
            _finish(ticket, Wake.STOPPED)
        else:
            self._send_and_release(batch)
        return ticket

    def fetch(self, ticket: Ticket) -> Ticket:
        """:meth:`submit` the ticket and wait until it is back (making the next call if handed it)."""
        self.submit(ticket).done.wait()
        while ticket.wake is Wake.LEAD:
            ticket.wake = None
            ticket.done.clear()
            with self._cond:  # the lead is reserved for this ticket (_sending stays True)
                batch = None if self._closed else [ticket, *self._take_due(time.monotonic(), carried=False)]
            if batch is None:
                self._release()
                _finish(ticket, Wake.STOPPED)
            else:
                self._send_and_release(batch)
            ticket.done.wait()
        return ticket

    def wake(self) -> None:
        """A unit was told to stop (or recalls its ticket): its ticket goes back at once, here, on the
        caller's thread, whatever the fetcher's thread is doing (it may be running a batch: "Inline")."""
        with self._cond:
            self._give_back(time.monotonic())
            self._cond.notify_all()

    # ---------------------------------------------------------------------------------------- the loop

    def _run_in_context(self) -> None:
        """Its log lines carry the member's fields (consumers/logcontext.py)."""
        with logcontext.bind(**getattr(self.host, "log_fields", {})):
            self._run()

    def _run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                self._send_inline(batch)
        except Exception:
            log.exception("%s: the fetcher failed; its shards stop", self.host.label)
        finally:
            self.close()

    def _next_batch(self) -> list[Ticket] | None:
        """Wait until no call is in flight and a ticket is due; take it and every ticket half-way through
        its backoff (the caller then owns the next call)."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                self._give_back(now)
                if not self._sending and any(t.due_s <= now for t in self._tickets):
                    self._sending = True
                    return self._take_due(now)
                due = min((min(t.due_s, t.recall_at_s) for t in self._tickets), default=now + 3600)
                self._cond.wait(None if self._sending else max(0.0, due - now))
            return None

    def _give_back(self, now: float) -> None:
        """Waiting tickets whose units want them back (stopping, recalled, a retry due) go back at once,
        without a call. The caller holds the lock."""
        back = [t for t in self._tickets if _wanted_back(t, now)]
        if back:
            for ticket in back:
                _finish(ticket, Wake.STOPPED if ticket.stopping.is_set() else Wake.RECALLED)
            self._tickets = [t for t in self._tickets if t not in back]

    def _take_due(self, now: float, *, carried: bool = True) -> list[Ticket]:
        """Remove and return the waiting tickets due by ``now`` or half-way through their backoff (so the
        backoffs of idle shards line up); without the ``carried`` ones for a unit's own call (it runs
        no other unit's batch: they stay for the rounds, module docstring "Inline"). The caller holds
        the lock."""
        batch, kept = [], []
        for t in self._tickets:
            (batch if t.due_s - now <= t.idle_s / 2 and (carried or not t.carried) else kept).append(t)
        self._tickets = kept
        return batch

    def _send_and_release(
        self, batch: list[Ticket], ready: list[tuple[Ticket, FetchResult]] | None = None
    ) -> None:
        """Make the call (this thread owns it), then let the next one go. ``ready``: as for :meth:`_send`
        (the tickets put there are the caller's to finish)."""
        try:
            self._send(batch, ready)
        except Exception as e:  # a bug: every ticket of the call must still go back to its unit
            log.exception("%s: a fetch failed unexpectedly", self.host.label)
            kept = {id(ticket) for ticket, _ in ready or ()}
            for ticket in batch:
                if not ticket.done.is_set() and id(ticket) not in kept:
                    _finish(ticket, Wake.ERROR, error=e)
        finally:
            self._release()

    def _release(self) -> None:
        """The call in flight is over. When one ticket waits, a busy shard's whose unit's thread waits for
        it (not a ``carried`` one), its unit makes the next call (one wake-up: the unit's, which has to
        wake for its result anyway). When more wait, or a carried one, the
        fetcher's thread makes it with all of them (it then goes on making calls back to back while
        tickets keep coming, with no wake-up of a caller per call); it is woken, too, when only idle
        shards' tickets wait (one may be due sooner than the thread's wait)."""
        lead = None
        with self._cond:
            if (
                len(self._tickets) == 1
                and self._tickets[0].idle_s == 0
                and not self._tickets[0].carried
                and not self._tickets[0].stopping.is_set()
            ):
                lead = self._tickets.pop()  # _sending stays True: reserved for it
            else:
                self._sending = False
                if self._tickets:
                    self._cond.notify()
        if lead is not None:
            _finish(lead, Wake.LEAD)

    def _send(self, batch: list[Ticket], ready: list[tuple[Ticket, FetchResult]] | None = None) -> None:
        """One call for ``batch``. With ``ready`` (the waiter's calls), a ticket that read entries and has
        an ``inline`` runner goes there instead of back to its unit (module docstring, "Inline")."""
        sent: list[Ticket] = []
        requests: list[ShardFetch] = []
        waiting = self._waiter is not None and self._waiter.healthy
        riders: list[tuple[str, str] | None] = []  # per sent ticket: a rider's wait, kept if it reads nothing
        for ticket in batch:
            ride = (ticket.wait_key, ticket.wait_id) if ticket.rider and ticket.wait_id else None
            ticket.wait_key = ticket.wait_id = ""
            ticket.rider = False
            epoch = self.host.epoch_for(ticket.incarnation)
            if epoch is None or ticket.stopping.is_set():
                _finish(ticket, Wake.STOPPED)
                continue
            read = self.host.lease_valid(ticket.incarnation)
            if not read and not ticket.ack_ids:
                _finish(ticket, Wake.LEASE)
                continue
            # A rider reads without asking for its last-delivered id: unless it reads something, that is
            # still the id it waits from (only its owner moves it), and the call's reply leaves it out.
            wait = waiting and ride is None
            requests.append(ShardFetch(ticket.shard, epoch, ticket.ack_ids, read, ticket.token, wait))
            sent.append(ticket)
            riders.append(ride)
        if not sent:
            return
        try:
            results = self.dataplane.fetch(self.host.member_id, requests, self.count)
        except DataPlaneUnavailable as e:
            for ticket in sent:
                _finish(ticket, Wake.UNAVAILABLE, error=e)
            return
        except Exception as e:
            for ticket in sent:
                _finish(ticket, Wake.ERROR, error=e)
            return
        acked = 0
        idle: list[Ticket] = []
        for ticket, request, result, ride in zip(sent, requests, results, riders, strict=True):
            if result.acked and ticket.ack_ids:
                acked += len(ticket.ack_ids)
                ticket.ack_ids = []
            if not request.read:
                _finish(ticket, Wake.LEASE if result.ok else Wake.RESULT, result=result)
            elif result.ok and not result.entries and result.redeliver_token == ticket.token:
                if ticket.recall is not None and ticket.recall.is_set():
                    _finish(ticket, Wake.RESULT, result=result)  # nothing read, but its unit wants it back
                else:
                    if result.last_id:
                        ticket.wait_key = self.dataplane.stream_key(ticket.shard)
                        ticket.wait_id = result.last_id
                    elif ride is not None and waiting:
                        ticket.wait_key, ticket.wait_id = ride
                    idle.append(ticket)
            elif (
                ready is not None
                and ticket.inline is not None
                and result.ok
                and result.entries
                and (not result.redeliver_token or result.redeliver_token == ticket.token)
            ):
                ready.append((ticket, result))
            else:
                _finish(ticket, Wake.RESULT, result=result)
        if acked:
            self.host.record(acked=acked)
        self._rearm(idle)

    def _rearm(self, tickets: list[Ticket], linger_s: float | None = None) -> None:
        """Empty reads: keep the tickets. One with a ``wait_id`` is parked on the wait (module
        docstring, "Waking"), due again when its stream has news, or after ``idle_wait_ms`` at the
        latest (``linger_s``: after that, for drained tickets whose acks wait for a call, "Drained");
        any other is due again after its shard's (doubled) idle backoff."""
        if not tickets:
            return
        now = time.monotonic()
        waiter, parked = self._waiter, False
        for ticket in tickets:
            if ticket.wait_id and waiter is not None:
                ticket.idle_s, parked = waiter.timeout_s if linger_s is None else linger_s, True
            else:
                ticket.idle_s = min(max(ticket.idle_s * 2, self._idle_min_s), self._idle_max_s)
            ticket.due_s = now + ticket.idle_s
        with self._cond:
            closed = self._closed
            if not closed:
                self._tickets += tickets
                # Its unit may have recalled it just before it was parked (consumers/member/concurrent.py
                # looks at idle_s, set above, after it sets the recall): let the loop see it now.
                if any(t.recall is not None and t.recall.is_set() for t in tickets):
                    self._cond.notify_all()
                elif linger_s is not None:
                    self._cond.notify()  # the fetcher's thread: due sooner than it may be waiting for
                if parked:
                    self._wait_cond.notify()  # the waiter's thread: a ticket to wait for
        if not closed:
            if parked and waiter is not None:
                waiter.parked(tickets)
            return
        for ticket in tickets:
            _finish(ticket, Wake.STOPPED)

    # ------------------------------------------- inline rounds (the waiter's and the fetcher's threads)

    def _send_inline(self, batch: list[Ticket]) -> None:
        """The waiter's call for the tickets it woke, or the fetcher thread's for the due ones (module
        docstring, "Inline"): their batches run on this thread where their units allow it, and this thread
        makes their next call (acks and reads), whose entries it runs again, round after round, until every
        ticket is parked again or back with its unit: a one-worker member drains on one thread, as a plain
        consumer loop does. Each call goes out with a look (one ``XREAD`` that does not block, on another
        connection, so both take one round trip) for news on the parked tickets' streams; those with news
        join the next round's call: a busy shard cannot keep the others waiting, and a producer's appends to
        several shards that came during a round are read by the next one. The call in flight is released
        before a batch runs, so the fetcher's thread and the units call meanwhile."""
        with self._cond:  # this thread owns the call: it takes every ticket due now
            batch = [*batch, *self._take_due(time.monotonic())]
        while batch:
            ready: list[tuple[Ticket, FetchResult]] = []
            answer = self._look()
            try:
                self._send_and_release(batch, ready)
            finally:
                news = self._mark_news(answer)
            again: list[Ticket] = []
            drained: list[Ticket] = []
            for ticket, result in ready:
                try:
                    whole = ticket.inline(ticket, result)  # type: ignore[misc]
                except Exception as e:  # a bug in the runner: its unit stops, as with a failed call
                    log.exception("%s: shard %s: an inline batch failed", self.host.label, ticket.shard)
                    _finish(ticket, Wake.ERROR, error=e)
                    continue
                if not whole:
                    _finish(ticket, Wake.RESULT, result=result)
                elif self._park_drained(ticket, result):
                    drained.append(ticket)
                else:
                    again.append(ticket)
            self._rearm(drained, ACK_LINGER_S)
            batch = self._resubmit(again, news)

    def _park_drained(self, ticket: Ticket, result: FetchResult) -> bool:
        """A whole batch that was shorter than ``count`` read the shard to its end: the group's
        last-delivered id there is its last entry's (``XREADGROUP ... >`` reads up to ``count`` per
        stream, and only the owner reads). Then, with the wait working, the ticket parks on that id at
        once, its acks with it (module docstring, "Drained"): True. Otherwise its next call reads again."""
        waiter = self._waiter
        if waiter is None or not waiter.healthy or len(result.entries) >= self.count:
            return False
        ticket.wait_key = self.dataplane.stream_key(ticket.shard)
        ticket.wait_id = result.entries[-1].entry_id
        ticket.carried = True
        return True

    def _look(self) -> Callable[[], list[str]] | None:
        """Send the look for news on the parked tickets' streams (None: nothing to look at, or it could
        not be sent: the wait that follows finds them)."""
        waiter = self._waiter
        if waiter is None:
            return None
        with self._cond:
            after = {t.wait_key: t.wait_id for t in self._tickets if t.wait_id}
        if not after:
            return None
        try:
            return waiter.wait.news_later(after)
        except Exception:  # the blocking wait reports a lasting failure
            return None

    def _mark_news(self, answer: Callable[[], list[str]] | None) -> bool:
        """Parked tickets whose streams had news are due now (True when any is): they join the next call.
        A failed look changes nothing: the wait that follows finds them."""
        if answer is None:
            return False
        try:
            keys = set(answer())
        except Exception:
            return False
        if not keys:
            return False
        due = False
        with self._cond:
            now = time.monotonic()
            for ticket in self._tickets:
                if ticket.wait_id and ticket.wait_key in keys:
                    ticket.due_s, ticket.wait_id, due = now, "", True
        return due

    def _resubmit(self, tickets: list[Ticket], news: bool = False) -> list[Ticket]:
        """Tickets whose batches ran inline, due now with their acks: the next call to make on this
        thread (with every other due ticket) when none is in flight; else they wait for the next one.
        ``news``: tickets were made due by a look (they go with that call, even with no ``tickets``)."""
        if not tickets and not news:
            return []
        now = time.monotonic()
        for ticket in tickets:
            ticket.due_s, ticket.idle_s, ticket.carried = now, 0.0, True
        with self._cond:
            if not self._closed and self._sending:
                self._tickets += tickets
                return []  # the call in flight's end takes them (_release)
            if not self._closed:
                self._give_back(now)  # this thread may go on making calls: it looks, as _next_batch does
                batch = [*tickets, *self._take_due(now)]
                self._sending = bool(batch)  # none left due (taken meanwhile): no call to own
                return batch
        for ticket in tickets:
            _finish(ticket, Wake.STOPPED)
        return []

    def _wait_set(self) -> dict[str, str] | None:
        """The streams of the parked tickets and their ids, once there is one (None: closed). The
        caller holds the lock."""
        while not self._closed:
            parked = {t.wait_key: t.wait_id for t in self._tickets if t.wait_id}
            if parked:
                return parked
            self._wait_cond.wait()
        return None

    def _polled_now(self) -> None:
        """The wait works (again): tickets idle on the polling backoff are due now, so that their next
        read asks for a last id and parks them. The caller holds the lock."""
        now, due = time.monotonic(), False
        for ticket in self._tickets:
            if not ticket.wait_id and ticket.idle_s > 0:
                ticket.due_s, due = now, True
        if due:
            self._cond.notify_all()

    def _woken(self, keys: list[str] | None) -> list[Ticket] | None:
        """Those streams have news (None: every parked ticket, the wait failed): their tickets are due
        now. When no call is in flight the caller gets the next one, with every due ticket, to make on
        its own thread (as :meth:`submit` does: no wake-up of the fetcher's thread and back); else the
        fetcher's thread makes it. The caller holds the lock."""
        now, due = time.monotonic(), False
        for ticket in self._tickets:
            if ticket.wait_id and (keys is None or ticket.wait_key in keys):
                ticket.due_s, ticket.wait_id, due = now, "", True  # no longer waited on: it is due
        if not due:
            return None
        for ticket in self._tickets:
            if ticket.wait_id:  # the other parked ones ride along (module docstring, "Waking")
                ticket.due_s, ticket.rider = now, True
        if self._closed or self._sending:
            self._cond.notify_all()
            return None
        self._sending = True
        return self._take_due(now)


def _wanted_back(ticket: Ticket, now: float) -> bool:
    """Stopping, or recalled by its unit (module docstring)."""
    return (
        ticket.stopping.is_set()
        or ticket.recall_at_s <= now
        or (ticket.recall is not None and ticket.recall.is_set())
    )


def _finish(
    ticket: Ticket, wake: Wake, *, result: FetchResult | None = None, error: BaseException | None = None
) -> None:
    ticket.wake, ticket.result, ticket.error = wake, result, error
    ticket.done.set()
