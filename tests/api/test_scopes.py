"""Trust boundaries of the member endpoints: credential scopes, member-id ownership, the heartbeat floor
and credential changes that apply in every process at once (docs/protocol.md section 13, "Credentials
and scopes"). Real API, real private Redis; every refusal is checked to change nothing in Redis."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from coordinator import credentials
from coordinator.models import ApiCredential
from coordinator.protocol.group import Heartbeat
from coordinator.store import MetadataStore
from rsc_redis.keys import heartbeat_rate_key

from .helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

HB = f"groups/{PREFIX}/{GROUP}/heartbeat"
JOIN = {"member_epoch": 0, "capacity": 2}


@pytest.fixture(autouse=True)
def groups(api: Api) -> None:
    api.create_group(heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    api.create_group(group="audit")
    api.create_group(prefix="payments", group=GROUP)


def issue(name: str, role: str = "member", **scope: str) -> str:
    out = io.StringIO()
    call_command("create_api_credential", name, role=role, stdout=out, stderr=io.StringIO(), **scope)
    return out.getvalue().strip()


def metadata(store: MetadataStore) -> dict[str, Any]:
    return {p: store.raw_metadata(p) for p in (PREFIX, "payments")}


def steady(api: Api, member_id: str, token: str) -> int:
    """Join and reconcile ``member_id`` until STABLE; returns its epoch."""
    body = api.post(HB, {"member_id": member_id, **JOIN}, token=token).json()
    for _ in range(5):
        if body["member_state"] == "STABLE":
            return int(body["member_epoch"])
        owned = [s["shard"] for s in body["shards"]]
        body = api.post(
            HB,
            {"member_id": member_id, "member_epoch": body["member_epoch"], "owned_shards": owned},
            token=token,
        ).json()
    raise AssertionError(body)


# ---------------------------------------------------------------------------------------------- scopes


@pytest.mark.parametrize(
    ("path", "body", "scope", "value"),
    [
        (
            f"groups/payments/{GROUP}/heartbeat",
            {"member_id": "orders-1", **JOIN},
            "stream_prefixes",
            "payments",
        ),
        (f"groups/{PREFIX}/audit/heartbeat", {"member_id": "orders-1", **JOIN}, "consumer_groups", "audit"),
        (HB, {"member_id": "billing-1", **JOIN}, "member_id_prefix", "billing-1"),
        (HB, {"member_id": "billing-1", "member_epoch": -1}, "member_id_prefix", "billing-1"),
    ],
)
def test_a_scoped_member_credential_is_refused_outside_its_scope(
    api: Api, store: MetadataStore, path: str, body: dict[str, Any], scope: str, value: str
) -> None:
    token = issue(
        "orders-workers", stream_prefixes="ord*", groups="billing shipping", member_id_prefix="orders-"
    )
    before = metadata(store)
    problem = assert_problem(api.post(path, body, token=token), 403, "OUTSIDE_CREDENTIAL_SCOPE")
    assert problem["details"]["scope"] == scope
    assert problem["details"]["value"] == value
    assert scope in problem["detail"] and "orders-workers" in problem["detail"]
    assert token not in str(problem)
    assert metadata(store) == before


def test_a_scoped_member_credential_works_inside_its_scope(api: Api) -> None:
    token = issue(
        "orders-workers", stream_prefixes="ord*", groups="billing, shipping", member_id_prefix="orders-"
    )
    assert steady(api, "orders-1", token) > 0
    assert api.get(f"routing/{PREFIX}", token=token).status_code == 200
    problem = assert_problem(api.get("routing/payments", token=token), 403, "OUTSIDE_CREDENTIAL_SCOPE")
    assert problem["details"] == {"scope": "stream_prefixes", "value": "payments", "allowed": ["ord*"]}


def test_unscoped_and_admin_credentials_reach_every_group(api: Api) -> None:
    member = issue("any-member")
    for path in (HB, f"groups/payments/{GROUP}/heartbeat", f"groups/{PREFIX}/audit/heartbeat"):
        assert api.post(path, {"member_id": "x-1", **JOIN}, token=member).status_code == 200
        assert api.post(path, {"member_id": "y-1", **JOIN}, token=ADMIN_TOKEN).status_code == 200


def test_the_command_validates_scopes_and_refuses_them_for_admins() -> None:
    with pytest.raises(CommandError, match="stream_prefixes"):
        issue("bad", stream_prefixes="orders:*")
    with pytest.raises(CommandError, match="member_id_prefix"):
        issue("bad", member_id_prefix="-x")
    with pytest.raises(CommandError, match="no scope"):
        issue("bad", role="admin", groups="billing")
    assert not ApiCredential.objects.filter(name="bad").exists()
    issue("good", stream_prefixes="a* b?", groups="*", member_id_prefix="w-")
    credential = ApiCredential.objects.get(name="good")
    assert (credential.stream_prefixes, credential.consumer_groups, credential.member_id_prefix) == (
        "a* b?",
        "*",
        "w-",
    )


# ---------------------------------------------------------------------------------------------- ownership


def test_a_member_id_belongs_to_the_credential_that_joined_it(api: Api, store: MetadataStore) -> None:
    first, second = issue("team-a"), issue("team-b")
    epoch = steady(api, "shared-id", first)
    before = metadata(store)
    attempts = [
        {"member_id": "shared-id", "member_epoch": epoch},  # a steady heartbeat: the fast path
        {"member_id": "shared-id", "member_epoch": epoch, "owned_shards": []},  # the full path
        {"member_id": "shared-id", "member_epoch": -1},  # leave (evict)
        {"member_id": "shared-id", **JOIN},  # rejoin (take over)
    ]
    for body in attempts:
        for token in (second, MEMBER_TOKEN, ADMIN_TOKEN):
            problem = assert_problem(api.post(HB, body, token=token), 403, "MEMBER_ID_NOT_OWNED")
            assert problem["details"] == {"member_id": "shared-id"}
    assert metadata(store) == before
    # Its own credential carries on, leaves, and may rejoin the (remembered, ended) id; others still not.
    assert api.post(HB, {"member_id": "shared-id", "member_epoch": epoch}, token=first).status_code == 200
    assert api.post(HB, {"member_id": "shared-id", "member_epoch": -1}, token=first).status_code == 200
    assert_problem(api.post(HB, {"member_id": "shared-id", **JOIN}, token=second), 403, "MEMBER_ID_NOT_OWNED")
    assert api.post(HB, {"member_id": "shared-id", **JOIN}, token=first).status_code == 200


def test_a_staff_session_owns_the_members_it_joins(api: Api, store: MetadataStore) -> None:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="manage_groups"))
    browser = Client(enforce_csrf_checks=False)
    browser.force_login(user)
    response = browser.post(
        f"/api/v1/{HB}", {"member_id": "from-session", **JOIN}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert_problem(
        api.post(HB, {"member_id": "from-session", "member_epoch": -1}), 403, "MEMBER_ID_NOT_OWNED"
    )
    group = store.describe_group(PREFIX, GROUP)
    assert {m["member_id"] for m in group["members"]} >= {"from-session"}


def test_a_member_joined_without_an_owner_is_adopted_by_its_first_credential(
    api: Api, store: MetadataStore
) -> None:
    """Members joined before ownership was recorded (an upgrade) keep working and become owned."""
    joined = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="legacy", member_epoch=0, capacity=1))
    epoch = joined["member_epoch"]
    assert api.post(HB, {"member_id": "legacy", "member_epoch": epoch}, token=MEMBER_TOKEN).status_code == 200
    assert_problem(
        api.post(HB, {"member_id": "legacy", "member_epoch": epoch}, token=issue("other")),
        403,
        "MEMBER_ID_NOT_OWNED",
    )


# ---------------------------------------------------------------------------------------------- floor


def test_the_heartbeat_floor_refuses_a_flood_with_429_and_retry_after(
    api: Api, store: MetadataStore, settings: Any
) -> None:
    epoch = steady(api, "m1", MEMBER_TOKEN)
    settings.RSC_HEARTBEAT_FLOOR_MS, settings.RSC_HEARTBEAT_BURST = 2_000, 3
    body = {"member_id": "m1", "member_epoch": epoch}
    codes = [api.heartbeat(**body).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    lease_before = store.raw_metadata(PREFIX)[f"l:{GROUP}:m1".encode()]
    for _ in range(5):
        response = api.heartbeat(**body)
        problem = assert_problem(response, 429, "HEARTBEAT_TOO_FREQUENT")
        assert problem["retriable"] is True
        assert 0 < problem["details"]["retry_after_ms"] <= 2_000
        assert response["Retry-After"] in ("1", "2")
        assert "2000 ms" in problem["detail"]
    # Refused heartbeats renew nothing, and the other members are not affected.
    assert store.raw_metadata(PREFIX)[f"l:{GROUP}:m1".encode()] == lease_before
    assert api.join("m2")["member_id"] == "m2"
    # A leave is floored too (a flood of any kind); after the wait, the member is served again.
    assert_problem(api.heartbeat(member_id="m1", member_epoch=-1), 429, "HEARTBEAT_TOO_FREQUENT")
    time.sleep(problem["details"]["retry_after_ms"] / 1000 + 0.05)
    assert api.heartbeat(**body).status_code == 200


def test_the_floor_is_shared_by_every_api_process(api: Api, redis_url: str, settings: Any) -> None:
    """Kept in Redis: a second store (another process's pool) sees the same allowance."""
    from coordinator.store import HeartbeatFloor

    epoch = steady(api, "m1", MEMBER_TOKEN)
    floor = HeartbeatFloor(period_ms=5_000, burst=2)
    one, other = MetadataStore.from_url(redis_url), MetadataStore.from_url(redis_url)
    heartbeat = Heartbeat(member_id="m1", member_epoch=epoch)
    one.heartbeat(PREFIX, GROUP, heartbeat, floor)
    other.heartbeat(PREFIX, GROUP, heartbeat, floor)
    with pytest.raises(Exception, match="faster than one heartbeat per 5000 ms") as refused:
        one.heartbeat(PREFIX, GROUP, heartbeat, floor)
    assert refused.value.code == "HEARTBEAT_TOO_FREQUENT"  # type: ignore[attr-defined]
    ttl_ms = other.client.pttl(heartbeat_rate_key(PREFIX, GROUP, "m1"))
    assert 0 < ttl_ms <= 10_000  # the floor's state expires by itself


def test_the_floor_can_be_turned_off_and_leaves_unknown_members_alone(
    api: Api, store: MetadataStore, settings: Any
) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS = 0
    epoch = steady(api, "m1", MEMBER_TOKEN)
    assert all(api.heartbeat(member_id="m1", member_epoch=epoch).status_code == 200 for _ in range(30))
    settings.RSC_HEARTBEAT_FLOOR_MS, settings.RSC_HEARTBEAT_BURST = 60_000, 1
    for index in range(3):  # joins of new ids: no floor state for ids that are not live
        assert api.join(f"new-{index}")["member_epoch"] > 0
    assert not store.client.keys("rsc:*:hbr:*")


# ---------------------------------------------------------------------------------------------- deactivation


def test_a_change_in_another_process_applies_at_once(api: Api, store: MetadataStore) -> None:
    """Another process deactivates a credential: its database write (no signal here) and its bump of
    the shared generation. This process refuses the token on the very next request, inside the cache's
    time limit."""
    token = issue("workers")
    assert api.get(f"routing/{PREFIX}", token=token).status_code == 200  # cached now
    ApiCredential.objects.filter(name="workers").update(active=False)  # update(): no signal, no bump
    assert api.get(f"routing/{PREFIX}", token=token).status_code == 200  # the cache still says active
    store.client.set(credentials.SHARED_GENERATION_KEY, "changed")  # as another process's commit does
    assert_problem(api.get(f"routing/{PREFIX}", token=token), 401, "UNAUTHENTICATED")


@pytest.mark.django_db(transaction=True)
def test_a_committed_change_is_published_to_other_processes(store: MetadataStore) -> None:
    seen = [store.client.get(credentials.SHARED_GENERATION_KEY)]
    issue("workers")
    seen.append(store.client.get(credentials.SHARED_GENERATION_KEY))
    credential = ApiCredential.objects.get(name="workers")
    credential.active = False
    credential.save()
    seen.append(store.client.get(credentials.SHARED_GENERATION_KEY))
    # Each commit publishes a value never seen before (random, not a counter Redis could lose and
    # count up again to a value some process cached).
    assert None not in seen[1:] and len(set(seen)) == 3


def test_without_redis_the_cache_falls_back_to_its_time_limit(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    token = issue("workers")

    def unreadable() -> None:
        raise ConnectionError("redis down")

    monkeypatch.setattr("coordinator.store.get_store", unreadable)
    monkeypatch.setattr(credentials, "_shared_failure_logged_at", 0.0)
    assert credentials.match_token(token) is not None
    assert credentials.match_token(token) is not None
    assert "credential generation unreadable" in caplog.text
