"""Static membership: an instance id that keeps a member's shards across its restarts (KIP-345 / KIP-848's
``group.instance.id``). docs/protocol.md section 3, "Static membership", is the specification.

Theory of operation
-------------------
A member MAY join with an ``instance_id`` (a pod name, say): a name of the *place* it runs, which a new
process in that place, with a new member id, joins with again. At most one member of a group is the
instance id's *holder* at a time: a live member with that instance id, or an ended one that is *held*.

* **Held.** A static member that leaves with ``member_epoch -2`` (a temporary leave: a clean stop that
  expects to come back), or whose lease ends, ends as every member does (``LEFT`` / ``EXPIRED``: its
  shards are released at once, the data plane fences its id), but its *target* is held for it until
  ``held_until_ms`` = the end + the group's ``lease_ttl_ms`` (the session timeout, as in Kafka, where
  the static and dynamic session timeouts are one setting). No bump: nobody else's target moves, and
  the assignor keeps counting the held member (:func:`assignor_members`), so its shards are given to
  nobody else meanwhile.
* **Taken over.** A join with that instance id (any member id) takes the held target over
  (:func:`take_over`): the target entry moves to the new member id, the hold ends, and the join's bump
  computes the same target (the assignor is sticky), so the new member is granted exactly the shards
  the old one had, at a fresh epoch, and no other member's assignment moves.
* **Released.** A hold that reaches ``held_until_ms`` ends (:func:`release_due_holds`, run by the tick):
  the member is an ordinary ended member, and the tick's bump gives its shards to the others.
* **Refused.** A join with an instance id whose holder is a live member of another id, its lease still
  running, is refused with ``UNRELEASED_INSTANCE_ID`` and changes nothing: the live holder is never
  fenced by a second process given the same name, so two of them cannot fence each other in a loop.
  Once the holder's lease has ended (even before a tick has expired it), the join expires it first and
  takes over.

Every function here is pure and appends what it changes to ``changes`` (changes.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .changes import Change, MemberChanged
from .errors import UnreleasedInstanceId
from .model import Group, Member


def hold(group: Group, member_id: str, now_ms: int, *, changes: list[Change]) -> Group:
    """Hold the target of ``member_id``, just ended, for its instance id for one lease TTL. A member
    without an instance id is left as it is."""
    member = group.members[member_id]
    if member.instance_id is None or member.state.is_live:
        return group
    held = replace(member, held_until_ms=now_ms + group.config.lease_ttl_ms)
    changes.append(MemberChanged(consumer_group=group.consumer_group, member_id=member_id))
    return replace(group, members={**group.members, member_id: held})


def _unhold(group: Group, member: Member, changes: list[Change]) -> Group:
    changes.append(MemberChanged(consumer_group=group.consumer_group, member_id=member.member_id))
    return replace(group, members={**group.members, member.member_id: replace(member, held_until_ms=None)})


def release_due_holds(group: Group, now_ms: int, *, changes: list[Change]) -> tuple[Group, list[str]]:
    """End every hold that has reached its time; the caller bumps if any did (their shards move)."""
    due = [m for m in group.held_members() if m.held_until_ms is not None and m.held_until_ms <= now_ms]
    for member in due:
        group = _unhold(group, member, changes)
    return group, [m.member_id for m in due]


def take_over(group: Group, holder: Member, member_id: str, *, changes: list[Change]) -> Group:
    """A join of ``member_id`` with the instance id of ``holder``, an ended member whose target is held:
    the held target becomes ``member_id``'s and the hold ends. The caller adds the member and bumps."""
    group = _unhold(group, holder, changes)
    target = dict(group.target)
    shards = target.pop(holder.member_id, None)
    if shards:
        target[member_id] = shards
    return replace(group, target=target)


def raise_if_unreleased(group: Group, instance_id: str, member_id: str, now_ms: int) -> Member | None:
    """The live holder of ``instance_id`` (another member id) whose lease has ended: the join expires it
    and takes over. None when there is no live holder of another id. ``UnreleasedInstanceId`` (nothing
    changed) when there is one and its lease still runs."""
    holder = group.instance_holder(instance_id)
    if holder is None or holder.member_id == member_id or not holder.state.is_live:
        return None
    if holder.lease_deadline_ms <= now_ms:
        return holder
    raise UnreleasedInstanceId(
        f"instance_id {instance_id!r} is held by live member {holder.member_id!r} of group "
        f"{group.consumer_group!r} until its lease ends or it leaves: two processes may not share an "
        "instance id (give each its own), and a restarted one waits for its previous incarnation",
        instance_id=instance_id,
        member_id=holder.member_id,
        lease_deadline_ms=holder.lease_deadline_ms,
    )


def assignor_members(group: Group) -> Iterable[str]:
    """The member ids the assignor divides the shards among: the live members and the held ones."""
    return (mid for mid, m in group.members.items() if m.state.is_live or m.held_until_ms is not None)


def replaced_by(group: Group, member: Member) -> Member | None:
    """The live member that took the instance id of ``member`` (ended) over, if any."""
    if member.instance_id is None or member.state.is_live:
        return None
    holder = group.instance_holder(member.instance_id)
    return holder if holder is not None and holder.member_id != member.member_id else None
