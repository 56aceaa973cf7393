"""The typed error hierarchy of the coordination protocol.

Every error the protocol core can return to a client is a subclass of :class:`CoordinatorError` with a
stable ``code`` (an :class:`ErrorCode`), a ``retriable`` flag and an actionable message. The HTTP layer
maps codes to status codes in exactly one place (``coordinator/api/errors.py``); the codes and their
meaning are specified in ``docs/protocol.md`` ("Error codes").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar


class ErrorCode(StrEnum):
    INVALID_REQUEST = "INVALID_REQUEST"
    INVALID_IDENTIFIER = "INVALID_IDENTIFIER"
    INVALID_CONFIG = "INVALID_CONFIG"
    GROUP_NOT_FOUND = "GROUP_NOT_FOUND"
    GROUP_ALREADY_EXISTS = "GROUP_ALREADY_EXISTS"
    STREAM_PREFIX_NOT_FOUND = "STREAM_PREFIX_NOT_FOUND"
    SHARD_COUNT_CONFLICT = "SHARD_COUNT_CONFLICT"
    SHARD_COUNT_UNCHANGED = "SHARD_COUNT_UNCHANGED"
    MIGRATION_IN_PROGRESS = "MIGRATION_IN_PROGRESS"
    UNKNOWN_SHARD = "UNKNOWN_SHARD"
    SHARD_NOT_FOUND = "SHARD_NOT_FOUND"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    GROUP_MAX_SIZE_REACHED = "GROUP_MAX_SIZE_REACHED"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    CONCURRENT_UPDATE = "CONCURRENT_UPDATE"
    METADATA_CORRUPT = "METADATA_CORRUPT"
    GROUP_HAS_LIVE_MEMBERS = "GROUP_HAS_LIVE_MEMBERS"
    MIGRATION_NOT_ACTIVE = "MIGRATION_NOT_ACTIVE"
    STREAM_PREFIX_NOT_EMPTY = "STREAM_PREFIX_NOT_EMPTY"
    ENTRY_NOT_PENDING = "ENTRY_NOT_PENDING"
    CONFIRMATION_MISMATCH = "CONFIRMATION_MISMATCH"
    DEAD_LETTER_NOT_FOUND = "DEAD_LETTER_NOT_FOUND"
    DEAD_LETTER_NOT_VERIFIED = "DEAD_LETTER_NOT_VERIFIED"
    GROUP_HAS_UNCONSUMED_ENTRIES = "GROUP_HAS_UNCONSUMED_ENTRIES"
    MEMBER_ID_NOT_OWNED = "MEMBER_ID_NOT_OWNED"
    HEARTBEAT_TOO_FREQUENT = "HEARTBEAT_TOO_FREQUENT"
    STALE_JOIN = "STALE_JOIN"
    UNRELEASED_INSTANCE_ID = "UNRELEASED_INSTANCE_ID"
    FENCED_INSTANCE_ID = "FENCED_INSTANCE_ID"
    JOINS_THROTTLED = "JOINS_THROTTLED"
    CREDENTIAL_JOINS_TOO_FREQUENT = "CREDENTIAL_JOINS_TOO_FREQUENT"
    CREDENTIAL_MEMBER_LIMIT_REACHED = "CREDENTIAL_MEMBER_LIMIT_REACHED"


class CoordinatorError(Exception):
    """Base of every error the coordinator reports. ``details`` holds structured, JSON-safe fields."""

    # An ErrorCode for the core's errors; a layer above may define errors with codes of its own
    # (coordinator/operations.py). None carries an HTTP status: coordinator/api/errors.py maps codes.
    code: ClassVar[StrEnum] = ErrorCode.INVALID_REQUEST
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code.value})"


class InvalidRequest(CoordinatorError):
    code = ErrorCode.INVALID_REQUEST


class InvalidIdentifier(InvalidRequest):
    code = ErrorCode.INVALID_IDENTIFIER


class InvalidConfig(InvalidRequest):
    code = ErrorCode.INVALID_CONFIG


class GroupNotFound(CoordinatorError):
    """The group does not exist. Members retry with backoff: only the Admin API creates groups."""

    code = ErrorCode.GROUP_NOT_FOUND
    retriable = True


class GroupAlreadyExists(CoordinatorError):
    code = ErrorCode.GROUP_ALREADY_EXISTS


class StreamPrefixNotFound(CoordinatorError):
    code = ErrorCode.STREAM_PREFIX_NOT_FOUND
    retriable = True


class ShardCountConflict(CoordinatorError):
    code = ErrorCode.SHARD_COUNT_CONFLICT


class ShardCountUnchanged(CoordinatorError):
    code = ErrorCode.SHARD_COUNT_UNCHANGED


class MigrationInProgress(CoordinatorError):
    code = ErrorCode.MIGRATION_IN_PROGRESS


class UnknownShard(InvalidRequest):
    """A shard named in a request body (a member's drained report) that is not part of the expected
    version: the request is wrong (400)."""

    code = ErrorCode.UNKNOWN_SHARD


class ShardNotFound(CoordinatorError):
    """The shard a request addresses (in its path: ``.../shards/<shard>/skip``) is not a shard of an active
    or draining version of the stream prefix: a missing resource (404), like GROUP_NOT_FOUND. A malformed
    shard is INVALID_REQUEST."""

    code = ErrorCode.SHARD_NOT_FOUND


class MemberIdNotOwned(CoordinatorError):
    """The member id was joined by another credential: only that credential may heartbeat, leave or
    rejoin it (docs/protocol.md section 13, "Credentials and scopes"). Nothing was changed."""

    code = ErrorCode.MEMBER_ID_NOT_OWNED


class HeartbeatTooFrequent(CoordinatorError):
    """The member heartbeats faster than the per-member floor allows. Raised by the store layer;
    ``details["retry_after_ms"]`` says when the next heartbeat is accepted. Nothing was changed."""

    code = ErrorCode.HEARTBEAT_TOO_FREQUENT
    retriable = True


class JoinsThrottled(CoordinatorError):
    """This API process is already running as many joins as it admits at once: joins are shed first
    under load, so that steady heartbeats and renewals keep every live member's lease. Raised by the
    HTTP layer; ``details["retry_after_ms"]`` says when to retry (jittered). Nothing was changed."""

    code = ErrorCode.JOINS_THROTTLED
    retriable = True


class CredentialJoinsTooFrequent(CoordinatorError):
    """The credential joins members faster than its join rate allows, counted over every API process
    (docs/protocol.md section 13, "Per credential"). Raised by the store layer;
    ``details["retry_after_ms"]`` says when its next join is accepted. Nothing was changed."""

    code = ErrorCode.CREDENTIAL_JOINS_TOO_FREQUENT
    retriable = True


class CredentialMemberLimitReached(CoordinatorError):
    """A join of a member id new to the credential while the credential already has its maximum of live
    members (across every group and API process). Raised by the store layer; ``details``: ``limit``,
    ``live_members``, ``retry_after_ms``. Retriable: members that leave or expire make room. Nothing was
    changed."""

    code = ErrorCode.CREDENTIAL_MEMBER_LIMIT_REACHED
    retriable = True


class StaleJoin(CoordinatorError):
    """A join whose ``join_seq`` is older than the one the member id last joined with: a delayed retry
    of a join its member has since moved past. Refused so it cannot fence the live incarnation;
    nothing was changed (whoever sent it has stopped waiting for the answer)."""

    code = ErrorCode.STALE_JOIN


class UnreleasedInstanceId(CoordinatorError):
    """A join with an ``instance_id`` that a live member of another id holds, its lease still running
    (docs/protocol.md section 3, "Static membership"): two processes were given one instance id, or the
    previous incarnation has not left yet. Nothing was changed; the holder is not fenced. Retriable: the
    join is accepted once the holder leaves or its lease ends. ``details``: ``instance_id``,
    ``member_id`` (the holder), ``lease_deadline_ms`` (the holder's lease, Redis clock)."""

    code = ErrorCode.UNRELEASED_INSTANCE_ID
    retriable = True


class UnknownMemberId(CoordinatorError):
    """The member id is not in the group: the member must drop all its shards and rejoin with epoch 0."""

    code = ErrorCode.UNKNOWN_MEMBER_ID


class FencedMemberEpoch(CoordinatorError):
    """The member's epoch is stale, from the future, or the member was expired / left.

    The member must stop reading and acking every shard at once and rejoin with epoch 0.
    """

    code = ErrorCode.FENCED_MEMBER_EPOCH


class FencedInstanceId(FencedMemberEpoch):
    """A heartbeat of a member id whose static ``instance_id`` another member id has taken over
    (docs/protocol.md section 3, "Static membership"): a fence like FENCED_MEMBER_EPOCH. A rejoin with
    that instance id is refused (UNRELEASED_INSTANCE_ID) for as long as the new holder is live."""

    code = ErrorCode.FENCED_INSTANCE_ID


class GroupMaxSizeReached(CoordinatorError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED
    retriable = True


class IllegalTransition(CoordinatorError):
    """A (member state, event) pair that the member state machine does not define."""

    code = ErrorCode.ILLEGAL_TRANSITION


class StoreUnavailable(CoordinatorError):
    """The metadata store cannot be reached. Raised by the store layer, never by the pure core."""

    code = ErrorCode.STORE_UNAVAILABLE
    retriable = True


class ConcurrentUpdate(CoordinatorError):
    """Optimistic concurrency gave up after its retries. Raised by the store layer."""

    code = ErrorCode.CONCURRENT_UPDATE
    retriable = True


class MetadataCorrupt(CoordinatorError):
    """Redis answered, but the metadata could not be read or a script failed: a bug or a hand edit.
    Not retriable: retrying the same command against the same data fails the same way."""

    code = ErrorCode.METADATA_CORRUPT


# ---------------------------------------------------------------------------------- entry lifecycle
# docs/protocol.md section 14: operator actions on entries, migrations and prefixes.


class GroupHasLiveMembers(CoordinatorError):
    """An action reserved for a group without live members (releasing it from a migration's drain)."""

    code = ErrorCode.GROUP_HAS_LIVE_MEMBERS


class MigrationNotActive(CoordinatorError):
    """No migration is active, or the group has nothing left to drain in it."""

    code = ErrorCode.MIGRATION_NOT_ACTIVE


class StreamPrefixNotEmpty(CoordinatorError):
    """Deleting a stream prefix that still has groups or unconsumed entries, without ``force``."""

    code = ErrorCode.STREAM_PREFIX_NOT_EMPTY


class GroupHasUnconsumedEntries(CoordinatorError):
    """Deleting a group that has entries not yet delivered (lag) or delivered and not acknowledged
    (pending), without ``force``: a group created again with the name would silently skip them."""

    code = ErrorCode.GROUP_HAS_UNCONSUMED_ENTRIES


class EntryNotPending(CoordinatorError):
    """A listed entry id is not pending for the group on that shard; nothing was acknowledged."""

    code = ErrorCode.ENTRY_NOT_PENDING


class ConfirmationMismatch(CoordinatorError):
    """A destructive action confirmed against a figure that is no longer the current one."""

    code = ErrorCode.CONFIRMATION_MISMATCH


class DeadLetterNotFound(CoordinatorError):
    code = ErrorCode.DEAD_LETTER_NOT_FOUND


class DeadLetterNotVerified(CoordinatorError):
    """A replay of dead letters the data plane's dead-letter function did not write (their MAC does not
    verify), or of unsigned ones (from before dead letters were signed) without the operator's
    ``accept_unsigned``. Nothing was changed; ``details["refused"]`` lists ``{"id", "verdict"}``."""

    code = ErrorCode.DEAD_LETTER_NOT_VERIFIED
