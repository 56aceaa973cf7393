"""The uniform sticky assignor: balanced, complete, deterministic, moves only what it must."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.assignor import assign
from coordinator.protocol.model import Shard

member_sets = st.sets(st.sampled_from([f"m{i}" for i in range(12)]), max_size=12)
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
    assert set(result) == members
    every = [s for t in result.values() for s in t]
    assert sorted(every) == sorted(shards)  # each shard exactly once
    sizes = [len(t) for t in result.values()]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: a surviving member keeps as many of its previous shards as its quota allows.
    for m in members:
        still_there = previous.get(m, frozenset()) & shards
        assert len(result[m] & still_there) == min(len(still_there), len(result[m]))
    assert assign(sorted(members, reverse=True), shards, previous) == result  # deterministic


def test_a_new_member_takes_only_the_surplus() -> None:
    shards = {Shard(version=1, index=i) for i in range(6)}
    first = assign(["a", "b"], shards, {})
    second = assign(["a", "b", "c"], shards, first)
    moved = sum(len(first[m] - second[m]) for m in ("a", "b"))
    assert moved == 2 and len(second["c"]) == 2


def test_no_members_no_assignment_and_no_shards_empty_targets() -> None:
    assert assign([], {Shard(version=1, index=0)}, {}) == {}
    assert assign(["a"], set(), {}) == {"a": frozenset()}
