"""Instruments the store and the tick update (``coordinator/metrics.py`` serves them; Django-free).

* :data:`HEARTBEAT_SECONDS`: this process's heartbeats by path (fast, full, refused);
* :func:`count`: cluster-wide counters in the hash ``rsc:metrics`` (tick runs and time, expired
  members, CAS conflicts), written by whichever process did the work, read by any scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Histogram

from rsc_redis.keys import METRICS_KEY

log = logging.getLogger(__name__)


HEARTBEAT_SECONDS = Histogram(
    "rsc_heartbeat_seconds",
    "Heartbeats handled by this coordinator, by path (fast, full, refused), and their duration.",
    ["path"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)

# rsc:metrics field -> (metric name, help). Counters, summed over every process that counted.
METRICS_FIELDS = {
    "tick_runs": ("rsc_tick_runs", "Ticks run (every stream prefix once per tick)."),
    "tick_seconds": ("rsc_tick_seconds", "Time spent in ticks, seconds."),
    "members_expired": ("rsc_members_expired", "Members fenced by the tick (lease or revocation timeout)."),
    "cas_conflicts": ("rsc_cas_conflicts", "Compare-and-set commits that lost a race and were re-decided."),
}


def count(client: Any, **increments: float) -> None:
    """Add to the cluster-wide counters (a failure is logged: metrics never fail the work)."""
    try:
        pipe = client.pipeline(transaction=False)
        for field, value in increments.items():
            if value:
                pipe.hincrbyfloat(METRICS_KEY, field, value)
        pipe.execute()
    except Exception as e:
        log.debug("metrics counters not updated: %s", e)


@contextmanager
def heartbeat_timer() -> Iterator[dict[str, str]]:
    """``with heartbeat_timer() as path: ...; path["path"] = "fast"``: observed on exit (refused if
    the block raised)."""
    labels = {"path": "full"}
    started = time.perf_counter()
    try:
        yield labels
    except BaseException:
        labels["path"] = "refused"
        raise
    finally:
        HEARTBEAT_SECONDS.labels(labels["path"]).observe(time.perf_counter() - started)
