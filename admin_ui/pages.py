"""What every operator page module shares: error texts, the auto-refresh switch, the way back."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import redirect

from coordinator.api.errors import HTTP_STATUS
from coordinator.operations import AuditUnavailable
from coordinator.protocol.errors import ConcurrentUpdate, CoordinatorError, StoreUnavailable

REFRESH_S = 5


def is_transient(error: CoordinatorError) -> bool:
    """The store or the audit trail could not serve right now (unreachable, busy, contended): worth
    retrying as is. Not ``error.retriable``, which is advice to members: a missing group is retriable
    for a member (it may be created) but not something an operator should wait for."""
    return isinstance(error, StoreUnavailable | ConcurrentUpdate | AuditUnavailable)


def error_text(error: CoordinatorError) -> str:
    """``Migration in progress: <message> [MIGRATION_IN_PROGRESS]``, plus advice when it is transient."""
    title = HTTP_STATUS.get(error.code, (500, "Error"))[1]
    text = f"{title}: {error.message} [{error.code.value}]"
    return text + (" This is usually temporary: retry shortly." if is_transient(error) else "")


def refresh(request: HttpRequest) -> int | None:
    return None if request.GET.get("refresh") == "off" else REFRESH_S


def to_detail(stream_prefix: str, consumer_group: str) -> HttpResponseRedirect:
    return redirect("admin:admin_ui_group_detail", stream_prefix=stream_prefix, consumer_group=consumer_group)
