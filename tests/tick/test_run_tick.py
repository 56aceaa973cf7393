"""manage.py run_tick: --once, the loop's backoff while Redis is down, and graceful SIGTERM / SIGINT."""

from __future__ import annotations

import io
import os
import signal
import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from coordinator.service import TickLoop, backoff_ms, stopped_by_signals
from coordinator.store import MetadataStore, get_store, reset_store

from .conftest import GROUP, PREFIX, Member, create_group, member_view, wait_for_lease_end, wait_until
from .processes import child_env, manage


def test_once_runs_one_tick(store: MetadataStore) -> None:
    create_group(store)
    Member(store, "m1").heartbeat()
    wait_for_lease_end(store, "m1")
    out = io.StringIO()

    call_command("run_tick", "--once", stdout=out)

    assert member_view(store, "m1")["state"] == "EXPIRED"
    assert out.getvalue().strip() == "tick done: 1 stream prefixes, 1 member/shard changes"


def test_once_fails_when_the_store_is_unreachable(settings: Any, disposable_redis: Any) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    try:
        disposable_redis.kill()
        with pytest.raises(CommandError, match=r"tick failed, retry later: .*unreachable"):
            call_command("run_tick", "--once")
    finally:
        reset_store()


@pytest.mark.parametrize("interval_ms", ["0", "-5", "10000"])
def test_impossible_interval_is_refused(settings: Any, interval_ms: str) -> None:
    settings.RSC_MEMBER_LEASE_TTL_MS = 10000
    with pytest.raises(CommandError, match=r"--interval-ms must be positive and below .*LEASE_TTL_MS"):
        call_command("run_tick", "--interval-ms", interval_ms)


@pytest.mark.parametrize(
    ("failures", "expected_ms"), [(1, 100), (2, 200), (3, 400), (6, 3200), (7, 5000), (60, 5000)]
)
def test_backoff_doubles_up_to_a_cap(failures: int, expected_ms: int) -> None:
    assert backoff_ms(100, failures, maximum_ms=5000) == expected_ms


def test_backoff_never_waits_less_than_one_interval() -> None:
    assert backoff_ms(8000, 1, maximum_ms=5000) == 8000
    assert backoff_ms(8000, 5, maximum_ms=5000) == 8000


def test_the_loop_backs_off_while_redis_is_down_and_resumes(
    settings: Any, disposable_redis: Any, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    loop = TickLoop(20, backoff_max_ms=80)
    thread = threading.Thread(target=loop.run, daemon=True)
    try:
        create_group(get_store())
        disposable_redis.kill()
        thread.start()
        wait_until(lambda: loop.failures, lambda n: n >= 4, what="four failed ticks")
        disposable_redis.restart()  # empty, same port: the pool reconnects by itself
        wait_until(lambda: loop.ticks, lambda n: n >= 1, what="a tick after the restart")
    finally:
        loop.stop()
        thread.join(timeout=10)
        reset_store()

    assert not thread.is_alive()
    warnings = [r.getMessage() for r in coordinator_logs.records if r.levelname == "WARNING"]
    delays = [int(message.rsplit("retrying in ", 1)[1].split()[0]) for message in warnings]
    assert delays[:4] == [20, 40, 80, 80]
    assert all("unreachable" in message for message in warnings)
    assert any("tick succeeded again after" in r.getMessage() for r in coordinator_logs.records)


def test_the_loop_stops_on_a_bug() -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        TickLoop(10, tick=broken).run()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_tick_expires_members_and_stops_gracefully_on_a_signal(
    store: MetadataStore, redis_url: str, spawn: Any, signum: signal.Signals
) -> None:
    create_group(store)  # lease 1000 ms
    Member(store, "m1").heartbeat()
    child = spawn("run_tick", manage("run_tick", "--interval-ms", "100"), child_env(redis_url))

    def m1_state() -> str:
        assert child.process.poll() is None, child.output()
        return str(member_view(store, "m1")["state"])

    wait_until(m1_state, lambda state: state == "EXPIRED", timeout_s=20, what="m1 EXPIRED by run_tick")
    wait_until(child.output, lambda out: "member_id=m1" in out, timeout_s=5, what="the expiry log line")

    child.signal(signum)

    assert child.process.wait(timeout=10) == 0, child.output()
    output = child.output()
    assert "run_tick: ticking every 100 ms" in output
    assert f"run_tick: stopped ({signum.name}) after" in output
    assert "Traceback" not in output
    assert store.describe_group(PREFIX, GROUP)["state"] == "EMPTY"


def test_the_stop_signals_stop_the_loop_and_the_previous_handlers_come_back() -> None:
    """``stopped_by_signals``: the one helper both run_tick and run_retention install their handlers with."""
    loop = TickLoop(1000, tick=lambda: None)
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    with stopped_by_signals(loop) as received:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        loop.run()  # returns at once: the handler stopped it
    assert received == ["SIGTERM"] and loop.ticks == 0
    assert {signum: signal.getsignal(signum) for signum in before} == before
