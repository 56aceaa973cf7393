"""The HTTP API v1 (docs/protocol.md section 13): thin views over the metadata store.

Each view authenticates (``auth``), validates the path, the query and the body (``serializers``), makes
one call and returns its JSON as it is. Reads call the store (``coordinator.store.get_store()``); every
admin action (create, delete, max_concurrency, shard count, prefix deletion here; the entry lifecycle in
``lifecycle``) calls ``coordinator.operations``, which authorizes, audits first (failing closed) and
records the outcome, the same door the operator pages use. Errors are raised, never returned:
``errors.exception_handler`` turns every one of them into problem details. Nothing here decides anything
about the protocol.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.urls import reverse
from django.utils.http import parse_header_parameters
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from coordinator import operations
from coordinator.credentials import Role, TokenPrincipal
from coordinator.protocol.errors import CoordinatorError, ErrorCode
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, validate_identifier
from coordinator.store import MetadataStore, get_store

from . import schemas as doc
from .auth import (
    BearerTokenAuthentication,
    IsAdmin,
    IsMember,
    StaffSessionAuthentication,
    identity_of,
    require_scope,
    role_of,
)
from .errors import ApiErrorCode, exception_handler
from .parsers import StrictJSONParser, require_json_body
from .serializers import (
    CreateGroupSerializer,
    DeleteGroupQuerySerializer,
    DeletePrefixQuerySerializer,
    HeartbeatSerializer,
    MaxConcurrencySerializer,
    QuerySerializer,
    ShardCountSerializer,
    StrictSerializer,
)
from .throttling import (
    AdminRateThrottle,
    admit_credential_join,
    admit_join,
    forget_left_member,
    heartbeat_floor,
)

log = logging.getLogger(__name__)

# Set in request.META (the WSGI environ) once the fast path ran the heartbeat script for this request
# and found the member not steady (fastpath.py, door.py): this view then does not run it again.
FAST_TRIED = "rsc.fast_tried"


class JSONOnlyNegotiation(BaseContentNegotiation):
    """The API speaks JSON only, whatever ``Accept`` says: a client that asks for HTML gets JSON (and
    an error as problem+json) rather than a 406 that it would not understand either."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        media_type, _params = parse_header_parameters(request.content_type or "")
        return next((p for p in parsers if p.media_type == media_type), None)

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type


class ApiView(APIView):
    """Base of every API view: bearer / staff-session auth (member role by default), JSON in and out,
    problem details for every error, ``Cache-Control: no-store``."""

    authentication_classes = (BearerTokenAuthentication, StaffSessionAuthentication)
    permission_classes = (IsMember,)
    parser_classes = (StrictJSONParser,)
    renderer_classes = (JSONRenderer,)
    content_negotiation_class = JSONOnlyNegotiation
    metadata_class = None  # OPTIONS is a 405 like any other method a route does not define
    throttle_classes = ()

    @property
    def allowed_methods(self) -> list[str]:
        return [m for m in super().allowed_methods if m != "OPTIONS"]

    def get_exception_handler(self) -> Any:
        return exception_handler

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Cache-Control"] = "no-store"  # coordination state is stale the moment it is read
        return response

    @property
    def store(self) -> MetadataStore:
        return get_store()

    def path_identifiers(self) -> tuple[str, ...]:
        """The path's stream prefix and consumer group, checked (INVALID_IDENTIFIER) in path order."""
        names = [n for n in ("stream_prefix", "consumer_group") if n in self.kwargs]
        return tuple(validate_identifier(self.kwargs[n], n) for n in names)

    def body(self, serializer_class: type[StrictSerializer], *, optional: bool = False) -> Any:
        """The validated body. ``optional``: a request without any body reads as ``{}``."""
        if optional and _declared_empty(self.request):
            data: Any = {}
        else:
            require_json_body(self.request)
            data = self.request.data
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer

    def query(self, serializer_class: type[QuerySerializer]) -> dict[str, Any]:
        """The validated query parameters (unknown or repeated names refused)."""
        params = self.request.query_params
        repeated = sorted(name for name in params if len(params.getlist(name)) > 1)
        if repeated:
            raise ValidationError(
                {n: [ErrorDetail("given more than once", code="repeated_parameter")] for n in repeated}
            )
        serializer = serializer_class(data={name: params[name] for name in params})
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def path_value(self, name: str, parse: Any) -> str:
        """A path segment parsed by the core's own rule; malformed: INVALID_REQUEST, field ``name``."""
        try:
            return str(parse(self.kwargs[name]))
        except CoordinatorError as e:
            raise ValidationError({name: [ErrorDetail(e.message, code=f"invalid_{name}")]}) from e

    def actor(self) -> operations.Actor:
        return actor_from_api_request(self.request)


