"""The audit trail: the only code that writes, settles and prunes ``AuditEntry`` rows.

One way in: :func:`begin` then :func:`settle`, called by ``coordinator/operations.py`` for every
operator action, whatever its entry point (API, pages, commands). The row is written with the outcome
``pending`` before anything changes, and settled afterwards. (An after-the-fact ``record`` used to serve
the pages' group actions; it failed open, writing nothing when the database was down after the change
was made, and is gone.)

:func:`begin` and :func:`settle` commit in their own transaction (``durable=True``): a row that is
"written first" but sits in a caller's open transaction is not written at all until that transaction
commits, and is lost if it rolls back after the change was made. Calling them inside ``atomic()`` is a
programming error (Django raises ``RuntimeError``), not something to paper over.

Every write also logs one line (logger ``admin_ui.audit``, its name from before the module moved
here, kept for whoever filters the log on it), so the trail survives in the log when the
table is pruned. Entry fields (a skip's payloads) go to the table only, never to the log.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from .models import AuditEntry

log = logging.getLogger("admin_ui.audit")


def begin(
    *,
    username: str,
    user: Any,
    source: str,
    action: AuditEntry.Action,
    stream_prefix: str,
    consumer_group: str = "",
    details: dict[str, Any],
) -> AuditEntry:
    """Commit the row of an action about to be attempted (outcome ``pending``); raises DatabaseError."""
    with transaction.atomic(durable=True):
        entry = AuditEntry.objects.create(
            user=user,
            username=username,
            action=action,
            source=source,
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
            details=_json_safe(details),
            outcome=AuditEntry.PENDING,
        )
    log.info(
        "%s %s by %s: stream_prefix=%s consumer_group=%s requested: %s (audit entry %s)",
        source,
        action.value,
        username,
        stream_prefix,
        consumer_group,
        details,
        entry.pk,
    )
    return entry


def settle(entry: AuditEntry, outcome: str, *, message: str = "", details: dict[str, Any]) -> None:
    """Replace ``pending`` with the outcome (``ok`` or an error code); raises DatabaseError."""
    entry.outcome = outcome
    entry.message = message
    entry.details = _json_safe(details)
    with transaction.atomic(durable=True):
        entry.save(update_fields=["outcome", "message", "details"])
    log.info(
        "%s %s by %s: stream_prefix=%s consumer_group=%s outcome=%s%s (audit entry %s)",
        entry.source,
        entry.action,
        entry.username,
        entry.stream_prefix,
        entry.consumer_group,
        outcome,
        f": {message}" if message else "",
        entry.pk,
    )


def _json_safe(details: dict[str, Any]) -> dict[str, Any]:
    # Error details are documented JSON-safe; a stray value must not make the audit write fail.
    return dict(json.loads(json.dumps(details, default=str)))


def prune(*, before: datetime, dry_run: bool = False) -> int:
    """Delete (or with ``dry_run`` only count) the rows written before ``before``; returns how many."""
    old = AuditEntry.objects.filter(timestamp__lt=before)
    if dry_run:
        return int(old.count())
    deleted, _by_model = old.delete()
    # Every retention pass prunes: a pass that found nothing to delete says so at DEBUG only.
    log.log(
        logging.INFO if deleted else logging.DEBUG,
        "audit trail pruned: %d entries written before %s deleted",
        deleted,
        before.isoformat(),
    )
    return int(deleted)
