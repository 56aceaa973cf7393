"""The admin API's per-credential rate limit (coordinator/api/throttling.py, RSC_ADMIN_API_RATE): the
request after the allowance is a 429 TOO_MANY_REQUESTS problem with Retry-After and changes nothing;
other credentials and the member endpoints are not affected."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from coordinator.models import AuditEntry

from .helpers import ADMIN_TOKEN, GROUP, PREFIX, Api, assert_problem, redis_snapshot

OTHER_ADMIN_TOKEN = "test-other-admin-token-2c7b9e4f1a"
RATE = 3  # requests per minute in these tests


@pytest.fixture(autouse=True)
def low_rate(settings: Any) -> None:
    # Read on every request: no restart, no cache of the old rate. (The cache of counts is emptied for
    # every API test by tests/api/conftest.py.)
    settings.RSC_ADMIN_API_RATE = f"{RATE}/min"
    settings.RSC_ADMIN_TOKENS = [ADMIN_TOKEN, OTHER_ADMIN_TOKEN]


def use_up_allowance(api: Api, token: str = ADMIN_TOKEN, *, used: int = 0) -> None:
    for _ in range(RATE - used):
        response = api.get("admin/groups", token=token)
        assert response.status_code == 200, response.content


def assert_throttled(response: Any) -> dict[str, Any]:
    problem = assert_problem(response, 429, "TOO_MANY_REQUESTS")
    assert problem["retriable"] is True
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    assert f"{retry_after} second" in problem["detail"]
    return problem


def test_the_request_after_the_allowance_is_a_429_with_retry_after(api: Api) -> None:
    use_up_allowance(api)
    assert_throttled(api.get("admin/groups"))
    # Every admin route, lifecycle ones included, shares the credential's allowance.
    assert_throttled(api.get(f"admin/groups/{PREFIX}/{GROUP}"))
    assert_throttled(api.get(f"admin/groups/{PREFIX}/{GROUP}/dead-letters"))


def test_a_throttled_request_changes_nothing(api: Api, store: Any) -> None:
    api.create_group()  # 1 of 3
    api.get("admin/groups")  # 2 of 3
    api.get("admin/groups")  # 3 of 3
    AuditEntry.objects.all().delete()
    before = redis_snapshot(store.client)

    create = {"stream_prefix": "other", "consumer_group": "g", "shard_count": 2}
    assert_throttled(api.post("admin/groups", create))
    assert_throttled(api.delete(f"admin/groups/{PREFIX}/{GROUP}?force=true"))
    assert_throttled(api.put(f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 3}))
    assert_throttled(api.post(f"admin/groups/{PREFIX}/{GROUP}/shards/v1:0/redeliver"))

    assert redis_snapshot(store.client) == before
    assert not AuditEntry.objects.exists()


def test_another_credential_has_its_own_allowance(api: Api) -> None:
    use_up_allowance(api)
    assert_throttled(api.get("admin/groups"))
    use_up_allowance(api, OTHER_ADMIN_TOKEN)
    assert_throttled(api.get("admin/groups", token=OTHER_ADMIN_TOKEN))


def test_a_staff_session_is_counted_per_user(api: Api) -> None:
    permission = Permission.objects.get(codename="manage_groups")
    clients = []
    for name in ("alice", "bob"):
        user = User.objects.create_user(name, is_staff=True)
        user.user_permissions.add(permission)
        client = Client()
        client.force_login(user)
        clients.append(client)
    alice, bob = clients
    for _ in range(RATE):
        assert alice.get("/api/v1/admin/groups").status_code == 200
    assert_throttled(alice.get("/api/v1/admin/groups"))
    assert bob.get("/api/v1/admin/groups").status_code == 200
    assert api.get("admin/groups").status_code == 200  # and a token is another credential again


def test_member_endpoints_are_not_throttled(api: Api) -> None:
    api.create_group()
    use_up_allowance(api, used=1)
    assert_throttled(api.get("admin/groups"))
    # More heartbeats than the admin allowance (one per member: the heartbeat floor is a separate rule).
    for index in range(RATE + 1):
        api.join(f"m{index}")
        assert api.get(f"routing/{PREFIX}").status_code == 200
    # An admin token on the member endpoints is not counted against its admin allowance either.
    assert api.get(f"routing/{PREFIX}", token=OTHER_ADMIN_TOKEN).status_code == 200
    use_up_allowance(api, OTHER_ADMIN_TOKEN)


def test_refused_requests_do_not_use_up_the_allowance(api: Api) -> None:
    for _ in range(2 * RATE):
        assert_problem(api.get("admin/groups", token="not-a-token"), 401, "UNAUTHENTICATED")
        assert_problem(api.get("admin/groups", token=None), 401, "UNAUTHENTICATED")
    use_up_allowance(api)


def test_the_default_rate_is_600_per_minute(settings: Any) -> None:
    from coordinator.api.throttling import AdminRateThrottle

    del settings.RSC_ADMIN_API_RATE
    assert AdminRateThrottle().get_rate() == "600/min"
    assert AdminRateThrottle().parse_rate(AdminRateThrottle().get_rate()) == (600, 60)


def test_joins_are_shed_first_when_the_process_runs_its_limit(api: Any, store: Any, settings: Any) -> None:
    """docs/protocol.md section 13, "Overload": with RSC_MAX_CONCURRENT_JOINS joins running in this
    process, one more join is 429 JOINS_THROTTLED (changing nothing); steady heartbeats and leaves are
    not throttled."""
    from coordinator.api.throttling import admit_join

    api.create_group()
    epoch = api.join("m1")["member_epoch"]
    settings.RSC_MAX_CONCURRENT_JOINS = 1
    before = store.raw_metadata(PREFIX)
    with admit_join():  # a join in progress in this process
        response = api.heartbeat(member_id="m2", member_epoch=0, capacity=1)
        problem = assert_problem(response, 429, "JOINS_THROTTLED")
        assert problem["retriable"] is True and 500 <= problem["details"]["retry_after_ms"] < 2_000
        assert response["Retry-After"] in ("1", "2")
        assert store.raw_metadata(PREFIX) == before
        assert api.heartbeat(member_id="m1", member_epoch=epoch).status_code == 200  # steady: served
    assert api.join("m2")["member_id"] == "m2"  # the slot is free again
    settings.RSC_MAX_CONCURRENT_JOINS = 0
    with admit_join(), admit_join():
        assert api.join("m3")["member_id"] == "m3"  # 0: no limit
