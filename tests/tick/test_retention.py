"""The retention entry points: coordinator.tasks.retention (through Celery's Task.apply) and
manage.py run_retention, against a real Redis; the audit prune hook they call; the system checks of the
retention and ended-member settings."""

from __future__ import annotations

import io
import sys
import types
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from config.celery import app
from coordinator import service
from coordinator.checks import COUNTS, check_rsc_settings
from coordinator.protocol.commands import MAX_ENDED_MEMBERS_LIMIT
from coordinator.protocol.errors import InvalidRequest, StoreUnavailable
from coordinator.protocol.model import RetentionPolicy, Shard
from coordinator.service import TickLoop
from coordinator.store import MetadataStore, get_store, reset_store
from coordinator.tasks import retention
from rsc_redis import keys as rkeys
from tests.protocol.context import Context

from .conftest import GROUP, PREFIX, Member, create_group

V1_0 = rkeys.stream_key(PREFIX, Shard(version=1, index=0))


@pytest.fixture
def pruned(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in operations layer: records the calls of its prune_audit (the real one needs the DB)."""
    calls: list[dict[str, Any]] = []

    def prune_audit(**kwargs: Any) -> int:
        calls.append(kwargs)
        return 3

    monkeypatch.setitem(sys.modules, "coordinator.operations", types.SimpleNamespace(prune_audit=prune_audit))
    return calls


def consumed_entries(store: MetadataStore, count: int) -> None:
    """``count`` entries on v1:0, read and acked by the group: all of them can be trimmed."""
    ids = [store.client.xadd(V1_0, {"n": str(i)}) for i in range(count)]
    store.client.xreadgroup(GROUP, "c", {V1_0: ">"}, count=count)
    store.client.xack(V1_0, GROUP, *ids)


def test_the_task_is_registered_and_scheduled_every_retention_interval(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["coordinator-retention"]
    assert entry["task"] == retention.name == "coordinator.tasks.retention"
    assert app.tasks[retention.name].ignore_result is True
    assert app.conf.beat_schedule == settings.CELERY_BEAT_SCHEDULE
    interval_s = settings.RSC_RETENTION_INTERVAL_MS / 1000
    assert entry["schedule"] == entry["options"]["expires"] == interval_s == 30.0


def test_the_task_trims_and_prunes_the_audit(
    store: MetadataStore, pruned: list[dict[str, Any]], coordinator_logs: pytest.LogCaptureFixture
) -> None:
    create_group(store)
    consumed_entries(store, 4)

    result = retention.apply()

    assert result.successful(), result.traceback
    assert store.client.xlen(V1_0) == 0
    assert pruned == [{}]  # the default retention of RSC_AUDIT_RETENTION_DAYS
    messages = [r.getMessage() for r in coordinator_logs.records if r.name == "coordinator.service"]
    assert "streams trimmed: stream_prefix=orders streams=1 entries=4" in messages
    assert "audit rows pruned: rows=3" in messages


def test_caps_that_drop_entries_are_a_warning(
    store: MetadataStore, pruned: list[dict[str, Any]], coordinator_logs: pytest.LogCaptureFixture
) -> None:
    create_group(store)
    store.set_retention(PREFIX, RetentionPolicy(max_len=1_000))
    pipe = store.client.pipeline(transaction=False)
    for i in range(1_010):
        pipe.xadd(V1_0, {"n": str(i)})
    pipe.execute()
    [report] = service.run_retention()
    assert report.trimmed_by_caps == {V1_0: 10}
    warnings = [r.getMessage() for r in coordinator_logs.records if r.levelname == "WARNING"]
    assert any("retention caps dropped entries regardless of consumption" in w for w in warnings)


def test_store_unavailable_is_logged_and_swallowed(
    settings: Any, disposable_redis: Any, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    try:
        create_group(get_store())
        disposable_redis.kill()
        result = retention.apply()
        assert result.successful(), result.traceback
        warnings = [r for r in coordinator_logs.records if r.name == "coordinator.tasks"]
        assert [r.levelname for r in warnings] == ["WARNING"]
        assert "retention pass skipped, the next beat retries" in warnings[0].getMessage()
    finally:
        reset_store()


def test_a_bug_fails_the_task_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "run_retention", broken)
    result = retention.apply()
    assert result.failed()
    assert isinstance(result.result, RuntimeError)


def test_the_tick_caps_ended_members_at_rsc_max_ended_members(settings: Any, store: MetadataStore) -> None:
    settings.RSC_MAX_ENDED_MEMBERS = 1
    create_group(store)
    for member_id in ("m1", "m2", "m3"):
        member = Member(store, member_id)
        member.heartbeat()
        member.epoch = -1
        member.heartbeat()  # leaves
    [report] = service.run_tick()
    assert report.collected == ((GROUP, "m1"), (GROUP, "m2"))
    assert [m["member_id"] for m in store.describe_group(PREFIX, GROUP)["members"]] == ["m3"]


# ------------------------------------------------------------------------------------------ audit prune


def test_a_failing_prune_is_logged_and_does_not_fail_the_pass(
    monkeypatch: pytest.MonkeyPatch, coordinator_logs: pytest.LogCaptureFixture
) -> None:
    def prune_audit(**kwargs: Any) -> int:
        raise RuntimeError("database is down")

    monkeypatch.setitem(sys.modules, "coordinator.operations", types.SimpleNamespace(prune_audit=prune_audit))
    assert service.prune_audit_once() == 0
    [record] = [r for r in coordinator_logs.records if r.levelname == "ERROR"]
    assert "audit prune failed" in record.getMessage() and record.exc_info is not None


# ------------------------------------------------------------------------------------------ run_retention


def test_once_runs_one_pass(store: MetadataStore, pruned: list[dict[str, Any]]) -> None:
    create_group(store)
    consumed_entries(store, 3)
    out = io.StringIO()
    call_command("run_retention", "--once", stdout=out)
    assert out.getvalue().strip() == (
        "retention pass done: 1 stream prefixes, 4 streams visited, 3 entries trimmed (0 by caps), "
        "0 retired streams deleted"
    )
    assert pruned == [{}]


def test_once_fails_when_the_store_is_unreachable(settings: Any, disposable_redis: Any) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    try:
        disposable_redis.kill()
        with pytest.raises(CommandError, match=r"retention pass failed, retry later: .*unreachable"):
            call_command("run_retention", "--once")
    finally:
        reset_store()


@pytest.mark.parametrize("interval_ms", ["0", "-5", "999"])
def test_an_interval_below_one_second_is_refused(interval_ms: str) -> None:
    with pytest.raises(CommandError, match=r"--interval-ms must be at least 1000"):
        call_command("run_retention", "--interval-ms", interval_ms)


def test_the_loop_names_what_failed(coordinator_logs: pytest.LogCaptureFixture) -> None:
    def down() -> None:
        raise StoreUnavailable("the metadata store is unreachable")

    loop = TickLoop(1000, tick=down, name="retention pass")
    assert loop.tick_once() is False
    assert any(
        r.getMessage().startswith("retention pass failed (the metadata store is unreachable)")
        for r in coordinator_logs.records
    )


# ------------------------------------------------------------------------------------------ system checks

WEEK_MS = 7 * 24 * 3_600_000


def error_ids(messages: list[Any]) -> list[str]:
    return sorted(message.id or "" for message in messages)


@pytest.mark.parametrize(("interval_ms", "ids"), [(999, ["rsc.E005"]), (1000, []), (WEEK_MS, [])])
def test_a_retention_interval_below_one_second_is_rejected(
    settings, interval_ms: int, ids: list[str]
) -> None:
    settings.RSC_RETENTION_INTERVAL_MS = interval_ms
    messages = check_rsc_settings()
    assert error_ids(messages) == ids
    assert all("RSC_RETENTION_INTERVAL_MS" in m.msg for m in messages)


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("RSC_MAX_ENDED_MEMBERS", 0, True),
        ("RSC_MAX_ENDED_MEMBERS", MAX_ENDED_MEMBERS_LIMIT, True),
        ("RSC_MAX_ENDED_MEMBERS", MAX_ENDED_MEMBERS_LIMIT + 1, False),
        ("RSC_MAX_ENDED_MEMBERS", -1, False),
        ("RSC_MAX_ENDED_MEMBERS", True, False),
        ("RSC_MAX_ENDED_MEMBERS", "100", False),
        ("RSC_RETENTION_MAX_STREAMS", 1, True),
        ("RSC_RETENTION_MAX_STREAMS", 0, False),
        ("RSC_RETENTION_MAX_STREAMS", 1_000_001, False),
    ],
)
def test_count_settings_must_be_integers_in_range(settings, name: str, value: object, ok: bool) -> None:
    setattr(settings, name, value)
    assert error_ids(check_rsc_settings()) == ([] if ok else ["rsc.E006"])


def test_the_ended_member_cap_setting_has_the_range_the_tick_accepts(settings) -> None:
    """COUNTS is the check's copy of Tick.max_ended_members' range: both refuse the same values."""
    _default, low, high, _ = COUNTS["RSC_MAX_ENDED_MEMBERS"]
    ctx = Context()
    for value, accepted in [(low - 1, False), (low, True), (high, True), (high + 1, False)]:
        if accepted:
            ctx.tick(max_ended_members=value)
        else:
            with pytest.raises(InvalidRequest):
                ctx.tick(max_ended_members=value)
