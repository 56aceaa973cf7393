"""Request bodies: strict DRF serializers that turn JSON into the core's commands.

Strict means: an unknown field is an error (also inside ``client``), an integer must be a JSON integer
(not ``true``, ``"5"`` or ``5.0``), a string must be a JSON string (not ``5``), and every number has the
range docs/protocol.md gives it. Identifiers and shards are checked by the core's own validators
(``validate_identifier``, ``validate_member_id``, ``Shard.parse``), so there is one definition of each;
an identifier that fails reports the DRF error code ``invalid_identifier`` and the request is answered
with ``INVALID_IDENTIFIER`` when that is all that is wrong with it.

The cross-field rules (``heartbeat_interval_ms < lease_ttl_ms``, ``capacity`` required on a join) stay in
the core, which raises ``INVALID_CONFIG`` / ``INVALID_REQUEST`` for them. The schema (``schemas``) states
every rule here, the combinations of fields included (a serializer's ``schema_rules``); the two it
cannot state (heartbeat below lease, a comparison of two fields; shard_count for a new prefix, a rule
about state) are in the body's description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from coordinator import conf, operations
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import CoordinatorError, InvalidIdentifier
from coordinator.protocol.group import JOIN_EPOCH, LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH, Heartbeat
from coordinator.protocol.limits import GROUP_CONFIG_RANGES, require_lease_above_tick
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    MAX_CAPACITY,
    MAX_MAX_LEN,
    MAX_RETENTION_MS,
    MAX_SHARD_COUNT,
    MEMBER_ID_RE,
    MIN_MAX_AGE_MS,
    MIN_MAX_LEN,
    ClientInfo,
    GroupConfig,
    OrderingMode,
    RetentionPolicy,
    Shard,
    validate_identifier,
    validate_instance_id,
    validate_member_id,
)
from coordinator.store.parked_reports import MAX_KEY_CHARS, MAX_KEYS_PER_SHARD
from coordinator.store.parked_reports import MAX_SHARDS as MAX_PARKED_SHARDS
from coordinator.store.redis_store import START_FROM, default_config_from_settings

from .errors import IDENTIFIER_ERROR_CODE
from .schemas import AFTER_PATTERN, ENTRY_ID_SCHEMA, SHARD_SCHEMA, whole

MAX_MEMBER_EPOCH = 2**53  # the largest integer every JSON implementation represents exactly
MAX_OWNED_SHARDS = 2 * MAX_SHARD_COUNT  # a draining and an active version at most


# ---------------------------------------------------------------------------------------------- fields


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: DRF's IntegerField also takes ``"5"``, ``5.0`` and ``"5.0"``."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else: DRF's CharField also takes numbers. Never trimmed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class IdentifierField(StrictCharField):
    """A stream prefix, consumer group or member id, checked by the core's validator."""

    def __init__(self, what: str, **kwargs: Any) -> None:
        self.what = what
        long = what in _LONG_IDENTIFIERS
        max_length = 128 if long else 64
        kwargs.setdefault("help_text", _IDENTIFIER_HELP.format(max_length=max_length))
        # The pattern documents the core's rule in the schema; the core's validator is what enforces it.
        pattern = whole((MEMBER_ID_RE if long else IDENTIFIER_RE).pattern)
        super().__init__(max_length=max_length, validators=[RegexValidator(pattern)], **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data == "":  # DRF answers "may not be blank" without asking to_internal_value
            return self.to_internal_value(data)
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            if self.what == "member_id":
                return validate_member_id(data)
            if self.what == "instance_id":
                return validate_instance_id(data)
            return validate_identifier(data, self.what)
        except InvalidIdentifier as e:
            raise serializers.ValidationError(e.message, code=IDENTIFIER_ERROR_CODE) from e


# Identifiers with the member id's rule (1-128 characters).
_LONG_IDENTIFIERS = frozenset({"member_id", "instance_id"})
_IDENTIFIER_HELP = (
    "1-{max_length} characters of letters, digits, '.', '_' or '-', starting with a letter or digit."
)


@extend_schema_field(SHARD_SCHEMA)
class ShardField(StrictCharField):
    """A shard in its wire form ``v<version>:<index>`` (checked by ``Shard.parse``)."""

    def to_internal_value(self, data: Any) -> Shard:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            return Shard.parse(data)
        except CoordinatorError as e:
            raise serializers.ValidationError(e.message, code="invalid_shard") from e


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices, as a JSON string (DRF's ChoiceField compares ``str(value)``)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not declare (each reported under its own name, code ``unknown_field``).

    ``schema_rules``: JSON Schema keywords the schema adds to the body's object (``anyOf`` / ``oneOf``
    for the combinations of fields that ``validate`` or the core require); ``schemas.StrictSerializerScheme``
    adds them with ``additionalProperties: false``.
    """

    schema_rules: ClassVar[dict[str, Any]] = {}

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(str(k) for k in data if k not in self.fields) if isinstance(data, Mapping) else []
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as e:
            if unknown and isinstance(e.detail, dict):
                e.detail.update(_unknown_errors(unknown))
            raise
        if unknown:
            raise serializers.ValidationError(_unknown_errors(unknown))
        return value


def _unknown_errors(names: list[str]) -> dict[str, list[serializers.ErrorDetail]]:
    return {n: [serializers.ErrorDetail("unknown field", code="unknown_field")] for n in names}


# ---------------------------------------------------------------------------------------------- members


class ClientInfoSerializer(StrictSerializer):
    """Where the member runs; recorded for operators, never used for decisions."""

    host = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    pid = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, default=0)
    listener = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    version = StrictCharField(max_length=64, required=False, allow_blank=True, default="")


class ParkedShardSerializer(StrictSerializer):
    """One shard of a member's parked-keys report (coordinator/store/parked_reports.py)."""

    shard = ShardField()
    count = StrictIntegerField(
        min_value=1, max_value=2**31 - 1, help_text="Keys parked on the shard (at least those named)."
    )
    keys = serializers.ListField(
        child=StrictCharField(max_length=MAX_KEY_CHARS),
        max_length=MAX_KEYS_PER_SHARD,
        help_text=f"Up to {MAX_KEYS_PER_SHARD} of them (partition keys, cut to {MAX_KEY_CHARS} characters).",
    )


class HeartbeatSerializer(StrictSerializer):
    """A member heartbeat (docs/protocol.md section 3). Unknown fields are rejected. A join (member_epoch
    0) must report capacity (an integer, not null)."""

    # The core's rule (Heartbeat.validated): capacity is required and not null on a join. (No "enum" in
    # schema_rules: drf-spectacular's enum hook would name them by field and merge different ones.)
    schema_rules: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"properties": {"member_epoch": {"anyOf": [{"maximum": LEAVE_EPOCH}, {"minimum": 1}]}}},
            {"required": ["capacity"], "properties": {"capacity": {"type": "integer"}}},
        ]
    }

    member_id = IdentifierField("member_id")
    member_epoch = StrictIntegerField(
        min_value=TEMPORARY_LEAVE_EPOCH,
        max_value=MAX_MEMBER_EPOCH,
        help_text=f"{JOIN_EPOCH} joins, {LEAVE_EPOCH} leaves, {TEMPORARY_LEAVE_EPOCH} leaves for now (a "
        "static member: its shards are held for its instance_id for one lease TTL), otherwise the member's "
        "current epoch.",
    )
    owned_shards = serializers.ListField(
        child=ShardField(),
        required=False,
        allow_null=True,
        max_length=MAX_OWNED_SHARDS,
        help_text="The shards the member still holds (assigned plus not yet released). Absent or null: "
        "not reported, which never acknowledges a revocation.",
    )
    capacity = StrictIntegerField(
        min_value=1,
        max_value=MAX_CAPACITY,
        required=False,
        allow_null=True,
        help_text="Worker threads the member's runtime can run. Required on a join; absent or null: "
        "unchanged.",
    )
    client = ClientInfoSerializer(required=False, allow_null=True)
    parked_keys = serializers.ListField(
        child=ParkedShardSerializer(),
        required=False,
        allow_null=True,
        max_length=MAX_PARKED_SHARDS,
        help_text="The keys parked on the member's shards (docs/protocol.md section 3, \"Parked keys\"), "
        "one item per shard with any; [] none. Sent when they change.",
    )
    join_seq = StrictIntegerField(
        min_value=0,
        max_value=MAX_MEMBER_EPOCH,
        required=False,
        allow_null=True,
        help_text="Read by joins only (ignored otherwise): the member's count of its own joins (the same "
        "number on a retried join, the next after a fence). A join with a lower number than the member "
        "id's last is refused (STALE_JOIN); the same number again answers the member as it is, without "
        "fencing it.",
    )
    instance_id = IdentifierField(
        "instance_id",
        required=False,
        allow_null=True,
        help_text="Read by joins only (ignored otherwise): the static member's instance id (a pod name; "
        "1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit). A later "
        "join with the same instance id, under any member id, gets the shards back if it comes within one "
        "lease TTL of this member's temporary leave (member_epoch -2) or lease end. A join with an instance "
        "id a live member of another id holds is refused (409 UNRELEASED_INSTANCE_ID, retriable) and "
        "fences nobody.",
    )

    def parked_report(self) -> dict[str, dict[str, Any]] | None:
        """The member's report of its parked keys by shard (``{}``: none now), or None when not sent.
        A count below the number of keys named is taken as that number; a shard listed twice, as its
        last item."""
        parked = self.validated_data.get("parked_keys")
        if parked is None:
            return None
        return {
            str(item["shard"]): {"count": max(item["count"], len(item["keys"])), "keys": list(item["keys"])}
            for item in parked
        }

    def to_heartbeat(self) -> Heartbeat:
        data = self.validated_data
        owned = data.get("owned_shards")
        client = data.get("client")
        return Heartbeat(
            member_id=data["member_id"],
            member_epoch=data["member_epoch"],
            owned=None if owned is None else frozenset(owned),
            capacity=data.get("capacity"),
            client=None if client is None else ClientInfo(**client),
            join_seq=data.get("join_seq"),
            instance_id=data.get("instance_id"),
        )


