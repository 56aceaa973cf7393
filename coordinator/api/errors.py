"""Every error the HTTP API returns, as RFC 9457 problem details; the ONE place codes map to statuses.

Theory of operation
-------------------
Errors reach a client through exactly three doors, and all three build their body with
:func:`problem`:

1. :func:`exception_handler`, DRF's exception handler (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``):
   everything raised inside an API view, from the core's :class:`CoordinatorError` to an unexpected
   ``KeyError``. It never returns ``None``, so DRF never re-raises and no traceback or HTML page can
   follow, whatever ``DEBUG`` says.
2. :func:`api_not_found`, the catch-all route under ``/api/``: unknown paths (also with DEBUG on, where
   Django would otherwise answer with its technical 404 page).
3. The Django handlers :func:`handler400` / ``403`` / ``404`` / ``500`` (wired in ``config/urls.py``):
   failures outside any view (middleware), for ``/api/`` paths only; other paths keep Django's pages,
   except 500: :func:`handler500` logs every unhandled exception under an incident id and shows it.

The status of a code is :data:`HTTP_STATUS` and nothing else: docs/protocol.md section 12 for the core's
codes, plus the operations layer's codes (:class:`OperationErrorCode`, coordinator/operations.py) and the
codes that only the HTTP layer produces (:class:`ApiErrorCode`).
Every 503 carries ``Retry-After`` (the store, its optimistic concurrency or the audit database will
likely be back within a second).

The body is ``{type, title, status, detail, code, retriable, instance, details}``; validation failures
add ``errors: [{field, message, code}]``. Every 500 adds ``incident_id``: :func:`log_incident` logged the
exception with its traceback at ERROR under that id, once (the response is marked as logged, so
Django's ``django.request`` does not log it again without the id). An unexpected failure's own message
is never sent: it may hold anything. A 500 outside the API (the operator pages) is a plain page that
shows the id.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.utils.html import format_html
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.views import set_rollback

from coordinator.operations import OperationErrorCode
from coordinator.protocol.errors import CoordinatorError, ErrorCode

log = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:redis-stream-coordinator:problem:"
RETRY_AFTER_S = 1


class ApiErrorCode(StrEnum):
    """Codes that only the HTTP layer produces (the core's are :class:`ErrorCode`, the operations
    layer's :class:`OperationErrorCode`)."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    NOT_ACCEPTABLE = "NOT_ACCEPTABLE"
    LENGTH_REQUIRED = "LENGTH_REQUIRED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    # coordinator/api/auth.py: a member credential used outside its stream-prefix / group / member-id
    # scope. Nothing was read or changed.
    OUTSIDE_CREDENTIAL_SCOPE = "OUTSIDE_CREDENTIAL_SCOPE"


# code -> (HTTP status, title). docs/protocol.md section 12; keep the two in step.
HTTP_STATUS: dict[str, tuple[int, str]] = {
    ErrorCode.INVALID_REQUEST: (400, "Invalid request"),
    ErrorCode.INVALID_IDENTIFIER: (400, "Invalid identifier"),
    ErrorCode.INVALID_CONFIG: (400, "Invalid group configuration"),
    ErrorCode.UNKNOWN_SHARD: (400, "Unknown shard"),
    ApiErrorCode.UNAUTHENTICATED: (401, "Authentication required"),
    OperationErrorCode.PERMISSION_DENIED: (403, "Permission denied"),
    ApiErrorCode.OUTSIDE_CREDENTIAL_SCOPE: (403, "Outside the credential's scope"),
    ErrorCode.MEMBER_ID_NOT_OWNED: (403, "Member id belongs to another credential"),
    ErrorCode.GROUP_NOT_FOUND: (404, "Group not found"),
    ErrorCode.SHARD_NOT_FOUND: (404, "Shard not found"),
    ErrorCode.STREAM_PREFIX_NOT_FOUND: (404, "Stream prefix not found"),
    ApiErrorCode.NOT_FOUND: (404, "Not found"),
    ApiErrorCode.METHOD_NOT_ALLOWED: (405, "Method not allowed"),
    ApiErrorCode.NOT_ACCEPTABLE: (406, "Not acceptable"),
    ErrorCode.GROUP_ALREADY_EXISTS: (409, "Group already exists"),
    ErrorCode.SHARD_COUNT_CONFLICT: (409, "Shard count conflict"),
    ErrorCode.SHARD_COUNT_UNCHANGED: (409, "Shard count unchanged"),
    ErrorCode.MIGRATION_IN_PROGRESS: (409, "Migration in progress"),
    ErrorCode.UNKNOWN_MEMBER_ID: (409, "Unknown member id"),
    ErrorCode.FENCED_MEMBER_EPOCH: (409, "Fenced member epoch"),
    ErrorCode.STALE_JOIN: (409, "Stale join"),
    ErrorCode.UNRELEASED_INSTANCE_ID: (409, "Instance id held by a live member"),
    ErrorCode.FENCED_INSTANCE_ID: (409, "Fenced instance id"),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (409, "Group is full"),
    ErrorCode.GROUP_HAS_LIVE_MEMBERS: (409, "Group has live members"),
    ErrorCode.MIGRATION_NOT_ACTIVE: (409, "No migration to release from"),
    ErrorCode.STREAM_PREFIX_NOT_EMPTY: (409, "Stream prefix not empty"),
    ErrorCode.GROUP_HAS_UNCONSUMED_ENTRIES: (409, "Group has unconsumed entries"),
    ErrorCode.ENTRY_NOT_PENDING: (409, "Entry not pending"),
    ErrorCode.CONFIRMATION_MISMATCH: (409, "Confirmation does not match"),
    ErrorCode.DEAD_LETTER_NOT_VERIFIED: (409, "Dead letter not written by the dead-letter function"),
    ErrorCode.DEAD_LETTER_NOT_FOUND: (404, "Dead letter not found"),
    ApiErrorCode.LENGTH_REQUIRED: (411, "Length required"),
    ApiErrorCode.PAYLOAD_TOO_LARGE: (413, "Payload too large"),
    ApiErrorCode.UNSUPPORTED_MEDIA_TYPE: (415, "Unsupported media type"),
    ApiErrorCode.TOO_MANY_REQUESTS: (429, "Too many requests"),
    ErrorCode.HEARTBEAT_TOO_FREQUENT: (429, "Heartbeats too frequent"),
    ErrorCode.JOINS_THROTTLED: (429, "Too many joins at once"),
    ErrorCode.CREDENTIAL_JOINS_TOO_FREQUENT: (429, "The credential joins too often"),
    ErrorCode.CREDENTIAL_MEMBER_LIMIT_REACHED: (429, "The credential has its maximum of live members"),
    ErrorCode.ILLEGAL_TRANSITION: (500, "Internal protocol violation"),
    OperationErrorCode.INTERNAL_ERROR: (500, "Internal error"),
    ErrorCode.STORE_UNAVAILABLE: (503, "Metadata store unavailable"),
    ErrorCode.CONCURRENT_UPDATE: (503, "Concurrent update"),
    OperationErrorCode.AUDIT_UNAVAILABLE: (503, "Audit trail unavailable"),
    ErrorCode.METADATA_CORRUPT: (500, "Metadata unreadable"),
}


class LengthRequired(drf.APIException):
    status_code = 411
    default_detail = "send the body with a Content-Length (chunked request bodies are not read)"
    default_code = "length_required"


class PayloadTooLarge(drf.APIException):
    status_code = 413
    default_detail = "the request body is too large"
    default_code = "payload_too_large"


# DRF's exceptions (and ours) -> code; the first matching class wins.
_DRF_CODES: tuple[tuple[type[drf.APIException], str], ...] = (
    (drf.NotAuthenticated, ApiErrorCode.UNAUTHENTICATED),
    (drf.AuthenticationFailed, ApiErrorCode.UNAUTHENTICATED),
    (drf.PermissionDenied, OperationErrorCode.PERMISSION_DENIED),
    (drf.NotFound, ApiErrorCode.NOT_FOUND),
    (drf.MethodNotAllowed, ApiErrorCode.METHOD_NOT_ALLOWED),
    (drf.NotAcceptable, ApiErrorCode.NOT_ACCEPTABLE),
    (drf.UnsupportedMediaType, ApiErrorCode.UNSUPPORTED_MEDIA_TYPE),
    (drf.Throttled, ApiErrorCode.TOO_MANY_REQUESTS),
    (PayloadTooLarge, ApiErrorCode.PAYLOAD_TOO_LARGE),
    (LengthRequired, ApiErrorCode.LENGTH_REQUIRED),
    (drf.ParseError, ErrorCode.INVALID_REQUEST),
    (drf.ValidationError, ErrorCode.INVALID_REQUEST),
)
# An identifier field that fails the core's validate_identifier reports this DRF error code.
IDENTIFIER_ERROR_CODE = "invalid_identifier"


def status_of(code: str) -> int:
    return HTTP_STATUS[code][0]


def problem(
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    retriable: bool = False,
    details: Mapping[str, Any] | None = None,
    **extensions: Any,
) -> dict[str, Any]:
    """The RFC 9457 body for ``code`` (its status and title come from :data:`HTTP_STATUS`)."""
    status, title = HTTP_STATUS[code]
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + str(code).lower().replace("_", "-"),
        "title": title,
        "status": status,
        "detail": detail,
        "code": str(code),
        "retriable": retriable,
    }
    if instance is not None:
        body["instance"] = instance
    body["details"] = _json_safe(dict(details or {}))
    body.update(extensions)
    return body


