"""The member's worker threads for ``ordering="key"`` and ``"none"``: one handler call per task.

Under "shard" ordering a unit runs its batches on its own thread and :class:`consumers.member.pool.
WorkerPool` only bounds how many do so at once. Under "key" and "none" the entries of one shard run at
once, so they need threads of their own: this pool keeps exactly as many as the member's effective
concurrency (``min(runtime max concurrency, the group's max_concurrency)``), named
``{label}-worker-{n}``, which take tasks first come, first served (so no shard starves: a unit queues
only what its lanes let run).

A caller may also :meth:`try_claim` a worker's place and run work on its own thread (a shard's
dispatcher does, for handlers fast enough that a hand-off would cost more than they do), or wait a
bounded time for one (:meth:`claim`: a one-worker member's round thread); tasks then run on one thread
fewer, so at most ``size`` run at once, claimed places included.

Resizing: growing starts threads at once; shrinking lets running tasks finish (a handler is never
interrupted) and ends idle threads until the count fits. Shutting down refuses new tasks, and every
queued task that never started is *cancelled* (its ``cancel`` callable runs), so its unit learns that
it will not run; running tasks finish. A task's own exceptions are logged and do not end its thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from consumers import logcontext

log = logging.getLogger("consumers.member")

Task = tuple[Callable[[], Any], Callable[[], Any]]  # (run, cancel)


class TaskPool:
    def __init__(self, name: str, log_fields: dict[str, str] | None = None) -> None:
        self.name = name
        self._log_fields = dict(log_fields or {})
        self._cond = threading.Condition()
        self._queue: deque[Task] = deque()
        self._target = 0
        self._threads = 0  # alive (each leaves when more are alive than the target)
        self._busy = 0
        self._claimers = 0  # callers waiting in claim()
        self._closed = False
        self._numbers = itertools.count()

    @property
    def size(self) -> int:
        with self._cond:
            return self._target

    @property
    def running(self) -> int:
        """Tasks running now (above :attr:`size` for a while after it shrank)."""
        with self._cond:
            return self._busy

    def resize(self, workers: int) -> None:
        with self._cond:
            if self._closed:
                return
            self._target = max(0, workers)
            while self._threads < self._target:
                self._threads += 1
                name = f"{self.name}-worker-{next(self._numbers)}"
                target = logcontext.bound(self._work, **self._log_fields)
                threading.Thread(target=target, name=name, daemon=True).start()
            self._cond.notify_all()  # idle threads above the target leave

    def submit(self, run: Callable[[], Any], cancel: Callable[[], Any]) -> bool:
        """Queue a task; False (and nothing queued) once the pool is shut down."""
        with self._cond:
            if self._closed:
                return False
            self._queue.append((run, cancel))
            self._cond.notify()
            return True

    def try_claim(self) -> bool:
        """Take one worker's place for the calling thread, if one is free and no task waits (True): the
        caller runs work itself, which saves a hand-off to another thread, and must :meth:`unclaim`."""
        with self._cond:
            if self._closed or self._queue or self._busy >= self._target:
                return False
            self._busy += 1
            return True

    def claim(self, timeout_s: float) -> bool:
        """:meth:`try_claim`, waiting up to ``timeout_s`` for a place (queued tasks take a free place
        first; waiting claims in no particular order): a round's thread (consumers/member/fetcher.py,
        "Inline") waits its turn for a fast batch, as it does for a shard unit's slot, rather than hand
        the batch to the shard's own thread because another shard's batch held the one place then."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._claimers += 1
            try:
                while not self._closed:
                    if not self._queue and self._busy < self._target:
                        self._busy += 1
                        return True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._claimers -= 1
            return False

    def unclaim(self) -> None:
        with self._cond:
            self._busy -= 1
            self._freed()

    def _freed(self) -> None:
        """A place came free (the caller holds the lock): a queued task takes it, or a waiting claim."""
        if self._claimers:
            self._cond.notify_all()  # the claims and the idle threads look again
        elif self._queue:
            self._cond.notify()  # a task waits for the place

    def shutdown(self) -> None:
        """No new tasks; queued ones are cancelled; running ones finish."""
        with self._cond:
            self._closed = True
            self._target = 0
            queued, self._queue = self._queue, deque()
            self._cond.notify_all()
        for _, cancel in queued:
            _guarded(cancel, "cancelling a task")

    def _work(self) -> None:
        while True:
            with self._cond:
                while (not self._queue or self._busy >= self._target) and self._threads <= self._target:
                    self._cond.wait()
                if self._threads > self._target:
                    self._threads -= 1
                    return
                run, _ = self._queue.popleft()
                self._busy += 1
            try:
                _guarded(run, "a task")
            finally:
                with self._cond:
                    self._busy -= 1
                    self._freed()


def _guarded(fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except Exception:
        log.exception("%s failed", what)