# ---------------------------------------------------------------------------------------------- admin


class LeaseTtlField(StrictIntegerField):
    """``lease_ttl_ms``: its range, and above RSC_TICK_INTERVAL_MS (checked by ``to_command``, where the
    setting is read; the schema's minimum says so: ``schemas.LeaseTtlScheme``), and above
    heartbeat_interval_ms (its description states it with this server's defaults)."""


class HeartbeatIntervalField(StrictIntegerField):
    """``heartbeat_interval_ms``: its range, and below lease_ttl_ms (given or this server's default; the
    description says so with the figures: ``schemas.HeartbeatIntervalScheme``)."""


def _config_field(name: str, help_text: str | None, *, required: bool = False) -> StrictIntegerField:
    """A GroupConfig field with the range the core accepts (GROUP_CONFIG_RANGES), so the schema's."""
    low, high = GROUP_CONFIG_RANGES[name]
    classes = {"lease_ttl_ms": LeaseTtlField, "heartbeat_interval_ms": HeartbeatIntervalField}
    field_class = classes.get(name, StrictIntegerField)
    return field_class(min_value=low, max_value=high, required=required, help_text=help_text)


# The core's defaults of the fields that have no server setting.
_GROUP_DEFAULTS = GroupConfig()


class CreateGroupSerializer(StrictSerializer):
    """A new consumer group. Unknown fields are rejected. heartbeat_interval_ms must be below
    lease_ttl_ms, either of them given or the server's default (400 INVALID_CONFIG otherwise: a rule
    JSON Schema cannot state). lease_ttl_ms must be above the server's RSC_TICK_INTERVAL_MS (its
    minimum here). shard_count is required while the stream prefix does not exist yet (400
    INVALID_REQUEST)."""

    stream_prefix = IdentifierField("stream_prefix")
    consumer_group = IdentifierField("consumer_group")
    shard_count = StrictIntegerField(
        min_value=1,
        max_value=MAX_SHARD_COUNT,
        required=False,
        help_text="Required when the stream prefix is new; if given for an existing prefix it must match.",
    )
    max_concurrency = _config_field(
        "max_concurrency", f"Worker threads a member may run (default {_GROUP_DEFAULTS.max_concurrency})."
    )
    # Their descriptions (schemas.LeaseTtlScheme, HeartbeatIntervalScheme) state the rule between them
    # with this server's defaults; ``schema_rules`` states it for tools (an OpenAPI extension).
    lease_ttl_ms = _config_field("lease_ttl_ms", None)
    heartbeat_interval_ms = _config_field("heartbeat_interval_ms", None)
    revocation_timeout_ms = _config_field(
        "revocation_timeout_ms", "Default: the server's RSC_REVOCATION_TIMEOUT_MS."
    )
    max_members = _config_field(
        "max_members", f"Live members at most (default {_GROUP_DEFAULTS.max_members})."
    )
    start_from = StrictChoiceField(
        choices=sorted(START_FROM),
        required=False,
        default="latest",
        help_text="Where the group's Redis consumer groups start reading the prefix's streams.",
    )

    # heartbeat_interval_ms < lease_ttl_ms, each either given or the server's default (JSON Schema cannot
    # compare two fields; tests/api/test_schema.py holds the API to this statement).
    schema_rules: ClassVar[dict[str, Any]] = {
        "x-less-than": {"heartbeat_interval_ms": "lease_ttl_ms"},
    }

    def to_command(self) -> tuple[CreateGroup, str]:
        data = dict(self.validated_data)
        current = conf.settings()
        config = default_config_from_settings(current)
        overrides = {name: data[name] for name in GROUP_CONFIG_RANGES if name in data}
        command = CreateGroup(
            stream_prefix=data["stream_prefix"],
            consumer_group=data["consumer_group"],
            shard_count=data.get("shard_count"),
            config=GroupConfig(**{**_config_dict(config), **overrides}),
        )
        # Checked again by operations.create_group for every entry point; here so a bad request fails
        # before the operation runs (the same function, the same INVALID_CONFIG answer).
        require_lease_above_tick(command.config.lease_ttl_ms, current.RSC_TICK_INTERVAL_MS)
        return command, data["start_from"]


