"""``manage.py prune_audit [--older-than-days N] [--dry-run]``: delete audit rows past their retention.

A one-line entry over ``coordinator.operations.prune_audit`` (the retention beat task calls the same
function once per run). The default age is ``RSC_AUDIT_RETENTION_DAYS`` (365); ``--dry-run`` only counts.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import operations
from coordinator.protocol.errors import InvalidRequest


class Command(BaseCommand):
    help = "Delete audit entries older than RSC_AUDIT_RETENTION_DAYS (or --older-than-days N)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-days",
            type=int,
            default=None,
            metavar="N",
            help="delete entries written more than N days ago (default: RSC_AUDIT_RETENTION_DAYS, 365)",
        )
        parser.add_argument("--dry-run", action="store_true", help="only count what would be deleted")

    def handle(self, *args: Any, older_than_days: int | None, dry_run: bool, **options: Any) -> None:
        try:
            count = operations.prune_audit(older_than_days=older_than_days, dry_run=dry_run)
        except InvalidRequest as e:
            raise CommandError(e.message) from e
        self.stdout.write(f"{count} audit entries {'would be' if dry_run else 'were'} deleted.")
