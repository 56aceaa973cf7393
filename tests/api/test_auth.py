"""Authentication and roles: bearer tokens (environment and database), staff sessions, CSRF, secrecy."""

from __future__ import annotations

import hashlib
import io
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import DatabaseError
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

from coordinator import credentials
from coordinator.models import ApiCredential

from .helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

SHARD_COUNT = {"shard_count": 2}
CREATE = {"stream_prefix": "p2", "consumer_group": "g2", "shard_count": 2}
HEARTBEAT = {"member_id": "m1", "member_epoch": 0, "capacity": 1}

ADMIN_ENDPOINTS = [
    ("GET", "admin/groups", None),
    ("POST", "admin/groups", CREATE),
    ("GET", f"admin/groups/{PREFIX}/{GROUP}", None),
    ("DELETE", f"admin/groups/{PREFIX}/{GROUP}", None),
    ("PUT", f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {"max_concurrency": 3}),
    ("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", SHARD_COUNT),
    ("GET", f"admin/stream-prefixes/{PREFIX}", None),
]
MEMBER_ENDPOINTS = [
    ("POST", f"groups/{PREFIX}/{GROUP}/heartbeat", HEARTBEAT),
    ("GET", f"routing/{PREFIX}", None),
]
SUCCESS = {"GET": 200, "POST": 201, "DELETE": 204, "PUT": 200}


@pytest.fixture(autouse=True)
def existing_group(api: Api) -> None:
    api.create_group(shard_count=4)


def expected_success(method: str, path: str) -> int:
    if path.endswith("shard-count"):
        return 202
    if path.endswith("heartbeat"):
        return 200
    return SUCCESS[method]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ENDPOINTS + MEMBER_ENDPOINTS)
def test_no_credential_is_a_401_and_changes_nothing(
    api: Api, store: Any, method: str, path: str, body: Any
) -> None:
    before = store.raw_metadata(PREFIX)
    problem = assert_problem(api.request(method, path, body, token=None), 401, "UNAUTHENTICATED")
    assert problem["retriable"] is False
    assert store.raw_metadata(PREFIX) == before


@pytest.mark.parametrize(
    "header",
    [
        "Bearer wrong-token",
        "Bearer",
        "Bearer ",
        f"Bearer {ADMIN_TOKEN} extra",
        f"Basic {ADMIN_TOKEN}",
        f"Token {ADMIN_TOKEN}",
        ADMIN_TOKEN,
        f"Bearer {ADMIN_TOKEN[:-1]}",
        f"Bearer {ADMIN_TOKEN}x",
    ],
)
def test_a_bad_authorization_header_is_a_401(api: Api, store: Any, header: str) -> None:
    before = store.raw_metadata(PREFIX)
    r = api.request("POST", "admin/groups", CREATE, token=None, HTTP_AUTHORIZATION=header)
    assert_problem(r, 401, "UNAUTHENTICATED")
    assert store.raw_metadata(PREFIX) == before


def test_the_bearer_scheme_is_case_insensitive(api: Api) -> None:
    r = api.request("GET", "admin/groups", token=None, HTTP_AUTHORIZATION=f"bearer {ADMIN_TOKEN}")
    assert r.status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ENDPOINTS)
def test_a_member_token_on_an_admin_endpoint_is_a_403(
    api: Api, store: Any, method: str, path: str, body: Any
) -> None:
    before = store.raw_metadata(PREFIX)
    problem = assert_problem(api.request(method, path, body, token=MEMBER_TOKEN), 403, "PERMISSION_DENIED")
    assert "admin credential" in problem["detail"]
    assert store.raw_metadata(PREFIX) == before
    assert store.raw_metadata("p2") == {}


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ENDPOINTS + MEMBER_ENDPOINTS)
def test_an_admin_token_may_call_everything(api: Api, method: str, path: str, body: Any) -> None:
    r = api.request(method, path, body, token=ADMIN_TOKEN)
    assert r.status_code == expected_success(method, path), r.content


