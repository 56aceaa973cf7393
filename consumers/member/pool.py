"""A resizable pool of worker threads (one per member): it runs handler batches and nothing else.

The size follows the member's effective concurrency, which a heartbeat response may change at any
time: growing starts threads at once; shrinking lets surplus threads exit when they finish their current
task (a handler is never interrupted). Tasks run in submission order; a shard submits its next batch
only after the previous one completed, which is what keeps one shard on one worker at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class PoolClosed(RuntimeError):
    """A task was submitted after :meth:`WorkerPool.shutdown`."""


class WorkerPool:
    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._tasks: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads: set[threading.Thread] = set()
        self._target = 0
        self._closed = False
        self._counter = 0

    @property
    def size(self) -> int:
        """The number of workers asked for (threads above it exit as soon as they are idle)."""
        with self._cond:
            return self._target

    @property
    def live_threads(self) -> int:
        with self._cond:
            return len(self._threads)

    def resize(self, workers: int) -> None:
        with self._cond:
            if self._closed:
                return
            self._target = max(0, workers)
            while len(self._threads) < self._target:
                self._counter += 1
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-worker-{self._counter}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._cond.notify_all()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise PoolClosed(f"worker pool {self.name} is shut down")
            self._tasks.append((future, fn, args))
            self._cond.notify()
        return future

    def shutdown(self) -> None:
        """No new tasks; queued ones are cancelled; running ones finish (threads are daemons, so a
        handler stuck for good does not keep the process alive)."""
        with self._cond:
            self._closed = True
            self._target = 0
            while self._tasks:
                self._tasks.popleft()[0].cancel()
            self._cond.notify_all()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._tasks and len(self._threads) <= self._target:
                    self._cond.wait()
                if len(self._threads) > self._target:
                    self._threads.discard(me)
                    self._cond.notify_all()
                    return
                future, fn, args = self._tasks.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as e:  # the task reports its own errors; this only keeps the thread
                future.set_exception(e)
            else:
                future.set_result(result)
