"""Request bodies: strict DRF serializers that turn JSON into the core's commands.

Strict means: an unknown field is an error (also inside ``client``), an integer must be a JSON integer
(not ``true``, ``"5"`` or ``5.0``), a string must be a JSON string (not ``5``), and every number has the
range docs/protocol.md gives it. Identifiers and shards are checked by the core's own validators
(``validate_identifier``, ``validate_member_id``, ``Shard.parse``), so there is one definition of each;
an identifier that fails reports the DRF error code ``invalid_identifier`` and the request is answered
with ``INVALID_IDENTIFIER`` when that is all that is wrong with it.

The cross-field rules (``heartbeat_interval_ms < lease_ttl_ms``, ``capacity`` required on a join) stay in
the core, which raises ``INVALID_CONFIG`` / ``INVALID_REQUEST`` for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import CoordinatorError, InvalidConfig, InvalidIdentifier
from coordinator.protocol.group import JOIN_EPOCH, LEAVE_EPOCH, Heartbeat
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    MAX_CAPACITY,
    MAX_MAX_CONCURRENCY,
    MAX_MEMBERS_LIMIT,
    MAX_SHARD_COUNT,
    MEMBER_ID_RE,
    ClientInfo,
    GroupConfig,
    OrderingMode,
    Shard,
    validate_identifier,
    validate_member_id,
)
from coordinator.store.redis_store import START_FROM, default_config_from_settings

from .errors import IDENTIFIER_ERROR_CODE

MAX_MEMBER_EPOCH = 2**53  # the largest integer every JSON implementation represents exactly
MAX_OWNED_SHARDS = 2 * MAX_SHARD_COUNT  # a draining and an active version at most
# Ranges of GroupConfig.validated(); tests/api check that both agree at every bound.
CONFIG_RANGES: dict[str, tuple[int, int]] = {
    "max_concurrency": (1, MAX_MAX_CONCURRENCY),
    "lease_ttl_ms": (1_000, 3_600_000),
    "heartbeat_interval_ms": (100, 600_000),
    "revocation_timeout_ms": (1_000, 3_600_000),
    "max_members": (1, MAX_MEMBERS_LIMIT),
}


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
        max_length = 128 if what == "member_id" else 64
        kwargs.setdefault("help_text", _IDENTIFIER_HELP.format(max_length=max_length))
        # The pattern documents the core's rule in the schema; the core's validator is what enforces it.
        pattern = (MEMBER_ID_RE if what == "member_id" else IDENTIFIER_RE).pattern
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
            return validate_identifier(data, self.what)
        except InvalidIdentifier as e:
            raise serializers.ValidationError(e.message, code=IDENTIFIER_ERROR_CODE) from e


_IDENTIFIER_HELP = (
    "1-{max_length} characters of letters, digits, '.', '_' or '-', starting with a letter or digit."
)


@extend_schema_field(
    {"type": "string", "pattern": r"^v[1-9][0-9]{0,8}:(0|[1-9][0-9]{0,4})$", "example": "v1:0"}
)
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
    """Rejects fields it does not declare (each reported under its own name, code ``unknown_field``)."""

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


class HeartbeatSerializer(StrictSerializer):
    """A member heartbeat (docs/protocol.md section 3). Unknown fields are rejected."""

    member_id = IdentifierField("member_id")
    member_epoch = StrictIntegerField(
        min_value=LEAVE_EPOCH,
        max_value=MAX_MEMBER_EPOCH,
        help_text=f"{JOIN_EPOCH} joins, {LEAVE_EPOCH} leaves, otherwise the member's current epoch.",
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
        )


# ---------------------------------------------------------------------------------------------- admin


def _config_field(name: str, help_text: str) -> StrictIntegerField:
    low, high = CONFIG_RANGES[name]
    return StrictIntegerField(min_value=low, max_value=high, required=False, help_text=help_text)


class CreateGroupSerializer(StrictSerializer):
    """A new consumer group. Unknown fields are rejected."""

    stream_prefix = IdentifierField("stream_prefix")
    consumer_group = IdentifierField("consumer_group")
    shard_count = StrictIntegerField(
        min_value=1,
        max_value=MAX_SHARD_COUNT,
        required=False,
        help_text="Required when the stream prefix is new; if given for an existing prefix it must match.",
    )
    max_concurrency = _config_field("max_concurrency", "Worker threads a member may run (default 1).")
    lease_ttl_ms = _config_field("lease_ttl_ms", "Default: the server's RSC_MEMBER_LEASE_TTL_MS.")
    heartbeat_interval_ms = _config_field(
        "heartbeat_interval_ms", "Below lease_ttl_ms. Default: the server's RSC_HEARTBEAT_INTERVAL_MS."
    )
    revocation_timeout_ms = _config_field(
        "revocation_timeout_ms", "Default: the server's RSC_REVOCATION_TIMEOUT_MS."
    )
    max_members = _config_field("max_members", "Live members at most (default 1000).")
    start_from = StrictChoiceField(
        choices=sorted(START_FROM),
        required=False,
        default="latest",
        help_text="Where the group's Redis consumer groups start reading the prefix's streams.",
    )

    def to_command(self) -> tuple[CreateGroup, str]:
        data = dict(self.validated_data)
        config = default_config_from_settings(settings)
        overrides = {name: data[name] for name in CONFIG_RANGES if name in data}
        command = CreateGroup(
            stream_prefix=data["stream_prefix"],
            consumer_group=data["consumer_group"],
            shard_count=data.get("shard_count"),
            config=GroupConfig(**{**_config_dict(config), **overrides}),
        )
        tick_ms = settings.RSC_TICK_INTERVAL_MS
        if command.config.lease_ttl_ms <= tick_ms:
            # docs/protocol.md section 5: the tick must run within every lease, or expiry lags a whole tick.
            raise InvalidConfig(
                f"lease_ttl_ms ({command.config.lease_ttl_ms}) must be above the coordinator's tick interval "
                f"(RSC_TICK_INTERVAL_MS = {tick_ms})",
                field="lease_ttl_ms",
            )
        return command, data["start_from"]


def _config_dict(config: GroupConfig) -> dict[str, int]:
    return {name: getattr(config, name) for name in CONFIG_RANGES}


class MaxConcurrencySerializer(StrictSerializer):
    """The group's new server-side cap on worker threads per member."""

    max_concurrency = StrictIntegerField(min_value=1, max_value=MAX_MAX_CONCURRENCY)


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
