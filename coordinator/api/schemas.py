"""OpenAPI documentation of the responses (drf-spectacular), the security schemes, and what the schema
says about requests beyond what drf-spectacular reads off the serializers.

The views return the store's JSON-ready dicts as they are (one source of truth for their shape: the core's
``describe`` module and the store's ``codec``); the serializers below only *document* those shapes.
tests/api/test_schema.py validates real responses against the generated schema, so a change on either
side that is not made on the other fails the tests.

Requests: the schema states every rule the API enforces that JSON Schema can say (patterns, ranges,
unknown fields refused, the fields one of which must be given), so that a request the schema calls valid
is never refused for its shape: tests/api/test_schemathesis.py holds the server to that. Two rules it
cannot say are stated in the create-group body's description: ``heartbeat_interval_ms`` below
``lease_ttl_ms`` (either may take the server's default; also in both fields' descriptions, with this
server's defaults, and as the body's ``x-less-than`` extension) and ``shard_count`` for a new stream
prefix.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from coordinator import conf
from coordinator.operations import OperationErrorCode
from coordinator.protocol.describe import GroupState, ShardAssignment
from coordinator.protocol.errors import ErrorCode
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    EndReason,
    MemberState,
    OrderingMode,
    VersionState,
)

from .errors import HTTP_STATUS, PROBLEM_CONTENT_TYPE, ApiErrorCode

# ---------------------------------------------------------------------------------------------- security


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "coordinator.api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A member or admin token: RSC_MEMBER_TOKENS / RSC_ADMIN_TOKENS, or one issued by "
            "`manage.py create_api_credential NAME --role member|admin`.",
        }


class StaffSessionScheme(OpenApiAuthenticationExtension):
    target_class = "coordinator.api.auth.StaffSessionAuthentication"
    name = "staffSession"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": settings.SESSION_COOKIE_NAME,
            "description": "A Django staff session with the permission coordinator.manage_groups (admin "
            "role); unsafe methods need the X-CSRFToken header.",
        }


# ---------------------------------------------------------------------------------------------- patterns
# A schema pattern is read by two regex dialects: validators use ECMA-262 (JSON Schema's) and search for
# it; generators such as Hypothesis (schemathesis) and Python validators use Python's ``re``. They agree on
# ``^`` (the start, no multiline flag) but not on ``$``: in Python it also matches before a final "\n", so
# a generator makes "a\n" from ``^a$`` and the server, which fullmatches, refuses it. END ("no character
# follows") means the end of the string in both dialects. Character classes are spelled out ([0-9], never
# \d, which is Unicode in Python and ASCII in ECMA).

END = r"(?![\s\S])"


def whole(pattern: str) -> str:
    """A fullmatch rule (the core writes them ``^...$``) as a schema pattern that means the same in both
    dialects."""
    return f"^(?:{pattern.removeprefix('^').removesuffix('$')}){END}"


def decimal_at_most(limit: int) -> str:
    """A regex for the decimal integers 0..limit with any leading zeros: how the core reads an entry id's
    parts (``int(text)``; ``05-0`` is ``5-0``), so that pattern and server agree to the last value."""
    digits = str(limit)
    alternatives = [f"[0-9]{{1,{len(digits) - 1}}}"]  # fewer digits than the limit
    for i, digit in enumerate(digits):  # as many digits: equal up to i, smaller at i, anything after
        low = 1 if i == 0 else 0
        if int(digit) > low:
            rest = len(digits) - i - 1
            smaller = f"[{low}-{int(digit) - 1}]" if int(digit) - 1 > low else str(low)
            alternatives.append(digits[:i] + smaller + (f"[0-9]{{{rest}}}" if rest else ""))
    alternatives.append(digits)
    return "0*(?:" + "|".join(alternatives) + ")"


_U64 = decimal_at_most(2**64 - 1)
# A Redis stream entry id as the core takes it (coordinator.protocol.model.validate_entry_ids): two
# decimal parts below 2**64, ASCII digits only.
ENTRY_ID_PATTERN = f"^{_U64}-{_U64}{END}"
ENTRY_ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": ENTRY_ID_PATTERN,
    "example": "1700000000000-0",
}
AFTER_PATTERN = f"^(?:-|{_U64}-{_U64}){END}"
SHARD_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": whole(r"v[1-9][0-9]{0,8}:(0|[1-9][0-9]{0,4})"),  # Shard.parse's rule
    "example": "v1:0",
}
# What str.strip() removes (str.isspace()), spelled as code points: not ECMA's \s, which differs (it has
# U+FEFF, Python has U+001C..U+001F and U+0085).
_PY_SPACE = "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace())
# DRF's CharField refuses NUL in any string (ProhibitNullCharactersValidator). One character at least:
# drf-spectacular offers a blank-allowing field's "" as a oneOf alternative of its own, which must not
# also match the pattern.
TEXT_PATTERN = f"^[^\\u0000]+{END}"
# A required reason: no NUL, and something left once stripped (operations.validate_reason).
REQUIRED_TEXT_PATTERN = f"^[^\\u0000]*[^\\u0000{_PY_SPACE}][^\\u0000]*{END}"


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Every request body refuses fields it does not declare (``StrictSerializer``): the schema says so
    with ``additionalProperties: false``, and adds the serializer's ``schema_rules`` (the combinations of
    fields it requires, as ``anyOf`` / ``oneOf``)."""

    target_class = "coordinator.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        schema.update(getattr(self.target, "schema_rules", {}))
        return schema


