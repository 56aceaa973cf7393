"""A listener's error policy as one shard unit applies it: decisions and memory, no I/O.

Theory of operation
-------------------
A handler raised on an entry. The unit (:mod:`consumers.member.shard`) does the reads, acks, waits and
dead-letter calls; this module only tells it what to do, and remembers what it must:

* under ``on_error="keep"`` (the default) the entry stays pending and the batch goes on. The unit
  *keeps* the entry here, so that a resync after a connection error does not hand it out again (a blip
  must not turn the default into a retry); a take-over, a rejoin (a new unit, new memory) or an
  operator's redeliver (:meth:`KeptEntries.clear`) does.
* under ``on_error="redeliver"`` :meth:`FailurePolicy.decide` says, for the entry the batch stopped at:
  ``REDELIVER`` after a backoff that doubles per consecutive failure of that same entry, until Redis's
  delivery count (which survives restarts and take-overs) has reached ``max_deliveries``; then
  ``DEAD_LETTER`` (``dead_letter=True``) or ``GIVE_UP``: the entry is kept, like under "keep".

Kept entries are bounded. They stay pending in Redis, so the set could grow for as long as the unit
lives (an operator who skips them acks them without this unit knowing). Two rules keep it small: a
complete resync, which reads every pending entry of the member, keeps only the ids it saw
(:meth:`KeptEntries.retain`); and at most :data:`MAX_KEPT_ENTRIES` are remembered: beyond that a failed
entry is not remembered (the ones remembered stay so; evicting them instead would make one resync hand
out every kept entry again, each failure evicting the next one). An entry not remembered is still
pending: a resync hands it out again, an at-least-once re-delivery like the one a take-over makes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from consumers.listener import ErrorPolicy

MAX_KEPT_ENTRIES = 10_000  # per unit; about 1 MB of ids at most


class Next(Enum):
    """What the unit does after the entry the batch stopped at failed (``on_error="redeliver"``)."""

    REDELIVER = "redeliver"  # wait the backoff, re-read the entry, go on from it
    DEAD_LETTER = "dead_letter"  # give up: copy it to the dead-letter stream and ack it (one script)
    GIVE_UP = "give_up"  # give up: it stays pending and is kept; one ERROR says so


@dataclass(frozen=True, slots=True)
class Decision:
    next: Next
    backoff_s: float = 0.0  # REDELIVER only


class KeptEntries:
    """Ids of entries left pending on purpose: at most ``limit`` of them."""

    def __init__(self, limit: int = MAX_KEPT_ENTRIES) -> None:
        self.limit = limit
        self._ids: set[str] = set()
        self.dropped = 0  # failed entries not remembered (the limit was reached), over the unit's life

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, entry_ids: Iterable[str]) -> int:
        """Keep ``entry_ids`` while there is room; returns how many of them were not remembered."""
        dropped = 0
        for entry_id in entry_ids:
            if entry_id in self._ids or len(self._ids) < self.limit:
                self._ids.add(entry_id)
            else:
                dropped += 1
        self.dropped += dropped
        return dropped

    def retain(self, still_pending: Iterable[str]) -> None:
        """Forget every kept id not in ``still_pending`` (acked meanwhile: skipped, say, or trimmed)."""
        self._ids.intersection_update(still_pending)

    def clear(self) -> None:
        self._ids.clear()


class FailurePolicy:
    """The error policy of one unit, with what it remembers between failures (unit thread only)."""

    def __init__(
        self,
        policy: ErrorPolicy,
        *,
        max_kept: int = MAX_KEPT_ENTRIES,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.policy = policy
        self.kept = KeptEntries(max_kept)
        self.jitter = jitter  # draws the number in [0, 1) that redeliver_jitter scales (tests pin it)
        self._streak = ("", 0)  # (entry id, its consecutive failures): for the backoff

    @property
    def stops_batch(self) -> bool:
        """Does a failed entry stop its batch (so later entries wait for it)?"""
        return self.policy.redeliver

    def decide(self, entry: Any, *, by_deliveries: bool = False) -> Decision:
        """``on_error="redeliver"``: what to do about ``entry``, which has just failed.

        The backoff doubles per consecutive failure of the entry: counted here, for a unit that handles
        one entry at a time ("shard" ordering); or, with ``by_deliveries`` (units that run many entries
        at once, which fail in any interleaving), taken from Redis's delivery count of the entry."""
        if deliveries(entry) >= self.policy.max_deliveries:
            return Decision(Next.DEAD_LETTER if self.policy.dead_letter else Next.GIVE_UP)
        if by_deliveries:
            failures = deliveries(entry)
        else:
            entry_id, failures = self._streak
            failures = failures + 1 if entry_id == entry.entry_id else 1
            self._streak = (entry.entry_id, failures)
        return Decision(Next.REDELIVER, self.policy.backoff_ms(failures, self.jitter()) / 1000)

    def what_next(self, entry: Any) -> str:
        """For the log line of a failure: what happens to ``entry`` now."""
        if self.policy.redeliver:
            return f"delivery {deliveries(entry)} of at most {self.policy.max_deliveries}"
        return "it stays pending"


def deliveries(entry: Any) -> int:
    """Redis's delivery count of ``entry``, this delivery included."""
    return int(getattr(entry, "deliveries", 1))
