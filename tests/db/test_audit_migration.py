"""The audit trail moved from admin_ui to coordinator (coordinator/migrations/0003_auditentry.py,
admin_ui/migrations/0004_auditentry_moved_to_coordinator.py) without touching its table: a database
migrated before the move keeps its rows, and reads them through the new model and the pages' proxy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("admin_ui", "0003_alter_auditentry_action"), ("coordinator", "0002_credential_scopes")]
AFTER = [("admin_ui", "0004_auditentry_moved_to_coordinator"), ("coordinator", "0003_auditentry")]


@pytest.fixture
def executor() -> Iterator[MigrationExecutor]:
    ex = MigrationExecutor(connection)
    yield ex
    ex = MigrationExecutor(connection)  # whatever happened, leave the database at the latest state
    ex.migrate(ex.loader.graph.leaf_nodes())


def test_rows_written_before_the_move_survive_it(executor: MigrationExecutor) -> None:
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("admin_ui", "AuditEntry")
    old.objects.create(
        username="ops", action="skip_entries", stream_prefix="orders", source="api", outcome="ok"
    )

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    from admin_ui.models import AuditEntry as PagesAuditEntry
    from coordinator.models import AuditEntry

    assert AuditEntry._meta.db_table == "admin_ui_auditentry"
    assert [(e.username, e.action, e.stream_prefix, e.outcome) for e in AuditEntry.objects.all()] == [
        ("ops", "skip_entries", "orders", "ok")
    ]
    assert PagesAuditEntry.objects.get().username == "ops"