class StrictTextScheme(OpenApiSerializerFieldExtension):
    """A free-text field (``StrictCharField`` without a pattern of its own): no NUL (DRF refuses it);
    a required reason must also hold something besides whitespace."""

    target_class = "coordinator.api.serializers.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        field = self.target
        schema: dict[str, Any] = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        has_own = any(isinstance(v, RegexValidator) for v in field.validators)  # identifiers
        if "pattern" not in schema and not has_own:
            required_reason = getattr(field, "reason_required", False)
            schema["pattern"] = REQUIRED_TEXT_PATTERN if required_reason else TEXT_PATTERN
        return schema


class LeaseTtlScheme(OpenApiSerializerFieldExtension):
    """``lease_ttl_ms`` must also be above this server's RSC_TICK_INTERVAL_MS (docs/protocol.md section 5):
    the schema's minimum is the larger of the two bounds, read when the schema is generated."""

    target_class = "coordinator.api.serializers.LeaseTtlField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        field = self.target
        schema: dict[str, Any] = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        current = conf.settings()
        schema["minimum"] = max(schema["minimum"], int(current.RSC_TICK_INTERVAL_MS) + 1)
        schema["description"] = (
            f"Must be above heartbeat_interval_ms: the one given, else this server's default "
            f"RSC_HEARTBEAT_INTERVAL_MS ({current.RSC_HEARTBEAT_INTERVAL_MS}); and above this server's "
            f"RSC_TICK_INTERVAL_MS ({current.RSC_TICK_INTERVAL_MS}: the minimum). Otherwise 400 "
            "INVALID_CONFIG. Default: this server's RSC_MEMBER_LEASE_TTL_MS "
            f"({current.RSC_MEMBER_LEASE_TTL_MS})."
        )
        return schema


class HeartbeatIntervalScheme(OpenApiSerializerFieldExtension):
    """``heartbeat_interval_ms`` must be below ``lease_ttl_ms`` (docs/protocol.md section 5), either of them
    possibly the server's default: the description states the rule with this server's figures, read when
    the schema is generated (the create-group body's ``x-less-than`` states it for tools)."""

    target_class = "coordinator.api.serializers.HeartbeatIntervalField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        field = self.target
        schema: dict[str, Any] = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        current = conf.settings()
        schema["description"] = (
            f"Must be below lease_ttl_ms: the one given, else this server's default RSC_MEMBER_LEASE_TTL_MS "
            f"({current.RSC_MEMBER_LEASE_TTL_MS}). Otherwise 400 INVALID_CONFIG. Default: this server's "
            f"RSC_HEARTBEAT_INTERVAL_MS ({current.RSC_HEARTBEAT_INTERVAL_MS})."
        )
        return schema


# ---------------------------------------------------------------------------------------------- fields


def _choice(enum: Any, **kwargs: Any) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=[m.value for m in enum], **kwargs)


def _shard(**kwargs: Any) -> serializers.CharField:
    kwargs.setdefault("help_text", "A shard, 'v<version>:<index>'.")
    return serializers.CharField(**kwargs)