def _config_dict(config: GroupConfig) -> dict[str, int]:
    return {name: getattr(config, name) for name in GROUP_CONFIG_RANGES}


class MaxConcurrencySerializer(StrictSerializer):
    """The group's new server-side cap on worker threads per member."""

    max_concurrency = _config_field("max_concurrency", None, required=True)


class ShardCountSerializer(StrictSerializer):
    """A shard-count change (docs/protocol.md section 8). Unknown fields are rejected."""

    shard_count = StrictIntegerField(min_value=1, max_value=MAX_SHARD_COUNT)
    ordering = StrictChoiceField(
        choices=[m.value for m in OrderingMode],
        required=False,
        default=OrderingMode.STRICT.value,
        help_text="strict: a new shard is readable only once the old shards that may hold its keys are "
        "drained (per-key order holds). relaxed: new shards are readable at once.",
    )

    def ordering_mode(self) -> OrderingMode:
        return OrderingMode(self.validated_data["ordering"])


# ---------------------------------------------------------------------------------------------- lifecycle
# The rules (entry ids, reasons, ranges) are coordinator/operations.py's; these fields report them per
# field. The operations functions check them again for their other callers (pages, commands).


class StrictBooleanField(serializers.BooleanField):
    """A JSON ``true`` or ``false`` and nothing else: DRF's BooleanField also takes ``"yes"`` and ``1``."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


@extend_schema_field(ENTRY_ID_SCHEMA)
class EntryIdField(StrictCharField):
    """A Redis stream entry id ``<ms>-<seq>`` (checked by ``operations.validate_entry_id``)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            return operations.validate_entry_id(data)
        except CoordinatorError as e:
            raise serializers.ValidationError(e.message, code="invalid_entry_id") from e


