"""The group actions of the operator pages (max_concurrency, shard count, delete) go through
coordinator/operations.py: the audit row is written first and, when it cannot be, nothing changes
(fail closed, coordinator/operations.py); a refusal is recorded with its code."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError
from django.test import Client

from coordinator.models import AuditEntry
from coordinator.store import MetadataStore
from tests.api.helpers import redis_snapshot

from .helpers import GROUP, PREFIX, create, messages_of, url

PAGE_ACTIONS = {
    "set_max_concurrency": {"max_concurrency": "5"},
    "change_shard_count": {"shard_count": "8", "ordering": "strict", "from_version": "1", "confirm": "yes"},
    "delete_group": {"confirm": "yes", "force": "on"},
}


@pytest.mark.parametrize("action", sorted(PAGE_ACTIONS))
def test_a_page_action_whose_audit_row_cannot_be_written_changes_nothing(
    action: str, operator: Client, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store)
    store.client.xadd(f"rsc:{{{PREFIX}}}:v1:0", {"k": "v"})  # something a forced delete would lose
    before = redis_snapshot(store.client)

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("the audit database is down")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)
    r = operator.post(url(action), PAGE_ACTIONS[action], follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    (message,) = messages_of(r)
    assert message.startswith("Audit trail unavailable: ") and "[AUDIT_UNAVAILABLE]" in message
    assert redis_snapshot(store.client) == before
    monkeypatch.undo()
    assert AuditEntry.objects.count() == 0


@pytest.mark.parametrize(
    ("action", "group", "data", "code"),
    [
        ("set_max_concurrency", "gone", {"max_concurrency": "5"}, "GROUP_NOT_FOUND"),
        ("change_shard_count", GROUP, {"shard_count": "4", "ordering": "strict", "confirm": "yes"},
         "SHARD_COUNT_UNCHANGED"),
        ("delete_group", GROUP, {"confirm": "yes"}, "GROUP_HAS_UNCONSUMED_ENTRIES"),
    ],
)  # fmt: skip
def test_a_refused_page_action_is_audited_with_its_code(
    action: str, group: str, data: dict[str, str], code: str, operator: Client, store: MetadataStore
) -> None:
    create(store)
    store.client.xadd(f"rsc:{{{PREFIX}}}:v1:0", {"k": "v"})
    before = redis_snapshot(store.client)
    r = operator.post(url(action, group=group), data, follow=True)
    assert any(m.endswith(f"[{code}]") for m in messages_of(r))
    assert redis_snapshot(store.client) == before
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.source) == ("operator", "admin_ui")
    assert (entry.action, entry.outcome) == (action, code)
    assert entry.consumer_group == group and entry.message
