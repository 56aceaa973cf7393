"""Moving one member towards the group's target assignment (Kafka's ``CurrentAssignmentBuilder``).

Theory of operation
-------------------
The group's target says which shards each member should own at the assignment epoch. A member reaches
it in steps, one per heartbeat, and never in a way that lets two members own one shard:

1. Revoke first. If the member holds shards that are not in its target, it moves to
   ``UNREVOKED_SHARDS`` and *keeps its epoch*: its response lists only the shards it keeps, and the
   revoked ones stay counted as its own (``Member.revoking``) until a heartbeat's owned shards leave them
   out. Nothing new is granted in this step, so a member never gains while it still has to give up.
2. Then assign. Once nothing is left to revoke, the member moves to the target's epoch and receives every
   target shard that no other member owns. Shards that another member still owns (it is revoking them)
   are withheld: the member is ``UNRELEASED_SHARDS`` and gets them on a later heartbeat, once freed.
3. ``STABLE`` when it owns exactly its target.

A member's epoch moves only when its own assignment moves. One whose target did not change in a bump
(most members of a large group: a join changes the targets of a few members at most) is *settled*: it
stays ``STABLE`` at the epoch it has, and reconciliation leaves it alone. Kafka moves every member to
each new target assignment epoch; here the epoch is a fencing token of ownership, and moving it without
a change of ownership would only cost every member a full decision after every join (at 10,000 members,
that cost is what kept a group from forming: docs/protocol.md section 4).

Each newly granted shard records the member epoch at which it was granted (its assignment epoch). The
data plane accepts a read by member ``m`` at epoch ``e`` on shard ``s`` only if ``s`` is assigned to
``m`` and ``grant_epoch(s) <= e <= m.member_epoch``: a member whose response was lost can keep reading
what it had, and nobody can read with an epoch from before the shard was theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .model import Member, MemberState, Shard
from .states import MemberEvent, check_transition


def reconcile(
    member: Member,
    *,
    event: MemberEvent,
    target: frozenset[Shard],
    target_epoch: int,
    owned_reported: frozenset[Shard] | None,
    owners: Mapping[Shard, str],
    now_ms: int,
    revocation_timeout_ms: int,
) -> Member:
    """The member after one reconciliation step. ``owners`` maps each owned shard to its live owner."""
    if member.state is MemberState.UNREVOKED_SHARDS:
        if owned_reported is None or owned_reported & member.revoking:
            # Still holding (or not saying) what it must give up: wait, keep the epoch.
            nxt = member
        else:
            # Revocation acknowledged: the revoked shards are free from this moment.
            released = replace(member, revoking=frozenset(), revocation_deadline_ms=None)
            nxt = _next_assignment(released, target, target_epoch, owners, now_ms, revocation_timeout_ms)
    elif settled(member, target):
        nxt = member
    else:
        nxt = _next_assignment(member, target, target_epoch, owners, now_ms, revocation_timeout_ms)
    check_transition(member.state, event, nxt.state)
    return nxt


def settled(member: Member, target: frozenset[Shard]) -> bool:
    """True when reconciliation has nothing to do for ``member``: it is STABLE and owns exactly
    ``target`` (whatever its epoch and the target's)."""
    return member.state is MemberState.STABLE and member.assigned.keys() == target


def _next_assignment(
    member: Member,
    target: frozenset[Shard],
    target_epoch: int,
    owners: Mapping[Shard, str],
    now_ms: int,
    revocation_timeout_ms: int,
) -> Member:
    current = member.assigned
    kept = {s: e for s, e in current.items() if s in target}
    to_revoke = frozenset(current) - target
    if to_revoke:
        return replace(
            member,
            state=MemberState.UNREVOKED_SHARDS,
            assigned=kept,
            revoking=to_revoke,
            # The clock may already run: the tick starts it for a member that has not heartbeated
            # since the target moved its shard (group.start_revocation_clocks).
            revocation_deadline_ms=(
                member.revocation_deadline_ms
                if member.revocation_deadline_ms is not None
                else now_ms + revocation_timeout_ms
            ),
        )
    wanted = target - frozenset(current)
    free = {s for s in wanted if owners.get(s, member.member_id) == member.member_id}
    epoch_changed = target_epoch != member.member_epoch
    return replace(
        member,
        state=MemberState.UNRELEASED_SHARDS if wanted - free else MemberState.STABLE,
        member_epoch=target_epoch,
        previous_epoch=member.member_epoch if epoch_changed else member.previous_epoch,
        assigned={**kept, **{s: target_epoch for s in free}},
    )
