"""A member's data-plane outages: one WARNING per episode, back-offs a failover can live with.

Theory of operation
-------------------
Every unit of a member fails at once when Redis cannot serve (one fetch call carries all their shards,
:mod:`consumers.member.fetcher`), and each then backs off, resyncs and retries on its own
(:mod:`consumers.member.shard`). An *episode* runs from the first ``DataPlaneUnavailable`` of any unit
until a call of any unit goes through again. The member shares one :class:`Outage` between its units so
that

* an episode logs **one WARNING** (its first failure, with Redis's own words: ``CLUSTERDOWN The cluster
  is down``, ``Connection refused``) and one INFO when Redis answers again, with how long it lasted and
  how many calls failed; the units' own retries log at DEBUG. No traceback: a failover is not a bug;
* the back-off of every unit **resets when Redis answers again**: a unit waiting out its pause wakes as
  soon as another unit's call went through (:meth:`Outage.pause`), instead of sleeping out a wait that
  was sized for an outage that is over.

The pause (:func:`pause_s`): ``UNAVAILABLE_PAUSE_MIN_S`` doubled per failure in a row, at most
``UNAVAILABLE_PAUSE_MAX_S``, ``retry_backoff_max_ms`` and half of what is left of the lease (a member
must be back before its lease ends, or it is fenced for nothing). Why a cap as short as a quarter of a
second: a Redis Cluster failover takes one to a few seconds, and the point of retrying is to be back
within a moment of the promotion; a retry is one connection attempt (refused at once by a dead port), so
a quarter second between them costs nothing worth saving, while the doubling up to 5 s it replaces left
shards idle for up to 5 s after the cluster was ok again.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("consumers.member")

UNAVAILABLE_PAUSE_MIN_S = 0.05  # the first retry after a failure
UNAVAILABLE_PAUSE_MAX_S = 0.25  # the longest wait between two retries (module docstring)
_WAKE_CHECK_S = 0.02  # how often a pausing unit looks whether Redis answered another unit


def pause_s(failures: int, *, backoff_max_ms: int, lease_left_ms: int | None) -> float:
    """The wait after the ``failures``-th failure in a row (module docstring)."""
    pause = UNAVAILABLE_PAUSE_MIN_S * 2 ** min(max(failures, 1) - 1, 16)
    pause = min(pause, UNAVAILABLE_PAUSE_MAX_S, backoff_max_ms / 1000)
    if lease_left_ms is not None:
        pause = min(pause, max(UNAVAILABLE_PAUSE_MIN_S, lease_left_ms / 2000))
    return pause


class Outage:
    """The episodes of one member (thread-safe; module docstring)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._lock = threading.Lock()
        self._since_s: float | None = None  # the episode's start, None between episodes
        self._failed_calls = 0
        self._episodes = 0  # bumped when an episode ends: a pausing unit wakes on the change

    @property
    def ongoing(self) -> bool:
        return self._since_s is not None

    def failed(self, where: str, error: object) -> None:
        """A call failed with ``DataPlaneUnavailable``: the first of an episode logs a WARNING."""
        with self._lock:
            self._failed_calls += 1
            first = self._since_s is None
            if first:
                self._since_s = time.monotonic()
        if first:
            log.warning(
                "%s: Redis cannot serve the data plane (%s: %s); its shards back off, resync and retry "
                "(one line per outage)",
                self.label, where, error,
            )  # fmt: skip
        else:
            log.debug("%s: %s: still unavailable: %s", self.label, where, error)

    def answered(self) -> None:
        """A call went through: the episode (if any) is over, and every pausing unit retries now."""
        if self._since_s is None:  # the steady state: no lock
            return
        with self._lock:
            since, failed = self._since_s, self._failed_calls
            if since is None:
                return
            self._since_s, self._failed_calls = None, 0
            self._episodes += 1
        log.info(
            "%s: Redis answers the data plane again after %.0f ms (%d failed calls)",
            self.label, (time.monotonic() - since) * 1000, failed,
        )  # fmt: skip

    def pause(self, seconds: float, stop: threading.Event) -> bool:
        """Wait ``seconds``, or until ``stop`` is set (returns True) or an episode ends (another unit's
        call went through: retry at once)."""
        episodes = self._episodes
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if stop.wait(min(left, _WAKE_CHECK_S)):
                return True
            if self._episodes != episodes:
                return False
