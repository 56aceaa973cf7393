"""The pre-DRF heartbeat fast path (coordinator/api/fastpath.py) answers exactly what the DRF view
answers: a corpus of requests, each sent from the same Redis state through both doors, must give the
same status, headers and body, byte for byte, and leave the same metadata. Steady heartbeats must be
answered without DRF."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import RequestFactory

from coordinator.api import fastpath
from coordinator.api.views import HeartbeatView
from coordinator.models import ApiCredential
from coordinator.store import MetadataStore
from rsc_redis.keys import CREDENTIAL_MEMBERS

from .helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, expires_by_itself

PATH = f"/api/v1/groups/{PREFIX}/{GROUP}/heartbeat"
ALL = ["v1:0", "v1:1", "v1:2", "v1:3"]
# Headers that differ between two runs by nature, compared for presence only.
TIMING = {"Retry-After"}


@pytest.fixture
def steady(api: Api, store: MetadataStore) -> int:
    api.create_group(heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    joined = api.join("m1")
    assert joined["member_state"] == "STABLE"
    return int(joined["member_epoch"])


def snapshot(store: MetadataStore) -> dict[bytes, bytes]:
    return {key: store.client.dump(key) for key in store.client.keys("*") if not expires_by_itself(key)}


def restore(store: MetadataStore, state: dict[bytes, bytes]) -> None:
    store.client.flushall()
    for key, value in state.items():
        store.client.restore(key, 0, value)


def through(view: Callable[..., Any], body: Any, token: str | None, **meta: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    prefix = meta.pop("prefix", PREFIX)
    content_type = meta.pop("content_type", "application/json")
    request = RequestFactory().generic("POST", PATH, raw, content_type=content_type, **headers)
    response = view(request, stream_prefix=prefix, consumer_group=GROUP)
    if hasattr(response, "render"):
        response.render()
    return response


def comparable(response: Any) -> tuple[int, dict[str, str], bytes]:
    headers = {k: ("<present>" if k in TIMING else v) for k, v in response.headers.items()}
    return response.status_code, headers, comparable_body(response.get("Content-Type", ""), response.content)


def comparable_body(content_type: str, body: bytes) -> bytes:
    """A problem body without what differs between two runs by nature (the retry wait, incident ids)."""
    if "application/problem+json" not in content_type:
        return body
    problem = json.loads(body)
    problem.get("details", {}).pop("retry_after_ms", None)
    if problem["code"] == "HEARTBEAT_TOO_FREQUENT":
        problem["detail"] = problem["detail"].split(": retry in")[0]
    problem.pop("incident_id", None)
    return json.dumps(problem, sort_keys=True).encode()


def corpus(epoch: int, scoped: str) -> list[tuple[str, Any, str | None, dict[str, Any]]]:
    steady = {"member_id": "m1", "member_epoch": epoch}
    return [
        ("steady", steady, MEMBER_TOKEN, {}),
        ("steady, owned reported", {**steady, "owned_shards": ALL}, MEMBER_TOKEN, {}),
        ("steady, owned unordered", {**steady, "owned_shards": ALL[::-1]}, MEMBER_TOKEN, {}),
        ("steady, same capacity", {**steady, "capacity": 2}, MEMBER_TOKEN, {}),
        ("steady, owned null", {**steady, "owned_shards": None, "capacity": None}, MEMBER_TOKEN, {}),
        ("steady, charset", steady, MEMBER_TOKEN, {"content_type": "application/json; charset=utf-8"}),
        ("capacity change", {**steady, "capacity": 3}, MEMBER_TOKEN, {}),
        ("owned differs", {**steady, "owned_shards": ALL[:2]}, MEMBER_TOKEN, {}),
        ("stale epoch", {**steady, "member_epoch": epoch + 5}, MEMBER_TOKEN, {}),
        ("unknown member", {"member_id": "ghost", "member_epoch": 3}, MEMBER_TOKEN, {}),
        ("join", {"member_id": "m2", "member_epoch": 0, "capacity": 1}, MEMBER_TOKEN, {}),
        ("leave", {"member_id": "m1", "member_epoch": -1}, MEMBER_TOKEN, {}),
        (
            "client info",
            {**steady, "client": {"host": "h", "pid": 1, "listener": "l", "version": "v"}},
            MEMBER_TOKEN,
            {},
        ),
        ("another credential", steady, ADMIN_TOKEN, {}),
        ("out of scope", steady, scoped, {}),
        ("no credential", steady, None, {}),
        ("wrong token", steady, "not-a-token", {}),
        ("duplicate key", b'{"member_id": "m1", "member_epoch": 1, "member_epoch": 1}', MEMBER_TOKEN, {}),
        ("NaN", b'{"member_id": "m1", "member_epoch": NaN}', MEMBER_TOKEN, {}),
        ("not an object", [steady], MEMBER_TOKEN, {}),
        ("unknown field", {**steady, "zz": 1}, MEMBER_TOKEN, {}),
        ("boolean epoch", {**steady, "member_epoch": True}, MEMBER_TOKEN, {}),
        ("string epoch", {**steady, "member_epoch": str(epoch)}, MEMBER_TOKEN, {}),
        ("float epoch", {**steady, "member_epoch": float(epoch)}, MEMBER_TOKEN, {}),
        ("epoch too large", {**steady, "member_epoch": 2**60}, MEMBER_TOKEN, {}),
        ("bad member id", {**steady, "member_id": "m:1"}, MEMBER_TOKEN, {}),
        ("bad shard", {**steady, "owned_shards": ["v0:1"]}, MEMBER_TOKEN, {}),
        ("shard not a string", {**steady, "owned_shards": [1]}, MEMBER_TOKEN, {}),
        ("capacity zero", {**steady, "capacity": 0}, MEMBER_TOKEN, {}),
        ("text/plain", steady, MEMBER_TOKEN, {"content_type": "text/plain"}),
        ("latin-1", steady, MEMBER_TOKEN, {"content_type": "application/json; charset=latin-1"}),
        ("empty body", b"", MEMBER_TOKEN, {}),
        ("bad prefix", steady, MEMBER_TOKEN, {"prefix": "bad{x}"}),
    ]


def test_both_doors_answer_every_request_alike(steady: int, store: MetadataStore, settings: Any) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS = 0  # the floor has its own case below
    _credential, scoped = ApiCredential.issue("elsewhere", "member", stream_prefixes="payments")
    drf = HeartbeatView.as_view()
    start = snapshot(store)
    for name, body, token, meta in corpus(steady, scoped):
        restore(store, start)
        fast = through(fastpath.heartbeat, body, token, **dict(meta))
        after_fast = snapshot(store)
        restore(store, start)
        slow = through(drf, body, token, **dict(meta))
        assert comparable(fast) == comparable(slow), name
        assert _without_leases(after_fast) == _without_leases(snapshot(store)), name


def _without_leases(state: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """Keys other than the metadata hash and the lease index byte for byte; leases are Redis TIME + TTL,
    so they differ between two runs by the milliseconds between them (the hash's other fields are
    compared; the index follows the l: fields, tests/store/test_tick_index.py). Nor a credential's live
    members, scored by Redis TIME too (tests/api/test_credential_limits.py)."""
    skip = {f"rsc:{{{PREFIX}}}:meta".encode(), f"rsc:{{{PREFIX}}}:lz".encode()}
    members = CREDENTIAL_MEMBERS.pattern()
    return {k: v for k, v in state.items() if k not in skip and not fnmatch.fnmatchcase(k.decode(), members)}


def test_the_metadata_fields_match_too(steady: int, store: MetadataStore, settings: Any) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS = 0
    drf = HeartbeatView.as_view()
    for body in (
        {"member_id": "m1", "member_epoch": steady, "capacity": 3},
        {"member_id": "m1", "member_epoch": -1},
    ):
        start = snapshot(store)
        through(fastpath.heartbeat, body, MEMBER_TOKEN)
        fast = {k: v for k, v in store.raw_metadata(PREFIX).items() if not k.startswith(b"l:")}
        restore(store, start)
        through(drf, body, MEMBER_TOKEN)
        slow = {k: v for k, v in store.raw_metadata(PREFIX).items() if not k.startswith(b"l:")}
        assert _normalized(fast) == _normalized(slow)
        restore(store, start)


def _normalized(meta: dict[bytes, bytes]) -> dict[bytes, Any]:
    """The documents without their time stamps (Redis TIME at the decision) and commit tokens."""
    out: dict[bytes, Any] = {}
    for key, value in meta.items():
        if key == b"txn":
            continue
        if key.startswith(b"d:"):  # a member's record
            member = json.loads(value)
            member.pop("last_heartbeat_ms", None)
            member.pop("ended_at_ms", None)
            member.pop("joined_at_ms", None)
            member.pop("revocation_deadline_ms", None)
            out[key] = member
        elif key.startswith(b"dl:"):  # a change-log entry: its commit's token is random
            seq, _token, *tags = value.split(b" ")
            out[key] = (seq, tags)
        elif key.startswith((b"g#:", b"gm#:", b"d#:", b"r:")):
            continue  # revisions count commits, which differ between paths; r: is the response compared above
        elif key.startswith(b"ts:"):
            deadline, ended, oldest = value.split()  # the oldest end is a time stamp too
            out[key] = (deadline, ended, oldest == b"-")
        else:
            out[key] = value
    return out


@pytest.fixture
def drf_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests that reached the DRF view (not answered by the fast path)."""
    calls: list[str] = []
    real = fastpath._drf_view

    def counting(request: Any, **kwargs: Any) -> Any:
        calls.append(request.path)
        return real(request, **kwargs)

    monkeypatch.setattr(fastpath, "_drf_view", counting)
    return calls


