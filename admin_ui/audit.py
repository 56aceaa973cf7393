"""The audit trail of the operator pages: one ``AuditEntry`` row and one log line per attempted change."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest

from .models import AuditEntry

log = logging.getLogger(__name__)


def record(
    request: HttpRequest,
    action: AuditEntry.Action,
    stream_prefix: str,
    consumer_group: str = "",
    *,
    details: dict[str, Any] | None = None,
    outcome: str = AuditEntry.OK,
    message: str = "",
) -> AuditEntry:
    user: Any = request.user
    entry = AuditEntry.objects.create(
        user=user if user.is_authenticated else None,
        username=user.get_username() if user.is_authenticated else "",
        action=action,
        stream_prefix=stream_prefix,
        consumer_group=consumer_group,
        details=details or {},
        outcome=outcome,
        message=message,
    )
    log.info(
        "admin page %s by %s: stream_prefix=%s consumer_group=%s outcome=%s details=%s",
        action.value,
        entry.username,
        stream_prefix,
        consumer_group,
        outcome,
        entry.details,
    )
    return entry
