"""What a command changed, as records: the core says it; nobody works it out by comparing states.

Theory of operation
-------------------
Every function of the core that changes the state appends a record of the change, where it makes it, to
the ``changes`` list it is given (Kafka's group coordinator appends ``CoordinatorRecord``s the same way
and returns them with the response). :func:`coordinator.protocol.commands.apply` returns them in its
``Outcome``; the store turns them into the documents and derived fields it writes
(``coordinator/store/commit_plan.py``), and writes nothing the records do not name.

A record names what changed, not its new value: the new value is in the outcome's state. A record is
appended exactly when the core puts a new value in place (a new ``Member`` object, a new target, a new
topology), never when it leaves one as it is: a member is named by ``MemberChanged`` if and only if the
command replaced, added or ended it. One command may change a thing more than once (a batch of
heartbeats of one group: a member joins, another leaves, its target moves back): the records then name
it more than once, or name a change that the later steps undid; the store writes what the final state
holds.

Records are frozen values and the lists are appended to only: nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopologyChanged:
    """The stream prefix's routing versions, migration or retention policy changed (or it is new)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCreated:
    """A new group: the store writes all of it, and the topology's list of groups."""

    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDeleted:
    """The group is gone: the store deletes all of it, and lists it no more."""

    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupBumped:
    """A new group epoch and a target computed at it (group.bump). ``targets_moved``: the members whose
    target entry is not what it was before this bump (the joiner's, those that gave up or gained shards);
    every other member's target is the same. In proportion to the shards, not to the members."""

    consumer_group: str
    targets_moved: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfigChanged:
    """The group's config changed: every member's response shows it (max_concurrency)."""

    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainedChanged:
    """The group's drained shards changed: every member's shards may be readable or not."""

    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberChanged:
    """The member was added, replaced (a new incarnation) or changed (renewed, reconciled, a revocation
    clock started or stopped, ended): a new ``Member`` value."""

    consumer_group: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved:
    """The (ended) member is forgotten."""

    consumer_group: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSet:
    """The member's lease was set (a renewal, a join); the member is also named by ``MemberChanged``."""

    consumer_group: str
    member_id: str
    deadline_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired:
    """The member was ended because its lease, as read, had ended: decided on a lease read at load time,
    so the store commits it only if the lease has still ended (the member did not renew meanwhile)."""

    consumer_group: str
    member_id: str


Change = (
    TopologyChanged
    | GroupCreated
    | GroupDeleted
    | GroupBumped
    | GroupConfigChanged
    | DrainedChanged
    | MemberChanged
    | MemberRemoved
    | LeaseSet
    | LeaseExpired
)
