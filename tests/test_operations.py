"""coordinator/operations.py: authorize, validate, audit first (fail closed), act, record the outcome.

Against a real private Redis (tests/conftest.py) and the test database; the entry points (API views,
operator pages, commands) have their own tests.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.db import DatabaseError, transaction

from admin_ui.lifecycle_views import actor_from_admin_request
from coordinator import operations
from coordinator.api.errors import HTTP_STATUS
from coordinator.api.views import actor_from_api_request
from coordinator.credentials import Role, TokenPrincipal
from coordinator.models import AuditEntry
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    CoordinatorError,
    GroupHasUnconsumedEntries,
    InvalidRequest,
    ShardNotFound,
)
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, OrderingMode, RetentionPolicy
from coordinator.store import MetadataStore, get_store, reset_store
from tests.api.helpers import make_pending, redis_snapshot

P, G = "orders", "billing"
ADMIN = operations.Actor(username="ops", source="command", is_admin=True)
NOT_ADMIN = operations.Actor(username="viewer", source="admin_ui", is_admin=False)


@pytest.fixture(autouse=True)
def store(settings: Any, redis_url: str, db: None) -> Iterator[MetadataStore]:
    settings.REDIS_URL = redis_url
    reset_store()
    store = get_store()
    config = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)
    store.create_group(CreateGroup(stream_prefix=P, consumer_group=G, shard_count=2, config=config))
    store.heartbeat(P, G, Heartbeat(member_id="m1", member_epoch=0, capacity=1))
    yield store
    reset_store()


def rows() -> list[tuple[str, str, str, str]]:
    return [(e.username, e.source, e.action, e.outcome) for e in AuditEntry.objects.order_by("id")]


# ------------------------------------------------------------------------------------------ authorize


@pytest.mark.parametrize(
    "act",
    [
        lambda a: operations.skip_entries(a, P, G, "v1:0", older_than_ms=0, reason="r"),
        lambda a: operations.redeliver(a, P, G, "v1:0"),
        lambda a: operations.release_drain(a, P, G, confirm_unconsumed=0, reason="r"),
        lambda a: operations.replay_dead_letters(a, P, G, ["1-0"]),
        lambda a: operations.purge_dead_letters(a, P, G, None, reason="r"),
        lambda a: operations.set_retention(a, P, RetentionPolicy(max_len=5_000)),
        lambda a: operations.delete_prefix(a, P, force=True),
    ],
    ids=["skip", "redeliver", "release", "replay", "purge", "retention", "delete"],
)
def test_an_actor_who_is_not_an_admin_changes_nothing_and_writes_nothing(
    act: Any, store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    make_pending(store.client, 1, prefix=P, group=G)
    before = redis_snapshot(store.client)
    with pytest.raises(operations.PermissionDeniedError) as refused:
        act(NOT_ADMIN)
    assert refused.value.code == "PERMISSION_DENIED" and HTTP_STATUS[refused.value.code][0] == 403
    assert redis_snapshot(store.client) == before and rows() == []
    assert "viewer is not an admin" in caplog.text


# ------------------------------------------------------------------------------------------ validate


skip = functools.partial(operations.skip_entries, ADMIN, P, G)
release = functools.partial(operations.release_drain, ADMIN, P, G)
ANY = {"older_than_ms": 0, "reason": "r"}


@pytest.mark.parametrize(
    ("act", "field"),
    [
        (lambda: skip("v1:0", older_than_ms=0, reason=""), "reason"),
        (lambda: skip("v1:0", older_than_ms=0, reason=" \n"), "reason"),
        (lambda: skip("v1:0", older_than_ms=0, reason="x" * 501), "reason"),
        (lambda: skip("v1:0", older_than_ms=0, reason=None), "reason"),
        (lambda: skip("v1-0", **ANY), "shard"),
        (lambda: skip("v1:0", reason="r"), "entry_ids"),
        (lambda: skip("v1:0", entry_ids=["1-0"], **ANY), "entry_ids"),
        (lambda: skip("v1:0", entry_ids=["1_0"], reason="r"), "entry_ids"),
        (lambda: skip("v1:0", entry_ids=[], reason="r"), "entry_ids"),
        (lambda: skip("v1:0", older_than_ms=-1, reason="r"), "older_than_ms"),
        (lambda: skip("v1:0", older_than_ms=True, reason="r"), "older_than_ms"),
        (lambda: operations.skip_entries(ADMIN, "a:b", G, "v1:0", **ANY), "stream_prefix"),
        (lambda: operations.redeliver(ADMIN, P, "", "v1:0"), "consumer_group"),
        (lambda: operations.redeliver(ADMIN, P, G, "v1:0", reason="x" * 501), "reason"),
        (lambda: release(confirm_unconsumed=0, reason=""), "reason"),
        (lambda: release(confirm_unconsumed=-1, reason="r"), "confirm_unconsumed"),
        (lambda: operations.replay_dead_letters(ADMIN, P, G, []), "ids"),
        (lambda: operations.purge_dead_letters(ADMIN, P, G, None, reason=""), "reason"),
        (lambda: operations.purge_dead_letters(ADMIN, P, G, ["x"], reason="r"), "ids"),
        (lambda: operations.set_retention(ADMIN, P, RetentionPolicy(max_len=5)), "max_len"),
        (lambda: operations.set_retention(ADMIN, P, {"max_len": 5_000}), "policy"),  # type: ignore[arg-type]
        (lambda: operations.delete_prefix(ADMIN, P, force="yes"), "force"),  # type: ignore[arg-type]
    ],
)
def test_invalid_arguments_are_refused_before_the_audit_row(
    act: Any, field: str, store: MetadataStore
) -> None:
    before = redis_snapshot(store.client)
    with pytest.raises(InvalidRequest) as refused:
        act()
    assert refused.value.details.get("field") == field
    assert redis_snapshot(store.client) == before and rows() == []


# ------------------------------------------------------------------------------------------ audit first


def test_the_row_is_committed_pending_before_the_store_is_called(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    original = MetadataStore.redeliver

    def redeliver(self: MetadataStore, *args: Any) -> Any:
        entry = AuditEntry.objects.get()
        seen.append((entry.action, entry.outcome))
        return original(self, *args)

    monkeypatch.setattr(MetadataStore, "redeliver", redeliver)
    result = operations.redeliver(ADMIN, P, G, "v1:1", reason="stuck")
    assert seen == [("redeliver", "pending")]
    assert result == {"shard": "v1:1", "redeliver_token": 1, "owner": "m1"}
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.user, entry.source, entry.outcome) == ("ops", None, "command", "ok")
    assert entry.details == {"shard": "v1:1", "reason": "stuck", "redeliver_token": 1, "owner": "m1"}


def test_when_the_audit_row_cannot_be_written_the_store_is_never_called(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_pending(store.client, 2, prefix=P, group=G)
    before = redis_snapshot(store.client)

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("database is locked")

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the store was called without an audit row")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)
    monkeypatch.setattr(MetadataStore, "skip_entries", never)
    with pytest.raises(operations.AuditUnavailable) as refused:
        operations.skip_entries(ADMIN, P, G, "v1:0", entry_ids=ids, reason="poison")
    error = refused.value
    assert (error.code, error.retriable, HTTP_STATUS[error.code][0]) == ("AUDIT_UNAVAILABLE", True, 503)
    assert "nothing was changed" in error.message
    assert redis_snapshot(store.client) == before


def test_inside_a_transaction_the_audit_row_could_not_be_first_so_nothing_happens(
    store: MetadataStore,
) -> None:
    """An audit row in a caller's open transaction is not written until that commits: refused."""
    before = redis_snapshot(store.client)
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        operations.redeliver(ADMIN, P, G, "v1:0")
    assert redis_snapshot(store.client) == before and rows() == []


