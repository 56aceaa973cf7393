"""The uniform, sticky assignor.

Theory of operation
-------------------
Input: the live member ids, the assignable shards, and the previous target. Output: a new target in
which (1) every assignable shard has exactly one member, (2) shard counts of any two members differ by
at most one, and (3) as few shards as possible change member.

With ``S`` shards and ``M`` members every member's quota is ``S // M``, and ``S % M`` members get one
more. To move as little as possible, the extra slots go to the members that already hold the most of
their previous shards (ties broken by member id, so the result is deterministic). Each member keeps up to
its quota of its previous shards; the rest of the shards, in shard order, fill the members below quota.
A shard therefore moves only when its member is gone or holds more than its quota.

The target lists only the members that get shards: in a group larger than its shard count most get
none, and a target with an entry per member would make every bump, and every read and write of the
group's header, cost time in proportion to the group rather than to its shards.

Worker capacity is deliberately not an input: ``runtime_max_concurrency`` sizes the thread pool inside
one member and is never an assignment weight (docs/consumers.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice

from .model import Shard


def assign(
    member_ids: Iterable[str],
    shards: Iterable[Shard],
    previous: Mapping[str, frozenset[Shard]],
) -> dict[str, frozenset[Shard]]:
    """The new target: only the members that get shards are listed (in member-id order); every other
    member's target is empty. ``previous`` may list empty targets too; they are ignored."""
    live = dict.fromkeys(member_ids)  # distinct, in the order they come; a membership test in O(1)
    all_shards = frozenset(shards)
    if not live or not all_shards:
        return {}
    base, extra = divmod(len(all_shards), len(live))

    # What each member could keep: its previous shards that still exist, not claimed twice (members in
    # id order). In a group larger than its shard count most members keep nothing: the work here is
    # per member with previous shards, not per member.
    keepable: dict[str, list[Shard]] = {}
    claimed: set[Shard] = set()
    for member_id in sorted(m for m, had in previous.items() if had and m in live):
        mine = sorted(s for s in previous[member_id] if s in all_shards and s not in claimed)
        if mine:
            claimed.update(mine)
            keepable[member_id] = mine

    # Ranked by what they keep (most first), ties and the members keeping nothing in id order; the
    # first ``extra`` get one shard more than ``base``. Members keeping nothing are listed (sorted) only
    # when some of them get a shard.
    by_stickiness = sorted(keepable, key=lambda m: (-len(keepable[m]), m))
    if base > 0 or len(by_stickiness) < extra:
        wanted = len(live) if base > 0 else extra
        others = (m for m in sorted(live) if m not in keepable)
        by_stickiness += islice(others, wanted - len(by_stickiness))
    quota = {m: q for rank, m in enumerate(by_stickiness) if (q := base + (1 if rank < extra else 0)) > 0}

    result: dict[str, list[Shard]] = {m: keepable.get(m, [])[:q] for m, q in quota.items()}
    taken = {s for kept in result.values() for s in kept}
    free = iter(sorted(all_shards - taken))
    for member_id in sorted(quota):
        need = quota[member_id] - len(result[member_id])
        if need > 0:
            result[member_id].extend(next(free) for _ in range(need))
    return {m: frozenset(result[m]) for m in sorted(result) if result[m]}
