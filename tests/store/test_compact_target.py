"""The target lists only the members whose target holds shards (model.Group.target), and so does the
group header (codec.encode_group_header, docs/store.md): a group larger than its shard count stores and
reads a header the size of its shard count; a header an earlier version wrote whole reads the same."""

from __future__ import annotations

import json

import orjson

from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore, codec
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_store import _steady

META = rkeys.meta_key(PREFIX)


def test_a_group_larger_than_its_shard_count_stores_only_the_targets_with_shards(
    store: MetadataStore,
) -> None:
    create(store, shard_count=3, max_members=100)
    _steady(store, [f"m{i:02d}" for i in range(40)])
    header = json.loads(store.client.hget(META, f"g:{GROUP}"))
    assert header["target_rest"] == "live"
    assert sorted(len(t) for t in header["target"].values()) == [1, 1, 1]
    kept = store.reader.decoded[(PREFIX, GROUP)].group  # the core's own target, as its last commit made it
    fresh = MetadataStore(store.client)._load(PREFIX, None).state
    assert fresh is not None
    group = fresh.groups[GROUP]
    assert group.target == kept.target and list(group.target) == sorted(group.target)
    assert len(group.target) == 3 and all(group.target.values())
    # Operators still see every live member's target, the empty ones included.
    view = store.describe_group(PREFIX, GROUP)["target_assignment"]
    assert len(view) == 40 and sum(1 for t in view.values() if not t) == 37


def test_a_header_written_whole_by_an_earlier_version_reads_the_same(store: MetadataStore) -> None:
    create(store, shard_count=2, max_members=100)
    _steady(store, ["a", "b", "c"])
    state = store._load(PREFIX, None).state
    assert state is not None
    group = state.groups[GROUP]
    raw = store.client.hget(META, f"g:{GROUP}")
    whole = orjson.loads(raw)
    # As the version before wrote it when every live member had an entry: the empty ones too, no marker.
    whole["target"] = {m: whole["target"].get(m, []) for m in ("a", "b", "c")}
    del whole["target_rest"]
    records = {m: codec.encode_member(x) for m, x in group.members.items()}
    leases = {m: x.lease_deadline_ms for m, x in group.members.items()}
    decoded = codec.decode_group_cached(orjson.dumps(whole), records, leases, None).group
    assert decoded.target == group.target and len(decoded.target) == 2
    assert all(isinstance(s, Shard) for t in decoded.target.values() for s in t)
    assert decoded == group
