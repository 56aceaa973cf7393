"""An audit write failing mid-action, on the real database: a trigger on the audit table makes the
database itself refuse the write (not a patched Python call).

The pending row is refused: the action fails closed (AUDIT_UNAVAILABLE, 503) and Redis is not touched,
the entries stay pending exactly as they were. The outcome's update is refused: the change has happened,
so the result is returned and the row stays "pending" ("may have happened"). coordinator/operations.py,
"Theory of operation", steps 3 and 4.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, connection

from coordinator import operations
from coordinator.api.errors import HTTP_STATUS
from coordinator.models import AuditEntry
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore
from tests.api.helpers import GROUP, PREFIX, Api, assert_problem, make_pending, redis_snapshot

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = operations.Actor(username="ops", source="command", is_admin=True)
STREAM = f"rsc:{{{PREFIX}}}:v1:0"
TRIGGER = "rsc_test_refuse_audit"
REFUSAL = "the audit table refuses this write (test trigger)"


@contextmanager
def audit_table_refusing(event: str) -> Iterator[None]:
    """While inside, the database raises on every ``event`` (INSERT or UPDATE) on the audit table."""
    table = connection.ops.quote_name(AuditEntry._meta.db_table)
    if connection.vendor == "postgresql":
        install = [
            f"CREATE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$",
            f"CREATE TRIGGER {TRIGGER} BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {TRIGGER}()",
        ]
        remove = [f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}", f"DROP FUNCTION IF EXISTS {TRIGGER}()"]
    elif connection.vendor == "sqlite":
        install = [
            f"CREATE TRIGGER {TRIGGER} BEFORE {event} ON {table} BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
        ]
        remove = [f"DROP TRIGGER IF EXISTS {TRIGGER}"]
    else:
        pytest.skip(f"no refusing trigger written for {connection.vendor}")
    with connection.cursor() as cursor:
        for sql in install:
            cursor.execute(sql)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for sql in remove:
                cursor.execute(sql)


@pytest.fixture
def pending(store: MetadataStore) -> list[str]:
    """orders/billing with member m1 and two entries pending for it on v1:0; their ids."""
    config = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)
    store.create_group(CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=2, config=config))
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=1))
    return make_pending(store.client, 2)


def xpending(store: MetadataStore) -> list[tuple[str, str, int]]:
    rows = store.client.xpending_range(STREAM, GROUP, "-", "+", 100)
    return [(r["message_id"].decode(), r["consumer"].decode(), r["times_delivered"]) for r in rows]


def test_a_refused_audit_row_fails_closed_and_redis_is_unchanged(
    store: MetadataStore, pending: list[str]
) -> None:
    before, pending_before = redis_snapshot(store.client), xpending(store)
    assert [row[0] for row in pending_before] == pending

    with audit_table_refusing("INSERT"), pytest.raises(operations.AuditUnavailable) as refused:
        operations.skip_entries(ADMIN, PREFIX, GROUP, "v1:0", entry_ids=pending, reason="poison")

    error = refused.value
    assert (error.code, error.retriable, HTTP_STATUS[error.code][0]) == ("AUDIT_UNAVAILABLE", True, 503)
    assert isinstance(error.__cause__, DatabaseError) and REFUSAL in str(error.__cause__)
    assert xpending(store) == pending_before
    assert redis_snapshot(store.client) == before
    assert not AuditEntry.objects.exists()

    # With the database writable again the same request goes through: it was the refusal, nothing else.
    result = operations.skip_entries(ADMIN, PREFIX, GROUP, "v1:0", entry_ids=pending, reason="poison")
    assert [e["id"] for e in result["skipped"]] == pending and xpending(store) == []
    assert [(e.action, e.outcome) for e in AuditEntry.objects.all()] == [("skip_entries", "ok")]


def test_over_http_a_refused_audit_row_is_a_503_and_redis_is_unchanged(
    api: Api, store: MetadataStore, pending: list[str]
) -> None:
    before, pending_before = redis_snapshot(store.client), xpending(store)
    url = f"admin/groups/{PREFIX}/{GROUP}/shards/v1:0/skip"
    with audit_table_refusing("INSERT"):
        r = api.post(url, {"entry_ids": pending, "reason": "poison"})
    problem = assert_problem(r, 503, "AUDIT_UNAVAILABLE")
    assert problem["retriable"] is True and "nothing was changed" in problem["detail"]
    assert REFUSAL not in r.content.decode()  # the database's message stays in the log
    assert xpending(store) == pending_before
    assert redis_snapshot(store.client) == before
    assert not AuditEntry.objects.exists()


def test_a_refused_outcome_leaves_the_row_pending_and_returns_the_change_made(
    store: MetadataStore, pending: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with audit_table_refusing("UPDATE"), caplog.at_level(logging.ERROR, logger="coordinator.operations"):
        result: dict[str, Any] = operations.skip_entries(
            ADMIN, PREFIX, GROUP, "v1:0", entry_ids=pending, reason="poison"
        )
    assert [e["id"] for e in result["skipped"]] == pending  # done: not reported as a failure
    assert xpending(store) == []
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.details) == (
        "skip_entries",
        AuditEntry.PENDING,
        {"shard": "v1:0", "reason": "poison", "entry_ids": pending},
    )
    assert "stays pending" in caplog.text
