"""codec.owned_argument (the fast heartbeat's owned shards, as the f: field holds them) is the text of
the shards in Shard's own order, whatever the set, cached or not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.model import Shard
from coordinator.store import codec

shards = st.frozensets(st.builds(Shard, version=st.integers(1, 20), index=st.integers(0, 200)), max_size=40)


@given(shards)
def test_owned_argument_is_the_shards_in_shard_order(owned: frozenset[Shard]) -> None:
    expected = ",".join(str(s) for s in sorted(owned))
    assert codec.owned_argument(owned) == expected
    assert codec.owned_argument(frozenset(owned)) == expected  # an equal set: the cached answer


def test_numeric_order_not_text_order() -> None:
    owned = frozenset(Shard.parse(s) for s in ("v2:0", "v1:10", "v1:2", "v10:1", "v1:0"))
    assert codec.owned_argument(owned) == "v1:0,v1:2,v1:10,v2:0,v10:1"