def test_steady_heartbeats_never_reach_drf(steady: int, drf_calls: list[str]) -> None:
    calls = drf_calls
    calls.clear()  # whatever of the fixture's join it saw
    body = {"member_id": "m1", "member_epoch": steady}
    for _ in range(5):
        assert through(fastpath.heartbeat, body, MEMBER_TOKEN).status_code == 200
    assert calls == []
    assert through(fastpath.heartbeat, {**body, "capacity": 5}, MEMBER_TOKEN).status_code == 200
    assert calls == [PATH]  # not steady: DRF decides


def test_a_floor_refusal_is_answered_alike_and_counted_once(
    steady: int, store: MetadataStore, settings: Any
) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS, settings.RSC_HEARTBEAT_BURST = 60_000, 2
    body = {"member_id": "m1", "member_epoch": steady}
    assert through(fastpath.heartbeat, body, MEMBER_TOKEN).status_code == 200
    # not steady (capacity change): the script ran once here; DRF must not run it (and count) again
    assert through(fastpath.heartbeat, {**body, "capacity": 3}, MEMBER_TOKEN).status_code == 200
    fast = through(fastpath.heartbeat, body, MEMBER_TOKEN)
    slow = through(HeartbeatView.as_view(), body, MEMBER_TOKEN)
    assert fast.status_code == slow.status_code == 429
    assert comparable(fast) == comparable(slow)


