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
