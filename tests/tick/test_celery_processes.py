"""A real Celery worker and beat, as subprocesses, ticking a private Redis (which is also their broker)."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from coordinator.store import MetadataStore

from .conftest import GROUP, PREFIX, Member, create_group, member_view, wait_until
from .processes import WORKER_ARGS, celery, child_env

TICK_MS = "200"


def test_beat_and_worker_expire_a_silent_member(
    store: MetadataStore, redis_url: str, spawn: Any, tmp_path: Any
) -> None:
    create_group(store)  # lease 1000 ms
    Member(store, "m1").heartbeat()
    epoch_before = store.describe_group(PREFIX, GROUP)["group_epoch"]
    env = child_env(redis_url, RSC_TICK_INTERVAL_MS=TICK_MS)
    worker = spawn("worker", celery(*WORKER_ARGS, "-n", "tick-test@%h"), env)
    beat = spawn("beat", celery("beat", "-l", "info", "--schedule", str(tmp_path / "schedule")), env)

    def m1_state() -> str:
        assert worker.process.poll() is None, worker.output()
        assert beat.process.poll() is None, beat.output()
        return str(member_view(store, "m1")["state"])

    # Bounded: the worker and beat start in a few seconds, the lease ends after one, a tick follows
    # within 200 ms.
    wait_until(m1_state, lambda state: state == "EXPIRED", timeout_s=20, what="m1 EXPIRED by the beat")

    view = store.describe_group(PREFIX, GROUP)
    assert member_view(store, "m1")["end_reason"] == "LEASE_EXPIRED"
    assert view["group_epoch"] == epoch_before + 1
    assert view["state"] == "EMPTY" and view["target_assignment"] == {}
    wait_until(
        worker.output,
        lambda out: "member expired, its shards are free" in out and "member_id=m1" in out,
        timeout_s=5,
        what="the worker's INFO line for the expiry",
    )
    # (beat's per-send INFO lines are kept out of the logs: the expiry above is what proves it sent)
    assert worker.stop() == 0 and beat.stop() == 0  # both shut down cleanly on SIGTERM


@pytest.mark.parametrize(
    ("program", "settings_env", "error_id"),
    [
        ("beat", {"RSC_TICK_INTERVAL_MS": "0"}, "rsc.E001"),
        ("worker", {"RSC_TICK_INTERVAL_MS": "20000"}, "rsc.E002"),
    ],
    ids=["beat-zero-interval", "worker-tick-above-lease"],
)
def test_worker_and_beat_refuse_impossible_settings(
    redis_url: str, spawn: Any, tmp_path: Any, program: str, settings_env: dict[str, str], error_id: str
) -> None:
    argv = celery(*WORKER_ARGS) if program == "worker" else celery(
        "beat", "-l", "info", "--schedule", str(tmp_path / "schedule")
    )
    child = spawn(program, argv, child_env(redis_url, **settings_env))
    try:
        code = child.process.wait(timeout=20)
    except Exception:
        child.signal(signal.SIGKILL)
        raise AssertionError(f"{program} kept running with impossible settings:\n{child.output()}") from None
    assert code != 0
    assert "refusing to start, impossible settings" in child.output()
    assert error_id in child.output()
