"""Static membership through the Redis metadata store (docs/protocol.md section 3, "Static membership"):
the instance id and the hold are stored in the member's record, the tick comes back when a hold ends
(the group's ts: field), the data plane's fields follow (a held member has no m: or o: field), and a
refused join writes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.protocol.errors import FencedInstanceId, UnreleasedInstanceId
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_store import assert_derived_fields_consistent, fields, redis_ms, shards_of


def send(
    store: MetadataStore, member: str, epoch: int, owned: Any = None, instance_id: str | None = None
) -> dict[str, Any]:
    owned_set = None if owned is None else frozenset(Shard.parse(s) for s in owned)
    capacity = 1 if epoch == 0 else None
    hb = Heartbeat(
        member_id=member, member_epoch=epoch, owned=owned_set, capacity=capacity, instance_id=instance_id
    )
    return store.heartbeat(PREFIX, GROUP, hb)


def settle(store: MetadataStore, responses: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for _ in range(3):
        for mid, r in list(responses.items()):
            responses[mid] = send(store, mid, r["member_epoch"], shards_of(r))
    return responses


def test_a_restart_with_the_instance_id_gets_the_same_shards_through_the_store(store: MetadataStore) -> None:
    create(store, shard_count=6)
    joined = {mid: send(store, mid, 0, [], instance_id=f"pod-{mid[0]}") for mid in ("a1", "b1", "c1")}
    before = {mid: shards_of(r) for mid, r in settle(store, joined).items()}
    assert sorted(len(s) for s in before.values()) == [2, 2, 2]
    epoch = store.describe_group(PREFIX, GROUP)["group_epoch"]

    send(store, "b1", -2)  # b1 stops cleanly
    stored = fields(store)
    assert "m:billing:b1" not in stored  # the data plane refuses the old id at once
    assert not any(v.startswith("b1 ") for k, v in stored.items() if k.startswith("o:billing:"))
    view = store.describe_group(PREFIX, GROUP)
    assert view["group_epoch"] == epoch  # no bump
    held = view["held_instances"]
    assert [(h["instance_id"], h["member_id"], h["shards"]) for h in held] == [("pod-b", "b1", before["b1"])]
    # The group's tick schedule (ts:) says when the hold ends, so that a tick reads the group then.
    assert fields(store)["ts:billing"].split()[0] == str(held[0]["held_until_ms"])
    assert_derived_fields_consistent(store)
    store.tick()
    assert store.describe_group(PREFIX, GROUP)["held_instances"] == held  # not due: still held

    r = send(store, "b2", 0, [], instance_id="pod-b")
    assert (r["member_state"], shards_of(r)) == ("STABLE", before["b1"])
    after = settle(store, {"a1": joined["a1"], "c1": joined["c1"]})
    assert {m: shards_of(x) for m, x in after.items()} == {"a1": before["a1"], "c1": before["c1"]}
    assert all(x["member_state"] == "STABLE" and not x["revoking"] for x in after.values())
    view = store.describe_group(PREFIX, GROUP)
    members = {m["member_id"]: m for m in view["members"]}
    assert members["b2"]["instance_id"] == "pod-b" and members["b1"]["held_until_ms"] is None
    assert view["held_instances"] == []
    assert_derived_fields_consistent(store)
    with pytest.raises(FencedInstanceId):
        send(store, "b1", joined["b1"]["member_epoch"], before["b1"])


def test_a_hold_ends_by_the_tick_and_the_shards_move(store: MetadataStore) -> None:
    create(store, shard_count=2, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    joined = {mid: send(store, mid, 0, [], instance_id=f"pod-{mid[0]}") for mid in ("a1", "b1")}
    settle(store, joined)
    send(store, "b1", -2)
    group = store.describe_group(PREFIX, GROUP)
    until = group["held_instances"][0]["held_until_ms"]
    a = joined["a1"]
    while redis_ms(store) <= until:  # a1 keeps heartbeating through b1's hold (a lease TTL)
        a = send(store, "a1", a["member_epoch"], shards_of(a))
        store.tick()
        if redis_ms(store) < until:
            assert store.describe_group(PREFIX, GROUP)["held_instances"] != []
        time.sleep(0.1)
    store.tick()
    view = store.describe_group(PREFIX, GROUP)
    assert view["held_instances"] == [] and view["group_epoch"] > group["group_epoch"]
    a = send(store, "a1", a["member_epoch"], shards_of(a))
    assert shards_of(a) == ["v1:0", "v1:1"]
    assert_derived_fields_consistent(store)


def test_a_second_process_with_the_instance_id_is_refused_and_nothing_is_written(
    store: MetadataStore,
) -> None:
    create(store, shard_count=2)
    a = send(store, "a1", 0, [], instance_id="pod-a")
    before = store.client.hgetall(rkeys.meta_key(PREFIX))
    with pytest.raises(UnreleasedInstanceId) as refused:
        send(store, "x1", 0, [], instance_id="pod-a")
    assert refused.value.details["member_id"] == "a1"
    assert store.client.hgetall(rkeys.meta_key(PREFIX)) == before
    assert send(store, "a1", a["member_epoch"], shards_of(a))["member_state"] == "STABLE"


def test_a_static_join_decides_on_the_holders_lease_as_it_is_in_redis(store: MetadataStore) -> None:
    """A heartbeat's load reads its own lease only; a static join reads the holder's too (renewals in
    Redis included: static_membership.py). Here the holder's lease, as this store last saw it, has
    ended, but the holder renewed it itself in Redis (the API out of its reach): the join is refused,
    at once, not taken for a take-over that every commit then refuses."""
    create(store, shard_count=2, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    a = send(store, "a1", 0, [], instance_id="pod-a")
    epoch = store.client.hget(rkeys.meta_key(PREFIX), f"m:{GROUP}:a1")
    assert epoch is not None
    deadline = int(fields(store)[f"l:{GROUP}:a1"])
    while redis_ms(store) <= deadline:
        time.sleep(0.05)  # the coordinator's deadline passes ...
    until = redis_ms(store) + 900  # ... and the member's own renewal in Redis holds the lease
    store.client.hset(rkeys.lease_records_key(PREFIX), f"{GROUP}:a1", f"{epoch.decode()} {until}")
    with pytest.raises(UnreleasedInstanceId) as refused:
        send(store, "x1", 0, [], instance_id="pod-a")
    assert refused.value.details["lease_deadline_ms"] == until
    # Once that renewal has ended too, the same join takes over at once (no tick needed).
    store.client.hset(rkeys.lease_records_key(PREFIX), f"{GROUP}:a1", f"{epoch.decode()} {redis_ms(store)}")
    time.sleep(0.01)
    r = send(store, "x1", 0, [], instance_id="pod-a")
    assert shards_of(r) == shards_of(a)
    view = store.describe_group(PREFIX, GROUP)
    members = {m["member_id"]: m for m in view["members"]}
    assert (members["a1"]["state"], members["a1"]["end_reason"]) == ("EXPIRED", "LEASE_EXPIRED")
    assert_derived_fields_consistent(store)