# ------------------------------------------------------------------------------------------ outcomes


def test_a_skip_records_each_entry_with_its_fields(store: MetadataStore) -> None:
    ids = make_pending(store.client, 2, prefix=P, group=G)
    result = operations.skip_entries(ADMIN, P, G, "v1:0", entry_ids=ids, reason="poison")
    assert [e["id"] for e in result["skipped"]] == ids
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.message) == ("skip_entries", "ok", "")
    assert entry.details["count"] == 2 and entry.details["entry_ids"] == ids
    skipped = entry.details["skipped"]
    assert [(e["id"], e["consumer"], e["deliveries"]) for e in skipped] == [(i, "m1", 1) for i in ids]
    assert [(e["fields"]["event_id"], e["fields"]["partition_key"]) for e in skipped] == [
        ("evt-0", "key-0"),
        ("evt-1", "key-1"),
    ]


def test_a_refusal_of_the_store_is_recorded_with_its_code_and_details(store: MetadataStore) -> None:
    with pytest.raises(ShardNotFound):
        operations.redeliver(ADMIN, P, G, "v7:0")
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.details["error"]) == ("SHARD_NOT_FOUND", {"field": "shard", "shard": "v7:0"})
    assert entry.message.startswith("v7:0 is not a shard")


def test_delete_prefix_records_the_usage_it_had_even_when_refused(store: MetadataStore) -> None:
    make_pending(store.client, 3, prefix=P, group=G)
    with pytest.raises(CoordinatorError) as refused:
        operations.delete_prefix(ADMIN, P, reason="done")
    assert refused.value.code == "STREAM_PREFIX_NOT_EMPTY"
    result = operations.delete_prefix(ADMIN, P, force=True, reason="done")
    assert result["deleted_keys"] > 0
    first, second = AuditEntry.objects.order_by("id")
    usage = {"groups": [G], "unconsumed_entries": 3, "streams": 2}
    assert (first.outcome, first.details["usage"]) == ("STREAM_PREFIX_NOT_EMPTY", usage)
    assert (second.outcome, second.details["usage"], second.consumer_group) == ("ok", usage, "")


