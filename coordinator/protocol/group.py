"""Group-level operations: heartbeat (join / renew / acknowledge / leave), fencing, target computation.

Every function here is pure: it takes a :class:`Group` (and the stream prefix's :class:`Topology`)
plus ``now_ms`` and returns a new group, or raises a :class:`CoordinatorError` having changed nothing
that the caller keeps. Each change it makes is also appended, where it is made, to the ``changes`` list
it is given (changes.py): the store writes what those records name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .assignor import assign
from .changes import Change, GroupBumped, LeaseExpired, LeaseSet, MemberChanged, MemberRemoved
from .errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    GroupMaxSizeReached,
    InvalidRequest,
    MemberIdNotOwned,
    StaleJoin,
    UnknownMemberId,
)
from .model import (
    MAX_CAPACITY,
    MAX_SHARD_COUNT,
    ClientInfo,
    EndReason,
    Group,
    Member,
    MemberState,
    Shard,
    Topology,
    require_int_in_range,
    validate_instance_id,
    validate_member_id,
)
from .reconciliation import reconcile
from .states import MemberEvent, allowed_next, check_transition
from .static import hold, raise_if_unreleased, release_due_holds, replaced_by, take_over

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# A static member's temporary leave (KIP-848's -2): it ends, and its target is held for its instance id
# (static.py). From a member without an instance id it is a plain leave.
TEMPORARY_LEAVE_EPOCH = -2
# MemberState.is_live inlined where every member of a large group is looked at (bump): a property call
# per member costs about as much as the rest of the scan.
_EXPIRED, _LEFT = MemberState.EXPIRED, MemberState.LEFT


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    member_id: str
    member_epoch: int
    # The shards the member still holds; None means "not reported" (no revocation is acknowledged).
    owned: frozenset[Shard] | None = None
    # The member's worker capacity (runtime_max_concurrency); required on join, None = unchanged.
    capacity: int | None = None
    client: ClientInfo | None = None
    # Who sends it (the edge's credential identity); None: not checked (internal callers, tests).
    owner: str | None = None
    # Joins only: the member's count of its own joins (a retried join sends the same number, a rejoin
    # after a fence the next). None: not sent (a join then always starts a new incarnation).
    join_seq: int | None = None
    # Joins only: the static member's instance id (docs/protocol.md section 3, "Static membership").
    instance_id: str | None = None

    def validated(self) -> Heartbeat:
        validate_member_id(self.member_id)
        require_int_in_range(self.member_epoch, "member_epoch", TEMPORARY_LEAVE_EPOCH, 2**53)
        if self.instance_id is not None:  # read by joins only; ignored on every other heartbeat
            validate_instance_id(self.instance_id)
        if self.capacity is not None:
            require_int_in_range(self.capacity, "capacity", 1, MAX_CAPACITY)
        elif self.member_epoch == JOIN_EPOCH:
            raise InvalidRequest("a join (member_epoch 0) must report capacity", field="capacity")
        if self.owned is not None and len(self.owned) > 2 * MAX_SHARD_COUNT:
            raise InvalidRequest(f"owned lists at most {2 * MAX_SHARD_COUNT} shards", field="owned")
        if self.join_seq is not None:  # read by joins only; ignored on every other heartbeat
            require_int_in_range(self.join_seq, "join_seq", 0, 2**53)
        return self


# --------------------------------------------------------------------------------------------------
# Target assignment


def assignable_shards(group: Group, topology: Topology) -> frozenset[Shard]:
    """The active version's shards plus the draining versions' shards this group has not drained."""
    active = frozenset(topology.active_version.shards())
    draining = frozenset(s for v in topology.draining_versions for s in v.shards())
    return active | (draining - group.drained)


def readable(group: Group, topology: Topology, shard: Shard) -> bool:
    """False while strict ordering holds ``shard`` back until the old shards it depends on drain."""
    return not (topology.blocked_by(shard) - group.drained)


def bump(
    group: Group,
    topology: Topology,
    *,
    changes: list[Change],
    joining: str | None = None,
    was: Mapping[str, frozenset[Shard]] | None = None,
) -> Group:
    """A change of the assignor's inputs: next group epoch and a target computed at it.

    ``joining`` names a member being added in this step (it is not live until it has reconciled).
    ``was``: the target the record of the bump compares with, when the step changed the target before
    the bump (a static member's take-over moved a held target to the joining id); the group's own else.
    The assignor divides the shards among the live members and the held ones (static.py).
    """
    epoch = group.group_epoch + 1
    live = [
        mid
        for mid, m in group.members.items()
        if (m.state is not _EXPIRED and m.state is not _LEFT) or m.held_until_ms is not None
    ]
    if joining is not None:
        live.append(joining)
    if was is None:
        was = group.target
    target = assign(live, assignable_shards(group, topology), group.target)
    # The target lists only the members with shards (model.Group.target): this is in proportion to the
    # shards, not to the members.
    moved = frozenset(m for m in was.keys() | target.keys() if was.get(m) != target.get(m))
    changes.append(GroupBumped(consumer_group=group.consumer_group, targets_moved=moved))
    return replace(group, group_epoch=epoch, assignment_epoch=epoch, target=target)


# --------------------------------------------------------------------------------------------------
# Fencing a member (leave, lease expiry, revocation timeout, replaced by a rejoin)


def end_member(
    group: Group, member_id: str, event: MemberEvent, reason: EndReason, now_ms: int, *, changes: list[Change]
) -> Group:
    """Move a live member to its terminal state and release all its shards at once (no bump)."""
    member = group.members[member_id]
    new_state = next(iter(allowed_next(member.state, event)))
    ended = replace(
        member,
        state=check_transition(member.state, event, new_state),
        assigned={},
        revoking=frozenset(),
        revocation_deadline_ms=None,
        ended_at_ms=now_ms,
        end_reason=reason,
    )
    changes.append(MemberChanged(consumer_group=group.consumer_group, member_id=member_id))
    return replace(group, members={**group.members, member_id: ended})


# --------------------------------------------------------------------------------------------------
# Heartbeat


def heartbeat(
    group: Group, topology: Topology, hb: Heartbeat, now_ms: int, *, changes: list[Change]
) -> Group:
    """Apply one member heartbeat. Raises (changing nothing) when it must be rejected: what it appended
    to ``changes`` by then is to be dropped with the group it was deciding."""
    hb = hb.validated()
    _raise_if_not_owner(group, hb)
    if hb.member_epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
        return _leave(group, topology, hb, now_ms, changes)
    if hb.member_epoch == JOIN_EPOCH:
        return _join(group, topology, hb, now_ms, changes)
    member = _raise_if_fenced(group, hb, now_ms)
    member = replace(
        member,
        lease_deadline_ms=now_ms + group.config.lease_ttl_ms,
        last_heartbeat_ms=now_ms,
        client=hb.client or member.client,
        # A member joined before ownership was recorded is adopted by the credential it heartbeats with.
        owner=member.owner or hb.owner or "",
    )
    capacity_changed = hb.capacity is not None and hb.capacity != member.capacity
    if capacity_changed:
        assert hb.capacity is not None
        member = replace(member, capacity=hb.capacity)
    group = replace(group, members={**group.members, member.member_id: member})
    _record_member(group, member, changes)
    if capacity_changed:
        # Capacity is group metadata (it sets the member's effective concurrency), never a weight:
        # the new target is computed, but the assignor does not look at it.
        group = bump(group, topology, changes=changes)
    return _reconcile_member(group, hb.member_id, MemberEvent.HEARTBEAT, hb.owned, now_ms, changes)


def _record_member(group: Group, member: Member, changes: list[Change]) -> None:
    """A member put in place with a lease set (a renewal, a join)."""
    name, mid = group.consumer_group, member.member_id
    changes.append(MemberChanged(consumer_group=name, member_id=mid))
    changes.append(LeaseSet(consumer_group=name, member_id=mid, deadline_ms=member.lease_deadline_ms))


def _raise_if_not_owner(group: Group, hb: Heartbeat) -> None:
    """A member id belongs to the credential that joined it, for as long as the group remembers it
    (ended members included: a fenced member's rejoin is its own, not another credential's take-over)."""
    member = group.members.get(hb.member_id)
    if member is None or not member.owner or hb.owner is None or hb.owner == member.owner:
        return
    raise MemberIdNotOwned(
        f"member {hb.member_id!r} was joined by another credential: only that credential may heartbeat, "
        "leave or rejoin it (use a member id of your own)",
        member_id=hb.member_id,
    )


def _raise_if_fenced(group: Group, hb: Heartbeat, now_ms: int) -> Member:
    member = group.members.get(hb.member_id)
    if member is not None and (holder := replaced_by(group, member)) is not None:
        raise FencedInstanceId(
            f"member {hb.member_id!r} was replaced by member {holder.member_id!r}, which joined with its "
            f"instance_id {member.instance_id!r}: it must drop all its shards (its rejoin with that "
            "instance id is refused while the other is live)",
            member_id=hb.member_id,
            instance_id=member.instance_id,
        )
    if member is None:
        raise UnknownMemberId(
            f"member {hb.member_id!r} is not in group {group.consumer_group!r}: it must drop all its "
            "shards and rejoin with member_epoch 0",
            member_id=hb.member_id,
        )
    allowed_next(member.state, MemberEvent.HEARTBEAT)  # raises FencedMemberEpoch for terminal states
    if member.lease_deadline_ms <= now_ms:
        raise FencedMemberEpoch(
            f"the lease of member {hb.member_id!r} ended at {member.lease_deadline_ms} (now {now_ms}): it "
            "must drop all its shards and rejoin with member_epoch 0",
            member_id=hb.member_id,
        )
    if hb.member_epoch == member.member_epoch:
        return member
    # The response that moved the member to its current epoch may have been lost: accept the previous
    # epoch if the member claims nothing beyond what it is assigned now.
    if (
        hb.member_epoch == member.previous_epoch
        and hb.owned is not None
        and hb.owned <= frozenset(member.assigned)
    ):
        return member
    raise FencedMemberEpoch(
        f"member {hb.member_id!r} sent epoch {hb.member_epoch}, but its epoch is {member.member_epoch}: it "
        "must drop all its shards and rejoin with member_epoch 0",
        member_id=hb.member_id,
        member_epoch=member.member_epoch,
        received_epoch=hb.member_epoch,
    )


def _join(group: Group, topology: Topology, hb: Heartbeat, now_ms: int, changes: list[Change]) -> Group:
    existing = group.members.get(hb.member_id)
    if existing is not None and hb.join_seq is not None and existing.join_seq is not None:
        if hb.join_seq < existing.join_seq:
            raise StaleJoin(
                f"a join of member {hb.member_id!r} with join_seq {hb.join_seq} arrived after its join "
                f"{existing.join_seq}: a delayed retry, refused so that it cannot fence the live member",
                member_id=hb.member_id,
                join_seq=hb.join_seq,
                current_join_seq=existing.join_seq,
            )
        if hb.join_seq == existing.join_seq and existing.state.is_live:
            return group  # the same join again (its response was lost): the member as it is now
    if hb.instance_id is not None:
        # Refused (UNRELEASED_INSTANCE_ID, nothing changed) while another live member holds it; a holder
        # whose lease has ended is expired here and held, so that the join takes its target over.
        lapsed = raise_if_unreleased(group, hb.instance_id, hb.member_id, now_ms)
        if lapsed is not None:
            mid = lapsed.member_id
            group = end_member(
                group, mid, MemberEvent.LEASE_EXPIRED, EndReason.LEASE_EXPIRED, now_ms, changes=changes
            )
            changes.append(LeaseExpired(consumer_group=group.consumer_group, member_id=mid))
            group = hold(group, mid, now_ms, changes=changes)
    if existing is not None and existing.state.is_live:
        # A new incarnation (or a join whose response was lost) uses a live member's id: fence the old
        # one first, so that nothing it still reads with its old epoch is accepted any more.
        group = end_member(
            group, hb.member_id, MemberEvent.FENCE, EndReason.REJOINED, now_ms, changes=changes
        )
        existing = group.members[hb.member_id]
    was = group.target
    holder = group.instance_holder(hb.instance_id) if hb.instance_id is not None else None
    if holder is not None and holder.held_until_ms is not None:
        group = take_over(group, holder, hb.member_id, changes=changes)
    # Counted only when it may matter: the members kept (ended ones too, for a while) are not fewer.
    maximum = group.config.max_members
    if len(group.members) >= maximum and (live_count := sum(1 for _ in group.live_members())) >= maximum:
        raise GroupMaxSizeReached(
            f"group {group.consumer_group!r} already has {live_count} members, its maximum",
            max_members=group.config.max_members,
        )
    assert hb.capacity is not None  # validated
    member = Member(
        member_id=hb.member_id,
        # An unknown id is treated as one that LEFT: JOIN is defined from the terminal states only.
        state=existing.state if existing is not None else MemberState.LEFT,
        member_epoch=JOIN_EPOCH,
        previous_epoch=LEAVE_EPOCH,
        assigned={},
        lease_deadline_ms=now_ms + group.config.lease_ttl_ms,
        capacity=hb.capacity,
        client=hb.client or ClientInfo(),
        joined_at_ms=now_ms,
        last_heartbeat_ms=now_ms,
        owner=hb.owner or (existing.owner if existing is not None else ""),
        join_seq=hb.join_seq,
        instance_id=hb.instance_id,
    )
    group = replace(group, members={**group.members, hb.member_id: member})
    _record_member(group, member, changes)
    group = bump(group, topology, changes=changes, joining=hb.member_id, was=was)
    return _reconcile_member(group, hb.member_id, MemberEvent.JOIN, frozenset(), now_ms, changes)


def _leave(group: Group, topology: Topology, hb: Heartbeat, now_ms: int, changes: list[Change]) -> Group:
    member_id = hb.member_id
    member = group.members.get(member_id)
    if member is None or not member.state.is_live:
        return group  # leaving twice, or after being fenced, is a no-op
    group = end_member(group, member_id, MemberEvent.LEAVE, EndReason.LEFT, now_ms, changes=changes)
    if hb.member_epoch == TEMPORARY_LEAVE_EPOCH and member.instance_id is not None:
        # A static member's temporary leave: its target is held for its instance id (no bump).
        return hold(group, member_id, now_ms, changes=changes)
    return bump(group, topology, changes=changes)


def _reconcile_member(
    group: Group,
    member_id: str,
    event: MemberEvent,
    owned: frozenset[Shard] | None,
    now_ms: int,
    changes: list[Change],
) -> Group:
    member = group.members[member_id]
    target = group.target.get(member_id, frozenset())
    # reconcile() looks up the owners of the shards the member is to gain only: when there are none
    # (most heartbeats of a large group), the walk of every member that builds the table is skipped.
    owners = {} if target.issubset(member.assigned) else group.owners()
    updated = reconcile(
        member,
        event=event,
        target=target,
        target_epoch=group.assignment_epoch,
        owned_reported=owned,
        owners=owners,
        now_ms=now_ms,
        revocation_timeout_ms=group.config.revocation_timeout_ms,
    )
    if updated is member:
        return group
    changes.append(MemberChanged(consumer_group=group.consumer_group, member_id=member_id))
    return replace(group, members={**group.members, member_id: updated})


# --------------------------------------------------------------------------------------------------
# Expiry (driven by the tick)


def start_revocation_clocks(group: Group, now_ms: int, *, changes: list[Change]) -> Group:
    """Start the revocation timeout of every live member that holds a shard its target no longer has
    and has not heard of it yet (it has not heartbeated since the bump that moved the shard: with the
    API unreachable it may renew its lease in Redis for as long as it likes, section 5). Stop it for
    one that no longer owes anything. A member in UNREVOKED_SHARDS keeps the deadline its heartbeat
    set; reconciliation keeps a deadline started here (section 5)."""
    changed: dict[str, Member] = {}
    for member in group.live_members():
        if not _revocation_clock_moves(group, member):
            continue
        if member.revocation_deadline_ms is None:
            deadline = now_ms + group.config.revocation_timeout_ms
            changed[member.member_id] = replace(member, revocation_deadline_ms=deadline)
        else:
            changed[member.member_id] = replace(member, revocation_deadline_ms=None)
    name = group.consumer_group
    changes.extend(MemberChanged(consumer_group=name, member_id=mid) for mid in changed)
    return replace(group, members={**group.members, **changed}) if changed else group


def _revocation_clock_moves(group: Group, member: Member) -> bool:
    """The next tick starts this live member's revocation clock (it holds a shard its target no longer
    has, and has no deadline), or stops it (it owes nothing any more)."""
    if member.state is MemberState.UNREVOKED_SHARDS:
        return False
    target = group.target.get(member.member_id)
    owes = not target.issuperset(member.assigned) if target else bool(member.assigned)
    return owes == (member.revocation_deadline_ms is None)


@dataclass(frozen=True, slots=True)
class TickSchedule:
    """What a tick must know of a group to tell, without reading it, that it has nothing to do yet
    (leases apart: the store indexes them by deadline). See :func:`tick_due`."""

    # The earliest revocation deadline of a live member or end of a static member's hold (static.py);
    # 0 when the next tick must start or stop a revocation clock; None when none of these.
    next_deadline_ms: int | None
    ended: int  # ended members still kept (the tick forgets them by age and beyond a count)
    oldest_ended_ms: int | None


def revocation_schedule_ms(group: Group, member: Member) -> int | None:
    """When a tick must next look at this member for its revocation: 0 when its revocation clock must
    start or stop (now), its revocation deadline when it has one, None when neither (or not live). It
    depends on the member and the group's target only."""
    if not member.state.is_live:
        return None
    if _revocation_clock_moves(group, member):
        return 0
    return member.revocation_deadline_ms


