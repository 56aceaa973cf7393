"""Fixtures of the operator page tests: the real admin over a real private Redis (tests/conftest.py).

Every test gets an empty Redis with the store pointed at it (``settings.REDIS_URL`` + ``reset_store``),
a test database, and Django test clients logged in as staff users with different permissions:
``operator`` (``coordinator.manage_groups``), ``viewer`` (``admin_ui.view_groups``) and ``staff``
(neither).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from coordinator.store import MetadataStore, get_store, reset_store


@pytest.fixture(autouse=True)
def admin_ui_environment(settings: Any, redis_url: str, db: None) -> Iterator[None]:
    settings.REDIS_URL = redis_url
    reset_store()
    yield
    reset_store()


@pytest.fixture
def store() -> MetadataStore:
    return get_store()


def staff_user(username: str, *permissions: str) -> User:
    """An active staff user holding exactly these permissions ("app_label.codename")."""
    user = User.objects.create_user(username, is_staff=True)  # no password (no slow hashing): force_login
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def logged_in(user: User, **client_options: Any) -> Client:
    client = Client(**client_options)
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    return logged_in(staff_user("operator", "coordinator.manage_groups", "admin_ui.view_auditentry"))


@pytest.fixture
def viewer() -> Client:
    return logged_in(staff_user("viewer", "admin_ui.view_groups"))


@pytest.fixture
def staff() -> Client:
    return logged_in(staff_user("staff"))
