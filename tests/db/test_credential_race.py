"""Deactivating a database credential while heartbeats use it: refused from the first request that
starts after the deactivation committed (coordinator/credentials.py, the credential cache).

The race PostgreSQL exposes: the post_save signal that clears the cache fires inside the deactivating
transaction, before the commit. Until the commit, every other connection still reads the credential as
active, so a request that fills the cache in that window stores a row that is stale a moment later, and
the token would keep working for up to DB_CREDENTIALS_TTL_S. The cache therefore invalidates again on
commit, and a fill stores its rows only if no invalidation happened while it read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from coordinator import credentials
from coordinator.models import ApiCredential
from coordinator.store import MetadataStore
from tests.api.helpers import PREFIX, Api, assert_problem

from .threads import postgresql_only, run_all

pytestmark = pytest.mark.django_db(transaction=True)

MEMBERS = 3  # heartbeat threads, one group and one member each (no rebalancing between them)
IN_WINDOW = 2 * MEMBERS  # requests served while the deactivating transaction is open, at least
AFTER_COMMIT = 5  # requests per thread that start after the commit
WAIT_S = 10.0

READERS_BLOCKED_ON_SQLITE = (
    "the SQLite test database (shared-cache, in memory) refuses to read a table while another "
    "connection's write transaction on it is open ('database table is locked'), so no request can read "
    "the stale rows there; PostgreSQL serves them from its snapshot"
)


@pytest.fixture(autouse=True)
def empty_credential_cache(transactional_db: None, settings: Any) -> Iterator[None]:
    # The members here heartbeat back to back on purpose: the heartbeat floor (its burst, then one per
    # RSC_HEARTBEAT_FLOOR_MS) is not what these tests are about, and refused one once a faster fast path
    # let a member send more than its burst within the floor's period.
    settings.RSC_HEARTBEAT_FLOOR_MS = 0
    credentials.forget_cached_credentials()
    yield
    credentials.forget_cached_credentials()


@pytest.fixture
def credential(store: MetadataStore) -> tuple[ApiCredential, str]:
    """A database member credential and its token."""
    return ApiCredential.issue("workers", "member")


def deactivate(pk: int) -> None:
    with transaction.atomic():
        stored = ApiCredential.objects.get(pk=pk)
        stored.active = False
        stored.save()


# ---------------------------------------------------------------------------------------------- threads


@dataclass
class Heartbeats:
    """What the heartbeat threads saw: (started after the commit?, status) per request."""

    committed: threading.Event = field(default_factory=threading.Event)
    given_up: threading.Event = field(default_factory=threading.Event)  # the deactivating thread failed
    served: threading.Condition = field(default_factory=threading.Condition)
    results: list[tuple[bool, int]] = field(default_factory=list)

    def record(self, after_commit: bool, status: int) -> None:
        with self.served:
            self.results.append((after_commit, status))
            self.served.notify_all()

    def wait_for(self, count: int) -> bool:
        with self.served:
            return self.served.wait_for(lambda: len(self.results) >= count, timeout=WAIT_S)


def heartbeat_until_refused(api: Api, token: str, group: str, seen: Heartbeats) -> None:
    """Join, then heartbeat (the member's current epoch) until AFTER_COMMIT requests that started after
    the deactivation committed have been answered."""
    epoch, after = 0, 0
    while not seen.given_up.is_set():
        after_commit = seen.committed.is_set()
        body = {"member_id": f"{group}-m", "member_epoch": epoch, **({"capacity": 1} if epoch == 0 else {})}
        r = api.post(f"groups/{PREFIX}/{group}/heartbeat", body, token=token)
        seen.record(after_commit, r.status_code)
        if r.status_code == 200:
            epoch = r.json()["member_epoch"]
        else:
            assert_problem(r, 401, "UNAUTHENTICATED")
        after += after_commit
        if after >= AFTER_COMMIT:
            return


@postgresql_only(READERS_BLOCKED_ON_SQLITE)
def test_heartbeats_are_refused_from_the_first_request_after_the_deactivation_committed(
    api: Api, credential: tuple[ApiCredential, str]
) -> None:
    """Three members heartbeat with a database credential (one group each) while another thread
    deactivates it in a transaction that stays open until heartbeats have been served in it."""
    stored, token = credential
    groups = [f"billing{i}" for i in range(MEMBERS)]
    for group in groups:
        api.create_group(group=group, shard_count=2)
    assert api.get(f"routing/{PREFIX}", token=token).status_code == 200  # the cache holds the credential
    seen = Heartbeats()

    def deactivate_while_heartbeats_read() -> None:
        try:
            assert seen.wait_for(MEMBERS), "the members did not join"
            with transaction.atomic():
                stored.active = False
                stored.save()  # post_save: the cache is cleared, inside the transaction
                # Hold the transaction open until heartbeats have been served meanwhile: the first
                # re-reads the credentials from its own connection, sees the committed row (still
                # active) and caches it; the others are served from that cache. The commit must undo it.
                in_window = len(seen.results)
                assert seen.wait_for(in_window + IN_WINDOW), "no heartbeat was served in the window"
        except BaseException:
            seen.given_up.set()
            raise
        seen.committed.set()

    run_all(
        deactivate_while_heartbeats_read,
        *(partial(heartbeat_until_refused, Api(Client()), token, group, seen) for group in groups),
    )

    before = [status for after_commit, status in seen.results if not after_commit]
    after = [status for after_commit, status in seen.results if after_commit]
    assert len(after) == MEMBERS * AFTER_COMMIT and set(after) == {401}
    # Requests in the window were served with the still-committed row: the race was there to lose.
    assert before.count(200) >= MEMBERS + IN_WINDOW, before
    assert set(before) <= {200, 401}  # 401: started after the commit itself, before we noted it


# ---------------------------------------------------------------------------------------------- interleavings


def test_a_fill_that_read_before_a_deactivation_committed_is_not_stored(
    monkeypatch: pytest.MonkeyPatch, credential: tuple[ApiCredential, str]
) -> None:
    """Read (credential active), then the deactivation commits (its signal clears the cache), then the
    fill would store what it read: it must not."""
    stored, token = credential
    read = credentials._read_active_credentials

    def read_then_deactivate() -> Any:
        rows = read()
        assert [c.principal.name for c in rows] == ["workers"]
        run_all(partial(deactivate, stored.pk))
        assert ApiCredential.objects.get(pk=stored.pk).active is False  # committed
        return rows

    monkeypatch.setattr(credentials, "_read_active_credentials", read_then_deactivate)
    principal = credentials.match_token(token)  # started before the commit: it may still pass
    assert principal is not None and principal.name == "workers"

    monkeypatch.setattr(credentials, "_read_active_credentials", read)
    assert credentials.match_token(token) is None  # the first request after the commit
    assert credentials.match_token(token) is None


@postgresql_only(READERS_BLOCKED_ON_SQLITE)
def test_rows_stored_while_a_deactivation_was_uncommitted_are_dropped_at_its_commit(
    credential: tuple[ApiCredential, str],
) -> None:
    """The deactivation's signal has fired (cache cleared), another connection fills the cache with
    the rows still committed (credential active), then the deactivation commits: refused from then."""
    stored, token = credential
    saved, filled = threading.Event(), threading.Event()

    def deactivate_and_wait() -> None:
        with transaction.atomic():
            stored.active = False
            stored.save()
            saved.set()
            assert filled.wait(WAIT_S)
        # committed (and the on_commit callbacks have run) once atomic() returns

    def fill_before_the_commit() -> credentials.TokenPrincipal | None:
        try:
            assert saved.wait(WAIT_S)
            principal = credentials.match_token(token)  # reads the committed row (active) and caches it
            with CaptureQueriesContext(connection) as queries:
                assert credentials.match_token(token) == principal
            assert len(queries) == 0  # served from the cache
            return principal
        finally:
            filled.set()

    _, principal = run_all(deactivate_and_wait, fill_before_the_commit)
    assert principal is not None and principal.name == "workers"  # the stale row was served
    assert credentials.match_token(token) is None  # the first request after the commit


def test_a_change_in_the_same_thread_applies_at_once_even_inside_its_transaction(
    credential: tuple[ApiCredential, str],
) -> None:
    stored, token = credential
    assert credentials.match_token(token) is not None
    with transaction.atomic():
        stored.active = False
        stored.save()
        assert credentials.match_token(token) is None  # this connection reads its own change
    assert credentials.match_token(token) is None


def test_a_rolled_back_deactivation_leaves_the_credential_working(
    credential: tuple[ApiCredential, str],
) -> None:
    stored, token = credential

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        stored.active = False
        stored.save()
        raise Abandon
    principal = credentials.match_token(token)
    assert principal is not None and principal.name == "workers"


# ---------------------------------------------------------------------------------------------- admin


def test_the_admin_deactivate_action_refuses_the_token_from_the_next_request(
    api: Api, credential: tuple[ApiCredential, str]
) -> None:
    stored, token = credential
    api.create_group()
    assert api.get(f"routing/{PREFIX}", token=token).status_code == 200  # cached
    operator = Client()
    operator.force_login(User.objects.create_superuser("root", password=None))
    r = operator.post(
        "/admin/coordinator/apicredential/",
        {"action": "deactivate", "_selected_action": [stored.pk], "index": 0},
    )
    assert r.status_code == 302, r.content
    assert ApiCredential.objects.get(pk=stored.pk).active is False
    assert_problem(api.get(f"routing/{PREFIX}", token=token), 401, "UNAUTHENTICATED")
