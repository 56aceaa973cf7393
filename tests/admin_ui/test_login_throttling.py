"""Admin-site login throttling (django-axes, config/settings.py): after RSC_LOGIN_FAILURE_LIMIT failed
logins for one username from one address, that pair is locked out, the right password included; other
usernames and other addresses are not."""

from __future__ import annotations

from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

LOGIN = "/admin/login/"
PASSWORD = "correct horse battery staple 42"
ATTACKER_IP = "203.0.113.7"


@pytest.fixture(autouse=True)
def users(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
    for name in ("alice", "bob"):
        User.objects.create_user(name, password=PASSWORD, is_staff=True)


def log_in(username: str, password: str, ip: str = ATTACKER_IP) -> Any:
    client = Client(REMOTE_ADDR=ip)
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"})


def assert_logged_in(response: Any) -> None:
    assert response.status_code == 302, response.content[:300]
    assert response["Location"] == "/admin/"


def assert_locked_out(response: Any) -> None:
    assert response.status_code == 429, response.content[:300]
    assert b"locked" in response.content.lower()


def fail(username: str, times: int, ip: str = ATTACKER_IP) -> None:
    for attempt in range(1, times + 1):
        response = log_in(username, "wrong password", ip)
        if attempt < settings.AXES_FAILURE_LIMIT:
            assert response.status_code == 200  # the login form again, with its error
        else:  # the failure that reaches the limit already answers with the lockout
            assert_locked_out(response)


def test_the_failure_limit_defaults_to_5() -> None:
    assert settings.AXES_FAILURE_LIMIT == 5


def test_after_5_wrong_passwords_even_the_right_one_is_refused() -> None:
    fail("alice", 5)
    assert_locked_out(log_in("alice", PASSWORD))
    assert AccessAttempt.objects.get(username="alice", ip_address=ATTACKER_IP).failures_since_start >= 5


def test_another_user_and_another_address_are_not_locked() -> None:
    fail("alice", 5)
    assert_locked_out(log_in("alice", PASSWORD))
    assert_logged_in(log_in("bob", PASSWORD))  # same address, other user
    assert_logged_in(log_in("alice", PASSWORD, ip="198.51.100.2"))  # same user, other address


def test_fewer_failures_do_not_lock_and_a_success_resets_the_count() -> None:
    fail("alice", 4)
    assert_logged_in(log_in("alice", PASSWORD))
    fail("alice", 4)  # counted from zero again: 4 more are still below the limit
    assert_logged_in(log_in("alice", PASSWORD))


# ----------------------------------------------------------------------------- behind a reverse proxy

PROXY_IP = "10.0.0.2"


def log_in_through_proxy(username: str, password: str, forwarded_for: str) -> Any:
    client = Client(REMOTE_ADDR=PROXY_IP, HTTP_X_FORWARDED_FOR=forwarded_for)
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"})


def test_without_a_trusted_header_the_address_is_remote_addr_whatever_a_client_sends() -> None:
    """The default, for direct connections: a client's own X-Forwarded-For is not read, so it cannot
    pick a fresh address per attempt to escape the lockout."""
    for attempt in range(5):
        log_in_through_proxy("alice", "wrong password", forwarded_for=f"198.51.100.{attempt}")
    assert_locked_out(log_in_through_proxy("alice", PASSWORD, forwarded_for="198.51.100.99"))
    assert AccessAttempt.objects.get(username="alice").ip_address == PROXY_IP


def test_behind_a_proxy_the_lockout_is_per_client_address_the_proxy_passed(settings: Any) -> None:
    """RSC_TRUSTED_PROXY_HEADER: the failures count against the client's address, not the proxy's, so
    one client's wrong passwords do not lock the user out for everyone behind the proxy; and what a
    client wrote into the header itself (left of what the proxy appended) changes nothing."""
    settings.RSC_TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    for attempt in range(5):
        response = log_in_through_proxy("alice", "wrong password", f"192.0.2.{attempt}, {ATTACKER_IP}")
    assert_locked_out(response)
    assert AccessAttempt.objects.get(username="alice").ip_address == ATTACKER_IP
    assert_locked_out(log_in_through_proxy("alice", PASSWORD, ATTACKER_IP))
    assert_logged_in(log_in_through_proxy("alice", PASSWORD, "198.51.100.2"))  # another client


@pytest.mark.parametrize(
    ("header", "count", "meta", "expected"),
    [
        ("", 1, {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}, PROXY_IP),
        ("X-Forwarded-For", 1, {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}, "203.0.113.7"),
        ("X-Forwarded-For", 1, {"HTTP_X_FORWARDED_FOR": "1.2.3.4, 203.0.113.7"}, "203.0.113.7"),
        ("X-Forwarded-For", 2, {"HTTP_X_FORWARDED_FOR": "1.2.3.4,203.0.113.7, 10.0.0.9"}, "203.0.113.7"),
        ("X-Forwarded-For", 2, {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}, PROXY_IP),  # not via both
        ("X-Forwarded-For", 1, {}, PROXY_IP),
        ("X-Forwarded-For", 1, {"HTTP_X_FORWARDED_FOR": "unknown"}, PROXY_IP),
        ("X-Forwarded-For", 1, {"HTTP_X_FORWARDED_FOR": "203.0.113.7:51234"}, "203.0.113.7"),
        ("X-Forwarded-For", 1, {"HTTP_X_FORWARDED_FOR": "[2001:DB8::1]:443"}, "2001:db8::1"),
        ("x-real-ip", 1, {"HTTP_X_REAL_IP": "2001:db8::7"}, "2001:db8::7"),
        ("HTTP_X_REAL_IP", 1, {"HTTP_X_REAL_IP": "203.0.113.8"}, "203.0.113.8"),
    ],
)
def test_the_client_address(
    settings: Any, header: str, count: int, meta: dict[str, str], expected: str
) -> None:
    from django.test import RequestFactory

    from coordinator.proxy import client_address

    settings.RSC_TRUSTED_PROXY_HEADER = header
    settings.RSC_TRUSTED_PROXY_COUNT = count
    request = RequestFactory().get("/admin/login/", REMOTE_ADDR=PROXY_IP, **meta)
    assert client_address(request) == expected


def test_axes_asks_the_coordinator_for_the_address() -> None:
    assert settings.AXES_CLIENT_IP_CALLABLE == "coordinator.proxy.client_address"
