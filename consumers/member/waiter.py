"""The member's waiter: one thread that blocks until one of the member's idle shards has new entries.

Theory of operation
-------------------
When a fetch finds nothing new on a shard, the fetcher keeps the shard's ticket (it is *idle*,
:mod:`consumers.member.fetcher`). With the wake-up on (``Runtime.wake_on_append``, the default) the
fetch also asked for the group's last-delivered id on that shard (``fetch.lua``, read ``'2'``), and the
ticket is *parked*: this thread waits, with one blocking ``XREAD`` over the streams of every parked
ticket of the member (:class:`consumers.dataplane.wait.EntryWait`), until one of them has an entry after
that id. Its ticket is then due at once, and this thread makes the fenced read (with every other due
ticket) when no call is in flight, else the fetcher's thread makes it next.
A parked ticket is also due after ``idle_wait_ms`` without news (the safety net: a redeliver request,
which appends nothing, is seen then at the latest), and the wait itself ends after as long and starts
again. So a member with idle shards sends nothing but that, and a new entry is read about one round
trip after it was appended, where a poll took up to ``idle_backoff_max_ms``.

A ticket parked while a wait is in progress and not among the streams it waits on (its shard's batch
was handled and its next read came back empty) interrupts the wait (``CLIENT UNBLOCK``); this thread
then waits again on the new set.

*When the wait fails.* The wake-up is a hint, never a read: a wait that fails (Redis unreachable, a
failover, a Redis user whose ACL profile predates it) loses nothing. Every parked ticket becomes due
(the fetcher reads them as it always did), the fetches ask for no last id, so idle tickets go back to
the polling backoff (``idle_backoff_min_ms`` .. ``idle_backoff_max_ms``), and this thread tries again
after a backoff (0.1 s doubling up to 1 s; a refusal, 60 s). Redis unreachable counts in the member's
outage (:mod:`consumers.member.outage`: one WARNING per outage for all its units and this thread); a
refusal logs one WARNING of its own, and one INFO when waiting works again. Before its first wait it
checks, changing nothing, that the Redis user may wait at all (:meth:`EntryWait.probe`); until then
the member polls.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from consumers import logcontext
from consumers.errors import DataPlaneError, DataPlaneUnavailable

if TYPE_CHECKING:
    from consumers.dataplane.wait import EntryWait
    from consumers.member.fetcher import Fetcher, Ticket

log = logging.getLogger("consumers.member")

RETRY_FIRST_S = 0.1
RETRY_MAX_S = 1.0  # Redis unreachable: how long at most between attempts to wait again
REFUSED_RETRY_S = 60.0  # the user may not wait (ACL): try again this rarely


class Waiter:
    def __init__(self, fetcher: Fetcher, wait: EntryWait, timeout_ms: int) -> None:
        self.fetcher = fetcher
        self.wait = wait
        self.timeout_ms = timeout_ms
        self.timeout_s = timeout_ms / 1000
        self.healthy = False  # fetches ask for last ids (and idle tickets park) only while True
        self._waiting_on: set[str] | None = None  # the streams of the wait in progress (fetcher's lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run_in_context, name=f"{fetcher.host.label}-waiter", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.wait.close()

    def parked(self, tickets: list[Ticket]) -> None:
        """The fetcher parked ``tickets``: end the wait in progress if it does not cover them all."""
        with self.fetcher._cond:
            on = self._waiting_on
            missing = on is not None and any(t.wait_id and t.wait_key not in on for t in tickets)
        if missing:
            self.wait.interrupt()

    # ------------------------------------------------------------------------------------- the loop

    def _run_in_context(self) -> None:
        with logcontext.bind(**getattr(self.fetcher.host, "log_fields", {})):
            try:
                self._run()
            except Exception:  # a bug: the member goes on polling
                log.exception("%s: the waiter failed; idle shards are polled", self.fetcher.host.label)
                self._failed()

    def _run(self) -> None:
        label, delay, warned = self.fetcher.host.label, RETRY_FIRST_S, False
        outage = getattr(self.fetcher.host, "outage", None)
        while not self._stop.is_set():
            try:
                if not self.healthy:
                    self.wait.probe()
                    with self.fetcher._cond:
                        self.healthy = True
                        self.fetcher._polled_now()
                    if warned:
                        log.info("%s: waiting for new entries again", label)
                        warned = False
                keys = self._wait_once()
                if keys is None:
                    return
                delay = RETRY_FIRST_S
                if outage is not None:
                    outage.answered()  # Redis answers (ends the member's outage, if one is on)
            except (DataPlaneUnavailable, DataPlaneError) as e:
                self._failed()
                refused = not isinstance(e, DataPlaneUnavailable)
                if not refused and outage is not None:
                    outage.failed("the wait for new entries", e)  # the member's one line per outage
                elif not warned:
                    advice = " (grant the rights in docs/redis-acl.md)" if refused else ""
                    log.warning(
                        "%s: cannot wait for new entries, polling idle shards: %s%s", label, e, advice
                    )
                    warned = True
                self._stop.wait(REFUSED_RETRY_S if refused else delay)
                delay = min(delay * 2, RETRY_MAX_S)

    def _wait_once(self) -> list[str] | None:
        """One wait on the parked tickets' streams; their tickets are due when it found news. None: the
        fetcher is closed."""
        fetcher = self.fetcher
        with fetcher._cond:
            after = fetcher._wait_set()
            if after is None:
                return None
            self._waiting_on = set(after)
            self.wait.arm()
        try:
            keys = self.wait.wait(after, self.timeout_ms)
        finally:
            with fetcher._cond:
                self._waiting_on = None
        if keys:
            with fetcher._cond:
                batch = fetcher._woken(keys)
            if batch:
                fetcher._send_inline(batch)  # this thread makes the read it woke for (and may run it)
        return keys

    def _failed(self) -> None:
        """Back to polling: parked tickets due now, and no more parked until the wait works again."""
        self.healthy = False
        with self.fetcher._cond:
            self._waiting_on = None
            batch = self.fetcher._woken(None)
        if batch:
            self.fetcher._send_and_release(batch)
