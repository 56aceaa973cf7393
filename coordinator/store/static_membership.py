"""What static membership needs of the store (docs/protocol.md section 3, "Static membership").

A heartbeat's load reads only its own member's lease (docs/store.md, "Delta loads"): the others keep
the leases this store last saw. A join with an ``instance_id`` also decides on the lease of the
instance id's live holder (refused while it runs, expired and taken over once it has ended), and that
decision must be on the lease as it is now, renewals in Redis included: a stale lease would refuse a
join that should take over, or expire a holder that renewed (which the commit then refuses, again and
again). So such a load reads every lease of the group, as a tick does.
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.protocol.group import JOIN_EPOCH, Heartbeat


def leases_to_read(heartbeats: Sequence[Heartbeat]) -> list[str] | None:
    """The members whose leases a decision on ``heartbeats`` reads: their own, or every member's (None)
    when one of them is a join with an instance id."""
    if any(hb.member_epoch == JOIN_EPOCH and hb.instance_id is not None for hb in heartbeats):
        return None
    return [hb.member_id for hb in heartbeats]
