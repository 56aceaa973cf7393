"""A member lives through Redis answering "not now": no unit stops, no traceback, one WARNING per outage,
and everything produced is handled once Redis answers again.

The outage is real: a script keeps the private Redis busy for a while, and every other command is
answered ``BUSY`` (``busy-reply-threshold`` lowered to 50 ms), the data plane's and the coordinator
store's alike."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
import redis

from consumers.member.outage import UNAVAILABLE_PAUSE_MAX_S, pause_s
from tests.consumers.harness import FAST, Cluster, Recorder, eventually

# Busy for ARGV[1] microseconds by Redis's clock, then return.
BUSY_LOOP = """
local start = redis.call('TIME')
repeat
  local now = redis.call('TIME')
until (now[1] - start[1]) * 1000000 + (now[2] - start[2]) >= tonumber(ARGV[1])
return 1
"""


@contextmanager
def busy_for(url: str, seconds: float) -> Iterator[None]:
    """Redis answers ``BUSY`` to everyone else for about ``seconds`` (the block waits until it is over)."""
    client = redis.Redis.from_url(url, socket_timeout=seconds + 10)
    client.config_set("busy-reply-threshold", 50)
    started = threading.Event()

    def run() -> None:
        started.set()
        client.eval(BUSY_LOOP, 0, int(seconds * 1_000_000))

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        started.wait()
        yield
        thread.join(seconds + 10)
    finally:
        client.config_set("busy-reply-threshold", 5000)
        client.close()


def test_a_busy_redis_stops_no_unit_and_logs_one_warning_per_outage(
    cluster: Cluster, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumers")
    recorder = Recorder()
    # Polling, so that the units' fetches meet the BUSY replies: a member that waits for new entries
    # sends nothing while Redis is busy and nothing is produced (consumers/member/waiter.py).
    m = cluster.member(recorder, runtime=replace(FAST, wake_on_append=False))
    eventually(lambda: cluster.stable(m), what="joined")
    keys = [cluster.key_for(i) for i in range(cluster.shard_count)]
    sent = cluster.send_many(keys, per_key=2)
    eventually(lambda: recorder.count() == sent, what="consumed before")
    caplog.clear()

    for _episode in range(2):
        with busy_for(redis_url, 0.8):
            pass
        sent += cluster.send_many(keys, per_key=2)
        eventually(lambda total=sent: recorder.count() >= total, what="consumed after the outage")

    records = caplog.records
    warnings = [
        r for r in records if r.levelno == logging.WARNING and "cannot serve the data plane" in r.message
    ]
    assert len(warnings) == 2, [r.message for r in records if r.levelno >= logging.WARNING]
    assert "BUSY" in warnings[0].message  # the code word redis-py strips is back
    assert [r.message for r in records if r.levelno >= logging.ERROR or r.exc_info] == []
    assert len([r for r in records if "answers the data plane again" in r.message]) == 2
    assert m.stats.fenced == 0
    assert len(m._units) == cluster.shard_count  # every unit still runs: none stopped and restarted


def test_the_pause_is_short_and_bounded_by_the_lease() -> None:
    assert pause_s(1, backoff_max_ms=5_000, lease_left_ms=None) == 0.05
    assert pause_s(2, backoff_max_ms=5_000, lease_left_ms=None) == 0.1
    assert pause_s(30, backoff_max_ms=5_000, lease_left_ms=None) == UNAVAILABLE_PAUSE_MAX_S
    assert pause_s(30, backoff_max_ms=100, lease_left_ms=None) == 0.1  # retry_backoff_max_ms still caps
    assert pause_s(30, backoff_max_ms=5_000, lease_left_ms=300) == 0.15  # half of the lease left
    assert pause_s(30, backoff_max_ms=5_000, lease_left_ms=-5) == 0.05  # lapsed: the floor