class EntryIdListField(serializers.ListField):
    """1..1000 entry ids (a repeated id counts once)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=EntryIdField(), min_length=1, max_length=operations.MAX_IDS, **kwargs)


class ReasonField(StrictCharField):
    """Why the operator acts (kept in the audit trail): 1-500 characters where required."""

    def __init__(self, *, required: bool) -> None:
        self.reason_required = required
        help_text = "Why (kept in the audit trail); 1-500 characters" + ("." if required else ", optional.")
        options: dict[str, Any] = {"required": required, "max_length": operations.MAX_REASON_CHARS}
        if not required:
            options.update(allow_blank=True, default="")
        super().__init__(help_text=help_text, **options)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        try:
            return operations.validate_reason(value, required=self.reason_required)
        except CoordinatorError as e:
            raise serializers.ValidationError(e.message, code="invalid_reason") from e


def _exactly_one(data: Mapping[str, Any], first: str, second: str, *, second_given: bool) -> None:
    if (first in data) == second_given:
        raise serializers.ValidationError(f"give exactly one of {first} and {second}", code="exactly_one")


class SkipSerializer(StrictSerializer):
    """Acknowledge pending entries without handling them: the listed ids, or every one older than an age
    (exactly one of entry_ids and older_than_ms)."""

    schema_rules: ClassVar[dict[str, Any]] = {
        "oneOf": [{"required": ["entry_ids"]}, {"required": ["older_than_ms"]}]
    }

    entry_ids = EntryIdListField(
        required=False,
        help_text="Entries pending for the group on this shard (any consumer). If any is not pending, "
        "nothing is acknowledged (409 ENTRY_NOT_PENDING).",
    )
    older_than_ms = StrictIntegerField(
        min_value=0,
        max_value=operations.MAX_SKIP_AGE_MS,
        required=False,
        help_text="Every pending entry whose id is older than this (Redis's clock), up to 1000 per call.",
    )
    reason = ReasonField(required=True)

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        _exactly_one(data, "entry_ids", "older_than_ms", second_given="older_than_ms" in data)
        return data


class RedeliverSerializer(StrictSerializer):
    """Ask the shard's owner to re-read its pending entries now. The body may be left out."""

    reason = ReasonField(required=False)