def test_a_token_listed_as_member_and_admin_is_admin(api: Api, settings: Any) -> None:
    settings.RSC_MEMBER_TOKENS = ["both-roles-token", MEMBER_TOKEN]
    settings.RSC_ADMIN_TOKENS = [ADMIN_TOKEN, "both-roles-token"]
    assert api.get("admin/groups", token="both-roles-token").status_code == 200


def test_empty_token_entries_never_match(api: Api, settings: Any) -> None:
    settings.RSC_MEMBER_TOKENS = ["", MEMBER_TOKEN]
    r = api.request("GET", f"routing/{PREFIX}", token=None, HTTP_AUTHORIZATION="Bearer  ")
    assert_problem(r, 401, "UNAUTHENTICATED")


# ---------------------------------------------------------------------------------------------- database


def issue(name: str, role: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_credential", name, role=role, stdout=out, stderr=err)
    token = out.getvalue().strip()
    assert "shown once" in err.getvalue() and token not in err.getvalue()
    return token


def test_database_credentials_store_only_a_hash_and_carry_their_role(api: Api) -> None:
    member = issue("workers", "member")
    admin = issue("ops", "admin")
    assert member.startswith("rsc_") and len(member) > 40 and member != admin
    stored = ApiCredential.objects.get(name="workers")
    assert stored.token_sha256 == hashlib.sha256(member.encode()).hexdigest()
    assert member not in repr(list(ApiCredential.objects.values()))

    assert api.get(f"routing/{PREFIX}", token=member).status_code == 200
    assert_problem(api.get("admin/groups", token=member), 403, "PERMISSION_DENIED")
    assert api.get("admin/groups", token=admin).status_code == 200

    stored.active = False
    stored.save()
    assert_problem(api.get(f"routing/{PREFIX}", token=member), 401, "UNAUTHENTICATED")


def test_the_command_refuses_duplicate_names_and_unknown_roles() -> None:
    issue("workers", "member")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_api_credential", "workers", role="admin", stdout=io.StringIO())
    with pytest.raises(CommandError):
        call_command("create_api_credential", "other", role="root", stdout=io.StringIO())


def test_every_candidate_is_compared_even_after_a_match(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    issue("workers", "member")
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN, "another-member-token"]
    calls: list[int] = []
    real = credentials.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(credentials.hmac, "compare_digest", counting)
    principal = credentials.match_token(MEMBER_TOKEN)  # the very first candidate
    assert principal is not None and principal.role is credentials.Role.MEMBER
    assert len(calls) == 4  # 2 member + 1 admin from settings, 1 from the database


def test_database_credentials_are_read_once_then_served_from_the_cache(
    api: Api, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """A heartbeat costs no query: the credentials are read once per DB_CREDENTIALS_TTL_S, and again
    after a change (tests/db/test_credential_race.py: changes racing the read, on PostgreSQL)."""
    token = issue("workers", "member")
    with django_assert_num_queries(1):
        assert api.get(f"routing/{PREFIX}", token=token).status_code == 200
    with django_assert_num_queries(0):
        assert api.get(f"routing/{PREFIX}", token=token).status_code == 200
        assert api.post(f"groups/{PREFIX}/{GROUP}/heartbeat", HEARTBEAT, token=token).status_code == 200

    issue("ops", "admin")  # any change clears the cache
    with django_assert_num_queries(1):
        assert credentials.match_token(token) is not None
        assert credentials.match_token(token) is not None

    later = credentials.time.monotonic() + credentials.DB_CREDENTIALS_TTL_S
    monkeypatch.setattr(credentials, "time", SimpleNamespace(monotonic=lambda: later))
    with django_assert_num_queries(1):  # expired: read again, once
        assert credentials.match_token(token) is not None
        assert credentials.match_token(token) is not None


def test_environment_tokens_keep_working_when_the_database_does_not(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> Any:
        raise DatabaseError("database is down")

    monkeypatch.setattr(credentials, "_candidates_from_database", broken)
    assert api.get(f"routing/{PREFIX}", token=MEMBER_TOKEN).status_code == 200
    problem = assert_problem(
        api.get(f"routing/{PREFIX}", token="rsc_from-the-database"), 503, "STORE_UNAVAILABLE"
    )
    assert problem["retriable"] is True


# ---------------------------------------------------------------------------------------------- sessions


def staff(username: str, *, permission: bool, is_staff: bool = True) -> User:
    user = User.objects.create_user(username, password=None, is_staff=is_staff)
    if permission:
        user.user_permissions.add(Permission.objects.get(codename="manage_groups"))
    return user


def session_client(user: User) -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    return client, secret


def test_a_staff_session_with_the_permission_is_admin_with_csrf(store: Any) -> None:
    client, csrf = session_client(staff("operator", permission=True))
    assert client.get("/api/v1/admin/groups").status_code == 200
    assert client.get(f"/api/v1/routing/{PREFIX}").status_code == 200

    # Unsafe methods need the CSRF token.
    before = store.raw_metadata("p2")
    r = client.post("/api/v1/admin/groups", CREATE, content_type="application/json")
    problem = assert_problem(r, 403, "PERMISSION_DENIED")
    assert "CSRF" in problem["detail"]
    assert store.raw_metadata("p2") == before

    r = client.post("/api/v1/admin/groups", CREATE, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert r.status_code == 201, r.content


@pytest.mark.parametrize(
    ("permission", "is_staff"),
    [(False, True), (True, False), (False, False)],
    ids=["no-perm", "not-staff", "neither"],
)
def test_a_session_without_staff_and_permission_is_a_403(permission: bool, is_staff: bool) -> None:
    client, csrf = session_client(staff("someone", permission=permission, is_staff=is_staff))
    assert_problem(client.get("/api/v1/admin/groups"), 403, "PERMISSION_DENIED")
    r = client.post("/api/v1/admin/groups", CREATE, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert_problem(r, 403, "PERMISSION_DENIED")
    assert_problem(client.get(f"/api/v1/routing/{PREFIX}"), 403, "PERMISSION_DENIED")


def test_a_superuser_session_is_admin() -> None:
    user = User.objects.create_superuser("root", password=None)
    client, _csrf = session_client(user)
    assert client.get(f"/api/v1/admin/groups/{PREFIX}/{GROUP}").status_code == 200


def test_a_bearer_header_decides_alone_even_with_a_session() -> None:
    client, _csrf = session_client(staff("operator", permission=True))
    r = client.get("/api/v1/admin/groups", HTTP_AUTHORIZATION="Bearer wrong")
    assert_problem(r, 401, "UNAUTHENTICATED")
    r = client.get("/api/v1/admin/groups", HTTP_AUTHORIZATION=f"Bearer {MEMBER_TOKEN}")
    assert_problem(r, 403, "PERMISSION_DENIED")


# ---------------------------------------------------------------------------------------------- secrecy


def test_tokens_never_reach_logs_or_error_bodies(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    database_token = issue("workers", "admin")
    caplog.set_level(logging.DEBUG)
    bodies = [
        api.get("admin/groups", token="guessed-secret-token").content,
        api.get("admin/groups", token=MEMBER_TOKEN).content,
        api.post("admin/groups", {**CREATE, "shard_count": 0}, token=ADMIN_TOKEN).content,
        api.post("admin/groups", CREATE, token=database_token).content,
        api.delete(f"admin/groups/{PREFIX}/{GROUP}", token=ADMIN_TOKEN).content,
        api.request(
            "POST", "admin/groups", CREATE, token=None, HTTP_AUTHORIZATION=f"Basic {ADMIN_TOKEN}"
        ).content,
    ]
    text = caplog.text + "".join(b.decode() for b in bodies)
    for secret in ("guessed-secret-token", MEMBER_TOKEN, ADMIN_TOKEN, database_token):
        assert secret not in text
    assert "api create_group by credential:workers" in caplog.text  # the name, never the token


def test_the_credential_admin_lists_but_never_adds() -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    issue("workers", "member")
    page = client.get("/admin/coordinator/apicredential/")
    assert page.status_code == 200 and b"workers" in page.content
    assert client.get("/admin/coordinator/apicredential/add/").status_code == 403
