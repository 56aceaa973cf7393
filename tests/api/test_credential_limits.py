"""Each API credential's join rate and cap on live members (docs/protocol.md section 13, "Per
credential"; coordinator/store/credential_limits.py): counted in Redis, so they hold across API
processes; a refused join is a 429 problem with a stable code and the reason, retriable, and changes
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.store import JoinLimits, MetadataStore, credential_limits, get_store, reset_store
from coordinator.store.codec import identity_digest
from rsc_redis import keys

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem, redis_snapshot

OTHER_MEMBER_TOKEN = "test-other-member-token-0c4e8a1f"


@pytest.fixture(autouse=True)
def two_member_tokens(settings: Any) -> None:
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN, OTHER_MEMBER_TOKEN]


def join(api: Api, member_id: str, group: str = GROUP, token: str = MEMBER_TOKEN, **body: Any) -> Any:
    body = {"member_id": member_id, "member_epoch": 0, "capacity": 1, **body}
    return api.post(f"groups/{PREFIX}/{group}/heartbeat", body, token=token)


def leave(api: Api, member_id: str, epoch: int, group: str = GROUP) -> Any:
    body = {"member_id": member_id, "member_epoch": -1}
    return api.post(f"groups/{PREFIX}/{group}/heartbeat", body, token=MEMBER_TOKEN)


def another_process() -> MetadataStore:
    """A fresh store (client, pool, scripts): what another API process holds."""
    reset_store()
    return get_store()


# ------------------------------------------------------------------------------------------ the join rate


def test_the_join_rate_holds_across_processes_and_refuses_with_a_stable_code(
    api: Api, store: MetadataStore, settings: Any
) -> None:
    settings.RSC_CREDENTIAL_JOIN_BURST = 3
    settings.RSC_CREDENTIAL_JOIN_FLOOR_MS = 60_000
    api.create_group()
    for i in range(2):
        assert join(api, f"m{i}").status_code == 200
    another_process()
    assert join(api, "m2").status_code == 200  # the third of the burst, in "another process"
    before = redis_snapshot(another_process().client)
    rate_key = keys.credential_joins_key(identity_digest(_identity(api)))
    rate = get_store().client.get(rate_key)

    refused = join(api, "m3")

    problem = assert_problem(refused, 429, "CREDENTIAL_JOINS_TOO_FREQUENT")
    assert problem["retriable"] is True and "faster than one per 60000 ms" in problem["detail"]
    assert 59_000 < problem["details"]["retry_after_ms"] <= 60_000
    assert refused["Retry-After"] == "60"
    assert redis_snapshot(get_store().client) == before  # nothing changed
    assert rate is not None and get_store().client.get(rate_key) == rate  # the refused join not counted
    assert join(api, "x0", token=OTHER_MEMBER_TOKEN).status_code == 200  # another credential's own rate
    settings.RSC_CREDENTIAL_JOIN_FLOOR_MS = 0
    assert join(api, "m3").status_code == 200  # 0: off


def test_every_join_counts_against_the_rate_rejoins_too(api: Api, settings: Any) -> None:
    settings.RSC_CREDENTIAL_JOIN_BURST = 2
    settings.RSC_CREDENTIAL_JOIN_FLOOR_MS = 60_000
    api.create_group()
    assert join(api, "m0").status_code == 200
    assert join(api, "m0", join_seq=2).status_code == 200
    assert_problem(join(api, "m0", join_seq=3), 429, "CREDENTIAL_JOINS_TOO_FREQUENT")


# ------------------------------------------------------------------------------------------ the cap


def test_the_cap_on_live_members_holds_across_groups_and_processes(api: Api, settings: Any) -> None:
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 2
    api.create_group()
    api.create_group(group="shipping")
    assert join(api, "m0").status_code == 200
    another_process()
    assert join(api, "s0", group="shipping").status_code == 200
    before = redis_snapshot(another_process().client)

    refused = join(api, "m1")

    problem = assert_problem(refused, 429, "CREDENTIAL_MEMBER_LIMIT_REACHED")
    assert problem["retriable"] is True
    assert "already has 2 live members, its limit of 2" in problem["detail"]
    assert problem["details"]["limit"] == 2 and problem["details"]["live_members"] == 2
    assert 1_000 <= problem["details"]["retry_after_ms"] <= credential_limits.TRUST_MS
    assert int(refused["Retry-After"]) >= 1
    assert redis_snapshot(get_store().client) == before
    # A rejoin of a member it already counts never meets the cap; another credential has its own.
    assert join(api, "m0", join_seq=2).status_code == 200
    assert join(api, "x0", token=OTHER_MEMBER_TOKEN).status_code == 200
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 0
    assert join(api, "m1").status_code == 200  # 0: no cap


def test_a_member_that_leaves_makes_room_at_once(api: Api, settings: Any) -> None:
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 1
    api.create_group()
    epoch = join(api, "m0").json()["member_epoch"]
    assert_problem(join(api, "m1"), 429, "CREDENTIAL_MEMBER_LIMIT_REACHED")
    assert leave(api, "m0", epoch).status_code == 200
    assert join(api, "m1").status_code == 200


def test_a_join_the_coordinator_refuses_gives_its_place_back(api: Api, settings: Any) -> None:
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 1
    api.create_group()
    assert_problem(join(api, "m0", group="no-such-group"), 404, "GROUP_NOT_FOUND")
    assert join(api, "x0", token=OTHER_MEMBER_TOKEN).status_code == 200
    assert_problem(join(api, "x0"), 403, "MEMBER_ID_NOT_OWNED")  # another credential's member id
    assert join(api, "m0").status_code == 200  # the place is still free


def test_members_that_ended_otherwise_are_found_gone_at_the_cap(
    api: Api, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expired or deleted member is not given back when it ends: the join that finds the cap reached
    checks the members not known live lately against their groups' metadata."""
    monkeypatch.setattr(credential_limits, "TRUST_MS", 0)  # check every member at once
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 2
    api.create_group()
    api.create_group(group="shipping")
    assert join(api, "m0").status_code == 200
    assert join(api, "s0", group="shipping").status_code == 200
    assert_problem(join(api, "m1"), 429, "CREDENTIAL_MEMBER_LIMIT_REACHED")  # both checked: live
    assert api.delete(f"admin/groups/{PREFIX}/shipping?force=true").status_code == 204

    assert join(api, "m1").status_code == 200  # s0 found gone

    members = get_store().client.zrange(keys.credential_members_key(identity_digest(_identity(api))), 0, -1)
    assert sorted(members) == [b"orders:billing:m0", b"orders:billing:m1"]


