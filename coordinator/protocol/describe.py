"""Read-only views of the state: the heartbeat response a member receives and the operator's view."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .group import readable
from .model import (
    Group,
    Member,
    MemberState,
    Migration,
    OrderingMode,
    PrefixState,
    RetentionPolicy,
    RoutingVersion,
    Shard,
    Topology,
    VersionState,
)
from .reconciliation import settled


class GroupState(StrEnum):
    EMPTY = "EMPTY"  # no live member
    RECONCILING = "RECONCILING"  # some live member does not own exactly its target yet
    STABLE = "STABLE"


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignedShard:
    shard: Shard
    assignment_epoch: int  # the member epoch at which the member was granted this shard
    readable: bool  # False while strict ordering holds it back


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    member_id: str
    member_epoch: int
    member_state: MemberState
    group_epoch: int
    assignment_epoch: int
    heartbeat_interval_ms: int
    lease_ttl_ms: int
    shards: tuple[AssignedShard, ...]
    revoking: tuple[Shard, ...]
    max_concurrency: int  # min(reported capacity, the group's max_concurrency)
    active_version: int
    shard_count: int


def heartbeat_response(group: Group, topology: Topology, member_id: str) -> HeartbeatResponse:
    member = group.members.get(member_id)
    active = topology.active_version
    if member is None or not member.state.is_live:
        # The answer to a leave (also of a member that was never there, or was already fenced).
        return HeartbeatResponse(
            member_id=member_id,
            member_epoch=-1,
            member_state=member.state if member is not None else MemberState.LEFT,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            heartbeat_interval_ms=group.config.heartbeat_interval_ms,
            lease_ttl_ms=group.config.lease_ttl_ms,
            shards=(),
            revoking=(),
            max_concurrency=0,
            active_version=active.version,
            shard_count=active.shard_count,
        )
    return HeartbeatResponse(
        member_id=member_id,
        member_epoch=member.member_epoch,
        member_state=member.state,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        heartbeat_interval_ms=group.config.heartbeat_interval_ms,
        lease_ttl_ms=group.config.lease_ttl_ms,
        shards=tuple(
            AssignedShard(shard=s, assignment_epoch=e, readable=readable(group, topology, s))
            for s, e in sorted(member.assigned.items())
        ),
        revoking=tuple(sorted(member.revoking)),
        max_concurrency=group.effective_concurrency(member),
        active_version=active.version,
        shard_count=active.shard_count,
    )


class ShardAssignment(StrEnum):
    """Where a shard of a group stands (operators' tables, the member x shard matrix)."""

    READABLE = "READABLE"  # owned, and its owner may read it
    HELD_BACK = "HELD_BACK"  # owned, but strict ordering holds it back until old shards drain
    REVOKING = "REVOKING"  # its owner is giving it up (ack only)
    UNASSIGNED = "UNASSIGNED"  # no member holds it
    DRAINED = "DRAINED"  # an old version's shard this group has finished


def shard_assignment(
    group: Group, topology: Topology, shard: Shard, owners: dict[Shard, str] | None = None
) -> ShardAssignment:
    """``owners``: ``group.owners()``, when the caller already has it (a table of every shard)."""
    if shard in group.drained:
        return ShardAssignment.DRAINED
    owner = (owners if owners is not None else group.owners()).get(shard)
    if owner is None:
        return ShardAssignment.UNASSIGNED
    if shard in group.members[owner].revoking:
        return ShardAssignment.REVOKING
    return ShardAssignment.READABLE if readable(group, topology, shard) else ShardAssignment.HELD_BACK


def group_state(group: Group) -> GroupState:
    live = list(group.live_members())
    if not live:
        return GroupState.EMPTY
    # Every live member owns exactly its target: its epoch may be older than the assignment epoch when
    # the bumps since it last changed left its target alone (section 4).
    empty: frozenset[Shard] = frozenset()
    converged = all(settled(m, group.target.get(m.member_id, empty)) for m in live)
    return GroupState.STABLE if converged else GroupState.RECONCILING


def _member_view(group: Group, member: Member, now_ms: int) -> dict[str, object]:
    target = group.target.get(member.member_id, frozenset())
    return {
        "member_id": member.member_id,
        "state": member.state.value,
        "member_epoch": member.member_epoch,
        "previous_epoch": member.previous_epoch,
        "lease_remaining_ms": max(0, member.lease_deadline_ms - now_ms) if member.state.is_live else 0,
        "capacity": member.capacity,
        "effective_concurrency": group.effective_concurrency(member),
        "current_assignment": [
            {"shard": str(s), "assignment_epoch": e} for s, e in sorted(member.assigned.items())
        ],
        "target_assignment": (
            [str(s) for s in sorted(target)]
            if member.state.is_live or member.held_until_ms is not None
            else []
        ),
        "revoking": [str(s) for s in sorted(member.revoking)],
        "revocation_deadline_ms": member.revocation_deadline_ms,
        "client": {
            "host": member.client.host,
            "pid": member.client.pid,
            "listener": member.client.listener,
            "version": member.client.version,
        },
        "joined_at_ms": member.joined_at_ms,
        "last_heartbeat_ms": member.last_heartbeat_ms,
        "ended_at_ms": member.ended_at_ms,
        "end_reason": member.end_reason.value if member.end_reason else None,
        "owner": member.owner,
        "instance_id": member.instance_id,
        "held_until_ms": member.held_until_ms,
    }


def _migration_view(migration: Migration | None, state: PrefixState) -> dict[str, object] | None:
    if migration is None:
        return None
    old = state.topology.version(migration.from_version)
    old_shards = old.shards() if old is not None else ()
    return {
        **migration_fields(migration),
        "active": migration.active,
        "drained": {
            name: [str(s) for s in old_shards if s in g.drained or not migration.active]
            for name, g in state.groups.items()
        },
        "shards_to_drain": len(old_shards),
    }


def version_view(v: RoutingVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "shard_count": v.shard_count,
        "state": v.state.value,
        "created_at_ms": v.created_at_ms,
        "sealed_at_ms": v.sealed_at_ms,
        "retired_at_ms": v.retired_at_ms,
    }


def migration_fields(m: Migration) -> dict[str, Any]:
    return {
        "from_version": m.from_version,
        "to_version": m.to_version,
        "ordering": m.ordering.value,
        "started_at_ms": m.started_at_ms,
        "completed_at_ms": m.completed_at_ms,
    }


def retention_view(policy: RetentionPolicy) -> dict[str, Any]:
    """The policy as operators see it; ``mode`` is always ``acked`` (the caps are opt-ins on top)."""
    return {
        "mode": "acked",
        "max_age_ms": policy.max_age_ms,
        "max_len": policy.max_len,
        "retired_grace_ms": policy.retired_grace_ms,
    }


def retention_from_view(view: dict[str, Any] | None) -> RetentionPolicy:
    """The inverse of :func:`retention_view`; ``None`` (a document from before retention) = defaults."""
    if view is None:
        return RetentionPolicy()
    return RetentionPolicy(
        max_age_ms=view.get("max_age_ms"),
        max_len=view.get("max_len"),
        retired_grace_ms=view.get("retired_grace_ms", 0),
    )


def topology_from_views(
    stream_prefix: str,
    versions: list[dict[str, Any]],
    migration: dict[str, Any] | None,
    retention: dict[str, Any] | None = None,
) -> Topology:
    """The inverse of :func:`version_view` / :func:`migration_fields` / :func:`retention_view` (extra
    keys are ignored)."""
    return Topology(
        retention=retention_from_view(retention),
        stream_prefix=stream_prefix,
        versions=tuple(
            RoutingVersion(
                version=v["version"],
                shard_count=v["shard_count"],
                state=VersionState(v["state"]),
                created_at_ms=v["created_at_ms"],
                sealed_at_ms=v["sealed_at_ms"],
                retired_at_ms=v["retired_at_ms"],
            )
            for v in versions
        ),
        migration=None
        if migration is None
        else Migration(
            from_version=migration["from_version"],
            to_version=migration["to_version"],
            ordering=OrderingMode(migration["ordering"]),
            started_at_ms=migration["started_at_ms"],
            completed_at_ms=migration["completed_at_ms"],
        ),
    )


def topology_view(topology: Topology) -> dict[str, object]:
    return {
        "stream_prefix": topology.stream_prefix,
        "active_version": topology.active_version.version,
        "shard_count": topology.active_version.shard_count,
        "versions": [version_view(v) for v in topology.versions],
        "sealed_versions": [v.version for v in topology.versions if v.state is VersionState.DRAINING],
    }


def describe_group(state: PrefixState, consumer_group: str, now_ms: int) -> dict[str, object]:
    """Everything an operator needs: epochs, both assignments, revocation and migration progress."""
    group = state.groups[consumer_group]
    owners = group.owners()
    held = {m.member_id: m for m in group.held_members()}
    pending = [
        {"shard": str(s), "revoked_by": m.member_id, "deadline_ms": m.revocation_deadline_ms}
        for m in group.live_members()
        for s in sorted(m.revoking)
    ]
    unreleased = [
        {"shard": str(s), "wanted_by": member_id, "owned_by": owners[s]}
        for member_id, target in sorted(group.target.items())
        for s in sorted(target)
        if owners.get(s, member_id) != member_id
    ]
    return {
        "stream_prefix": group.stream_prefix,
        "consumer_group": group.consumer_group,
        "state": group_state(group).value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "config": {
            "max_concurrency": group.config.max_concurrency,
            "lease_ttl_ms": group.config.lease_ttl_ms,
            "heartbeat_interval_ms": group.config.heartbeat_interval_ms,
            "revocation_timeout_ms": group.config.revocation_timeout_ms,
            "max_members": group.config.max_members,
        },
        "topology": topology_view(state.topology),
        "members": [
            _member_view(group, m, now_ms) for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
        # Every live member, an empty list for those whose target holds no shard (not listed in it).
        "target_assignment": {
            m.member_id: [str(s) for s in sorted(group.target.get(m.member_id, ()))]
            for m in sorted(group.live_members(), key=lambda m: m.member_id)
        },
        "pending_revocations": pending,
        "unreleased_shards": unreleased,
        # In a live member's target, owned by nobody: it is granted on that member's next heartbeat.
        "awaiting_pickup": [
            str(s)
            for s in sorted(s for m, t in group.target.items() if m not in held for s in t if s not in owners)
        ],
        # Static members whose target is held for their instance id (docs/protocol.md section 3).
        "held_instances": [
            {
                "instance_id": m.instance_id,
                "member_id": m.member_id,
                "held_until_ms": m.held_until_ms,
                "shards": [str(s) for s in sorted(group.target.get(m.member_id, ()))],
            }
            for m in sorted(held.values(), key=lambda m: m.member_id)
        ],
        "migration": _migration_view(state.topology.migration, state),
    }
