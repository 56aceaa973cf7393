"""The member's worker slots: how many handler batches of one member run at once.

A shard unit runs its batches on its own thread (``{label}-worker-{shard}``): no hand-off to another
thread per batch, which cost more than a small batch's handlers. This pool only bounds how many run at
the same time, to the member's effective concurrency, which a heartbeat response may change at any
time: growing lets waiting units in at once; shrinking lets the running batches finish (a handler is
never interrupted) and admits no new one until fewer than the new size run. Units get their slots in
the order they asked (first come, first served, so no shard starves), and a slot is handed from the
unit that releases it straight to the next one, without waking the others.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class PoolClosed(RuntimeError):
    """A batch asked for a slot after (or while) :meth:`WorkerPool.shutdown`."""


class _Waiter:
    __slots__ = ("granted", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()  # released when the slot is granted, or the pool shut down
        self.granted = False


class WorkerPool:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._waiting: deque[_Waiter] = deque()
        self._target = 0
        self._busy = 0
        self._closed = False

    @property
    def size(self) -> int:
        """The number of slots (batches that may run at once)."""
        with self._lock:
            return self._target

    @property
    def running(self) -> int:
        """Batches running now (above :attr:`size` for a while after it shrank)."""
        with self._lock:
            return self._busy

    def resize(self, workers: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._target = max(0, workers)
            self._grant()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the calling thread, once a slot is free; raises :class:`PoolClosed` if the
        pool is (or gets) shut down first."""
        self._acquire()
        try:
            return fn(*args)
        finally:
            self._release()

    def shutdown(self) -> None:
        """No new batches: every unit waiting for a slot gets :class:`PoolClosed`; running ones finish."""
        with self._lock:
            self._closed = True
            self._target = 0
            while self._waiting:
                self._waiting.popleft().lock.release()

    def _acquire(self) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed(f"worker pool {self.name} is shut down")
            if self._busy < self._target and not self._waiting:
                self._busy += 1
                return
            waiter = _Waiter()
            self._waiting.append(waiter)
        waiter.lock.acquire()
        if not waiter.granted:
            raise PoolClosed(f"worker pool {self.name} is shut down")

    def _release(self) -> None:
        """A batch is over: its slot goes to the longest waiting unit, if any."""
        with self._lock:
            self._busy -= 1
            self._grant()

    def _grant(self) -> None:
        """Hand free slots to the longest waiting units (the caller holds the lock)."""
        while self._waiting and self._busy < self._target:
            waiter = self._waiting.popleft()
            waiter.granted = True
            self._busy += 1
            waiter.lock.release()
