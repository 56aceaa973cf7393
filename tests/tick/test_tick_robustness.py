"""Regression tests for MetadataStore.tick: one prefix that cannot be ticked (unreadable metadata, a
script error reported as the non-retriable METADATA_CORRUPT) must not stop expiry in the others."""

from __future__ import annotations

import contextlib

from coordinator import service
from coordinator.store import MetadataStore
from rsc_redis.keys import meta_key

from .conftest import Member, create_group, member_view, wait_for_lease_end


def test_an_unreadable_prefix_does_not_stop_expiry_in_the_others(store: MetadataStore) -> None:
    create_group(store)  # prefix "orders"
    Member(store, "m1").heartbeat()
    # "aaa" sorts first. Its topology document is not JSON: a hand edit, or a future format.
    store.client.sadd("rsc:prefixes", "aaa")
    store.client.hset(meta_key("aaa"), mapping={"t": "{not json", "t#": "1"})
    wait_for_lease_end(store, "m1")

    with contextlib.suppress(Exception):  # failing for "aaa" itself is fine
        service.run_tick()

    assert member_view(store, "m1")["state"] == "EXPIRED"
