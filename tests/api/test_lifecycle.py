"""The lifecycle endpoints over HTTP against a real Redis: redeliver, skip, release-drain, dead letters,
retention and prefix deletion (docs/protocol.md section 13). Every action is audited, first.

Bad input of every kind is in test_lifecycle_rejections.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from coordinator.models import AuditEntry

from .helpers import (
    GROUP,
    PREFIX,
    Api,
    add_dead_letter,
    assert_problem,
    make_pending,
    redis_snapshot,
)

SHARD_URL = f"admin/groups/{PREFIX}/{GROUP}/shards"
DLQ_URL = f"admin/groups/{PREFIX}/{GROUP}/dead-letters"
API_ACTOR = "credential:RSC_ADMIN_TOKENS[0]"


def audit_rows() -> list[dict[str, Any]]:
    return list(
        AuditEntry.objects.order_by("id").values(
            "username", "source", "action", "stream_prefix", "consumer_group", "outcome", "message", "details"
        )
    )


def pending_ids(store: Any, shard: str = "v1:0") -> list[str]:
    rows = store.client.xpending_range(f"rsc:{{{PREFIX}}}:{shard}", GROUP, "-", "+", 100)
    return [row["message_id"].decode() for row in rows]


@pytest.fixture
def group(api: Api) -> None:
    """orders/billing, 4 shards, member m1 owning all of them."""
    api.create_group()
    api.join("m1")
    AuditEntry.objects.all().delete()  # the set-up's own create_group row: the tests look at theirs


# ---------------------------------------------------------------------------------------------- skip


def test_skip_listed_entries_acknowledges_them_and_audits_their_fields(
    api: Api, store: Any, group: None
) -> None:
    ids = make_pending(store.client, 3)
    r = api.post(f"{SHARD_URL}/v1:0/skip", {"entry_ids": ids[:2], "reason": "poison: bad schema"})
    assert r.status_code == 200, r.content
    assert r.json() == {"shard": "v1:0", "skipped": ids[:2], "count": 2}
    assert pending_ids(store) == ids[2:]
    [row] = audit_rows()
    skipped = row.pop("details")
    assert row == {
        "username": API_ACTOR,
        "source": "api",
        "action": "skip_entries",
        "stream_prefix": PREFIX,
        "consumer_group": GROUP,
        "outcome": "ok",
        "message": "",
    }
    assert skipped["reason"] == "poison: bad schema" and skipped["entry_ids"] == ids[:2]
    assert skipped["count"] == 2
    assert [(e["id"], e["consumer"], e["deliveries"]) for e in skipped["skipped"]] == [
        (ids[0], "m1", 1),
        (ids[1], "m1", 1),
    ]
    assert skipped["skipped"][0]["fields"]["event_id"] == "evt-0"
    assert skipped["skipped"][1]["fields"]["payload"] == '{"n": 1}'


def test_skip_older_than_an_age_acknowledges_every_such_entry(api: Api, store: Any, group: None) -> None:
    ids = make_pending(store.client, 2, shard="v1:2")
    r = api.post(f"{SHARD_URL}/v1:2/skip", {"older_than_ms": 0, "reason": "drop the lot"})
    assert r.status_code == 200, r.content
    assert r.json() == {"shard": "v1:2", "skipped": ids, "count": 2}
    assert pending_ids(store, "v1:2") == []
    # Nothing that young: an empty skip is still an answer (and still audited).
    r = api.post(f"{SHARD_URL}/v1:2/skip", {"older_than_ms": 3_600_000, "reason": "again"})
    assert r.json() == {"shard": "v1:2", "skipped": [], "count": 0}
    assert [(row["outcome"], row["details"]["count"]) for row in audit_rows()] == [("ok", 2), ("ok", 0)]


def test_skip_of_an_entry_not_pending_acknowledges_nothing(api: Api, store: Any, group: None) -> None:
    ids = make_pending(store.client, 2)
    before = redis_snapshot(store.client)
    problem = assert_problem(
        api.post(f"{SHARD_URL}/v1:0/skip", {"entry_ids": [ids[0], "1-1"], "reason": "x"}),
        409,
        "ENTRY_NOT_PENDING",
    )
    assert problem["details"]["entry_ids"] == ["1-1"]
    assert redis_snapshot(store.client) == before
    [row] = audit_rows()
    assert (row["outcome"], row["details"]["error"]["entry_ids"]) == ("ENTRY_NOT_PENDING", ["1-1"])
    assert "nothing was skipped" in row["message"]


# ---------------------------------------------------------------------------------------------- redeliver


def test_redeliver_moves_the_shard_token_on_and_names_the_owner(api: Api, store: Any, group: None) -> None:
    r = api.post(f"{SHARD_URL}/v1:1/redeliver", {"reason": "handler fixed"})
    assert r.status_code == 202, r.content
    assert r.json() == {"shard": "v1:1", "redeliver_token": 1, "owner": "m1"}
    # The body may be left out altogether.
    r = api.post(f"{SHARD_URL}/v1:1/redeliver", content_type=None)
    assert r.status_code == 202, r.content
    assert r.json()["redeliver_token"] == 2
    assert store.client.hgetall(f"rsc:{{{PREFIX}}}:rd:{GROUP}") == {b"v1:1": b"2"}
    assert [(row["action"], row["details"]) for row in audit_rows()] == [
        ("redeliver", {"shard": "v1:1", "reason": "handler fixed", "redeliver_token": 1, "owner": "m1"}),
        ("redeliver", {"shard": "v1:1", "reason": "", "redeliver_token": 2, "owner": "m1"}),
    ]


# ---------------------------------------------------------------------------------------------- release-drain


@pytest.fixture
def stranded(api: Api, store: Any) -> int:
    """A strict migration 2 -> 4 held back by billing, which has no live member and 3 unconsumed entries
    on v1:0; the group ``audit`` has a live member. Returns billing's unconsumed count."""
    api.create_group(shard_count=2)
    api.create_group(group="audit", shard_count=2)
    api.heartbeat(group="audit", member_id="a1", member_epoch=0, capacity=1)
    for i in range(3):
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:0", {"n": str(i)})
    r = api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 4})
    assert r.status_code == 202, r.content
    AuditEntry.objects.all().delete()  # the set-up's own rows (create_group, change_shard_count)
    return int(store.unconsumed_for_release(PREFIX, GROUP))