def tick_schedule(group: Group) -> TickSchedule:
    at = [t for m in group.members.values() if (t := revocation_schedule_ms(group, m)) is not None]
    ended = ended_schedule(group)
    if ended.next_deadline_ms is not None:
        at.append(ended.next_deadline_ms)
    return replace(ended, next_deadline_ms=min(at, default=None))


def ended_schedule(group: Group) -> TickSchedule:
    """:func:`tick_schedule` without the revocation deadlines: what it says of the ended members only
    (their count and oldest end, and as ``next_deadline_ms`` when the first hold of a static member
    ends, None if none is held). The store keeps the revocation deadlines per member, apart
    (docs/store.md), and this in the group's ``ts:`` field."""
    # Held static members are not forgotten while held: their hold ends first.
    ended = [
        m.ended_at_ms for m in group.members.values() if m.ended_at_ms is not None and m.held_until_ms is None
    ]
    holds = [m.held_until_ms for m in group.members.values() if m.held_until_ms is not None]
    return TickSchedule(
        next_deadline_ms=min(holds, default=None), ended=len(ended), oldest_ended_ms=min(ended, default=None)
    )


def tick_due(
    schedule: TickSchedule,
    earliest_lease_ms: int | None,
    now_ms: int,
    retention_ms: int,
    max_ended_members: int,
    migrating: bool,
) -> bool:
    """Whether a tick at ``now_ms`` may change the group (expire, time out, start or stop a revocation
    clock, forget ended members) or its prefix (``migrating``: draining versions to observe and
    retire). ``earliest_lease_ms``: the earliest lease deadline of a live member (None: none live).
    False means a tick at ``now_ms`` changes nothing: it need not read the group."""
    return (
        migrating
        or (earliest_lease_ms is not None and earliest_lease_ms <= now_ms)
        or (schedule.next_deadline_ms is not None and schedule.next_deadline_ms <= now_ms)
        or schedule.ended > max_ended_members
        or (schedule.oldest_ended_ms is not None and schedule.oldest_ended_ms + retention_ms <= now_ms)
    )


