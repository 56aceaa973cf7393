"""Heartbeats decided together: the full-path heartbeats of one group that queue in one process while
another decision on their stream prefix runs are decided as one change (docs/store.md, "Heartbeats
decided together").

Theory of operation
-------------------
Within a process, decisions on a stream prefix already take turns (``Committer.deciding_on``):
while one runs, the others wait. A decision at 10,000 members costs a few milliseconds in the core and
about as much again to load and commit, whatever it decides. So a waiting heartbeat does not wait for
its own turn: it puts a *ticket* in its group's queue, and whichever thread gets the turn takes every
ticket queued for the group (up to :data:`MAX_BATCH`) and decides them in one load, one run of the core
(:class:`coordinator.protocol.commands.MemberHeartbeats`: each heartbeat decided on what the ones
before it left, a refused one changing nothing) and one commit. Each ticket is then settled with its
own response or error, and its thread returns it. This is Kafka's group coordinator appending the
records of many requests in one batch (``group.coordinator.append.linger.ms``), without the linger:
only heartbeats that would have waited anyway are batched.

What a heartbeat is told does not depend on being batched: each one is decided and answered exactly
as if the ones before it in the batch had committed just before it. A failure of the whole decision
(the group is gone, Redis unreachable, compare-and-set given up) settles every ticket of the batch with
that error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from coordinator.protocol.describe import HeartbeatResponse
from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.group import Heartbeat

# At most this many heartbeats in one decision: a batch that loses a compare-and-set is decided again
# whole, so a larger one risks more work, and its first ticket waits for all of them.
MAX_BATCH = 16

Decided = HeartbeatResponse | CoordinatorError


class _Ticket:
    __slots__ = ("_error", "_result", "_settled", "heartbeat")

    def __init__(self, heartbeat: Heartbeat) -> None:
        self.heartbeat = heartbeat
        self._settled = threading.Event()
        self._result: HeartbeatResponse | None = None
        self._error: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    def settle(self, result: Decided | None = None, error: BaseException | None = None) -> None:
        if isinstance(result, CoordinatorError):
            result, error = None, result
        self._result, self._error = result, error
        self._settled.set()

    def outcome(self) -> HeartbeatResponse:
        self._settled.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class HeartbeatBatches:
    """The tickets queued per (stream prefix, group) in this process. Thread-safe; made again in a
    forked child (its lock could have been copied held, its tickets belong to the parent's threads)."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, str], list[_Ticket]] = {}
        self._pid = os.getpid()

    def decide(
        self,
        stream_prefix: str,
        consumer_group: str,
        heartbeat: Heartbeat,
        turn: Callable[[str], AbstractContextManager[object]],
        decide_batch: Callable[[list[Heartbeat]], Sequence[Decided]],
    ) -> HeartbeatResponse:
        """Queue ``heartbeat``, wait for the prefix's ``turn``, decide what is queued for the group with
        ``decide_batch`` (one result per heartbeat, in order) until this one is settled, and return its
        response (or raise its error)."""
        if self._pid != os.getpid():
            self._reset()
        ticket, key = _Ticket(heartbeat), (stream_prefix, consumer_group)
        with self._lock:
            self._queued.setdefault(key, []).append(ticket)
        with turn(stream_prefix):
            # Another thread that had the turn may have decided this ticket already. With the turn held
            # it is either settled or still queued; if the turn was not had (its wait is bounded) and
            # the ticket is in another thread's decision, nothing is taken here and the wait is below.
            while not ticket.settled:
                batch = self._take(key)
                if not batch:
                    break
                self._run(batch, decide_batch)
        return ticket.outcome()

    def _take(self, key: tuple[str, str]) -> list[_Ticket]:
        with self._lock:
            queue = self._queued.get(key)
            if not queue:
                return []
            batch, queue[:] = queue[: self.max_batch], queue[self.max_batch :]
            if not queue:
                del self._queued[key]
            return batch

    @staticmethod
    def _run(batch: list[_Ticket], decide_batch: Callable[[list[Heartbeat]], Sequence[Decided]]) -> None:
        try:
            results = list(decide_batch([t.heartbeat for t in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for a batch of {len(batch)} heartbeats")
        except BaseException as failed:  # every ticket's thread raises it (this one's included)
            for t in batch:
                t.settle(error=failed)
            return
        for t, result in zip(batch, results, strict=True):
            t.settle(result)
