"""redis_store._touched: the members a decision added, changed (another Member object) or removed, the
set a commit writes. Pure: no Redis."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.model import Group, GroupConfig, Member, MemberState
from coordinator.store.redis_store import _TOUCHED_EXACT_ABOVE, _touched


def _member(mid: str, epoch: int = 1) -> Member:
    return Member(
        member_id=mid,
        state=MemberState.STABLE,
        member_epoch=epoch,
        previous_epoch=0,
        assigned={},
        lease_deadline_ms=1_000,
        capacity=1,
        joined_at_ms=0,
        last_heartbeat_ms=0,
    )


def _group(members: dict[str, Member]) -> Group:
    return Group(
        stream_prefix="p", consumer_group="g", config=GroupConfig(), created_at_ms=0, members=members
    )


def _exact(before: Group, after: Group) -> set[str]:
    was, now = before.members, after.members
    return {m for m in now if was.get(m) is not now[m]} | (was.keys() - now.keys())


@given(
    size=st.integers(0, 200),
    changed=st.integers(0, 200),
    added=st.integers(0, 3),
    removed=st.integers(0, 3),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_touched_is_exactly_what_changed_whatever_the_order(
    size: int, changed: int, added: int, removed: int, shuffle: bool, seed: int
) -> None:
    rnd = random.Random(seed)
    before = _group({f"m{i:03d}": _member(f"m{i:03d}") for i in range(size)})
    members = dict(before.members)
    ids = list(members)
    for mid in rnd.sample(ids, min(changed, len(ids))):
        members[mid] = replace(members[mid], member_epoch=2)
    for mid in rnd.sample(ids, min(removed, len(ids))):
        del members[mid]
    for i in range(added):
        members[f"new{i}"] = _member(f"new{i}")
    if shuffle:  # the same members in another order: pairs of different members must not hide a change
        items = list(members.items())
        rnd.shuffle(items)
        members = dict(items)
    after = replace(before, members=members)
    got, exact = _touched(before, after), _exact(before, after)
    assert got >= exact  # never misses a change
    if not shuffle or len(got) > _TOUCHED_EXACT_ABOVE:
        assert got == exact
    assert _touched(before, before) == set()