def test_release_drain_needs_the_current_count_then_releases_the_group(
    api: Api, store: Any, stranded: int
) -> None:
    assert stranded == 3
    url = f"admin/groups/{PREFIX}/{GROUP}/release-drain"
    before = redis_snapshot(store.client)
    problem = assert_problem(
        api.post(url, {"confirm_unconsumed": 2, "reason": "billing is gone"}), 409, "CONFIRMATION_MISMATCH"
    )
    assert problem["details"]["unconsumed_entries"] == 3
    assert redis_snapshot(store.client) == before

    r = api.post(url, {"confirm_unconsumed": 3, "reason": "billing is gone"})
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["released"], body["unconsumed_entries"]) == (["v1:0", "v1:1"], 3)
    assert body["prefix"]["migration"]["drained"][GROUP] == ["v1:0", "v1:1"]
    assert [(row["outcome"], row["details"].get("unconsumed_entries")) for row in audit_rows()] == [
        ("CONFIRMATION_MISMATCH", None),
        ("ok", 3),
    ]
    assert audit_rows()[1]["details"]["released"] == ["v1:0", "v1:1"]
    # Done: nothing left to release.
    assert_problem(api.post(url, {"confirm_unconsumed": 0, "reason": "again"}), 409, "MIGRATION_NOT_ACTIVE")


def test_release_drain_refuses_a_group_with_live_members(api: Api, store: Any, stranded: int) -> None:
    before = redis_snapshot(store.client)
    assert_problem(
        api.post(f"admin/groups/{PREFIX}/audit/release-drain", {"confirm_unconsumed": 3, "reason": "x"}),
        409,
        "GROUP_HAS_LIVE_MEMBERS",
    )
    assert redis_snapshot(store.client) == before


# ---------------------------------------------------------------------------------------------- dead letters


def test_dead_letters_are_listed_in_pages_and_shown_one_by_one(api: Api, store: Any, group: None) -> None:
    ids = [add_dead_letter(store.client, i) for i in range(3)]
    body = api.get(DLQ_URL).json()
    assert (body["stream_key"], body["length"]) == (f"rsc:{{{PREFIX}}}:dlq:{GROUP}", 3)
    assert [e["id"] for e in body["entries"]] == ids
    first = body["entries"][0]
    assert first == {
        "id": ids[0],
        "source_shard": "v1:0",
        "source_id": "1700000000000-0",
        "deliveries": 5,
        "error": "ValueError: bad payload",
        "member_id": "m1",
        "at_ms": 1700000001000,
        "event_id": "evt-0",
        "partition_key": "key-0",
        "fields": first["fields"],
        "verdict": "SIGNED",
        "verdict_reason": "written by the dead-letter function (its MAC verifies)",
    }
    assert first["fields"]["payload"] == '{"n": 0}' and "dlq_error" not in first["fields"]
    page = api.get(f"{DLQ_URL}?after={ids[0]}&count=1").json()
    assert [e["id"] for e in page["entries"]] == [ids[1]]
    assert api.get(f"{DLQ_URL}/{ids[2]}").json()["event_id"] == "evt-2"
    assert_problem(api.get(f"{DLQ_URL}/1-0"), 404, "DEAD_LETTER_NOT_FOUND")
    assert audit_rows() == []  # reads are not audited