def expire_members(
    group: Group, topology: Topology, now_ms: int, *, changes: list[Change]
) -> tuple[Group, list[str]]:
    """Fence members whose lease ended or whose revocation timed out, and end the holds of static members
    that have reached their time; one bump if any of that moves a target. A static member whose lease
    ended is held (static.py): its target does not move, so it alone does not bump."""
    group = start_revocation_clocks(group, now_ms, changes=changes)
    fenced: list[str] = []
    moves = False
    for member in list(group.live_members()):
        mid = member.member_id
        if member.lease_deadline_ms <= now_ms:
            event, reason = MemberEvent.LEASE_EXPIRED, EndReason.LEASE_EXPIRED
            group = end_member(group, mid, event, reason, now_ms, changes=changes)
            changes.append(LeaseExpired(consumer_group=group.consumer_group, member_id=mid))
            group = hold(group, mid, now_ms, changes=changes)
            moves = moves or member.instance_id is None
            fenced.append(mid)
        elif member.revocation_deadline_ms is not None and member.revocation_deadline_ms <= now_ms:
            event, reason = MemberEvent.REVOCATION_TIMEOUT, EndReason.REVOCATION_TIMEOUT
            group = end_member(group, mid, event, reason, now_ms, changes=changes)
            moves = True
            fenced.append(mid)
    group, released = release_due_holds(group, now_ms, changes=changes)
    if moves or released:
        group = bump(group, topology, changes=changes)
    return group, fenced


