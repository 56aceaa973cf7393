"""The uniform sticky assignor: balanced, complete, deterministic, moves only what it must."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.assignor import assign
from coordinator.protocol.model import Shard

member_sets = st.sets(st.sampled_from([f"m{i}" for i in range(12)]), max_size=12)
big_member_sets = st.sets(st.sampled_from([f"m{i:02d}" for i in range(60)]), max_size=60)
shard_sets = st.sets(st.builds(Shard, version=st.integers(1, 3), index=st.integers(0, 20)), max_size=40)


@st.composite
def previous_targets(draw: st.DrawFn) -> dict[str, frozenset[Shard]]:
    members = draw(member_sets)
    shards = sorted(draw(shard_sets))
    owner = {s: draw(st.sampled_from(sorted(members))) for s in shards} if members else {}
    return {m: frozenset(s for s, o in owner.items() if o == m) for m in members}


@given(members=member_sets, shards=shard_sets, previous=previous_targets())
def test_balanced_complete_and_sticky(
    members: set[str], shards: set[Shard], previous: dict[str, frozenset[Shard]]
) -> None:
    result = assign(members, shards, previous)
    if not members:
        assert result == {}
        return
    # Only members that get shards are listed; every other member's target is empty.
    assert set(result) <= members and all(result.values())
    target = {m: result.get(m, frozenset()) for m in members}
    every = [s for t in target.values() for s in t]
    assert sorted(every) == sorted(shards)  # each shard exactly once
    sizes = [len(t) for t in target.values()]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: a surviving member keeps as many of its previous shards as its quota allows.
    for m in members:
        still_there = previous.get(m, frozenset()) & shards
        assert len(target[m] & still_there) == min(len(still_there), len(target[m]))
    assert assign(sorted(members, reverse=True), shards, previous) == result  # deterministic


def test_a_new_member_takes_only_the_surplus() -> None:
    shards = {Shard(version=1, index=i) for i in range(6)}
    first = assign(["a", "b"], shards, {})
    second = assign(["a", "b", "c"], shards, first)
    moved = sum(len(first[m] - second.get(m, frozenset())) for m in ("a", "b"))
    assert moved == 2 and len(second["c"]) == 2


def test_no_members_no_assignment_and_no_shards_empty_targets() -> None:
    assert assign([], {Shard(version=1, index=0)}, {}) == {}
    assert assign(["a"], set(), {}) == {}  # "a"'s target is empty: not listed


def reference_assign(
    member_ids: set[str] | list[str], shards: set[Shard], previous: dict[str, frozenset[Shard]]
) -> dict[str, frozenset[Shard]]:
    """The assignor as first written, every member handled alike and listed (assign() does per-member
    work only for members that keep or get a shard, and lists only those that get one): the two must
    agree exactly on those, key order included."""
    members = sorted(set(member_ids))
    all_shards = frozenset(shards)
    if not members:
        return {}
    base, extra = divmod(len(all_shards), len(members))
    keepable: dict[str, list[Shard]] = {}
    claimed: set[Shard] = set()
    for member_id in members:
        mine = sorted(s for s in previous.get(member_id, ()) if s in all_shards and s not in claimed)
        claimed.update(mine)
        keepable[member_id] = mine
    by_stickiness = sorted(members, key=lambda m: (-len(keepable[m]), m))
    quota = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(by_stickiness)}
    result = {m: keepable[m][: quota[m]] for m in members}
    taken = {s for kept in result.values() for s in kept}
    free = iter(sorted(all_shards - taken))
    for member_id in members:
        result[member_id].extend(next(free) for _ in range(quota[member_id] - len(result[member_id])))
    return {m: frozenset(s) for m, s in result.items()}


@st.composite
def big_previous_targets(draw: st.DrawFn) -> dict[str, frozenset[Shard]]:
    """Previous targets over up to 60 members, some of them overlapping (a shard listed twice)."""
    members = sorted(draw(big_member_sets))
    shards = sorted(draw(shard_sets))
    if not members:
        return {}
    return {
        m: frozenset(draw(st.sets(st.sampled_from(shards), max_size=4))) if shards else frozenset()
        for m in members
    }


@given(members=big_member_sets, shards=shard_sets, previous=big_previous_targets())
def test_the_same_target_as_the_reference_assignor_in_the_same_order(
    members: set[str], shards: set[Shard], previous: dict[str, frozenset[Shard]]
) -> None:
    result = assign(members, shards, previous)
    reference = reference_assign(members, shards, previous)
    assert list(result.items()) == [(m, t) for m, t in reference.items() if t]