def _shards(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(child=_shard(), **kwargs)


def _nullable_int(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(allow_null=True, **kwargs)


# ---------------------------------------------------------------------------------------------- members


class AssignedShardSerializer(serializers.Serializer):
    shard = _shard()
    stream_key = serializers.CharField(help_text="The Redis stream key, e.g. 'rsc:{orders}:v1:0'.")
    assignment_epoch = serializers.IntegerField(help_text="The member epoch at which it was granted.")
    readable = serializers.BooleanField(help_text="False while strict ordering holds the shard back.")


class HeartbeatRoutingSerializer(serializers.Serializer):
    active_version = serializers.IntegerField()
    shard_count = serializers.IntegerField()


class HeartbeatResponseSerializer(serializers.Serializer):
    member_id = serializers.CharField()
    member_epoch = serializers.IntegerField(help_text="-1 after a leave.")
    member_state = _choice(MemberState)
    group_epoch = serializers.IntegerField()
    assignment_epoch = serializers.IntegerField()
    heartbeat_interval_ms = serializers.IntegerField()
    lease_ttl_ms = serializers.IntegerField()
    shards = AssignedShardSerializer(many=True, help_text="The shards the member may read.")
    revoking = _shards(help_text="Shards to stop reading; acknowledge by leaving them out of owned_shards.")
    max_concurrency = serializers.IntegerField(
        help_text="Worker threads to use: min(reported capacity, the group's max_concurrency)."
    )
    routing = HeartbeatRoutingSerializer()


# ---------------------------------------------------------------------------------------------- topology


class RoutingVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    shard_count = serializers.IntegerField()
    state = _choice(VersionState)
    created_at_ms = serializers.IntegerField()
    sealed_at_ms = _nullable_int()
    retired_at_ms = _nullable_int()


class TopologySerializer(serializers.Serializer):
    stream_prefix = serializers.CharField()
    active_version = serializers.IntegerField(help_text="Producers write to this version.")
    shard_count = serializers.IntegerField(help_text="The active version's shard count.")
    versions = RoutingVersionSerializer(many=True)
    sealed_versions = serializers.ListField(
        child=serializers.IntegerField(), help_text="Draining versions: producers must not append to them."
    )


class _MigrationFields(serializers.Serializer):
    from_version = serializers.IntegerField()
    to_version = serializers.IntegerField()
    ordering = _choice(OrderingMode)
    started_at_ms = serializers.IntegerField()
    completed_at_ms = _nullable_int()
    active = serializers.BooleanField()
    drained = serializers.DictField(
        child=_shards(), help_text="Consumer group -> the old version's shards it has drained."
    )


class _UndrainedFields(serializers.Serializer):
    """Why one old shard has not drained yet for one group."""

    shard = _shard()
    owner = serializers.CharField(allow_null=True, help_text="The member that owns it; null: nobody.")
    live_members = serializers.IntegerField(help_text="Live members of the group (0: nobody will drain).")
    lag = _nullable_int(help_text="Entries not yet delivered to the group, counted from its position.")
    pending = serializers.IntegerField(help_text="Delivered but not acknowledged.")
    oldest_pending_age_ms = _nullable_int()


class BlockingShardSerializer(_UndrainedFields):
    consumer_group = serializers.CharField()


class PrefixMigrationSerializer(_MigrationFields):
    blocking = BlockingShardSerializer(
        many=True, help_text="Every old shard some group has not drained, and why (empty once complete)."
    )


class GroupMigrationSerializer(_MigrationFields):
    shards_to_drain = serializers.IntegerField(help_text="The old version's shard count.")
    undrained = _UndrainedFields(
        many=True, help_text="This group's old shards not drained yet, and why (empty once complete)."
    )


class RetentionViewSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(
        choices=["acked"], help_text="Always 'acked': trim only what every group has acknowledged..."
    )
    max_age_ms = _nullable_int(help_text="...plus, if set, entries older than this, handled or not.")
    max_len = _nullable_int(help_text="...plus, if set, all but about this many entries per shard stream.")
    retired_grace_ms = serializers.IntegerField(help_text="Delay before a retired version's streams go.")


class PrefixDescriptionSerializer(serializers.Serializer):
    topology = TopologySerializer()
    migration = PrefixMigrationSerializer(allow_null=True)
    groups = serializers.ListField(child=serializers.CharField(), help_text="The prefix's consumer groups.")
    retention = RetentionViewSerializer()
    now_ms = serializers.IntegerField(help_text="Redis's clock when this was read.")


# ---------------------------------------------------------------------------------------------- groups


class GroupConfigSerializer(serializers.Serializer):
    max_concurrency = serializers.IntegerField()
    lease_ttl_ms = serializers.IntegerField()
    heartbeat_interval_ms = serializers.IntegerField()
    revocation_timeout_ms = serializers.IntegerField()
    max_members = serializers.IntegerField()


class CurrentShardSerializer(serializers.Serializer):
    shard = _shard()
    assignment_epoch = serializers.IntegerField()


class ClientInfoViewSerializer(serializers.Serializer):
    host = serializers.CharField(allow_blank=True)
    pid = serializers.IntegerField()
    listener = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)


class MemberViewSerializer(serializers.Serializer):
    member_id = serializers.CharField()
    state = _choice(MemberState)
    member_epoch = serializers.IntegerField()
    previous_epoch = serializers.IntegerField()
    lease_remaining_ms = serializers.IntegerField()
    capacity = serializers.IntegerField()
    effective_concurrency = serializers.IntegerField()
    current_assignment = CurrentShardSerializer(many=True)
    target_assignment = _shards()
    revoking = _shards()
    revocation_deadline_ms = _nullable_int()
    client = ClientInfoViewSerializer()
    joined_at_ms = serializers.IntegerField()
    last_heartbeat_ms = serializers.IntegerField()
    ended_at_ms = _nullable_int()
    end_reason = _choice(EndReason, allow_null=True)
    owner = serializers.CharField(
        allow_blank=True,
        help_text="The credential identity that joined the member (database:<pk>, environment:<digest>, "
        "session:<user pk>); only it may heartbeat, leave or rejoin the id. Empty: not recorded.",
    )
    instance_id = serializers.CharField(
        allow_null=True,
        help_text="The static member's instance id (docs/protocol.md section 3); null: dynamic.",
    )
    held_until_ms = _nullable_int(
        help_text="An ended static member whose target is held for its instance id until then (Redis clock)."
    )


class HeldInstanceSerializer(serializers.Serializer):
    instance_id = serializers.CharField()
    member_id = serializers.CharField(help_text="The ended member whose target is held.")
    held_until_ms = serializers.IntegerField()
    shards = _shards(help_text="The held target: read by nobody until the instance comes back.")


class PendingRevocationSerializer(serializers.Serializer):
    shard = _shard()
    revoked_by = serializers.CharField()
    deadline_ms = _nullable_int()


class UnreleasedShardSerializer(serializers.Serializer):
    shard = _shard()
    wanted_by = serializers.CharField()
    owned_by = serializers.CharField()


class BacklogRowSerializer(serializers.Serializer):
    """One non-retired shard of the group: what is waiting and for how long."""

    shard = _shard()
    stream_key = serializers.CharField()
    # VersionState's own enum, although a retired version's shards are not listed: drf-spectacular names
    # enums by field name, and a two-valued "version_state" took the name VersionStateEnum from the
    # three-valued one, so a topology with a RETIRED version violated its own schema.
    version_state = _choice(VersionState, help_text="ACTIVE or DRAINING (retired versions are not listed).")
    owner = serializers.CharField(allow_null=True)
    assignment = _choice(ShardAssignment, help_text="Where the shard stands for the group.")
    length = serializers.IntegerField(help_text="XLEN of the stream.")
    lag = _nullable_int(help_text="Entries not yet delivered to the group, counted from its position.")
    pending = serializers.IntegerField(help_text="Delivered but not acknowledged.")
    last_delivered_id = serializers.CharField()
    oldest_pending_id = serializers.CharField(allow_null=True)
    oldest_pending_age_ms = _nullable_int(help_text="Redis's clock minus the oldest pending id's time.")
    oldest_pending_idle_ms = _nullable_int()
    oldest_pending_consumer = serializers.CharField(allow_null=True)
    max_deliveries = serializers.IntegerField(help_text="Highest delivery count among the oldest pending.")
    redeliver_token = serializers.IntegerField()


class DeadLetterStreamSerializer(serializers.Serializer):
    stream_key = serializers.CharField()
    length = serializers.IntegerField()


class ParkedShardViewSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Keys parked on the shard.")
    keys = serializers.ListField(child=serializers.CharField(), help_text="Up to 16 of them.")


class GroupDescriptionSerializer(serializers.Serializer):
    stream_prefix = serializers.CharField()
    consumer_group = serializers.CharField()
    state = _choice(GroupState)
    group_epoch = serializers.IntegerField()
    assignment_epoch = serializers.IntegerField()
    config = GroupConfigSerializer()
    topology = TopologySerializer()
    members = MemberViewSerializer(many=True, help_text="Live members and ended ones still retained.")
    target_assignment = serializers.DictField(child=_shards(), help_text="Member id -> its target.")
    pending_revocations = PendingRevocationSerializer(many=True)
    unreleased_shards = UnreleasedShardSerializer(many=True)
    awaiting_pickup = _shards(help_text="In a live member's target, owned by nobody yet.")
    held_instances = HeldInstanceSerializer(
        many=True,
        help_text="Static members' targets held for their instance ids (docs/protocol.md section 3).",
    )
    migration = GroupMigrationSerializer(allow_null=True)
    backlog = BacklogRowSerializer(many=True)
    dead_letters = DeadLetterStreamSerializer()
    parked_keys = serializers.DictField(
        child=serializers.DictField(child=ParkedShardViewSerializer()),
        help_text="Live member id -> shard -> the keys parked there waiting for a retry, as the member last "
        "reported them (ordering key/none with on_error redeliver); members with none are left out.",
    )
    now_ms = serializers.IntegerField(help_text="Redis's clock when this was read.")


class GroupSummarySerializer(serializers.Serializer):
    stream_prefix = serializers.CharField()
    consumer_group = serializers.CharField()
    state = _choice(GroupState)
    group_epoch = serializers.IntegerField()
    assignment_epoch = serializers.IntegerField()
    members = serializers.IntegerField(help_text="Live members.")
    shard_count = serializers.IntegerField()
    active_version = serializers.IntegerField()


# ---------------------------------------------------------------------------------------------- entries


class RedeliverResponseSerializer(serializers.Serializer):
    shard = _shard()
    redeliver_token = serializers.IntegerField(help_text="The shard's new token: its owner re-reads.")
    owner = serializers.CharField(allow_null=True, help_text="The member that will re-read; null: nobody.")


class SkipResponseSerializer(serializers.Serializer):
    shard = _shard()
    skipped = serializers.ListField(
        child=serializers.CharField(), help_text="The acknowledged entry ids (their fields are audited)."
    )
    count = serializers.IntegerField()


class ReleaseDrainResponseSerializer(serializers.Serializer):
    released = _shards(help_text="The old shards no longer waited for on this group's behalf.")
    unconsumed_entries = serializers.IntegerField(help_text="Entries the group abandoned there.")
    prefix = PrefixDescriptionSerializer()


class DeadLetterSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The dead letter's id in the group's dead-letter stream.")
    source_shard = _shard()
    source_id = serializers.CharField(help_text="The entry's id on its source shard.")
    deliveries = serializers.IntegerField(help_text="Deliveries when it was given up on.")
    error = serializers.CharField(allow_blank=True, help_text="The handler's exception, 'Type: message'.")
    member_id = serializers.CharField()
    at_ms = serializers.IntegerField()
    event_id = serializers.CharField(allow_null=True)
    partition_key = serializers.CharField(allow_null=True)
    fields = serializers.DictField(
        child=serializers.CharField(allow_blank=True), help_text="The entry's original fields."
    )
    verdict = serializers.ChoiceField(
        choices=["SIGNED", "UNSIGNED", "FORGED"],
        help_text="SIGNED: written by the data plane's dead-letter function (its MAC verifies); UNSIGNED: "
        "no MAC (written before dead letters were signed, or by hand; replayed only with "
        "accept_unsigned); FORGED: a MAC that does not verify (never replayed). docs/protocol.md 14.",
    )
    verdict_reason = serializers.CharField(help_text="The verdict in words, for operators.")


class DeadLetterListSerializer(serializers.Serializer):
    stream_key = serializers.CharField()
    length = serializers.IntegerField(help_text="Dead letters in the stream.")
    entries = DeadLetterSerializer(many=True)


class ReplayedSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The dead letter's id (now deleted from the dead-letter stream).")
    shard = _shard(help_text="The active version's shard it was appended to.")
    entry_id = serializers.CharField(help_text="Its new entry id there.")


class ReplayResponseSerializer(serializers.Serializer):
    replayed = ReplayedSerializer(many=True)


class PurgeResponseSerializer(serializers.Serializer):
    purged = serializers.IntegerField()


# ---------------------------------------------------------------------------------------------- problems

ALL_CODES = [c.value for codes in (ErrorCode, OperationErrorCode, ApiErrorCode) for c in codes]
assert set(ALL_CODES) == set(HTTP_STATUS), "every code needs a status in errors.HTTP_STATUS"


class FieldErrorSerializer(serializers.Serializer):
    field = serializers.CharField(
        allow_null=True, help_text="e.g. 'capacity', 'client.pid', 'owned_shards[2]'; null: the whole body."
    )
    message = serializers.CharField()
    code = serializers.CharField(help_text="e.g. 'required', 'unknown_field', 'max_value'.")


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details."""

    type = serializers.CharField(help_text="A URN naming the problem type.")
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField(help_text="What went wrong and what to do about it.")
    code = serializers.ChoiceField(choices=ALL_CODES, help_text="Stable; see docs/protocol.md section 12.")
    retriable = serializers.BooleanField(help_text="Retrying the same request later may succeed.")
    instance = serializers.CharField(required=False, help_text="The request path.")
    details = serializers.DictField(help_text="Structured fields of the error (member_epoch, field, ...).")
    errors = FieldErrorSerializer(many=True, required=False, help_text="Validation errors, one per field.")
    incident_id = serializers.CharField(required=False, help_text="INTERNAL_ERROR: where the log has it.")


def _problem(description: str) -> OpenApiResponse:
    return OpenApiResponse(response=ProblemSerializer, description=description)


def problems(*codes: str) -> dict[tuple[int, str], OpenApiResponse]:
    """The documented error responses of an operation (``application/problem+json``), by status."""
    by_status: dict[int, list[str]] = {}
    for code in (*COMMON_CODES, *codes):
        by_status.setdefault(HTTP_STATUS[code][0], []).append(str(code))
    return {
        (status, PROBLEM_CONTENT_TYPE): _problem("Codes: " + ", ".join(dict.fromkeys(names)) + ".")
        for status, names in sorted(by_status.items())
    }


# Any operation: no or a bad credential, the wrong role, a method the route lacks, a bug, Redis down.
COMMON_CODES = (
    ApiErrorCode.UNAUTHENTICATED,
    OperationErrorCode.PERMISSION_DENIED,
    ApiErrorCode.METHOD_NOT_ALLOWED,
    ErrorCode.ILLEGAL_TRANSITION,
    ErrorCode.METADATA_CORRUPT,
    OperationErrorCode.INTERNAL_ERROR,
    ErrorCode.STORE_UNAVAILABLE,
    ErrorCode.CONCURRENT_UPDATE,
)
# Operations with a JSON body.
BODY_CODES = (
    ErrorCode.INVALID_REQUEST,
    ApiErrorCode.LENGTH_REQUIRED,
    ApiErrorCode.PAYLOAD_TOO_LARGE,
    ApiErrorCode.UNSUPPORTED_MEDIA_TYPE,
)

# Admin operations: at most RSC_ADMIN_API_RATE requests per credential (coordinator/api/throttling.py).
ADMIN_CODES = (ApiErrorCode.TOO_MANY_REQUESTS,)


def admin_problems(*codes: str) -> dict[tuple[int, str], OpenApiResponse]:
    """``problems`` of an admin operation: also 429 TOO_MANY_REQUESTS (throttled per credential)."""
    return problems(*codes, *ADMIN_CODES)


RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    {"type": "integer", "minimum": 1},
    OpenApiParameter.HEADER,
    response=[429, 503],
    description="Seconds to wait before retrying (whole seconds, rounded up).",
)
WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[401], description="Bearer."
)
RESPONSE_HEADERS = [RETRY_AFTER, WWW_AUTHENTICATE]


def identifier_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": whole(IDENTIFIER_RE.pattern), "minLength": 1, "maxLength": 64},
        OpenApiParameter.PATH,
        description=description + " 1-64 of [A-Za-z0-9._-], starting with a letter or digit.",
    )


STREAM_PREFIX = identifier_parameter("stream_prefix", "The stream prefix (the 'topic').")
CONSUMER_GROUP = identifier_parameter("consumer_group", "The consumer group.")
SHARD = OpenApiParameter(
    "shard",
    SHARD_SCHEMA,
    OpenApiParameter.PATH,
    description="A shard of the group's stream prefix, 'v<version>:<index>' (a retired version's shards "
    "are not shards of the group any more).",
)
DEAD_LETTER_ID = OpenApiParameter(
    "dead_letter_id",
    ENTRY_ID_SCHEMA,
    OpenApiParameter.PATH,
    description="The dead letter's id in the group's dead-letter stream.",
)
# Operator actions (coordinator/operations.py): audited first, refused if the audit row cannot be written.
ACTION_CODES = (OperationErrorCode.AUDIT_UNAVAILABLE,)
