"""Audit retention: ``operations.prune_audit`` and ``manage.py prune_audit`` delete only old rows."""

from __future__ import annotations

import logging
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from coordinator import operations
from coordinator.models import AuditEntry
from coordinator.protocol.errors import InvalidRequest


def entry(age_days: float, name: str) -> AuditEntry:
    row = AuditEntry.objects.create(
        username="ops", action=AuditEntry.Action.REDELIVER, stream_prefix=name, outcome=AuditEntry.OK
    )
    # timestamp is auto_now_add: age it afterwards.
    AuditEntry.objects.filter(pk=row.pk).update(timestamp=timezone.now() - timedelta(days=age_days))
    return row


def remaining() -> list[str]:
    return sorted(AuditEntry.objects.values_list("stream_prefix", flat=True))


@pytest.fixture
def trail() -> None:
    for age, name in [(0, "today"), (29.9, "month"), (30.1, "older-than-30"), (400, "older-than-365")]:
        entry(age, name)


def test_prune_deletes_only_rows_older_than_the_age(trail: None) -> None:
    assert operations.prune_audit(older_than_days=30) == 2
    assert remaining() == ["month", "today"]
    assert operations.prune_audit(older_than_days=30) == 0


def test_a_pass_that_prunes_nothing_logs_nothing_at_info(
    trail: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Every retention pass prunes; only one that deleted rows says so (issue 31: "audit trail
    pruned: 0 entries" on every pass)."""
    caplog.set_level(logging.INFO, logger="coordinator")
    assert operations.prune_audit(older_than_days=30) == 2
    assert operations.prune_audit(older_than_days=30) == 0
    pruned = [r.getMessage() for r in caplog.records if "audit trail pruned" in r.getMessage()]
    assert len(pruned) == 1 and pruned[0].startswith("audit trail pruned: 2 entries")


def test_a_dry_run_counts_and_deletes_nothing(trail: None) -> None:
    assert operations.prune_audit(older_than_days=30, dry_run=True) == 2
    assert len(remaining()) == 4


def test_the_default_age_is_the_setting_else_365_days(trail: None, settings: Any) -> None:
    del settings.RSC_AUDIT_RETENTION_DAYS  # absent: 365
    assert operations.prune_audit() == 1
    assert remaining() == ["month", "older-than-30", "today"]
    settings.RSC_AUDIT_RETENTION_DAYS = 1
    assert operations.prune_audit() == 2
    assert remaining() == ["today"]


@pytest.mark.parametrize("days", [0, -1, True, "30"])
def test_an_impossible_age_deletes_nothing(trail: None, days: Any, settings: Any) -> None:
    with pytest.raises(InvalidRequest):
        operations.prune_audit(older_than_days=days)
    settings.RSC_AUDIT_RETENTION_DAYS = days
    with pytest.raises(InvalidRequest, match="RSC_AUDIT_RETENTION_DAYS"):
        operations.prune_audit()
    assert len(remaining()) == 4


def test_the_command(trail: None) -> None:
    out = StringIO()
    call_command("prune_audit", "--older-than-days", "30", "--dry-run", stdout=out)
    assert out.getvalue() == "2 audit entries would be deleted.\n" and len(remaining()) == 4
    out = StringIO()
    call_command("prune_audit", "--older-than-days", "30", stdout=out)
    assert out.getvalue() == "2 audit entries were deleted.\n" and remaining() == ["month", "today"]
    with pytest.raises(CommandError, match="older_than_days"):
        call_command("prune_audit", "--older-than-days", "0")
