"""The group header lists only the targets that hold shards when the target's members are exactly the
live members (codec.encode_group_header, docs/store.md): a group larger than its shard count stores a
header the size of its shard count, and reads back the whole target."""

from __future__ import annotations

import json
from dataclasses import replace

from coordinator.protocol.model import EndReason, MemberState, Shard
from coordinator.store import MetadataStore, codec

from .conftest import GROUP, PREFIX, create
from .test_store import _steady

META = codec.meta_key(PREFIX)


def test_a_group_larger_than_its_shard_count_stores_only_the_targets_with_shards(
    store: MetadataStore,
) -> None:
    create(store, shard_count=3, max_members=100)
    _steady(store, [f"m{i:02d}" for i in range(40)])
    header = json.loads(store.client.hget(META, f"g:{GROUP}"))
    assert header["target_rest"] == "live"
    assert sorted(len(t) for t in header["target"].values()) == [1, 1, 1]
    kept = store._decoded[(PREFIX, GROUP)].group  # the core's own target, as its last commit made it
    fresh = MetadataStore(store.client)._load(PREFIX, None).state
    assert fresh is not None
    group = fresh.groups[GROUP]
    assert group.target == kept.target and list(group.target) == sorted(group.target)
    assert set(group.target) == {m.member_id for m in group.live_members()}
    assert sum(1 for t in group.target.values() if not t) == 37


def test_a_target_of_any_other_shape_is_written_whole(store: MetadataStore) -> None:
    create(store, shard_count=8)
    _steady(store, ["a", "b"])
    header = json.loads(store.client.hget(META, f"g:{GROUP}"))
    assert "target_rest" not in header and set(header["target"]) == {"a", "b"}  # every entry holds shards
    state = store._load(PREFIX, None).state
    assert state is not None
    group = state.groups[GROUP]
    # A target entry for a member that is not live, and an empty one: nothing may be left out.
    b = replace(group.members["b"], state=MemberState.LEFT, ended_at_ms=1, end_reason=EndReason.LEFT)
    odd = replace(group, members={**group.members, "b": b}, target={"a": group.target["a"], "b": frozenset()})
    raw = codec.encode_group_header(odd)
    assert json.loads(raw)["target"] == {"a": sorted(map(str, group.target["a"])), "b": []}
    records = {m: codec.encode_member(x) for m, x in odd.members.items()}
    leases = {m: x.lease_deadline_ms for m, x in odd.members.items()}
    decoded = codec.decode_group_cached(raw, records, leases, None).group
    assert decoded.target == odd.target
    assert all(isinstance(s, Shard) for t in decoded.target.values() for s in t)
