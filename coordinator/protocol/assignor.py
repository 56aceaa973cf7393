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

from .model import Shard


def assign(
    member_ids: Iterable[str],
    shards: Iterable[Shard],
    previous: Mapping[str, frozenset[Shard]],
) -> dict[str, frozenset[Shard]]:
    members = sorted(set(member_ids))
    all_shards = frozenset(shards)
    if not members:
        return {}
    base, extra = divmod(len(all_shards), len(members))

    # What each member could keep: its previous shards that still exist, not claimed twice.
    keepable: dict[str, list[Shard]] = {}
    claimed: set[Shard] = set()
    for member_id in members:
        had = previous.get(member_id)
        if not had:  # most members of a group larger than its shard count
            keepable[member_id] = []
            continue
        mine = sorted(s for s in had if s in all_shards and s not in claimed)
        claimed.update(mine)
        keepable[member_id] = mine

    # Most keep nothing (a group larger than its shard count): those follow in id order, as sorting
    # them all by (-kept, id) would put them.
    keeping = sorted((m for m in members if keepable[m]), key=lambda m: (-len(keepable[m]), m))
    by_stickiness = keeping + [m for m in members if not keepable[m]]
    quota = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(by_stickiness)}

    result: dict[str, list[Shard]] = {m: keepable[m][: quota[m]] for m in members}
    taken = {s for kept in result.values() for s in kept}
    free = iter(sorted(all_shards - taken))
    for member_id in members:
        need = quota[member_id] - len(result[member_id])
        if need > 0:
            result[member_id].extend(next(free) for _ in range(need))
    nothing: frozenset[Shard] = frozenset()
    return {m: frozenset(s) if s else nothing for m, s in result.items()}