class ReleaseDrainSerializer(StrictSerializer):
    """Stop waiting for a group without live members in the active migration."""

    confirm_unconsumed = StrictIntegerField(
        min_value=0,
        max_value=operations.MAX_CONFIRM_UNCONSUMED,
        help_text="The group's unconsumed entries on its undrained shards, as the operator saw them; must "
        "equal the current count (409 CONFIRMATION_MISMATCH otherwise). They are abandoned.",
    )
    reason = ReasonField(required=True)


class ReplayDeadLettersSerializer(StrictSerializer):
    """Re-append dead letters to the active version."""

    ids = EntryIdListField(help_text="Dead-letter ids (entries of the group's dead-letter stream).")
    reason = ReasonField(required=False)
    accept_unsigned = StrictBooleanField(
        required=False,
        default=False,
        help_text="Also replay UNSIGNED dead letters (no MAC: written before dead letters were signed); "
        "FORGED ones are never replayed.",
    )


class PurgeDeadLettersSerializer(StrictSerializer):
    """Delete dead letters: the listed ids, or all (``all: true``); exactly one of the two."""

    # ids without all: true; or all: true without ids. The enums sit under "not", where drf-spectacular's
    # enum hook does not look (it would name both "PurgeDeadLettersAllEnum" and keep one).
    schema_rules: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {"required": ["ids"], "not": {"required": ["all"], "properties": {"all": {"enum": [True]}}}},
            {
                "required": ["all"],
                "not": {"anyOf": [{"required": ["ids"]}, {"properties": {"all": {"enum": [False]}}}]},
            },
        ]
    }

    ids = EntryIdListField(required=False, help_text="Dead-letter ids to delete.")
    all = StrictBooleanField(required=False, help_text="true: delete every dead letter of the group.")
    reason = ReasonField(required=True)

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        _exactly_one(data, "ids", "all: true", second_given=bool(data.get("all")))
        return data


