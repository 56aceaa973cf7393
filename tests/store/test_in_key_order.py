"""codec.in_key_order: a mapping whose first keys are in order and the rest appended comes out exactly
as a sort of all its keys would order it (the order a whole read of a group gives its members)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.store import codec

ids = st.text(alphabet="ab-19", min_size=1, max_size=4)


@given(base=st.sets(ids, max_size=40), appended=st.sets(ids, max_size=80))
def test_appended_keys_land_where_a_sort_puts_them(base: set[str], appended: set[str]) -> None:
    ordered = sorted(base)
    mapping = {k: f"v{k}" for k in ordered}
    mapping.update({k: f"w{k}" for k in sorted(appended - base, reverse=True)})
    result = codec.in_key_order(mapping, len(ordered))
    assert list(result.items()) == sorted(mapping.items())