def problem_headers(code: str, **extra: str) -> dict[str, str]:
    headers = dict(extra)
    if status_of(code) == 503:
        headers.setdefault("Retry-After", str(RETRY_AFTER_S))
    return headers


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    # CoordinatorError.details is documented JSON-safe; a stray value must not turn a 4xx into a 500.
    return dict(json.loads(json.dumps(value, default=str)))


# ------------------------------------------------------------------------------------------ DRF


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> HttpResponse:
    """DRF's exception handler for the API: a problem response for every exception, never ``None``.

    It returns a plain Django response, not a DRF ``Response``: DRF would render that with whatever
    renderer the view negotiated (drf-spectacular's schema view would answer a problem in YAML).
    """
    request = context.get("request")
    instance = request.path if request is not None else None
    set_rollback()
    code, detail, retriable, details, extensions, headers = _describe(exc, instance)
    body = problem(code, detail, instance=instance, retriable=retriable, details=details, **extensions)
    response = _problem_response(body, problem_headers(code, **headers))
    if "incident_id" in body:
        _mark_logged(response)
    return response


def log_incident(path: str | None, exc: BaseException | None, what: str) -> str:
    """Log ``exc`` with its traceback at ERROR under a new incident id, and return the id.

    The id goes into the response (``incident_id``), so an operator handed a 500 finds its traceback.
    """
    incident = uuid.uuid4().hex
    log.error("%s on %s (incident %s)", what, path, incident, exc_info=exc, extra={"incident_id": incident})
    return incident