class RetentionSerializer(StrictSerializer):
    """The stream prefix's whole retention policy (PUT: fields left out take their defaults)."""

    max_age_ms = StrictIntegerField(
        min_value=MIN_MAX_AGE_MS,
        max_value=MAX_RETENTION_MS,
        allow_null=True,
        help_text="Opt-in cap, DATA LOSS: trim entries older than this even if no group has handled them. "
        "null: no age cap.",
    )
    max_len = StrictIntegerField(
        min_value=MIN_MAX_LEN,
        max_value=MAX_MAX_LEN,
        allow_null=True,
        help_text="Opt-in cap, DATA LOSS: keep at most about this many entries per shard stream, handled "
        "or not. null: no length cap.",
    )
    retired_grace_ms = StrictIntegerField(
        min_value=0,
        max_value=MAX_RETENTION_MS,
        required=False,
        default=0,
        help_text="Wait this long after a version retired before deleting its (fully acked) streams.",
    )

    reason = ReasonField(required=False)

    def to_policy(self) -> RetentionPolicy:
        fields = {k: v for k, v in self.validated_data.items() if k != "reason"}
        return RetentionPolicy(**fields).validated()


# ---------------------------------------------------------------------------------------------- query


class QuerySerializer(StrictSerializer):
    """Query parameters: every value arrives as one string (a repeated name is refused by the view)."""


class _QueryField(serializers.Field):
    """One query-string value: always a string on the way in (never trimmed, never blank)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not data:
            self.fail("invalid")
        return self.parse(data)

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def to_representation(self, value: Any) -> Any:  # how the schema shows the default
        return value


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": 500})
class QueryCountField(_QueryField):
    """A decimal count in 1..500."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be an integer in 1..500"}

    def parse(self, text: str) -> int:
        if not re.fullmatch(r"[1-9][0-9]{0,2}", text) or int(text) > 500:
            self.fail("invalid")
        return int(text)


@extend_schema_field({"type": "boolean"})
class QueryBooleanField(_QueryField):
    """``true`` or ``false``, spelled exactly so."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be 'true' or 'false'"}

    def parse(self, text: str) -> bool:
        if text not in ("true", "false"):
            self.fail("invalid")
        return text == "true"


@extend_schema_field({"type": "string", "pattern": AFTER_PATTERN})
class QueryAfterField(_QueryField):
    """``-`` (from the start) or an entry id."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be '-' or an entry id '<ms>-<seq>'"}

    def parse(self, text: str) -> str:
        return "-" if text == "-" else str(EntryIdField().to_internal_value(text))


class DeadLettersQuerySerializer(QuerySerializer):
    after = QueryAfterField(
        required=False, default="-", help_text="List dead letters after this id ('-': from the oldest)."
    )
    count = QueryCountField(required=False, default=50, help_text="At most this many (1-500, default 50).")


class DeletePrefixQuerySerializer(QuerySerializer):
    force = QueryBooleanField(
        required=False,
        default=False,
        help_text="true: delete even while the prefix has groups or unconsumed entries (DATA LOSS).",
    )
    reason = ReasonField(required=False)


class DeleteGroupQuerySerializer(QuerySerializer):
    force = QueryBooleanField(
        required=False,
        default=False,
        help_text="true: delete even while the group has unconsumed entries (lag or pending > 0): DATA "
        "LOSS, a group created again with the name skips them.",
    )
    reason = ReasonField(required=False)
