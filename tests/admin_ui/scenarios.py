"""A large group for the browser tests: 20 shards, ten live members, three ended ones, a strict
migration 8 -> 20 held back by entries and by a group without members. Built through the store, with
entries made pending for real."""

from __future__ import annotations

from typing import Any

from coordinator.protocol.model import OrderingMode
from coordinator.store import MetadataStore

from .helpers import GROUP, OTHER_GROUP, PREFIX, create, hb, pend, stream

LIVE = [f"worker-{n:02d}" for n in range(1, 11)]
ENDED = ["old-01", "old-02", "old-03"]
JOINER = "worker-11"


def fill(store: MetadataStore, shard: str, count: int) -> None:
    """``count`` undelivered entries on ``shard``."""
    pipe = store.client.pipeline(transaction=False)
    for n in range(count):
        pipe.xadd(stream(shard), {"n": str(n)})
    pipe.execute()


def settle(store: MetadataStore, members: list[str], epochs: dict[str, int], rounds: int = 4) -> None:
    """Heartbeat every member, reporting what it was granted (acknowledging its revocations), until the
    group has converged (or ``rounds`` passes)."""
    owned: dict[str, list[str]] = {m: [] for m in members}
    for _ in range(rounds):
        for member in members:
            r = hb(store, member, epochs[member], owned[member])
            epochs[member] = r["member_epoch"]
            owned[member] = [s["shard"] for s in r["shards"]]
        if store.describe_group(PREFIX, GROUP)["state"] == "STABLE":
            return


def large_group(store: MetadataStore) -> dict[str, Any]:
    """``billing`` on ``orders``: v1 (8 shards, draining) -> v2 (20 shards, strict), ten live members,
    three that left, an eleventh joining; v1:1 has 40 undelivered entries, v1:2 three pending ones
    delivered 4 times (an hour old), some v2 shards some lag; a revocation in flight and a shard
    awaiting pickup; ``audit`` has no member at all. Returns billing's description."""
    create(store, shard_count=8, max_concurrency=4)
    create(store, group=OTHER_GROUP, shard_count=8)
    epochs: dict[str, int] = {}
    for member in [*LIVE, *ENDED]:
        epochs[member] = hb(store, member, 0, [], capacity=4)["member_epoch"]
    settle(store, [*LIVE, *ENDED], epochs)
    for member in ENDED:
        hb(store, member, -1)  # leaves
    settle(store, LIVE, epochs)
    fill(store, "v1:1", 40)
    owner_of_v12 = store.describe_group(PREFIX, GROUP)["backlog"][2]["owner"]
    pend(store, "v1:2", 3, consumer=owner_of_v12, deliveries=4, age_ms=3_600_000)
    store.change_shard_count(PREFIX, 20, OrderingMode.STRICT)
    store.tick()  # the empty old shards drain for billing
    settle(store, LIVE, epochs)
    for index, count in ((0, 5), (3, 120), (7, 2400), (12, 1)):
        fill(store, f"v2:{index}", count)
    # A new member joins and two shards move to it: the first one's owner has heard and not yet
    # acknowledged (revoking), the second one's has acknowledged, so that shard waits for the newcomer's
    # next heartbeat (unassigned).
    epochs[JOINER] = hb(store, JOINER, 0, [], capacity=4)["member_epoch"]
    view = store.describe_group(PREFIX, GROUP)
    owners = {b["shard"]: b["owner"] for b in view["backlog"]}
    revoking, released = (owners[s] for s in view["target_assignment"][JOINER][:2])
    hb(store, revoking, epochs[revoking])
    r = hb(store, released, epochs[released])
    hb(store, released, r["member_epoch"], [s["shard"] for s in r["shards"]])
    return store.describe_group(PREFIX, GROUP)