def _mark_logged(response: HttpResponse) -> None:
    # Django's log_response() skips a response so marked. The incident was logged with its traceback
    # and id; Django's own "Internal Server Error" record would repeat it without either.
    response._has_been_logged = True  # type: ignore[attr-defined]


# What a client is told instead of a translated Redis error's own message.
_DRIVER_DETAIL = {
    ErrorCode.STORE_UNAVAILABLE: "the coordinator's metadata store is unavailable; retry after Retry-After",
    ErrorCode.METADATA_CORRUPT: "the coordinator could not read its metadata; the details are in its log",
}
_Described = tuple[str, str, bool, dict[str, Any], dict[str, Any], dict[str, str]]


def _describe(exc: Exception, instance: str | None) -> _Described:
    """code, detail, retriable, details, extension members, headers of one exception."""
    if isinstance(exc, CoordinatorError):
        extensions: dict[str, Any] = {}
        if status_of(exc.code) == 500:  # ILLEGAL_TRANSITION (a bug), METADATA_CORRUPT (a hand edit)
            what = f"{exc.code.value}: {exc.message}"
            extensions["incident_id"] = log_incident(instance, exc, what)
        elif exc.code is ErrorCode.STORE_UNAVAILABLE:
            log.warning("%s: %s", instance, exc.message)
        detail = exc.message
        if exc.__cause__ is not None and exc.code in _DRIVER_DETAIL:
            detail = _DRIVER_DETAIL[
                exc.code
            ]  # a translated driver error: its words (hosts, ports) are logged
        return exc.code, detail, exc.retriable, exc.details, extensions, _retry_after(exc)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, SuspiciousOperation):
        exc = drf.ParseError("the request was rejected as malformed")
    if isinstance(exc, drf.ValidationError):
        return _describe_validation(exc)
    if isinstance(exc, drf.APIException):
        code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), None)
        if code is None or status_of(code) != exc.status_code:
            code = _code_for_status(exc.status_code)
        headers: dict[str, str] = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = str(exc.auth_header)
        wait = getattr(exc, "wait", None)
        if wait:
            headers["Retry-After"] = str(int(wait))
        retriable = code == ApiErrorCode.TOO_MANY_REQUESTS
        return code, _text(exc.detail), retriable, {}, {}, headers
    incident = log_incident(instance, exc, "unexpected error")
    extensions = {"incident_id": incident}
    return OperationErrorCode.INTERNAL_ERROR, _incident_detail(incident), False, {}, extensions, {}


