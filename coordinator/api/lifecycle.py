"""The HTTP API of the entry and migration lifecycle (docs/protocol.md section 13): operator actions on a
group's shards, its migration drain, its dead letters, and a stream prefix's retention.

Thin like ``views``: check the path (identifiers, then the shard or dead-letter id), the query and the
body, then one call. Every action goes through ``coordinator.operations`` (authorize, audit first, act,
record the outcome); the two dead-letter reads call the store. A rejected request changes nothing:
everything that can be refused for its shape is refused here, before any audit row or store call.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from coordinator import operations
from coordinator.protocol.errors import ErrorCode
from coordinator.protocol.model import Shard

from . import schemas as doc
from .serializers import (
    DeadLettersQuerySerializer,
    PurgeDeadLettersSerializer,
    RedeliverSerializer,
    ReleaseDrainSerializer,
    ReplayDeadLettersSerializer,
    RetentionSerializer,
    SkipSerializer,
)
from .views import AdminView

_GROUP = [doc.STREAM_PREFIX, doc.CONSUMER_GROUP]
_GROUP_CODES = (ErrorCode.INVALID_IDENTIFIER, ErrorCode.GROUP_NOT_FOUND)
# A shard action: the body, the group, a shard that is malformed (INVALID_REQUEST) or not the prefix's
# (SHARD_NOT_FOUND, 404).
_SHARD_CODES = (*doc.BODY_CODES, *_GROUP_CODES, ErrorCode.SHARD_NOT_FOUND, *doc.ACTION_CODES)


class _ShardAction(AdminView):
    def target(self) -> tuple[str, str, str]:
        prefix, group = self.path_identifiers()
        return prefix, group, self.path_value("shard", Shard.parse)


class RedeliverView(_ShardAction):
    @extend_schema(
        operation_id="redeliver_shard",
        tags=["admin"],
        summary="The shard's owner re-reads its pending entries now (audited)",
        description="Moves the shard's redeliver token on; the owning member notices it on its next read "
        "and re-reads its own pending entries, in order, before anything new. The body may be left out.",
        parameters=[*_GROUP, doc.SHARD, *doc.RESPONSE_HEADERS],
        request=RedeliverSerializer,
        responses={202: doc.RedeliverResponseSerializer, **doc.admin_problems(*_SHARD_CODES)},
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str, shard: str) -> Response:
        prefix, group, wire = self.target()
        reason = self.body(RedeliverSerializer, optional=True).validated_data["reason"]
        result = operations.redeliver(self.actor(), prefix, group, wire, reason=reason)
        return Response(result, status=status.HTTP_202_ACCEPTED)


class SkipView(_ShardAction):
    @extend_schema(
        operation_id="skip_entries",
        tags=["admin"],
        summary="Acknowledge pending entries without handling them (audited with their fields)",
        description="Exactly one of entry_ids (each must be pending for the group on this shard, else "
        "409 ENTRY_NOT_PENDING and nothing is acknowledged) and older_than_ms. The audit record keeps "
        "every skipped entry's id and fields.",
        parameters=[*_GROUP, doc.SHARD, *doc.RESPONSE_HEADERS],
        request=SkipSerializer,
        responses={
            200: doc.SkipResponseSerializer,
            **doc.admin_problems(*_SHARD_CODES, ErrorCode.ENTRY_NOT_PENDING),
        },
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str, shard: str) -> Response:
        prefix, group, wire = self.target()
        body = self.body(SkipSerializer).validated_data
        result = operations.skip_entries(
            self.actor(),
            prefix,
            group,
            wire,
            entry_ids=body.get("entry_ids"),
            older_than_ms=body.get("older_than_ms"),
            reason=body["reason"],
        )
        skipped = [entry["id"] for entry in result["skipped"]]
        return Response({"shard": result["shard"], "skipped": skipped, "count": len(skipped)})


class ReleaseDrainView(AdminView):
    @extend_schema(
        operation_id="release_drain",
        tags=["admin"],
        summary="Stop waiting for a group without live members in the active migration (audited)",
        description="Marks every old shard the group has not drained as drained for it, abandoning its "
        "unconsumed entries there. confirm_unconsumed must equal their current count (see the group's "
        "migration.undrained).",
        parameters=[*_GROUP, *doc.RESPONSE_HEADERS],
        request=ReleaseDrainSerializer,
        responses={
            200: doc.ReleaseDrainResponseSerializer,
            **doc.admin_problems(
                *doc.BODY_CODES,
                *_GROUP_CODES,
                ErrorCode.GROUP_HAS_LIVE_MEMBERS,
                ErrorCode.MIGRATION_NOT_ACTIVE,
                ErrorCode.CONFIRMATION_MISMATCH,
                *doc.ACTION_CODES,
            ),
        },
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        body = self.body(ReleaseDrainSerializer).validated_data
        result = operations.release_drain(
            self.actor(), prefix, group, confirm_unconsumed=body["confirm_unconsumed"], reason=body["reason"]
        )
        return Response(result)


# ---------------------------------------------------------------------------------------------- dead letters


class DeadLettersView(AdminView):
    @extend_schema(
        operation_id="list_dead_letters",
        tags=["admin"],
        summary="The group's dead letters, oldest first",
        parameters=[*_GROUP, DeadLettersQuerySerializer, *doc.RESPONSE_HEADERS],
        responses={
            200: doc.DeadLetterListSerializer,
            **doc.admin_problems(ErrorCode.INVALID_REQUEST, *_GROUP_CODES),
        },
    )
    def get(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        query = self.query(DeadLettersQuerySerializer)
        return Response(self.store.dead_letters(prefix, group, after=query["after"], count=query["count"]))


class DeadLetterView(AdminView):
    @extend_schema(
        operation_id="get_dead_letter",
        tags=["admin"],
        summary="One dead letter: its source, error, deliveries and original fields",
        parameters=[*_GROUP, doc.DEAD_LETTER_ID, *doc.RESPONSE_HEADERS],
        responses={
            200: doc.DeadLetterSerializer,
            **doc.admin_problems(ErrorCode.INVALID_REQUEST, *_GROUP_CODES, ErrorCode.DEAD_LETTER_NOT_FOUND),
        },
    )
    def get(self, request: Request, stream_prefix: str, consumer_group: str, dead_letter_id: str) -> Response:
        prefix, group = self.path_identifiers()
        dlq_id = self.path_value("dead_letter_id", operations.validate_entry_id)
        return Response(self.store.dead_letter(prefix, group, dlq_id))


class ReplayDeadLettersView(AdminView):
    @extend_schema(
        operation_id="replay_dead_letters",
        tags=["admin"],
        summary="Re-append dead letters to the active version (audited)",
        description="Each is routed by its partition key like a new entry and removed from the dead-letter "
        "stream. Every group of the prefix receives it again (at least once: handlers dedupe by event_id). "
        "Only dead letters the data plane's dead-letter function wrote (their MAC verifies), and UNSIGNED "
        "ones with accept_unsigned; otherwise 409 DEAD_LETTER_NOT_VERIFIED and nothing is replayed.",
        parameters=[*_GROUP, *doc.RESPONSE_HEADERS],
        request=ReplayDeadLettersSerializer,
        responses={
            200: doc.ReplayResponseSerializer,
            **doc.admin_problems(
                *doc.BODY_CODES,
                *_GROUP_CODES,
                ErrorCode.DEAD_LETTER_NOT_FOUND,
                ErrorCode.DEAD_LETTER_NOT_VERIFIED,
                *doc.ACTION_CODES,
            ),
        },
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        body = self.body(ReplayDeadLettersSerializer).validated_data
        result = operations.replay_dead_letters(
            self.actor(),
            prefix,
            group,
            body["ids"],
            reason=body["reason"],
            accept_unsigned=body["accept_unsigned"],
        )
        return Response(result)


class PurgeDeadLettersView(AdminView):
    @extend_schema(
        operation_id="purge_dead_letters",
        tags=["admin"],
        summary="Delete dead letters: the listed ones, or all (audited)",
        parameters=[*_GROUP, *doc.RESPONSE_HEADERS],
        request=PurgeDeadLettersSerializer,
        responses={
            200: doc.PurgeResponseSerializer,
            **doc.admin_problems(*doc.BODY_CODES, *_GROUP_CODES, *doc.ACTION_CODES),
        },
    )
    def post(self, request: Request, stream_prefix: str, consumer_group: str) -> Response:
        prefix, group = self.path_identifiers()
        body = self.body(PurgeDeadLettersSerializer).validated_data
        ids = None if body.get("all") else body["ids"]
        return Response(
            operations.purge_dead_letters(self.actor(), prefix, group, ids, reason=body["reason"])
        )


# ---------------------------------------------------------------------------------------------- retention


class RetentionView(AdminView):
    @extend_schema(
        operation_id="set_retention",
        tags=["admin"],
        summary="Set the stream prefix's retention policy (audited)",
        description="The base mode is always 'acked': the retention pass trims only what every group has "
        "acknowledged. max_age_ms and max_len are opt-in caps that trim regardless of consumption: DATA "
        "LOSS for entries no group has handled yet.",
        parameters=[doc.STREAM_PREFIX, *doc.RESPONSE_HEADERS],
        request=RetentionSerializer,
        responses={
            200: doc.PrefixDescriptionSerializer,
            **doc.admin_problems(
                *doc.BODY_CODES,
                ErrorCode.INVALID_IDENTIFIER,
                ErrorCode.STREAM_PREFIX_NOT_FOUND,
                *doc.ACTION_CODES,
            ),
        },
    )
    def put(self, request: Request, stream_prefix: str) -> Response:
        (prefix,) = self.path_identifiers()
        body = self.body(RetentionSerializer)
        policy = body.to_policy()
        reason = body.validated_data["reason"]
        return Response(operations.set_retention(self.actor(), prefix, policy, reason=reason))
