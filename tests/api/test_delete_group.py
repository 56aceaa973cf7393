"""DELETE admin/groups/{P}/{G}: a group with unconsumed entries is deleted only with ``force=true``
(issue 10, "Destructive actions ask"); the refusal names the counts and what is missing, and changes
nothing in Redis. Every attempt is audited through coordinator/operations.py."""

from __future__ import annotations

from typing import Any

from coordinator.models import AuditEntry
from coordinator.store import MetadataStore

from .helpers import (
    GROUP,
    MEMBER_TOKEN,
    PREFIX,
    Api,
    assert_problem,
    envelope,
    make_pending,
    redis_snapshot,
)

URL = f"admin/groups/{PREFIX}/{GROUP}"


def trail() -> list[tuple[str, str, str, dict[str, Any]]]:
    return [(e.username, e.source, e.outcome, e.details) for e in AuditEntry.objects.order_by("id")]


def test_an_empty_group_is_deleted_without_force_and_audited(api: Api) -> None:
    api.create_group(shard_count=2)
    AuditEntry.objects.all().delete()
    assert api.delete(URL).status_code == 204
    assert_problem(api.get(URL), 404, "GROUP_NOT_FOUND")
    assert trail() == [
        (
            "credential:RSC_ADMIN_TOKENS[0]",
            "api",
            "ok",
            {"force": False, "reason": "", "unconsumed": {"lag": 0, "pending": 0}},
        )
    ]


def test_a_group_with_lag_or_pending_entries_is_refused_with_the_counts_and_nothing_changes(
    api: Api, store: MetadataStore
) -> None:
    api.create_group(shard_count=2)
    api.join("m1")
    make_pending(store.client, 3, shard="v1:0")
    for i in range(5):  # not yet delivered: lag
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:1", envelope(i))
    AuditEntry.objects.all().delete()
    before = redis_snapshot(store.client)

    body = assert_problem(api.delete(URL), 409, "GROUP_HAS_UNCONSUMED_ENTRIES")
    assert (body["details"]["lag"], body["details"]["pending"]) == (5, 3)
    assert body["details"]["missing"] == "force"
    assert "force=true" in body["detail"]
    assert redis_snapshot(store.client) == before
    assert trail() == [
        (
            "credential:RSC_ADMIN_TOKENS[0]",
            "api",
            "GROUP_HAS_UNCONSUMED_ENTRIES",
            {
                "force": False,
                "reason": "",
                "unconsumed": {"lag": 5, "pending": 3},
                "error": body["details"],
            },
        )
    ]

    assert_problem(api.delete(f"{URL}?force=false"), 409, "GROUP_HAS_UNCONSUMED_ENTRIES")
    assert redis_snapshot(store.client) == before

    assert api.delete(f"{URL}?force=true&reason=decommissioned").status_code == 204
    assert_problem(api.get(URL), 404, "GROUP_NOT_FOUND")
    last = AuditEntry.objects.order_by("id").last()
    assert last is not None and (last.outcome, last.details["force"]) == ("ok", True)
    assert last.details["reason"] == "decommissioned"
    # Its Redis consumer groups are gone; the streams (and their entries) stay.
    assert store.client.xlen(f"rsc:{{{PREFIX}}}:v1:1") == 5
    assert store.client.xinfo_groups(f"rsc:{{{PREFIX}}}:v1:0") == []


def test_a_bad_force_value_is_an_invalid_request_and_writes_nothing(api: Api, store: MetadataStore) -> None:
    api.create_group(shard_count=1)
    AuditEntry.objects.all().delete()
    before = redis_snapshot(store.client)
    assert_problem(api.delete(f"{URL}?force=maybe"), 400, "INVALID_REQUEST")
    assert_problem(api.delete(f"{URL}?force=true&force=true"), 400, "INVALID_REQUEST")
    assert redis_snapshot(store.client) == before and trail() == []


def test_a_member_token_may_not_delete(api: Api, store: MetadataStore) -> None:
    api.create_group(shard_count=1)
    before = redis_snapshot(store.client)
    assert_problem(api.delete(URL, token=MEMBER_TOKEN), 403, "PERMISSION_DENIED")
    assert redis_snapshot(store.client) == before
