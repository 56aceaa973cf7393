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

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from coordinator import operations
from coordinator.metrics import scrape_refusal
from coordinator.operations import OperationErrorCode
from coordinator.protocol.errors import ErrorCode

from . import schemas as doc
from . import views
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


# ------------------------------------------------------------------------------------------- the schema


class ScalingFiguresSerializer(serializers.Serializer):
    """The document ``group_scaling`` answers (docs/autoscaling.md, "The endpoint")."""

    stream_prefix = serializers.CharField()
    consumer_group = serializers.CharField()
    exists = serializers.BooleanField(help_text="False: no such group or prefix (every figure is 0).")
    backlog = serializers.IntegerField(help_text="undelivered + pending: what a scaler reads.")
    undelivered = serializers.IntegerField(help_text="Entries not yet delivered to the group.")
    pending = serializers.IntegerField(help_text="Delivered and not acknowledged.")
    shards = serializers.IntegerField(help_text="Shards the group reads (active + undrained old ones).")
    active_shards = serializers.IntegerField(help_text="Shards of the active routing version.")
    shards_with_backlog = serializers.IntegerField()
    oldest_undelivered_age_seconds = serializers.FloatField(help_text="0 when nothing is undelivered.")
    exact = serializers.BooleanField(help_text="False: a bounded count (more than 1,000 on a shard).")


class ScalingSchemaView(views.ApiView):
    """Only for the served schema (drf-spectacular inspects the DRF view behind a URL's function, as
    for the heartbeat's fast path): the URL's view is :func:`group_scaling`, whose scrape-token check
    is /metrics' and not the API's authentication."""

    @extend_schema(
        operation_id="autoscaling",
        tags=["autoscaling"],
        summary="A group's backlog for an autoscaler (KEDA metrics-api): docs/autoscaling.md",
        description="Bearer token: one of RSC_METRICS_TOKENS or an admin credential. A group or prefix "
        "that does not exist answers 200 with exists false and zeros.",
        parameters=[doc.STREAM_PREFIX, doc.CONSUMER_GROUP, *doc.RESPONSE_HEADERS],
        responses={
            200: ScalingFiguresSerializer,
            **doc.problems(
                ErrorCode.INVALID_IDENTIFIER,
                ApiErrorCode.UNAUTHENTICATED,
                OperationErrorCode.PERMISSION_DENIED,
                ErrorCode.STORE_UNAVAILABLE,
            ),
        },
    )
    def get(self, request: Any, stream_prefix: str, consumer_group: str) -> Any:  # pragma: no cover
        raise AssertionError("the URL's view is group_scaling")


group_scaling.cls = ScalingSchemaView  # type: ignore[attr-defined]
group_scaling.initkwargs = {}  # type: ignore[attr-defined]
