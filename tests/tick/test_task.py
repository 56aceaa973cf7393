"""coordinator.tasks.tick, run through Celery's own code path (Task.apply) against a real Redis."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from config.celery import app
from coordinator import service
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore, get_store, reset_store
from coordinator.tasks import tick
from rsc_redis.keys import lease_index_key, meta_key, schedule_index_key

from .conftest import GROUP, PREFIX, Member, create_group, member_view, wait_for_lease_end

LONG_LEASE = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)


def shards_of(member: dict[str, Any]) -> list[str]:
    return [s["shard"] for s in member["current_assignment"]]


def expired_lines(logs: pytest.LogCaptureFixture, member_id: str) -> list[str]:
    messages = [r.getMessage() for r in logs.records if r.name == "coordinator.service"]
    return [m for m in messages if "member expired" in m and f"member_id={member_id}" in m]


def test_the_task_is_registered_and_scheduled_every_tick_interval(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["coordinator-tick"]
    assert entry["task"] == tick.name == "coordinator.tasks.tick"
    assert app.tasks[tick.name].ignore_result is True  # `tick` itself is shared_task's proxy
    assert app.conf.beat_schedule == settings.CELERY_BEAT_SCHEDULE
    # A beat that was not run within one interval is dropped, not replayed in a burst.
    interval_s = settings.RSC_TICK_INTERVAL_MS / 1000
    assert entry["schedule"] == entry["options"]["expires"] == interval_s


def test_a_silent_member_expires_through_the_task_and_its_shards_move(
    store: MetadataStore, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    create_group(store)
    m1, m2 = Member(store, "m1"), Member(store, "m2")
    assert len(m1.heartbeat()["shards"]) == 4
    # m2's share is still m1's: nothing is granted before m1 releases it or is fenced.
    assert m2.heartbeat()["member_state"] == "UNRELEASED_SHARDS"
    assert m2.shards == set()

    wait_for_lease_end(store, "m1", keep_alive=(m2,))  # m1 goes silent, m2 keeps heartbeating
    m2.heartbeat()  # a fresh lease for m2, so that only m1 can expire below
    before = store.describe_group(PREFIX, GROUP)
    # Only the tick fences: with the lease over, m1 still holds every shard until it runs.
    assert member_view(store, "m1")["state"] == "STABLE"
    assert shards_of(member_view(store, "m1")) == ["v1:0", "v1:1", "v1:2", "v1:3"]

    result = tick.apply()

    assert result.successful(), result.traceback
    after = store.describe_group(PREFIX, GROUP)
    m1_view = member_view(store, "m1")
    assert (m1_view["state"], m1_view["end_reason"]) == ("EXPIRED", "LEASE_EXPIRED")
    assert m1_view["current_assignment"] == [] and m1_view["revoking"] == []
    assert after["group_epoch"] == before["group_epoch"] + 1
    assert after["assignment_epoch"] == after["group_epoch"]
    assert after["target_assignment"] == {"m2": ["v1:0", "v1:1", "v1:2", "v1:3"]}
    assert after["pending_revocations"] == []
    assert len(expired_lines(coordinator_logs, "m1")) == 1

    response = m2.heartbeat()

    assert response["member_state"] == "STABLE"
    assert response["member_epoch"] == after["group_epoch"]
    assert m2.shards == {"v1:0", "v1:1", "v1:2", "v1:3"}
    assert {s["assignment_epoch"] for s in response["shards"]} == {after["group_epoch"]}


def _projection(store: MetadataStore, group: str) -> dict[str, Any]:
    """What a tick decides, without the clock readings (which differ between two runs)."""
    view = store.describe_group(PREFIX, group)
    members = {
        m["member_id"]: (
            m["state"], m["end_reason"], m["member_epoch"], tuple(shards_of(m)), tuple(m["revoking"])
        )
        for m in view["members"]
    }  # fmt: skip
    keys = ("state", "group_epoch", "assignment_epoch", "target_assignment")
    return {**{k: view[k] for k in keys}, "members": members}


def test_concurrent_ticks_have_exactly_the_effect_of_one(store: MetadataStore, redis_url: str) -> None:
    create_group(store, "silent")  # m1's lease ends
    create_group(store, "busy", config=LONG_LEASE)  # m3 stays alive throughout
    Member(store, "m1", "silent").heartbeat()
    m3 = Member(store, "m3", "busy")
    m3.heartbeat()
    wait_for_lease_end(store, "m1", group="silent")
    epochs_before = {g: store.describe_group(PREFIX, g)["group_epoch"] for g in ("silent", "busy")}
    # The metadata and the indexes (the tick reads only the groups the indexes say are due).
    keys = [meta_key(PREFIX), lease_index_key(PREFIX), schedule_index_key(PREFIX)]
    snapshot = {key: store.client.dump(key) for key in keys}

    [single] = store.tick()
    expected = {g: _projection(store, g) for g in ("silent", "busy")}
    assert single.expired == (("silent", "m1"),)

    threads_n = 8
    stores = [MetadataStore.from_url(redis_url) for _ in range(threads_n)]  # like 8 worker processes
    try:
        for _round in range(5):
            for key, value in snapshot.items():
                if value is None:  # an index that did not exist
                    store.client.delete(key)
                else:
                    store.client.restore(key, 0, value, replace=True)
            reports = _tick_concurrently(stores)

            expired = [e for r in reports for e in r.expired]
            assert expired == [("silent", "m1")]  # exactly one tick committed the expiry
            assert {g: _projection(store, g) for g in ("silent", "busy")} == expected
            assert store.describe_group(PREFIX, "silent")["group_epoch"] == epochs_before["silent"] + 1
            assert store.describe_group(PREFIX, "busy")["group_epoch"] == epochs_before["busy"]
    finally:
        for s in stores:
            s.client.close()

    # A late replay (a beat that was queued behind the others) changes nothing at all.
    settled = store.raw_metadata(PREFIX)
    [late] = store.tick()
    assert (late.expired, late.collected, late.drained, late.retired_versions) == ((), (), (), ())
    assert store.raw_metadata(PREFIX) == settled


def _tick_concurrently(stores: list[MetadataStore]) -> list[Any]:
    barrier = threading.Barrier(len(stores))
    reports: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(s: MetadataStore) -> None:
        try:
            barrier.wait(timeout=10)
            result = s.tick()
            with lock:
                reports.extend(result)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(reports) == len(stores)  # one report per tick: the prefix was visited by every one
    return reports


def test_two_beats_at_once_through_the_task_expire_the_member_once(
    store: MetadataStore, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    create_group(store)
    Member(store, "m1").heartbeat()
    wait_for_lease_end(store, "m1")
    epoch_before = store.describe_group(PREFIX, GROUP)["group_epoch"]
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def beat() -> None:
        barrier.wait(timeout=10)
        results.append(tick.apply())

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert [r.successful() for r in results] == [True, True]
    assert len(expired_lines(coordinator_logs, "m1")) == 1
    assert store.describe_group(PREFIX, GROUP)["group_epoch"] == epoch_before + 1


def test_store_unavailable_is_logged_and_swallowed(
    settings: Any, disposable_redis: Any, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    try:
        create_group(get_store())
        assert tick.apply().successful()
        disposable_redis.kill()

        result = tick.apply()

        assert result.successful(), result.traceback  # the worker sees a normal return
        assert result.result is None
        warnings = [r for r in coordinator_logs.records if r.name == "coordinator.tasks"]
        assert [r.levelname for r in warnings] == ["WARNING"]
        assert "tick skipped, the next beat retries" in warnings[0].getMessage()
        assert "unreachable" in warnings[0].getMessage()
    finally:
        reset_store()


def test_unconfigured_redis_is_a_warning_too(
    settings: Any, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    settings.REDIS_URL = None
    reset_store()
    assert tick.apply().successful()
    assert any("REDIS_URL is not configured" in r.getMessage() for r in coordinator_logs.records)


def test_a_bug_fails_the_task_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "run_tick", broken)
    result = tick.apply()
    assert result.failed()
    assert isinstance(result.result, RuntimeError)
