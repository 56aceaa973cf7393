"""Fixtures of the operator page tests: the real admin over a real private Redis (tests/conftest.py).

Every test gets an empty Redis with the store pointed at it (``settings.REDIS_URL`` + ``reset_store``),
a test database, and Django test clients logged in as staff users with different permissions:
``operator`` (``coordinator.manage_groups``), ``viewer`` (``admin_ui.view_groups``) and ``staff``
(neither).

The browser tests (test_browser.py) drive Debian's chromium through Playwright against pytest-django's
``live_server`` (a real HTTP server in this process, over the same private Redis), and keep their
screenshots under ``test-artifacts/admin_ui/`` (``RSC_TEST_ARTIFACTS`` to put them elsewhere).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
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


# ------------------------------------------------------------------------------------------ browser

# Debian's chromium (apt-get install -y chromium): Playwright drives it, so no browser is downloaded.
CHROMIUM = os.environ.get("RSC_TEST_CHROMIUM", "/usr/bin/chromium")
# Where the browser tests keep their screenshots (git-ignored: the directory ignores itself).
ARTIFACTS = Path(os.environ.get("RSC_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for a module's tests; skipped, saying why, where there is none."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM}: apt-get install -y chromium (or set RSC_TEST_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the Python package playwright is not installed (pip install playwright; the dev extra)")
    # Playwright's sync API keeps an asyncio loop registered on this thread while the browser is open;
    # Django would take every ORM call of the test (creating users, say) for one made from async code.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """``test-artifacts/admin_ui/<test name>/``, emptied: where a browser test saves its screenshots."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("# screenshots and other output of the tests\n*\n")
    folder = ARTIFACTS / "admin_ui" / request.node.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def open_page(browser: Any, live_server: Any) -> Iterator[Callable[..., Any]]:
    """``open_page(user, path)``: a 1280x800 page of the live server, signed in as ``user``."""
    contexts = []

    def open_as(user: User, path: str) -> Any:
        client = Client()
        client.force_login(user)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        contexts.append(context)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value, "url": live_server.url}]
        )
        page = context.new_page()
        page.goto(live_server.url + path)
        return page

    yield open_as
    for context in contexts:
        context.close()