def test_an_unexpected_failure_is_recorded_then_raised(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MetadataStore, "release_drain", lambda *a, **k: {}["surprise"])
    with pytest.raises(KeyError):
        operations.release_drain(ADMIN, P, G, confirm_unconsumed=0, reason="r")
    assert rows() == [("ops", "command", "release_drain", "INTERNAL_ERROR")]
    assert AuditEntry.objects.get().message == "KeyError"


def test_an_outcome_that_cannot_be_recorded_leaves_the_row_pending_and_returns_the_result(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    save = AuditEntry.save

    def broken_update(self: AuditEntry, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("update_fields"):  # the outcome, not the pending row
            raise DatabaseError("connection lost")
        save(self, *args, **kwargs)

    monkeypatch.setattr(AuditEntry, "save", broken_update)
    with caplog.at_level(logging.ERROR, logger="coordinator.operations"):
        result = operations.redeliver(ADMIN, P, G, "v1:0")
    assert result["redeliver_token"] == 1  # the change happened: it is not reported as a failure
    assert rows() == [("ops", "command", "redeliver", "pending")]
    assert "stays pending" in caplog.text


# ------------------------------------------------------------------------------------------ actors


def test_the_api_adapter_names_tokens_by_credential_and_sessions_by_user() -> None:
    admin_token = TokenPrincipal(name="ci-admin", role=Role.ADMIN, source="database")
    member_token = TokenPrincipal(name="workers", role=Role.MEMBER, source="environment")
    assert actor_from_api_request(SimpleNamespace(user=admin_token)) == operations.Actor(
        username="credential:ci-admin", user=None, source="api", is_admin=True
    )
    assert actor_from_api_request(SimpleNamespace(user=member_token)).is_admin is False

    staff = User.objects.create_user("ops", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="manage_groups"))
    staff = User.objects.get(pk=staff.pk)  # permissions are cached per instance
    actor = actor_from_api_request(SimpleNamespace(user=staff))
    assert (actor.username, actor.user, actor.source, actor.is_admin) == ("ops", staff, "api", True)
    plain = User.objects.create_user("plain", is_staff=True)
    assert actor_from_api_request(SimpleNamespace(user=plain)).is_admin is False


def test_the_admin_adapter_asks_admin_ui_access() -> None:
    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="manage_groups"))
    operator = User.objects.get(pk=operator.pk)
    actor = actor_from_admin_request(SimpleNamespace(user=operator))
    assert (actor.username, actor.user, actor.source) == ("operator", operator, "admin_ui")
    assert actor.is_admin is True
    viewer = User.objects.create_user("viewer", is_staff=True)
    assert actor_from_admin_request(SimpleNamespace(user=viewer)).is_admin is False
    anonymous = actor_from_admin_request(SimpleNamespace(user=AnonymousUser()))
    assert (anonymous.username, anonymous.user, anonymous.is_admin) == ("", None, False)


