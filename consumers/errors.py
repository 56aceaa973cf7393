"""The typed errors of the ``consumers`` package (producers, the data plane, the member runtime).

One base, :class:`ConsumersError`, with a stable ``code`` and a ``retriable`` flag, like
:mod:`coordinator.protocol.errors` on the coordinator side. Infrastructure errors are translated where
they happen: no ``redis.*`` exception leaves :mod:`consumers.dataplane` or :mod:`consumers.producer`.

Fencing is *not* an error: a fenced data-plane operation returns a
:class:`consumers.dataplane.FenceStatus`, because refusing is the protocol working as designed and the
caller must branch on which refusal it got.

This module imports nothing from Django or redis, so anything may import it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar


class ErrorCode(StrEnum):
    INVALID_REQUEST = "INVALID_REQUEST"
    STREAM_PREFIX_NOT_FOUND = "STREAM_PREFIX_NOT_FOUND"
    ROUTING_UNSTABLE = "ROUTING_UNSTABLE"
    DATA_PLANE_UNAVAILABLE = "DATA_PLANE_UNAVAILABLE"
    DATA_PLANE_ERROR = "DATA_PLANE_ERROR"
    FUNCTIONS_NOT_LOADED = "FUNCTIONS_NOT_LOADED"
    NOT_REPLICATED = "NOT_REPLICATED"


class ConsumersError(Exception):
    """Base of every error this package raises. ``details`` holds structured, JSON-safe fields."""

    code: ClassVar[ErrorCode] = ErrorCode.INVALID_REQUEST
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code.value})"


class InvalidRequest(ConsumersError):
    """A bad argument (identifier, count, payload, headers). Fix the call; retrying cannot help."""

    code = ErrorCode.INVALID_REQUEST


class StreamPrefixNotFound(ConsumersError):
    """The stream prefix has no routing metadata: only the coordinator's Admin API creates prefixes.

    Retriable in the same sense as the coordinator's ``STREAM_PREFIX_NOT_FOUND``: an operator may
    create it; a producer should not loop on it without bound.
    """

    code = ErrorCode.STREAM_PREFIX_NOT_FOUND
    retriable = True


class RoutingUnstable(ConsumersError):
    """The producer was refused for a stale route more than ``max_retries`` times in a row.

    Only a storm of shard-count changes can cause it (each one is refused while a migration is active,
    so it should not happen in practice). Nothing of the refused entries was written; entries already
    acknowledged by the producer (``details["sent"]``) were written once.
    """

    code = ErrorCode.ROUTING_UNSTABLE
    retriable = True


class DataPlaneUnavailable(ConsumersError):
    """Redis cannot serve the call now: unreachable or timed out, or it answered "not now" (a failover's
    ``CLUSTERDOWN``, ``MASTERDOWN``, ``READONLY``, ``MOVED`` / ``ASK`` / ``TRYAGAIN`` storms, ``LOADING``,
    ``BUSY``, ``OOM``, ``NOREPLICAS``: rsc_redis/errors.py classifies them by type and error code).
    Back off and retry.

    The outcome of the interrupted call is unknown when the connection failed or timed out
    (``details["redis_error"]`` is None): a read may have delivered entries into the member's pending
    list (recover them with ``DataPlane.read_own_pending``), an ack may have been applied, and a
    producer's append may have been written (at-least-once: a retry may duplicate it). With an error
    code in ``details["redis_error"]``, Redis refused the call before it ran.
    """

    code = ErrorCode.DATA_PLANE_UNAVAILABLE
    retriable = True


class DataPlaneError(ConsumersError):
    """Redis refused a data-plane command for a reason retrying will not fix (a missing stream or
    consumer group, a key of the wrong type, a script error, an ACL refusal: ``NOPERM``). The store and
    the streams disagree, or the deployment is misconfigured: an operator must look. A cluster in
    failover (``CLUSTERDOWN``) is never this: that is :class:`DataPlaneUnavailable`."""

    code = ErrorCode.DATA_PLANE_ERROR


class FunctionsNotLoaded(DataPlaneUnavailable):
    """The data plane's Redis Functions library of this code version is not loaded on a Redis it uses: a
    new or flushed node, or only a coordinator of another version has loaded its own. Nothing ran.

    The coordinator loads it (``manage.py redis_functions load``, its start and every tick), so this
    heals by itself while a coordinator of this version runs; retriable like any unavailability."""

    code = ErrorCode.FUNCTIONS_NOT_LOADED


class NotReplicated(ConsumersError):
    """A producer's ``durability="replicated"`` send: every entry **was appended** on the primary, but
    no replica acknowledged it within the producer's ``replication_timeout_ms`` (``WAIT``), so it is not
    known to survive the primary's loss. ``results`` holds the :class:`~consumers.producer.SendResult`
    of every entry of the call (in input order), ``details["replicas"]`` the count that acknowledged.

    Retriable, but not like an unavailability: the entries exist (consumers will handle them unless the
    primary dies before its replica catches up). A retry appends them again (at-least-once: duplicates,
    with new ``event_id`` s); a caller that cannot tolerate either may check the replica's health and
    decide (docs/producer.md, "Durability")."""

    code = ErrorCode.NOT_REPLICATED
    retriable = True

    def __init__(self, message: str, *, results: list[Any], **details: Any) -> None:
        super().__init__(message, **details)
        self.results = results
