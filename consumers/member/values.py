"""What goes in and out of the member state machine (:mod:`consumers.member.state`): heartbeat requests
and parsed responses, unit start / stop decisions, notices, the member's configuration, and the error
codes the member acts on. Plain frozen values; no behaviour beyond parsing and serializing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.protocol.model import Shard

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# A static member's clean stop: it leaves for now, its shards held for its instance id (section 3).
TEMPORARY_LEAVE_EPOCH = -2

# Heartbeat error codes that mean "you are not a member any more": drop everything, rejoin with 0.
FENCING_CODES = frozenset({"FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"})
# A join with our instance id while a live member of another id holds it (docs/protocol.md section 3,
# "Static membership"): nothing changed; join again after a backoff.
UNRELEASED_INSTANCE_ID = "UNRELEASED_INSTANCE_ID"
# A join whose join_seq is below the one the coordinator recorded for our id (docs/protocol.md section 3).
STALE_JOIN = "STALE_JOIN"
# Codes the member side makes up (the coordinator's are docs/protocol.md section 12).
COORDINATOR_UNREACHABLE = "COORDINATOR_UNREACHABLE"
INVALID_RESPONSE = "INVALID_RESPONSE"
CLIENT_ERROR = "CLIENT_ERROR"  # the coordinator client raised something it should not have
# Failures after which a join may still have been applied (the answer was lost, or the store failed
# after its commit): the member must leave before it can be sure it is not a member.
AMBIGUOUS_CODES = frozenset({COORDINATOR_UNREACHABLE, INVALID_RESPONSE, "STORE_UNAVAILABLE", CLIENT_ERROR})


class InvalidResponse(ValueError):
    """A heartbeat response that does not have the shape of docs/protocol.md section 13."""


# --------------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    assignment_epoch: int  # the member epoch at which the shard was granted (the data plane checks it)
    readable: bool  # False while strict ordering holds the shard back


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """A parsed heartbeat response (the fields the member acts on)."""

    member_epoch: int
    member_state: str
    group_epoch: int
    assignment_epoch: int
    heartbeat_interval_ms: int
    lease_ttl_ms: int
    shards: Mapping[Shard, Grant]
    revoking: frozenset[Shard]
    max_concurrency: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Response:
        try:
            shards = {
                _shard(s["shard"]): Grant(
                    assignment_epoch=_int(s["assignment_epoch"]), readable=bool(s.get("readable", True))
                )
                for s in body["shards"]
            }
            return cls(
                member_epoch=_int(body["member_epoch"]),
                member_state=str(body.get("member_state", "")),
                group_epoch=_int(body.get("group_epoch", 0)),
                assignment_epoch=_int(body.get("assignment_epoch", 0)),
                heartbeat_interval_ms=_positive(body["heartbeat_interval_ms"]),
                lease_ttl_ms=_positive(body["lease_ttl_ms"]),
                shards=shards,
                revoking=frozenset(_shard(s) for s in body.get("revoking", ())),
                max_concurrency=_int(body["max_concurrency"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidResponse(f"malformed heartbeat response ({type(e).__name__}: {e})") from e


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _positive(value: Any) -> int:
    if _int(value) <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return int(value)


def _shard(text: Any) -> Shard:
    try:
        return Shard.parse(text)
    except Exception as e:  # the core raises its own InvalidRequest; here it is a malformed response
        raise ValueError(str(e)) from e


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    """One heartbeat to send. ``seq`` and ``incarnation`` stay local; :meth:`to_json` is the wire body."""

    member_id: str
    member_epoch: int
    owned_shards: tuple[Shard, ...] | None = None
    capacity: int | None = None
    client: Mapping[str, Any] | None = None
    seq: int = 0
    incarnation: int = 0
    sent_ms: int = 0  # when it was built (the member's clock): the earliest moment it could renew the lease
    # Joins only: the member's count of its own joins, the same for every retry of one join (section 3).
    join_seq: int | None = None
    instance_id: str | None = None  # joins only: a static member's instance id
    # The keys parked on its shards, per shard ({"count": n, "keys": [...]}), sent when they changed
    # since the coordinator last accepted a report ({}: none now); None: not sent (docs/protocol.md §3).
    parked_keys: Mapping[str, Mapping[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"member_id": self.member_id, "member_epoch": self.member_epoch}
        if self.owned_shards is not None:
            body["owned_shards"] = [str(s) for s in self.owned_shards]
        if self.capacity is not None:
            body["capacity"] = self.capacity
        if self.client is not None:
            body["client"] = dict(self.client)
        if self.join_seq is not None:
            body["join_seq"] = self.join_seq
        if self.instance_id is not None:
            body["instance_id"] = self.instance_id
        if self.parked_keys is not None:  # on the wire, a list of {"shard", "count", "keys"}
            body["parked_keys"] = [
                {"shard": shard, **report} for shard, report in sorted(self.parked_keys.items())
            ]
        return body


# What renewing the lease in Redis answered (consumers.dataplane.LeaseRenewal's values), plus the loop's own
# UNAVAILABLE when the call failed.
RENEWED = "OK"
MEMBER_FENCED = "MEMBER_FENCED"
UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRenewalRequest:
    """One renewal of the member's own lease in Redis (docs/protocol.md section 5)."""

    member_id: str
    member_epoch: int
    incarnation: int
    sent_ms: int  # when it was built (the member's clock): the earliest moment it could renew the lease


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardStart:
    shard: Shard
    assignment_epoch: int
    readable: bool
    incarnation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardStop:
    shard: Shard
    abandon: bool  # True: stop at once and ack nothing (fenced); False: finish in-flight work, ack, stop
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """Something worth a log line; the loop logs it (``level`` is a :mod:`logging` level)."""

    level: int
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Decisions:
    start: tuple[ShardStart, ...] = ()
    stop: tuple[ShardStop, ...] = ()
    concurrency: int | None = None  # the new worker count, when it changed
    notices: tuple[Notice, ...] = ()
    finished: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberConfig:
    member_id: str
    capacity: int  # the runtime's max concurrency: reported on join, caps the worker count
    client: Mapping[str, Any] | None = None  # {host, pid, listener, version}, sent on join
    # Static membership (docs/consumers.md): sent on every join. With it, a clean stop is a temporary
    # leave (epoch -2: the shards wait one lease TTL for the next process with this instance id) unless
    # ``leave_group`` (epoch -1: they move at once, for a scale-in).
    instance_id: str | None = None
    leave_group: bool = False
    initial_heartbeat_interval_ms: int = 3_000  # until the first response says otherwise
    retry_backoff_initial_ms: int = 100
    retry_backoff_max_ms: int = 5_000
    retry_jitter_ratio: float = 0.2  # a failed renewal's backoff is shortened by up to this fraction
    # The least a round trip is taken to be when a retry is pulled in before the lease ends (the last
    # successful heartbeat's duration counts when it is longer).
    round_trip_floor_ms: int = 50
    leave_timeout_ms: int = 2_000  # how long a leave is retried before the lease is left to expire

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1; got {self.capacity}")
        if not 0 < self.retry_backoff_initial_ms <= self.retry_backoff_max_ms:
            raise ValueError("retry backoff: 0 < initial <= max is required")
        if self.round_trip_floor_ms < 1:
            raise ValueError(f"round_trip_floor_ms must be at least 1; got {self.round_trip_floor_ms}")