# ------------------------------------------------------------------------------------------ group actions

GROUP_ACTIONS = {
    "create_group": lambda a: operations.create_group(
        a, CreateGroup(stream_prefix=P, consumer_group="new", config=GroupConfig())
    ),
    "set_max_concurrency": lambda a: operations.set_max_concurrency(a, P, G, 4),
    "change_shard_count": lambda a: operations.change_shard_count(a, P, 4, OrderingMode.RELAXED),
    "delete_group": lambda a: operations.delete_group(a, P, G, force=True),
}


@pytest.mark.parametrize("action", sorted(GROUP_ACTIONS))
def test_a_group_action_without_its_audit_row_changes_nothing(
    action: str, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = redis_snapshot(store.client)

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("database is locked")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)
    with pytest.raises(operations.AuditUnavailable):
        GROUP_ACTIONS[action](ADMIN)
    assert redis_snapshot(store.client) == before


@pytest.mark.parametrize("action", sorted(GROUP_ACTIONS))
def test_a_group_action_by_a_non_admin_writes_nothing(action: str, store: MetadataStore) -> None:
    before = redis_snapshot(store.client)
    with pytest.raises(operations.PermissionDeniedError):
        GROUP_ACTIONS[action](NOT_ADMIN)
    assert redis_snapshot(store.client) == before and rows() == []


@pytest.mark.parametrize("action", sorted(GROUP_ACTIONS))
def test_a_group_action_is_audited_first_then_settled(action: str, store: MetadataStore) -> None:
    GROUP_ACTIONS[action](ADMIN)
    assert rows() == [("ops", "command", action, "ok")]


def test_delete_group_with_unconsumed_entries_needs_force(store: MetadataStore) -> None:
    make_pending(store.client, 2, prefix=P, group=G)
    before = redis_snapshot(store.client)
    with pytest.raises(GroupHasUnconsumedEntries) as refused:
        operations.delete_group(ADMIN, P, G)
    assert refused.value.details == {
        "stream_prefix": P,
        "consumer_group": G,
        "lag": 0,
        "pending": 2,
        "missing": "force",
    }
    assert redis_snapshot(store.client) == before
    assert rows() == [("ops", "command", "delete_group", "GROUP_HAS_UNCONSUMED_ENTRIES")]


def test_a_stale_shard_count_confirmation_is_refused_and_recorded(store: MetadataStore) -> None:
    before = redis_snapshot(store.client)
    with pytest.raises(ConfirmationMismatch):
        operations.change_shard_count(ADMIN, P, 4, OrderingMode.STRICT, expected_version=7)
    assert redis_snapshot(store.client) == before
    assert rows() == [("ops", "command", "change_shard_count", "CONFIRMATION_MISMATCH")]