def _identity(api: Api) -> str:
    view = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()
    return str(next(m["owner"] for m in view["members"] if m["member_id"] == "m0"))


# ------------------------------------------------------------------------------------------ the store part


def test_two_stores_admitting_at_once_cannot_both_take_the_last_place(redis_url: str) -> None:
    """The count and the cap are one script: whichever process comes second finds the cap reached."""
    first, second = MetadataStore.from_url(redis_url), MetadataStore.from_url(redis_url)
    limits = JoinLimits(max_members=1, period_ms=0, burst=1)
    try:
        assert first.credential_limits.admit("database:7", PREFIX, GROUP, "a", limits).counted
        with pytest.raises(Exception) as refused:
            second.credential_limits.admit("database:7", PREFIX, GROUP, "b", limits)
        assert refused.value.code == "CREDENTIAL_MEMBER_LIMIT_REACHED"  # type: ignore[attr-defined]
        # "a" is checked only once it has not been known live for TRUST_MS: still counted now.
        assert not second.credential_limits.admit("database:7", PREFIX, GROUP, "a", limits).counted
    finally:
        first.client.close()
        second.client.close()


def test_with_both_limits_off_nothing_is_written(api: Api, store: MetadataStore, settings: Any) -> None:
    settings.RSC_CREDENTIAL_MAX_MEMBERS = 0
    settings.RSC_CREDENTIAL_JOIN_FLOOR_MS = 0
    api.create_group()
    assert join(api, "m0").status_code == 200
    assert store.client.keys("rsc:credential:*") == []