def test_replay_appends_to_the_active_version_and_removes_the_dead_letter(
    api: Api, store: Any, group: None
) -> None:
    ids = [add_dead_letter(store.client, i) for i in range(2)]
    r = api.post(f"{DLQ_URL}/replay", {"ids": [ids[1]], "reason": "fixed"})
    assert r.status_code == 200, r.content
    [replayed] = r.json()["replayed"]
    assert replayed["id"] == ids[1] and replayed["shard"].startswith("v1:")
    stream = f"rsc:{{{PREFIX}}}:{replayed['shard']}"
    [(entry_id, fields)] = store.client.xrange(stream)
    assert entry_id.decode() == replayed["entry_id"]
    assert fields[b"event_id"] == b"evt-1" and b"dlq_error" not in fields
    assert [e["id"] for e in api.get(DLQ_URL).json()["entries"]] == [ids[0]]
    [row] = audit_rows()
    assert (row["action"], row["outcome"], row["details"]["replayed"]) == (
        "replay_dead_letters",
        "ok",
        [replayed],
    )
    before = redis_snapshot(store.client)
    assert_problem(api.post(f"{DLQ_URL}/replay", {"ids": [ids[1]]}), 404, "DEAD_LETTER_NOT_FOUND")
    assert redis_snapshot(store.client) == before


def test_a_dead_letter_the_function_did_not_write_is_refused_and_unsigned_ones_need_accept_unsigned(
    api: Api, store: Any, group: None
) -> None:
    """docs/protocol.md section 14: 409 DEAD_LETTER_NOT_VERIFIED, nothing replayed, audited as refused."""
    dlq = f"rsc:{{{PREFIX}}}:dlq:{GROUP}"
    real = add_dead_letter(store.client, 0)
    unsigned = store.client.xadd(dlq, {"event_id": "evt-u", "partition_key": "k", "payload": "{}"}).decode()
    forged = store.client.xadd(dlq, {"event_id": "evt-f", "payload": "{}", "dlq_mac": "f" * 40}).decode()
    verdicts = {e["id"]: e["verdict"] for e in api.get(DLQ_URL).json()["entries"]}
    assert verdicts == {real: "SIGNED", unsigned: "UNSIGNED", forged: "FORGED"}
    before = redis_snapshot(store.client)
    r = api.post(f"{DLQ_URL}/replay", {"ids": [real, forged]})
    assert_problem(r, 409, "DEAD_LETTER_NOT_VERIFIED")
    assert r.json()["details"]["refused"] == [{"id": forged, "verdict": "FORGED"}]
    assert_problem(api.post(f"{DLQ_URL}/replay", {"ids": [unsigned]}), 409, "DEAD_LETTER_NOT_VERIFIED")
    r = api.post(f"{DLQ_URL}/replay", {"ids": [forged], "accept_unsigned": True})
    assert_problem(r, 409, "DEAD_LETTER_NOT_VERIFIED")
    r = api.post(f"{DLQ_URL}/replay", {"ids": [unsigned], "accept_unsigned": "yes"})
    assert_problem(r, 400, "INVALID_REQUEST")
    assert redis_snapshot(store.client) == before
    r = api.post(f"{DLQ_URL}/replay", {"ids": [real, unsigned], "accept_unsigned": True, "reason": "checked"})
    assert r.status_code == 200, r.content
    assert [x["id"] for x in r.json()["replayed"]] == [real, unsigned]
    rows = audit_rows()
    assert [row["outcome"].split(":")[0] for row in rows] == ["DEAD_LETTER_NOT_VERIFIED"] * 3 + ["ok"]
    assert rows[-1]["details"]["accept_unsigned"] is True
    assert rows[0]["details"]["error"]["refused"] == [{"id": forged, "verdict": "FORGED"}]


