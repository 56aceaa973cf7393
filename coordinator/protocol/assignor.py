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

Worker capacity is deliberately not an input: ``runtime_max_concurrency`` sizes the thread pool inside
one member and is never an assignment weight (mission goal 6).
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
    # Distinct ids, sorted: dict.fromkeys keeps the order they come in (the group's members are in id
    # order already), which the sort then merely confirms; a set would scramble it.
    members = sorted(dict.fromkeys(member_ids))
    all_shards = frozenset(shards)
    if not members:
        return {}
    base, extra = divmod(len(all_shards), len(members))
    nothing: frozenset[Shard] = frozenset()
    # In a group larger than its shard count most members get nothing: the work below is per member
    # that keeps or gets a shard; the others only appear in the result (in id order, as every member).
    out = dict.fromkeys(members, nothing)

    # What each member could keep: its previous shards that still exist, not claimed twice (members in
    # id order). Members without previous shards keep nothing and are not listed.
    keepable: dict[str, list[Shard]] = {}
    claimed: set[Shard] = set()
    for member_id in sorted(m for m, had in previous.items() if had and m in out):
        mine = sorted(s for s in previous[member_id] if s in all_shards and s not in claimed)
        if mine:
            claimed.update(mine)
            keepable[member_id] = mine

    # Ranked by what they keep (most first), ties and the members keeping nothing in id order; the
    # first ``extra`` get one shard more than ``base``.
    by_stickiness = sorted(keepable, key=lambda m: (-len(keepable[m]), m))
    if base > 0 or len(by_stickiness) < extra:
        wanted = len(members) if base > 0 else extra
        by_stickiness += islice((m for m in members if m not in keepable), wanted - len(by_stickiness))
    quota = {m: q for rank, m in enumerate(by_stickiness) if (q := base + (1 if rank < extra else 0)) > 0}

    result: dict[str, list[Shard]] = {m: keepable.get(m, [])[:q] for m, q in quota.items()}
    taken = {s for kept in result.values() for s in kept}
    free = iter(sorted(all_shards - taken))
    for member_id in sorted(quota):
        need = quota[member_id] - len(result[member_id])
        if need > 0:
            result[member_id].extend(next(free) for _ in range(need))
    for member_id, mine in result.items():
        if mine:
            out[member_id] = frozenset(mine)
    return out