def test_many_owned_shards_in_any_order_are_steady_and_a_wrong_one_is_not(
    api: Api, drf_calls: list[str]
) -> None:
    """The owned list is parsed once per process (cached) and compared in Shard order, numeric (v1:2
    before v1:10, which text order would not give): a shuffled list of 12 shards is steady every time,
    from the cache too; the same list with one shard changed is not (DRF decides)."""
    api.create_group(shard_count=12, heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    joined = api.join("m1")
    owned = [s["shard"] for s in joined["shards"]]
    assert len(owned) == 12
    assert drf_calls == [PATH]  # the join: DRF's
    calls = drf_calls
    calls.clear()
    body = {"member_id": "m1", "member_epoch": joined["member_epoch"]}
    for order in (owned, owned[::-1], sorted(owned), owned[::-1]):
        response = through(fastpath.heartbeat, {**body, "owned_shards": order}, MEMBER_TOKEN)
        assert response.status_code == 200
        assert json.loads(response.content)["member_state"] == "STABLE"
    assert calls == []
    wrong = [*owned[:-1], "v1:12"]
    assert through(fastpath.heartbeat, {**body, "owned_shards": wrong}, MEMBER_TOKEN).status_code == 200
    assert calls == [PATH]


def test_a_member_a_bump_left_settled_is_answered_fast_with_the_new_epochs(
    api: Api, store: MetadataStore, settings: Any, drf_calls: list[str]
) -> None:
    """docs/protocol.md section 4: a join that does not move m1's target (one shard, m1 keeps it) bumps
    the group but leaves m1 settled at its epoch. Its stored response carries the epochs of the commit
    that wrote it; the fast path answers with the group's current ones, byte for byte what DRF
    answers, without DRF."""
    settings.RSC_HEARTBEAT_FLOOR_MS = 0
    api.create_group(shard_count=1, heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    m1 = api.join("m1")
    api.join("m2")
    api.join("m3")
    drf_calls.clear()
    body = {"member_id": "m1", "member_epoch": m1["member_epoch"], "owned_shards": ["v1:0"]}
    start = snapshot(store)
    fast = through(fastpath.heartbeat, body, MEMBER_TOKEN)
    assert drf_calls == []
    answer = json.loads(fast.content)
    assert (answer["member_epoch"], answer["group_epoch"], answer["assignment_epoch"]) == (
        m1["member_epoch"],
        m1["group_epoch"] + 2,
        m1["assignment_epoch"] + 2,
    )
    assert answer == {**m1, "group_epoch": m1["group_epoch"] + 2, "assignment_epoch": m1["group_epoch"] + 2}
    restore(store, start)
    slow = through(HeartbeatView.as_view(), body, MEMBER_TOKEN)
    assert comparable(fast) == comparable(slow)


def test_no_store_configured_is_worded_by_drf(steady: int, drf_calls: list[str], settings: Any) -> None:
    settings.REDIS_URL = ""  # get_store() refuses: the DRF view words it as a problem, no traceback
    body = {"member_id": "m1", "member_epoch": steady}
    drf_calls.clear()
    response = through(fastpath.heartbeat, body, MEMBER_TOKEN)
    assert drf_calls == [PATH]
    assert response.status_code == 503 and response["Content-Type"] == "application/problem+json"