def _retry_after(exc: CoordinatorError) -> dict[str, str]:
    """``Retry-After`` of an error that says when to come back (``details["retry_after_ms"]``, a 429),
    in whole seconds rounded up as HTTP requires; the milliseconds stay in the details."""
    wait_ms = exc.details.get("retry_after_ms")
    if not isinstance(wait_ms, int) or wait_ms < 0:
        return {}
    return {"Retry-After": str(max(1, -(-wait_ms // 1000)))}


def _incident_detail(incident: str) -> str:
    return f"an unexpected error occurred; it was logged as incident {incident}"


def _describe_validation(exc: drf.ValidationError) -> _Described:
    errors = list(_flatten(exc.detail, ""))
    identifier_only = bool(errors) and all(e["code"] == IDENTIFIER_ERROR_CODE for e in errors)
    code = ErrorCode.INVALID_IDENTIFIER if identifier_only else ErrorCode.INVALID_REQUEST
    first = errors[0] if errors else {"field": None, "message": "invalid request"}
    where = f"{first['field']}: " if first["field"] else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    detail = f"the request body is invalid: {where}{first['message']}{more}"
    return code, detail, False, {}, {"errors": errors}, {}


def _flatten(detail: Any, path: str) -> Any:
    """DRF's nested error detail as ``[{field, message, code}]``; ``field`` is e.g. ``client.pid`` or
    ``owned_shards[3]`` (``None`` for the body as a whole)."""
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if key == "non_field_errors":
                yield from _flatten(value, path)
            elif isinstance(key, int):
                yield from _flatten(value, f"{path}[{key}]")
            else:
                yield from _flatten(value, f"{path}.{key}" if path else str(key))
    elif isinstance(detail, list):
        for item in detail:
            yield from _flatten(item, path)
    else:
        yield {"field": path or None, "message": str(detail), "code": getattr(detail, "code", "invalid")}


def _text(detail: Any) -> str:
    if isinstance(detail, list | dict):
        return "; ".join(e["message"] for e in _flatten(detail, ""))
    return str(detail)


def _code_for_status(status: int) -> str:
    """An APIException this module does not know by class: the first code with its status."""
    for code, (code_status, _title) in HTTP_STATUS.items():
        if code_status == status and code in ApiErrorCode.__members__.values():
            return code
    return ErrorCode.INVALID_REQUEST if 400 <= status < 500 else OperationErrorCode.INTERNAL_ERROR


# ------------------------------------------------------------------------------------------ Django


def is_api_path(request: HttpRequest) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def problem_response(request: HttpRequest, code: str, detail: str) -> HttpResponse:
    return _problem_response(problem(code, detail, instance=request.path), problem_headers(code))


def _problem_response(body: dict[str, Any], headers: dict[str, str]) -> HttpResponse:
    return JsonResponse(
        body,
        status=body["status"],
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
        json_dumps_params={"separators": (",", ":")},
    )


@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The catch-all route under ``/api/``: any method, any unknown path."""
    return problem_response(request, ApiErrorCode.NOT_FOUND, f"no API endpoint at {request.path}")


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_api_path(request):
        return defaults.bad_request(request, exception)
    return problem_response(request, ErrorCode.INVALID_REQUEST, "the request was rejected as malformed")


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_api_path(request):
        return defaults.permission_denied(request, exception)
    return problem_response(request, OperationErrorCode.PERMISSION_DENIED, "permission denied")


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_api_path(request):
        return defaults.page_not_found(request, exception)
    return problem_response(request, ApiErrorCode.NOT_FOUND, f"no API endpoint at {request.path}")


_SERVER_ERROR_PAGE = (
    '<!doctype html><html lang="en"><head><title>Server Error (500)</title></head><body>'
    "<h1>Server Error (500)</h1><p>An unexpected error occurred. It was logged as incident "
    '<code id="incident-id">{}</code>; quote this id when you report it.</p></body></html>'
)


def handler500(request: HttpRequest) -> HttpResponse:
    """An exception outside DRF's handling (a plain Django view, a middleware): logged here with its
    traceback under an incident id, which the response shows. Django calls this inside its ``except``
    block, so ``sys.exc_info()`` is the exception (``None`` when called directly)."""
    incident = log_incident(request.path, sys.exc_info()[1], "unhandled exception")
    response: HttpResponse
    if is_api_path(request):
        body = problem(
            OperationErrorCode.INTERNAL_ERROR,
            _incident_detail(incident),
            instance=request.path,
            incident_id=incident,
        )
        response = _problem_response(body, {})
    else:
        response = HttpResponseServerError(format_html(_SERVER_ERROR_PAGE, incident))
    _mark_logged(response)
    return response
