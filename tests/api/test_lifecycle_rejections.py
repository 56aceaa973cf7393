"""Bad input to the lifecycle endpoints: each is a problem with its stable code, and nothing changes.

"Nothing changes" is checked on the whole private Redis (every key's DUMP: the metadata hash byte for
byte, the streams with their consumer groups and pending lists) and on the audit table. A request
refused for its shape writes no audit row; one refused by the store (an unknown shard, a missing
group) was an attempted change and is audited with its error code.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError

from coordinator.models import AuditEntry

from .helpers import (
    GROUP,
    MEMBER_TOKEN,
    PREFIX,
    Api,
    add_dead_letter,
    assert_problem,
    make_pending,
    redis_snapshot,
)

GROUP_URL = f"admin/groups/{PREFIX}/{GROUP}"
SKIP = f"{GROUP_URL}/shards/v1:0/skip"
REDELIVER = f"{GROUP_URL}/shards/v1:0/redeliver"
RELEASE = f"{GROUP_URL}/release-drain"
DLQ = f"{GROUP_URL}/dead-letters"
RETENTION = f"admin/stream-prefixes/{PREFIX}/retention"
PREFIX_URL = f"admin/stream-prefixes/{PREFIX}"
ID = "1700000000000-0"
LONG = "x" * 501


@pytest.fixture
def live(api: Api, store: Any) -> list[str]:
    """orders/billing with m1 owning every shard, 2 entries pending on v1:0 and one dead letter."""
    api.create_group()
    api.join("m1")
    add_dead_letter(store.client, 0)
    pending = make_pending(store.client, 2)
    AuditEntry.objects.all().delete()  # the set-up's own create_group row: the tests count theirs
    return pending


def assert_unchanged(store: Any, before: dict[bytes, bytes]) -> None:
    assert redis_snapshot(store.client) == before


IR, II = "INVALID_REQUEST", "INVALID_IDENTIFIER"
SKIP_ALL = {"older_than_ms": 0, "reason": "r"}
NO_CAPS = {"max_age_ms": None, "max_len": None}
# (method, path, body, code, the field the first error names); every one is a 400.
BAD_INPUT: list[tuple[str, str, Any, str, str | None]] = [
    # the shard in the path
    ("POST", f"{GROUP_URL}/shards/v1-0/skip", SKIP_ALL, IR, "shard"),
    ("POST", f"{GROUP_URL}/shards/v0:1/skip", SKIP_ALL, IR, "shard"),
    ("POST", f"{GROUP_URL}/shards/1:0/redeliver", {}, IR, "shard"),
    ("POST", f"{GROUP_URL}/shards/v1:01/redeliver", {}, IR, "shard"),
    # identifiers in the path
    ("POST", f"admin/groups/{PREFIX}/bad%20group/shards/v1:0/redeliver", {}, II, None),
    ("GET", "admin/groups/-x/billing/dead-letters", None, II, None),
    ("PUT", "admin/stream-prefixes/a:b/retention", {"max_age_ms": None, "max_len": None}, II, None),
    # skip bodies
    ("POST", SKIP, {"entry_ids": ["abc"], "reason": "r"}, IR, "entry_ids[0]"),
    ("POST", SKIP, {"entry_ids": [ID, "1-2-3"], "reason": "r"}, IR, "entry_ids[1]"),
    ("POST", SKIP, {"entry_ids": [f"{2**64}-0"], "reason": "r"}, IR, "entry_ids[0]"),
    ("POST", SKIP, {"entry_ids": [" 1-0"], "reason": "r"}, IR, "entry_ids[0]"),
    ("POST", SKIP, {"entry_ids": [1], "reason": "r"}, IR, "entry_ids[0]"),
    ("POST", SKIP, {"entry_ids": ID, "reason": "r"}, IR, "entry_ids"),
    ("POST", SKIP, {"entry_ids": [], "reason": "r"}, IR, "entry_ids"),
    ("POST", SKIP, {"entry_ids": [f"1-{i}" for i in range(1001)], "reason": "r"}, IR, "entry_ids"),
    ("POST", SKIP, {"entry_ids": [ID]}, IR, "reason"),
    ("POST", SKIP, {"entry_ids": [ID], "reason": ""}, IR, "reason"),
    ("POST", SKIP, {"entry_ids": [ID], "reason": "   "}, IR, "reason"),
    ("POST", SKIP, {"entry_ids": [ID], "reason": LONG}, IR, "reason"),
    ("POST", SKIP, {"entry_ids": [ID], "reason": 5}, IR, "reason"),
    ("POST", SKIP, {"entry_ids": [ID], "older_than_ms": 0, "reason": "r"}, IR, None),
    ("POST", SKIP, {"reason": "r"}, IR, None),
    ("POST", SKIP, {"older_than_ms": -1, "reason": "r"}, IR, "older_than_ms"),
    ("POST", SKIP, {"older_than_ms": 31_536_000_001, "reason": "r"}, IR, "older_than_ms"),
    ("POST", SKIP, {"older_than_ms": "5", "reason": "r"}, IR, "older_than_ms"),
    ("POST", SKIP, {"older_than_ms": 1.5, "reason": "r"}, IR, "older_than_ms"),
    ("POST", SKIP, {"older_than_ms": None, "reason": "r"}, IR, "older_than_ms"),
    ("POST", SKIP, {"older_than_ms": 0, "reason": "r", "force": True}, IR, "force"),
    ("POST", SKIP, [ID], IR, None),
    # redeliver bodies
    ("POST", REDELIVER, {"reason": LONG}, IR, "reason"),
    ("POST", REDELIVER, {"member_id": "m1"}, IR, "member_id"),
    # release-drain bodies
    ("POST", RELEASE, {"confirm_unconsumed": -1, "reason": "r"}, IR, "confirm_unconsumed"),
    ("POST", RELEASE, {"confirm_unconsumed": "3", "reason": "r"}, IR, "confirm_unconsumed"),
    ("POST", RELEASE, {"confirm_unconsumed": True, "reason": "r"}, IR, "confirm_unconsumed"),
    ("POST", RELEASE, {"reason": "r"}, IR, "confirm_unconsumed"),
    ("POST", RELEASE, {"confirm_unconsumed": 0}, IR, "reason"),
    ("POST", RELEASE, {"confirm_unconsumed": 0, "reason": "r", "all": True}, IR, "all"),
    # dead-letter reads: query and path
    ("GET", f"{DLQ}?count=0", None, IR, "count"),
    ("GET", f"{DLQ}?count=501", None, IR, "count"),
    ("GET", f"{DLQ}?count=05", None, IR, "count"),
    ("GET", f"{DLQ}?count=ten", None, IR, "count"),
    ("GET", f"{DLQ}?after=xyz", None, IR, "after"),
    ("GET", f"{DLQ}?after=", None, IR, "after"),
    ("GET", f"{DLQ}?start=-", None, IR, "start"),
    ("GET", f"{DLQ}?count=1&count=2", None, IR, "count"),
    ("GET", f"{DLQ}/abc", None, IR, "dead_letter_id"),
    ("GET", f"{DLQ}/1-0-0", None, IR, "dead_letter_id"),
    # replay and purge bodies
    ("POST", f"{DLQ}/replay", {}, IR, "ids"),
    ("POST", f"{DLQ}/replay", {"ids": []}, IR, "ids"),
    ("POST", f"{DLQ}/replay", {"ids": ["x"]}, IR, "ids[0]"),
    ("POST", f"{DLQ}/replay", {"ids": [ID], "all": True}, IR, "all"),
    ("POST", f"{DLQ}/purge", {"reason": "r"}, IR, None),
    ("POST", f"{DLQ}/purge", {"all": False, "reason": "r"}, IR, None),
    ("POST", f"{DLQ}/purge", {"ids": [ID], "all": True, "reason": "r"}, IR, None),
    ("POST", f"{DLQ}/purge", {"all": "true", "reason": "r"}, IR, "all"),
    ("POST", f"{DLQ}/purge", {"all": True}, IR, "reason"),
    ("POST", f"{DLQ}/purge", {"ids": ["1-x"], "reason": "r"}, IR, "ids[0]"),
    # retention bodies
    ("PUT", RETENTION, {"max_age_ms": 59_999, "max_len": None}, IR, "max_age_ms"),
    ("PUT", RETENTION, {"max_age_ms": 31_536_000_001, "max_len": None}, IR, "max_age_ms"),
    ("PUT", RETENTION, {"max_age_ms": None, "max_len": 999}, IR, "max_len"),
    ("PUT", RETENTION, {"max_age_ms": None, "max_len": 1_000_000_001}, IR, "max_len"),
    ("PUT", RETENTION, {**NO_CAPS, "retired_grace_ms": -1}, IR, "retired_grace_ms"),
    ("PUT", RETENTION, {**NO_CAPS, "retired_grace_ms": None}, IR, "retired_grace_ms"),
    ("PUT", RETENTION, {"max_age_ms": "60000", "max_len": None}, IR, "max_age_ms"),
    ("PUT", RETENTION, {"max_len": None}, IR, "max_age_ms"),
    ("PUT", RETENTION, {**NO_CAPS, "mode": "acked"}, IR, "mode"),
    # prefix deletion: the query
    ("DELETE", f"{PREFIX_URL}?force=yes", None, IR, "force"),
    ("DELETE", f"{PREFIX_URL}?force=1", None, IR, "force"),
    ("DELETE", f"{PREFIX_URL}?force=True", None, IR, "force"),
    ("DELETE", f"{PREFIX_URL}?force=", None, IR, "force"),
    ("DELETE", f"{PREFIX_URL}?force=true&force=true", None, IR, "force"),
    ("DELETE", f"{PREFIX_URL}?force=true&cascade=true", None, IR, "cascade"),
    ("DELETE", f"{PREFIX_URL}?force=true&reason={LONG}", None, IR, "reason"),
]


@pytest.mark.parametrize(("method", "path", "body", "code", "field"), BAD_INPUT)
def test_bad_input_is_a_problem_and_changes_nothing(
    api: Api, store: Any, live: list[str], method: str, path: str, body: Any, code: str, field: str | None
) -> None:
    before = redis_snapshot(store.client)
    kwargs = {} if body is None else {"body": body}
    problem = assert_problem(api.request(method, path, **kwargs), 400, code)
    if code == "INVALID_REQUEST":
        assert problem["errors"][0]["field"] == field, problem
    assert_unchanged(store, before)
    assert AuditEntry.objects.count() == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "details"),
    [
        ("POST", f"{GROUP_URL}/shards/v9:0/skip", SKIP_ALL, "SHARD_NOT_FOUND",
         {"field": "shard", "shard": "v9:0"}),
        ("POST", f"{GROUP_URL}/shards/v1:4/redeliver", {}, "SHARD_NOT_FOUND",
         {"field": "shard", "shard": "v1:4"}),
        ("POST", f"admin/groups/{PREFIX}/nope/shards/v1:0/redeliver", {}, "GROUP_NOT_FOUND",
         {"stream_prefix": PREFIX, "consumer_group": "nope"}),
        ("POST", f"admin/groups/{PREFIX}/nope/release-drain", {"confirm_unconsumed": 0, "reason": "r"},
         "GROUP_NOT_FOUND", {"stream_prefix": PREFIX, "consumer_group": "nope"}),
        ("POST", RELEASE, {"confirm_unconsumed": 0, "reason": "r"}, "GROUP_HAS_LIVE_MEMBERS",
         {"consumer_group": GROUP, "live_members": ["m1"]}),
        ("PUT", "admin/stream-prefixes/nope/retention", {"max_age_ms": None, "max_len": None},
         "STREAM_PREFIX_NOT_FOUND", {"stream_prefix": "nope"}),
        ("DELETE", "admin/stream-prefixes/nope?force=true", None, "STREAM_PREFIX_NOT_FOUND",
         {"stream_prefix": "nope"}),
    ],
)  # fmt: skip
def test_refusals_of_the_store_change_nothing_and_are_audited(
    api: Api, store: Any, live: list[str], method: str, path: str, body: Any, code: str, details: Any
) -> None:
    from coordinator.api.errors import HTTP_STATUS

    before = redis_snapshot(store.client)
    kwargs = {} if body is None else {"body": body}
    problem = assert_problem(api.request(method, path, **kwargs), HTTP_STATUS[code][0], code)
    if details is not None:
        assert problem["details"] == details
    assert_unchanged(store, before)
    [entry] = AuditEntry.objects.all()
    assert (entry.outcome, entry.message) == (code, problem["detail"])


@pytest.mark.parametrize("action", ["skip", "redeliver"])
def test_a_shard_in_the_path_that_does_not_exist_is_a_404(
    api: Api, store: Any, live: list[str], action: str
) -> None:
    """A missing resource, like a missing group (issue 31: it was 400 UNKNOWN_SHARD): 404 SHARD_NOT_FOUND
    in the problem-details shape, naming the shard; a malformed shard stays a 400."""
    body = SKIP_ALL if action == "skip" else {}
    response = api.request("POST", f"{GROUP_URL}/shards/v9:0/{action}", body=body)
    assert response.status_code == 404
    problem = assert_problem(response, 404, "SHARD_NOT_FOUND")
    assert problem["details"] == {"field": "shard", "shard": "v9:0"} and problem["retriable"] is False
    assert "v9:0 is not a shard of stream prefix" in problem["detail"]
    malformed = api.request("POST", f"{GROUP_URL}/shards/nine/{action}", body=body)
    assert_problem(malformed, 400, "INVALID_REQUEST")


# Every action endpoint, with a body it would accept: (method, path, body).
ACTIONS: list[tuple[str, str, Any]] = [
    ("POST", SKIP, SKIP_ALL),
    ("POST", REDELIVER, {}),
    ("POST", RELEASE, {"confirm_unconsumed": 0, "reason": "r"}),
    ("POST", f"{DLQ}/replay", {"ids": [ID]}),
    ("POST", f"{DLQ}/purge", {"all": True, "reason": "r"}),
    ("PUT", RETENTION, {"max_age_ms": None, "max_len": 5_000}),
    ("DELETE", f"{PREFIX_URL}?force=true", None),
]
READS = [("GET", DLQ, None), ("GET", f"{DLQ}/{ID}", None)]


@pytest.mark.parametrize(("method", "path", "body"), ACTIONS + READS)
def test_a_member_credential_gets_403(
    api: Api, store: Any, live: list[str], method: str, path: str, body: Any
) -> None:
    before = redis_snapshot(store.client)
    kwargs = {} if body is None else {"body": body}
    assert_problem(api.request(method, path, token=MEMBER_TOKEN, **kwargs), 403, "PERMISSION_DENIED")
    assert_problem(api.request(method, path, token=None, **kwargs), 401, "UNAUTHENTICATED")
    assert_unchanged(store, before)
    assert AuditEntry.objects.count() == 0


@pytest.mark.parametrize(("method", "path", "body"), ACTIONS)
def test_no_audit_row_no_change(
    api: Api, store: Any, live: list[str], monkeypatch: pytest.MonkeyPatch, method: str, path: str, body: Any
) -> None:
    """The audit row is written before the change: when it cannot be, the store is never called."""

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)
    before = redis_snapshot(store.client)
    kwargs = {} if body is None else {"body": body}
    problem = assert_problem(api.request(method, path, **kwargs), 503, "AUDIT_UNAVAILABLE")
    assert problem["retriable"] is True
    assert "nothing was changed" in problem["detail"] and "disk" not in problem["detail"]
    assert_unchanged(store, before)
    assert AuditEntry.objects.count() == 0