def actor_from_api_request(request: Any) -> operations.Actor:
    """A DRF request: a bearer-token principal (admin if its role is) or a staff session (admin with
    ``coordinator.manage_groups``), by the same rule as the API's permission classes."""
    user: Any = request.user
    is_admin = role_of(request) is Role.ADMIN
    if isinstance(user, TokenPrincipal):
        name = f"credential:{user.name}"
        return operations.Actor(username=name, source=operations.Source.API, is_admin=is_admin)
    return operations.Actor.of_user(user, source=operations.Source.API, is_admin=is_admin)


def _declared_empty(request: Request) -> bool:
    if request.META.get("HTTP_TRANSFER_ENCODING"):
        return False
    return request.META.get("CONTENT_LENGTH") in (None, "", "0")


class AdminView(ApiView):
    """Admin role only, at most RSC_ADMIN_API_RATE requests per credential (``throttling``)."""

    permission_classes = (IsAdmin,)
    throttle_classes = (AdminRateThrottle,)


# ---------------------------------------------------------------------------------------------- members


class HeartbeatView(ApiView):
    @extend_schema(
        operation_id="heartbeat",
        tags=["member"],
        summary="Member heartbeat: join (epoch 0), renew / reconcile, leave (epoch -1)",
        description="docs/protocol.md section 3. On FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID the member "
        "must stop reading every shard at once and rejoin with member_epoch 0; on GROUP_NOT_FOUND it "
        "retries with backoff.",
        parameters=[doc.STREAM_PREFIX, doc.CONSUMER_GROUP, *doc.RESPONSE_HEADERS],
        request=HeartbeatSerializer,
        responses={
            200: doc.HeartbeatResponseSerializer,
            **doc.problems(
                *doc.BODY_CODES,
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.GROUP_NOT_FOUND,
                ErrorCode.UNKNOWN_MEMBER_ID,
                ErrorCode.FENCED_MEMBER_EPOCH,
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                ErrorCode.STALE_JOIN,
                ErrorCode.JOINS_THROTTLED,
                ErrorCode.CREDENTIAL_JOINS_TOO_FREQUENT,
                ErrorCode.CREDENTIAL_MEMBER_LIMIT_REACHED,
                ApiErrorCode.OUTSIDE_CREDENTIAL_SCOPE,
                ErrorCode.MEMBER_ID_NOT_OWNED,
                ErrorCode.HEARTBEAT_TOO_FREQUENT,
            ),
        },
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        body = self.body(HeartbeatSerializer)
        heartbeat, parked = body.to_heartbeat(), body.parked_report()
        require_scope(request, prefix, group, heartbeat.member_id)
        heartbeat = dataclasses.replace(heartbeat, owner=identity_of(request))
        answer = self._heartbeat(request, prefix, group, heartbeat)
        if parked is not None and heartbeat.member_epoch >= 0:
            # Accepted, so from the member at its live epoch: keep its report of parked keys
            # (coordinator/store/parked_reports.py). A failure here is the heartbeat's (503: it is
            # sent again, which is safe).
            self.store.parked.record(prefix, group, heartbeat.member_id, parked)
        return Response(answer)

    def _heartbeat(self, request: Request, prefix: str, group: str, heartbeat: Heartbeat) -> Any:
        # The pre-DRF fast path (fastpath.py) already ran the script (floor included) for this request
        # and found the member not steady: straight to the full path, the floor counted once.
        if request._request.META.get(FAST_TRIED):
            return self.store.heartbeat(prefix, group, heartbeat, fast_tried=True)
        owner = heartbeat.owner or ""
        if heartbeat.member_epoch == 0:
            # Joins are shed first under load (429 JOINS_THROTTLED), then held to the credential's join
            # rate and cap on live members across every process (429 CREDENTIAL_*).
            with admit_join(), admit_credential_join(self.store, owner, prefix, group, heartbeat.member_id):
                return self.store.heartbeat(prefix, group, heartbeat, heartbeat_floor())
        answer = self.store.heartbeat(prefix, group, heartbeat, heartbeat_floor())
        if heartbeat.member_epoch < 0:  # left, for good or for now: not one of its credential's live members
            forget_left_member(self.store, owner, prefix, group, heartbeat.member_id)
        return answer


class RoutingView(ApiView):
    @extend_schema(
        operation_id="routing",
        tags=["member"],
        summary="The stream prefix's routing: active version and shard count, sealed versions",
        parameters=[doc.STREAM_PREFIX, *doc.RESPONSE_HEADERS],
        responses={
            200: doc.TopologySerializer,
            **doc.problems(
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.STREAM_PREFIX_NOT_FOUND,
                ApiErrorCode.OUTSIDE_CREDENTIAL_SCOPE,
            ),
        },
    )
    def get(self, request: Request, stream_prefix: str) -> Response:
        (prefix,) = self.path_identifiers()
        require_scope(request, prefix)
        return Response(self.store.routing(prefix))


# ---------------------------------------------------------------------------------------------- admin


_GROUP_PATH_CODES = (ErrorCode.INVALID_IDENTIFIER, ErrorCode.GROUP_NOT_FOUND)


def _group_url(prefix: str, group: str) -> str:
    return reverse("api-v1:admin-group", kwargs={"stream_prefix": prefix, "consumer_group": group})


class AdminGroupsView(AdminView):
    @extend_schema(
        operation_id="list_groups",
        tags=["admin"],
        summary="Every consumer group of every stream prefix",
        parameters=doc.RESPONSE_HEADERS,
        responses={200: doc.GroupSummarySerializer(many=True), **doc.admin_problems()},
    )
    def get(self, request: Request) -> Response:
        return Response(self.store.list_groups())

    @extend_schema(
        operation_id="create_group",
        tags=["admin"],
        summary="Create a consumer group (and its stream prefix, given shard_count, if new)",
        description="Configuration fields left out take the server's defaults (RSC_MEMBER_LEASE_TTL_MS, "
        "RSC_HEARTBEAT_INTERVAL_MS, RSC_REVOCATION_TIMEOUT_MS; "
        f"max_concurrency {GroupConfig().max_concurrency}, max_members {GroupConfig().max_members}).",
        parameters=doc.RESPONSE_HEADERS,
        request=CreateGroupSerializer,
        responses={
            201: doc.GroupDescriptionSerializer,
            **doc.admin_problems(
                *doc.BODY_CODES,
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.INVALID_CONFIG,
                ErrorCode.GROUP_ALREADY_EXISTS,
                ErrorCode.SHARD_COUNT_CONFLICT,
                *doc.ACTION_CODES,
            ),
        },
    )
    def post(self, request: Request) -> Response:
        command, start_from = self.body(CreateGroupSerializer).to_command()
        view = operations.create_group(self.actor(), command, start_from=start_from)
        location = _group_url(command.stream_prefix, command.consumer_group)
        return Response(view, status=status.HTTP_201_CREATED, headers={"Location": location})


class AdminGroupView(AdminView):
    @extend_schema(
        operation_id="describe_group",
        tags=["admin"],
        summary="Everything about one group: epochs, members, both assignments, revocations, migration",
        parameters=[doc.STREAM_PREFIX, doc.CONSUMER_GROUP, *doc.RESPONSE_HEADERS],
        responses={200: doc.GroupDescriptionSerializer, **doc.admin_problems(*_GROUP_PATH_CODES)},
    )
    def get(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        return Response(self.store.describe_group(prefix, group))

    @extend_schema(
        operation_id="delete_group",
        tags=["admin"],
        summary="Delete a group: its metadata, Redis consumer groups and dead letters (streams are kept)",
        description="Refused with 409 GROUP_HAS_UNCONSUMED_ENTRIES, with the `lag` and `pending` totals "
        "in the problem details, while the group has entries not yet delivered or not acknowledged, "
        "unless force=true (DATA LOSS: a group created again with the name skips them). Audited.",
        parameters=[
            doc.STREAM_PREFIX,
            doc.CONSUMER_GROUP,
            DeleteGroupQuerySerializer,
            *doc.RESPONSE_HEADERS,
        ],
        responses={
            204: None,
            **doc.admin_problems(
                ErrorCode.INVALID_REQUEST,
                *_GROUP_PATH_CODES,
                ErrorCode.GROUP_HAS_UNCONSUMED_ENTRIES,
                *doc.ACTION_CODES,
            ),
        },
    )
    def delete(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        query = self.query(DeleteGroupQuerySerializer)
        operations.delete_group(self.actor(), prefix, group, force=query["force"], reason=query["reason"])
        return Response(status=status.HTTP_204_NO_CONTENT)


class MaxConcurrencyView(AdminView):
    @extend_schema(
        operation_id="set_max_concurrency",
        tags=["admin"],
        summary="Set the group's server-side cap on worker threads per member",
        parameters=[doc.STREAM_PREFIX, doc.CONSUMER_GROUP, *doc.RESPONSE_HEADERS],
        request=MaxConcurrencySerializer,
        responses={
            200: doc.GroupDescriptionSerializer,
            **doc.admin_problems(*doc.BODY_CODES, *_GROUP_PATH_CODES, *doc.ACTION_CODES),
        },
    )
    def put(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        value = self.body(MaxConcurrencySerializer).validated_data["max_concurrency"]
        return Response(operations.set_max_concurrency(self.actor(), prefix, group, value))


class ShardCountView(AdminView):
    @extend_schema(
        operation_id="change_shard_count",
        tags=["admin"],
        summary="Start a shard-count change: a new routing version; the current one drains",
        description="docs/protocol.md section 8. 202: the migration has started; it completes once every "
        "group has drained the old version (see GET admin/stream-prefixes/{stream_prefix}).",
        parameters=[doc.STREAM_PREFIX, *doc.RESPONSE_HEADERS],
        request=ShardCountSerializer,
        responses={
            202: doc.PrefixDescriptionSerializer,
            **doc.admin_problems(
                *doc.BODY_CODES,
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.STREAM_PREFIX_NOT_FOUND,
                ErrorCode.SHARD_COUNT_UNCHANGED,
                ErrorCode.MIGRATION_IN_PROGRESS,
                *doc.ACTION_CODES,
            ),
        },
    )
    def post(self, request: Request, stream_prefix: str) -> Response:
        (prefix,) = self.path_identifiers()
        body = self.body(ShardCountSerializer)
        shard_count = body.validated_data["shard_count"]
        view = operations.change_shard_count(self.actor(), prefix, shard_count, body.ordering_mode())
        location = reverse("api-v1:admin-stream-prefix", kwargs={"stream_prefix": prefix})
        return Response(view, status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class StreamPrefixView(AdminView):
    @extend_schema(
        operation_id="describe_stream_prefix",
        tags=["admin"],
        summary="The stream prefix's topology and migration progress",
        parameters=[doc.STREAM_PREFIX, *doc.RESPONSE_HEADERS],
        responses={
            200: doc.PrefixDescriptionSerializer,
            **doc.admin_problems(ErrorCode.INVALID_IDENTIFIER, ErrorCode.STREAM_PREFIX_NOT_FOUND),
        },
    )
    def get(self, request: Request, stream_prefix: str) -> Response:
        (prefix,) = self.path_identifiers()
        return Response(self.store.describe_prefix(prefix))

    @extend_schema(
        operation_id="delete_stream_prefix",
        tags=["admin"],
        summary="Delete a stream prefix: its metadata, streams, dead letters (audited)",
        description="Refused with 409 STREAM_PREFIX_NOT_EMPTY while the prefix has consumer groups or "
        "unconsumed entries, unless force=true (which deletes them: DATA LOSS). The audit record keeps the "
        "usage the prefix had.",
        parameters=[doc.STREAM_PREFIX, DeletePrefixQuerySerializer, *doc.RESPONSE_HEADERS],
        responses={
            204: None,
            **doc.admin_problems(
                ErrorCode.INVALID_REQUEST,
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.STREAM_PREFIX_NOT_FOUND,
                ErrorCode.STREAM_PREFIX_NOT_EMPTY,
                *doc.ACTION_CODES,
            ),
        },
    )
    def delete(self, request: Request, stream_prefix: str) -> Response:
        (prefix,) = self.path_identifiers()
        query = self.query(DeletePrefixQuerySerializer)
        operations.delete_prefix(self.actor(), prefix, force=query["force"], reason=query["reason"])
        return Response(status=status.HTTP_204_NO_CONTENT)