def collect_garbage(
    group: Group,
    now_ms: int,
    retention_ms: int,
    max_ended_members: int | None = None,
    *,
    changes: list[Change],
) -> tuple[Group, list[str]]:
    """Forget ended members: those that ended ``retention_ms`` ago or more, and beyond the
    ``max_ended_members`` most recently ended ones (kept for operators and so that a late heartbeat of a
    fenced member is answered FENCED_MEMBER_EPOCH). The count cap bounds the group document under join /
    leave churn, which the age limit alone does not: 2,500 cycles within ten minutes are 2,500 members.
    """
    # A held static member is kept until its hold ends, whatever its age and the count (static.py).
    ended = [m for m in group.members.values() if m.ended_at_ms is not None and m.held_until_ms is None]
    gone = {
        m.member_id for m in ended if m.ended_at_ms is not None and m.ended_at_ms + retention_ms <= now_ms
    }
    if max_ended_members is not None:
        kept = [m for m in ended if m.member_id not in gone]
        # Newest first; equal end times are ordered by member id so that the choice is deterministic.
        kept.sort(key=lambda m: (-(m.ended_at_ms or 0), m.member_id))
        gone.update(m.member_id for m in kept[max_ended_members:])
    if not gone:
        return group, []
    members = {k: v for k, v in group.members.items() if k not in gone}
    name = group.consumer_group
    changes.extend(MemberRemoved(consumer_group=name, member_id=mid) for mid in sorted(gone))
    return replace(group, members=members), sorted(gone)