def test_purge_listed_dead_letters_then_all(api: Api, store: Any, group: None) -> None:
    ids = [add_dead_letter(store.client, i) for i in range(3)]
    r = api.post(f"{DLQ_URL}/purge", {"ids": [ids[0]], "reason": "junk"})
    assert r.status_code == 200 and r.json() == {"purged": 1}
    r = api.post(f"{DLQ_URL}/purge", {"all": True, "reason": "all junk"})
    assert r.status_code == 200 and r.json() == {"purged": 2}
    assert api.get(DLQ_URL).json()["length"] == 0
    details = [row["details"] for row in audit_rows()]
    assert [(d["ids"], d["all"], d["purged"]) for d in details] == [([ids[0]], False, 1), (None, True, 2)]


# ---------------------------------------------------------------------------------------------- retention


def test_set_retention_returns_the_prefix_and_audits_the_previous_policy(api: Api, group: None) -> None:
    url = f"admin/stream-prefixes/{PREFIX}/retention"
    r = api.put(url, {"max_age_ms": 86_400_000, "max_len": None, "retired_grace_ms": 60_000})
    assert r.status_code == 200, r.content
    assert r.json()["retention"] == {
        "mode": "acked",
        "max_age_ms": 86_400_000,
        "max_len": None,
        "retired_grace_ms": 60_000,
    }
    r = api.put(url, {"max_age_ms": None, "max_len": 1_000, "reason": "bounded memory"})
    no_age = {"mode": "acked", "max_age_ms": None, "max_len": 1_000, "retired_grace_ms": 0}
    assert r.json()["retention"] == no_age
    assert api.get(f"admin/stream-prefixes/{PREFIX}").json()["retention"]["max_len"] == 1_000
    rows = audit_rows()
    assert [(row["action"], row["consumer_group"], row["outcome"]) for row in rows] == [
        ("set_retention", "", "ok"),
        ("set_retention", "", "ok"),
    ]
    assert rows[1]["details"] == {
        "policy": {"max_age_ms": None, "max_len": 1_000, "retired_grace_ms": 0},
        "reason": "bounded memory",
        "previous": {"mode": "acked", "max_age_ms": 86_400_000, "max_len": None, "retired_grace_ms": 60_000},
    }


# ---------------------------------------------------------------------------------------------- delete prefix


def test_delete_prefix_is_refused_while_it_has_groups_unless_forced(
    api: Api, store: Any, group: None
) -> None:
    make_pending(store.client, 2)
    url = f"admin/stream-prefixes/{PREFIX}"
    before = redis_snapshot(store.client)
    for query in ("", "?force=false"):
        problem = assert_problem(api.delete(url + query), 409, "STREAM_PREFIX_NOT_EMPTY")
        assert problem["details"]["consumer_groups"] == [GROUP]
        assert problem["details"]["unconsumed_entries"] == 2
    assert redis_snapshot(store.client) == before

    r = api.delete(f"{url}?force=true&reason=decommissioned")
    assert r.status_code == 204 and r.content == b""
    assert store.client.keys(f"rsc:{{{PREFIX}}}:*") == []
    assert store.stream_prefixes() == []
    assert_problem(api.get(url), 404, "STREAM_PREFIX_NOT_FOUND")
    rows = audit_rows()
    assert [(row["action"], row["outcome"]) for row in rows] == [
        ("delete_prefix", "STREAM_PREFIX_NOT_EMPTY"),
        ("delete_prefix", "STREAM_PREFIX_NOT_EMPTY"),
        ("delete_prefix", "ok"),
    ]
    assert rows[2]["details"]["usage"] == {"groups": [GROUP], "unconsumed_entries": 2, "streams": 4}
    assert rows[2]["details"]["force"] is True and rows[2]["details"]["reason"] == "decommissioned"
    assert rows[2]["details"]["deleted_keys"] >= 5


def test_an_empty_prefix_is_deleted_without_force(api: Api, store: Any) -> None:
    api.create_group()
    assert api.delete(f"admin/groups/{PREFIX}/{GROUP}").status_code == 204
    assert api.delete(f"admin/stream-prefixes/{PREFIX}").status_code == 204
    assert store.client.keys(f"rsc:{{{PREFIX}}}:*") == []
    assert_problem(api.delete(f"admin/stream-prefixes/{PREFIX}"), 404, "STREAM_PREFIX_NOT_FOUND")


# ---------------------------------------------------------------------------------------------- actors


def test_a_staff_session_acts_as_its_user(api: Api, store: Any, group: None) -> None:
    user = User.objects.create_user("ops", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="manage_groups"))
    client = Client()
    client.force_login(user)
    r = Api(client).post(f"{SHARD_URL}/v1:0/redeliver", {}, token=None)
    assert r.status_code == 202, r.content
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.user, entry.source) == ("ops", user, "api")
