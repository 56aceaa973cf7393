"""The in-flight window of one shard under ``ordering="key"`` or ``"none"``: which entry may run next.

Theory of operation
-------------------
A unit (:mod:`consumers.member.concurrent`) puts every entry it reads into the window, in stream order,
each in the *lane* of its key: the partition key under "key", the entry's own id under "none" (and for
an entry with an empty partition key). A lane runs one entry at a time, its oldest first, so per-key
order is the lane's order; different lanes run at once. An entry leaves the window when it is finished
(handled and handed to the ack, or given up on), which lets the next entry of its lane run.

A lane whose head failed under ``on_error="redeliver"`` is *parked* until its retry is due: its later
entries wait, other lanes go on. Once due, the unit re-reads the head (which bumps Redis's delivery
count) and resumes the lane with the fresh copy, or, when the entry is no longer pending (an operator
skipped it), with the next one.

Everything here is data: no threads, no clock (times are numbers passed in), no I/O. The unit holds its
lock around every call.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from typing import Any

Key = Hashable


class Lanes:
    def __init__(self) -> None:
        self._lanes: dict[Key, deque[Any]] = {}  # key -> its entries in the window, oldest (the head) first
        self._key_of: dict[str, Key] = {}  # entry id -> its lane, for every entry in the window
        self._ready: deque[Key] = deque()  # lanes whose head may start now, in the order they became so
        self._running: set[Key] = set()  # lanes whose head has been taken to run
        self._parked: dict[Key, float] = {}  # lane -> when its retry is due
        self._due: list[tuple[float, int, Key]] = []  # heap over _parked (stale rows skipped)
        self._seq = 0

    def __len__(self) -> int:
        """Entries in the window (queued, running, parked)."""
        return len(self._key_of)

    @property
    def lane_count(self) -> int:
        """Lanes with entries in the window (keys under "key"; entries under "none")."""
        return len(self._lanes)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._key_of

    def add(self, key: Key, entry: Any) -> None:
        """Put ``entry`` at the end of its lane (entries arrive in stream order)."""
        if entry.entry_id in self._key_of:
            return  # already in the window (a re-read of what we hold): it runs once
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
        lane.append(entry)
        self._key_of[entry.entry_id] = key
        if len(lane) == 1 and key not in self._parked:
            self._ready.append(key)

    @property
    def ready_count(self) -> int:
        """Lanes whose head may start now."""
        return len(self._ready)

    def take_one(self) -> Any | None:
        """The head of the lane that became ready first, marked running (None: no lane is ready)."""
        if not self._ready:
            return None
        key = self._ready.popleft()
        self._running.add(key)
        return self._lanes[key][0]

    def finished(self, entry_id: str) -> None:
        """A running (or parked) head is done with: it leaves the window and its lane moves on."""
        key = self._key_of.pop(entry_id)
        lane = self._lanes[key]
        lane.popleft()
        self._running.discard(key)
        self._parked.pop(key, None)
        if lane:
            self._ready.append(key)
        else:
            del self._lanes[key]

    def put_back(self, entry_id: str) -> None:
        """A head taken to run did not start (the lease in doubt): it may be taken again."""
        key = self._key_of[entry_id]
        self._running.discard(key)
        self._ready.appendleft(key)

    def park(self, entry_id: str, until: float) -> None:
        """The running head failed and is retried at ``until``: its lane waits, the others go on."""
        key = self._key_of[entry_id]
        self._running.discard(key)
        self._parked[key] = until
        self._seq += 1
        heapq.heappush(self._due, (until, self._seq, key))

    def next_due(self) -> float | None:
        """When the earliest parked lane is due (None: none is parked)."""
        self._drop_stale()
        return self._due[0][0] if self._due else None

    def take_due(self, now: float) -> list[Any]:
        """The heads of the parked lanes due by ``now``, held (neither parked nor ready: the caller
        re-reads each, then :meth:`resume` s its lane)."""
        heads = []
        while (due := self.next_due()) is not None and due <= now:
            _, _, key = heapq.heappop(self._due)
            del self._parked[key]
            self._running.add(key)
            heads.append(self._lanes[key][0])
        return heads

    def resume(self, entry_id: str, again: Any | None) -> None:
        """After the re-read of a due head: ``again`` (its fresh copy) replaces it and its lane is ready
        first; None (it is no longer pending) finishes it, and the lane moves on."""
        if again is None:
            self.finished(entry_id)
            return
        key = self._key_of[entry_id]
        self._lanes[key][0] = again
        self._running.discard(key)
        self._ready.appendleft(key)

    @property
    def parked_count(self) -> int:
        return len(self._parked)

    def parked(self) -> dict[Key, float]:
        """Parked lanes and when each is due."""
        return dict(self._parked)

    def _drop_stale(self) -> None:
        """Heap rows of lanes no longer parked at that time (finished, or parked again) go."""
        while self._due:
            until, _, key = self._due[0]
            if self._parked.get(key) == until:
                return
            heapq.heappop(self._due)
