"""``GET /api/v1/autoscaling/<stream_prefix>/<consumer_group>``: one group's autoscaling figures as JSON,
for a KEDA ``metrics-api`` trigger or any autoscaler that polls (docs/autoscaling.md).

Who may read it: whoever may scrape ``/metrics`` (an ``RSC_METRICS_TOKENS`` token or an admin
credential, as a bearer token; coordinator/metrics.py decides), so a scaler holds a token that can do
nothing else. The figures come from the operations layer (:func:`coordinator.operations.group_scaling`);
a group that does not exist answers 200 with zeros, a malformed identifier a 400 problem, any other
failure the API's problem (coordinator/api/errors.py). A plain Django view, not DRF: it has no body,
no negotiation and no credential of the API's own kinds.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from coordinator import operations
from coordinator.metrics import scrape_refusal
from coordinator.operations import OperationErrorCode
from coordinator.protocol.errors import ErrorCode

from .errors import ApiErrorCode, exception_handler, problem_response


@csrf_exempt  # a bearer token, never a cookie
def group_scaling(request: HttpRequest, stream_prefix: str, consumer_group: str) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        response = problem_response(
            request, ApiErrorCode.METHOD_NOT_ALLOWED, f"method {request.method} is not allowed: use GET"
        )
        response["Allow"] = "GET, HEAD"
        return response
    refusal = scrape_refusal(request)  # the rule of /metrics (coordinator/metrics.py), as problems
    if refusal is not None:
        who = "an RSC_METRICS_TOKENS token or an admin one"
        if refusal.status == 503:
            return problem_response(request, ErrorCode.STORE_UNAVAILABLE, refusal.text.strip())
        if refusal.status == 403:
            detail = f"this token may not read autoscaling figures: it must be {who}"
            response = problem_response(request, OperationErrorCode.PERMISSION_DENIED, detail)
        elif "invalid_token" in refusal.authenticate:
            detail = f"this token may not read autoscaling figures: it is not {who}"
            response = problem_response(request, ApiErrorCode.UNAUTHENTICATED, detail)
        else:
            detail = f"autoscaling figures need 'Authorization: Bearer <token>': {who}"
            response = problem_response(request, ApiErrorCode.UNAUTHENTICATED, detail)
        response["WWW-Authenticate"] = refusal.authenticate
        return response
    try:
        figures = operations.group_scaling(stream_prefix, consumer_group)
    except Exception as e:  # a problem response for every failure, as every API view answers
        return exception_handler(e, {"request": request})
    return JsonResponse(figures, json_dumps_params={"separators": (",", ":")})
