"""The admin endpoints and routing over HTTP against a real Redis (docs/protocol.md section 13)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError

from coordinator.models import AuditEntry

from .helpers import (
    ADMIN_TOKEN,
    GROUP,
    MEMBER_TOKEN,
    NO_BODY,
    PREFIX,
    Api,
    assert_problem,
    redis_snapshot,
)


def test_create_group_uses_the_settings_defaults_and_answers_201_with_the_description(
    api: Api, settings: Any
) -> None:
    settings.RSC_MEMBER_LEASE_TTL_MS = 12_000
    settings.RSC_HEARTBEAT_INTERVAL_MS = 2_000
    settings.RSC_REVOCATION_TIMEOUT_MS = 45_000
    r = api.post("admin/groups", {"stream_prefix": PREFIX, "consumer_group": GROUP, "shard_count": 3})
    assert r.status_code == 201, r.content
    assert r["Location"] == f"/api/v1/admin/groups/{PREFIX}/{GROUP}"
    view = r.json()
    assert view["config"] == {
        "max_concurrency": 1,
        "lease_ttl_ms": 12_000,
        "heartbeat_interval_ms": 2_000,
        "revocation_timeout_ms": 45_000,
        "max_members": 1000,
    }
    assert (view["state"], view["group_epoch"], view["assignment_epoch"], view["members"]) == (
        "EMPTY",
        0,
        0,
        [],
    )
    assert view["topology"]["shard_count"] == 3 and view["topology"]["active_version"] == 1
    assert view["migration"] is None


def test_create_group_with_every_field(api: Api, store: Any) -> None:
    body = {
        "stream_prefix": "pay.ments-1",
        "consumer_group": "g_2",
        "shard_count": 2,
        "max_concurrency": 8,
        "lease_ttl_ms": 5_000,
        "heartbeat_interval_ms": 500,
        "revocation_timeout_ms": 2_000,
        "max_members": 3,
        "start_from": "earliest",
    }
    fields = {k: v for k, v in body.items() if k not in ("stream_prefix", "consumer_group")}
    view = api.create_group(prefix="pay.ments-1", group="g_2", **fields)
    assert view["config"] == {k: body[k] for k in view["config"]}
    # The Redis consumer groups exist, reading from the start of each stream.
    groups = store.client.xinfo_groups("rsc:{pay.ments-1}:v1:1")
    assert [(g["name"], g["last-delivered-id"]) for g in groups] == [(b"g_2", b"0-0")]


def test_create_conflicts(api: Api, store: Any) -> None:
    api.create_group(shard_count=4)
    before = store.raw_metadata(PREFIX)
    body = {"stream_prefix": PREFIX, "consumer_group": GROUP}
    assert_problem(api.post("admin/groups", body), 409, "GROUP_ALREADY_EXISTS")
    problem = assert_problem(
        api.post("admin/groups", {**body, "consumer_group": "other", "shard_count": 5}),
        409,
        "SHARD_COUNT_CONFLICT",
    )
    assert problem["details"] == {"shard_count": 4}
    problem = assert_problem(
        api.post("admin/groups", {**body, "lease_ttl_ms": 2_000, "heartbeat_interval_ms": 2_000}),
        400,
        "INVALID_CONFIG",
    )
    assert problem["details"] == {"field": "heartbeat_interval_ms"}
    # A new prefix needs its shard count.
    problem = assert_problem(
        api.post("admin/groups", {**body, "stream_prefix": "new"}), 400, "INVALID_REQUEST"
    )
    assert problem["details"] == {"field": "shard_count"}
    assert store.raw_metadata(PREFIX) == before
    assert store.raw_metadata("new") == {}
    # A second group on an existing prefix may omit shard_count or give the same one.
    api.create_group(group="second", shard_count=4)
    r = api.post("admin/groups", {"stream_prefix": PREFIX, "consumer_group": "third"})
    assert r.status_code == 201


def test_list_describe_and_delete(api: Api) -> None:
    assert api.get("admin/groups").json() == []
    api.create_group(shard_count=2)
    api.create_group(prefix="alpha", group="z", shard_count=1)
    api.join("m1")
    rows = api.get("admin/groups").json()
    assert rows == [
        {
            "stream_prefix": "alpha",
            "consumer_group": "z",
            "state": "EMPTY",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "members": 0,
            "shard_count": 1,
            "active_version": 1,
        },
        {
            "stream_prefix": PREFIX,
            "consumer_group": GROUP,
            "state": "STABLE",
            "group_epoch": 1,
            "assignment_epoch": 1,
            "members": 1,
            "shard_count": 2,
            "active_version": 1,
        },
    ]
    view = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()
    assert [m["member_id"] for m in view["members"]] == ["m1"]
    assert view["target_assignment"] == {"m1": ["v1:0", "v1:1"]}

    r = api.delete(f"admin/groups/{PREFIX}/{GROUP}")
    assert r.status_code == 204 and r.content == b""
    assert_problem(api.get(f"admin/groups/{PREFIX}/{GROUP}"), 404, "GROUP_NOT_FOUND")
    assert_problem(api.delete(f"admin/groups/{PREFIX}/{GROUP}"), 404, "GROUP_NOT_FOUND")
    assert_problem(api.heartbeat(member_id="m1", member_epoch=1), 404, "GROUP_NOT_FOUND")
    assert [r["consumer_group"] for r in api.get("admin/groups").json()] == ["z"]


def test_set_max_concurrency(api: Api) -> None:
    api.create_group(max_concurrency=2)
    api.join("m1", capacity=8)
    r = api.put(f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 5})
    assert r.status_code == 200, r.content
    view = r.json()
    assert (view["config"]["max_concurrency"], view["group_epoch"]) == (5, 2)
    # The member learns it on its next heartbeat (its assignment did not move, nor its epoch).
    hb = api.heartbeat(member_id="m1", member_epoch=1, owned_shards=["v1:0", "v1:1", "v1:2", "v1:3"]).json()
    assert (hb["member_epoch"], hb["group_epoch"], hb["max_concurrency"]) == (1, 2, 5)
    # The same value again changes nothing.
    assert (
        api.put(f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 5}).json()[
            "group_epoch"
        ]
        == 2
    )
    assert_problem(
        api.put("admin/groups/nope/x/max-concurrency", {"max_concurrency": 5}), 404, "GROUP_NOT_FOUND"
    )


def test_shard_count_change_and_prefix_description(api: Api) -> None:
    api.create_group(shard_count=4)
    assert_problem(api.get("admin/stream-prefixes/absent"), 404, "STREAM_PREFIX_NOT_FOUND")
    assert_problem(
        api.post("admin/stream-prefixes/absent/shard-count", {"shard_count": 2}),
        404,
        "STREAM_PREFIX_NOT_FOUND",
    )
    problem = assert_problem(
        api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 4}),
        409,
        "SHARD_COUNT_UNCHANGED",
    )
    assert problem["details"] == {"shard_count": 4}

    r = api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 8, "ordering": "relaxed"})
    assert r.status_code == 202, r.content
    assert r["Location"] == f"/api/v1/admin/stream-prefixes/{PREFIX}"
    body = r.json()
    assert body["topology"]["active_version"] == 2 and body["topology"]["shard_count"] == 8
    assert body["topology"]["sealed_versions"] == [1]
    migration = body["migration"]
    assert (
        migration["from_version"],
        migration["to_version"],
        migration["ordering"],
        migration["active"],
    ) == (
        1,
        2,
        "relaxed",
        True,
    )
    assert body["groups"] == [GROUP]
    assert api.get(f"admin/stream-prefixes/{PREFIX}").json()["migration"] == migration

    problem = assert_problem(
        api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 2}),
        409,
        "MIGRATION_IN_PROGRESS",
    )
    # It names what holds the migration back: every group with old shards left to drain.
    details = problem["details"]
    assert (details["from_version"], details["to_version"]) == (1, 2)
    assert details["blocking"] == {GROUP: ["v1:0", "v1:1", "v1:2", "v1:3"]}
    assert f"group {GROUP}" in problem["detail"]

    routing = api.get(f"routing/{PREFIX}").json()
    assert (
        routing["active_version"] == 2 and routing["shard_count"] == 8 and routing["sealed_versions"] == [1]
    )
    assert [(v["version"], v["state"]) for v in routing["versions"]] == [(1, "DRAINING"), (2, "ACTIVE")]


def test_strict_is_the_default_ordering(api: Api) -> None:
    api.create_group(shard_count=2)
    r = api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 4})
    assert r.json()["migration"]["ordering"] == "strict"


@pytest.mark.parametrize("token", [MEMBER_TOKEN, ADMIN_TOKEN], ids=["member", "admin"])
def test_routing(api: Api, token: str) -> None:
    assert_problem(api.get(f"routing/{PREFIX}", token=token), 404, "STREAM_PREFIX_NOT_FOUND")
    api.create_group(shard_count=3)
    r = api.get(f"routing/{PREFIX}", token=token)
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    body = r.json()
    created = body["versions"][0]["created_at_ms"]
    assert body == {
        "stream_prefix": PREFIX,
        "active_version": 1,
        "shard_count": 3,
        "versions": [
            {
                "version": 1,
                "shard_count": 3,
                "state": "ACTIVE",
                "created_at_ms": created,
                "sealed_at_ms": None,
                "retired_at_ms": None,
            }
        ],
        "sealed_versions": [],
    }


def test_a_lease_not_above_the_tick_interval_is_refused(api: Api, store: Any, settings: Any) -> None:
    settings.RSC_TICK_INTERVAL_MS = 1_000
    body = {"stream_prefix": PREFIX, "consumer_group": GROUP, "shard_count": 1, "lease_ttl_ms": 1_000,
            "heartbeat_interval_ms": 200}  # fmt: skip
    assert_problem(api.post("admin/groups", body), 400, "INVALID_CONFIG")
    assert store.stream_prefixes() == []
    assert api.post("admin/groups", {**body, "lease_ttl_ms": 1_001}).status_code == 201


# ---------------------------------------------------------------------------------------------- audit
# Every admin action goes through coordinator/operations.py: the audit row first (failing closed), then
# the store, then the outcome, refusals included.

AUDITED_ACTIONS = {
    "create_group": ("POST", "admin/groups", {"stream_prefix": PREFIX, "consumer_group": "new"}),
    "delete_group": ("DELETE", f"admin/groups/{PREFIX}/{GROUP}", None),
    "set_max_concurrency": ("PUT", f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 3}),
    "change_shard_count": ("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 8}),
}


def _send(api: Api, method: str, path: str, body: Any) -> Any:
    return api.request(method, path, NO_BODY if body is None else body)


@pytest.mark.parametrize("action", sorted(AUDITED_ACTIONS))
def test_an_admin_action_whose_audit_row_cannot_be_written_changes_nothing(
    action: str, api: Api, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.create_group(shard_count=2)
    before = redis_snapshot(store.client)
    rows_before = AuditEntry.objects.count()

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("the audit database is down")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)
    method, path, body = AUDITED_ACTIONS[action]
    problem = assert_problem(_send(api, method, path, body), 503, "AUDIT_UNAVAILABLE")
    assert problem["details"]["action"] == action
    assert redis_snapshot(store.client) == before
    assert AuditEntry.objects.count() == rows_before


@pytest.mark.parametrize(
    ("action", "method", "path", "body", "status", "code"),
    [
        ("create_group", "POST", "admin/groups", {"stream_prefix": PREFIX, "consumer_group": GROUP},
         409, "GROUP_ALREADY_EXISTS"),
        ("delete_group", "DELETE", f"admin/groups/{PREFIX}/gone", None, 404, "GROUP_NOT_FOUND"),
        ("set_max_concurrency", "PUT", f"admin/groups/{PREFIX}/gone/max-concurrency",
         {"max_concurrency": 3}, 404, "GROUP_NOT_FOUND"),
        ("change_shard_count", "POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 2},
         409, "SHARD_COUNT_UNCHANGED"),
    ],
)  # fmt: skip
def test_a_refused_admin_action_is_audited_with_its_code(
    action: str, method: str, path: str, body: Any, status: int, code: str, api: Api, store: Any
) -> None:
    api.create_group(shard_count=2)
    AuditEntry.objects.all().delete()
    before = redis_snapshot(store.client)
    assert_problem(_send(api, method, path, body), status, code)
    assert redis_snapshot(store.client) == before
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.source, entry.outcome) == (action, "api", code)
    assert entry.username == "credential:RSC_ADMIN_TOKENS[0]" and entry.message


def test_successful_admin_actions_are_audited(api: Api) -> None:
    api.create_group(shard_count=2)
    r = api.put(f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 4})
    assert r.status_code == 200
    r = api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 4, "ordering": "relaxed"})
    assert r.status_code == 202
    assert [(e.action, e.outcome, e.source) for e in AuditEntry.objects.order_by("id")] == [
        ("create_group", "ok", "api"),
        ("set_max_concurrency", "ok", "api"),
        ("change_shard_count", "ok", "api"),
    ]
    entries = list(AuditEntry.objects.order_by("id"))
    assert entries[0].details["shard_count"] == 2 and entries[0].details["start_from"] == "latest"
    assert entries[1].details == {"max_concurrency": 4, "previous": 1}
    assert entries[2].details == {
        "shard_count": 4,
        "ordering": "relaxed",
        "from_version": 1,
        "from_shard_count": 2,
        "to_version": 2,
        "groups": [GROUP],
    }
