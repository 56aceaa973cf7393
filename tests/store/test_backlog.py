"""Backlog figures, the describe decorations and release from a migration's drain, against a real Redis.

Entries are appended by the real producer (its envelope) and read with plain XREADGROUP under chosen
consumer names: the store's figures are what Redis says, whoever read the entries.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from consumers.producer import Producer
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    GroupHasLiveMembers,
    GroupNotFound,
    InvalidRequest,
    MigrationNotActive,
)
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.protocol.routing import shard_index
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create

# ---------------------------------------------------------------------------------------------- helpers


def join(store: MetadataStore, member: str, group: str = GROUP) -> dict[str, Any]:
    hb = Heartbeat(member_id=member, member_epoch=0, owned=frozenset(), capacity=8)
    return store.heartbeat(PREFIX, group, hb)


def leave(store: MetadataStore, member: str, group: str = GROUP) -> None:
    store.heartbeat(PREFIX, group, Heartbeat(member_id=member, member_epoch=-1))


def key_for(index: int, shard_count: int, start: int = 0) -> str:
    """The first partition key ``k<n>`` (n >= start) that routes to ``index``."""
    n = start
    while shard_index(f"k{n}", shard_count) != index:
        n += 1
    return f"k{n}"


def produce(store: MetadataStore, shard: str, count: int, shard_count: int) -> list[str]:
    """Append ``count`` entries routed to ``shard`` (of the active version); returns their ids."""
    parsed = Shard.parse(shard)
    producer = Producer(store.client)
    key = key_for(parsed.index, shard_count)
    ids = []
    for i in range(count):
        result = producer.send(PREFIX, key, {"n": i})
        assert str(result.shard) == shard
        ids.append(result.entry_id)
    return ids


def read(
    store: MetadataStore, shard: str, consumer: str, count: int, group: str = GROUP, after: str = ">"
) -> list[str]:
    """XREADGROUP as ``consumer``: new entries (``>``) or its own pending ones (``0``)."""
    key = rkeys.stream_key(PREFIX, Shard.parse(shard))
    reply = store.client.xreadgroup(group, consumer, {key: after}, count=count)
    return [entry_id.decode() for entry_id, _ in reply[0][1]] if reply else []


def ack(store: MetadataStore, shard: str, ids: list[str], group: str = GROUP) -> None:
    store.client.xack(rkeys.stream_key(PREFIX, Shard.parse(shard)), group, *ids)


def stream_state(store: MetadataStore, shard: str, group: str = GROUP) -> tuple[Any, ...]:
    """Everything a refused action must leave as it was: length, group info, pending entries."""
    key = rkeys.stream_key(PREFIX, Shard.parse(shard))
    rows = store.client.xpending_range(key, group, "-", "+", 1000)
    pending = [(p["message_id"], p["consumer"]) for p in rows]
    return store.client.xlen(key), store.client.xinfo_groups(key), pending


def ms(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


def by_shard(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["shard"]: r for r in rows}


# ---------------------------------------------------------------------------------------------- backlog


def test_backlog_rows_show_lag_pending_over_two_consumers_and_the_oldest_entry(store: MetadataStore) -> None:
    create(store, shard_count=2)
    join(store, "a")
    ids = produce(store, "v1:0", 5, 2)
    other = produce(store, "v1:1", 2, 2)
    assert read(store, "v1:0", "a", 2) == ids[:2]
    assert read(store, "v1:0", "ghost", 1) == ids[2:3]  # a previous owner's leftover
    read(store, "v1:0", "a", 10, after="0")  # a re-reads its own pending entries twice
    read(store, "v1:0", "a", 10, after="0")
    store.redeliver(PREFIX, GROUP, "v1:0")

    rows = store.backlog(PREFIX, GROUP)
    now_ms = store.describe_group(PREFIX, GROUP)["now_ms"]

    assert [r["shard"] for r in rows] == ["v1:0", "v1:1"]
    first, second = rows
    assert 0 <= first.pop("oldest_pending_idle_ms") <= 60_000
    assert 0 <= first.pop("oldest_pending_age_ms") <= now_ms - ms(ids[0])
    assert first == {
        "shard": "v1:0",
        "stream_key": "rsc:{orders}:v1:0",
        "version_state": "ACTIVE",
        "owner": "a",
        "assignment": "READABLE",
        "length": 5,
        "lag": 2,
        "pending": 3,
        "last_delivered_id": ids[2],
        "oldest_pending_id": ids[0],
        "oldest_pending_consumer": "a",
        "max_deliveries": 3,
        "redeliver_token": 1,
    }
    assert second == {
        "shard": "v1:1",
        "stream_key": "rsc:{orders}:v1:1",
        "version_state": "ACTIVE",
        "owner": "a",
        "assignment": "READABLE",
        "length": len(other),
        "lag": 2,
        "pending": 0,
        "last_delivered_id": "0-0",
        "oldest_pending_id": None,
        "oldest_pending_age_ms": None,
        "oldest_pending_idle_ms": None,
        "oldest_pending_consumer": None,
        "max_deliveries": 0,
        "redeliver_token": 0,
    }


def test_backlog_refuses_unknown_groups_and_bad_names(store: MetadataStore) -> None:
    with pytest.raises(GroupNotFound):
        store.backlog(PREFIX, GROUP)  # no prefix at all
    create(store, shard_count=1)
    with pytest.raises(GroupNotFound):
        store.backlog(PREFIX, "nobody")
    with pytest.raises(InvalidRequest):
        store.backlog(PREFIX, "bad name")


def test_describe_group_shows_backlog_dead_letters_and_what_is_undrained(store: MetadataStore) -> None:
    create(store, shard_count=2)
    join(store, "a")
    old0 = produce(store, "v1:0", 3, 2)
    old1 = produce(store, "v1:1", 2, 2)
    read(store, "v1:0", "a", 3)
    ack(store, "v1:0", old0[1:])  # the first entry stays pending: v1:0 cannot drain
    ack(store, "v1:1", read(store, "v1:1", "a", 10))
    store.client.xadd(rkeys.dead_letter_key(PREFIX, GROUP), {"event_id": "e"})
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # observes v1:1 drained

    view = store.describe_group(PREFIX, GROUP)
    rows = by_shard(view["backlog"])
    assert list(rows) == ["v1:0", "v1:1", "v2:0", "v2:1", "v2:2", "v2:3"]
    assert [rows[s]["version_state"] for s in ("v1:0", "v1:1", "v2:0")] == ["DRAINING", "DRAINING", "ACTIVE"]
    v10 = rows["v1:0"]
    assert (v10["pending"], v10["lag"], v10["oldest_pending_id"]) == (1, 0, old0[0])
    assert (rows["v1:1"]["pending"], rows["v1:1"]["lag"], rows["v1:1"]["length"]) == (0, 0, len(old1))
    assert view["dead_letters"] == {"stream_key": "rsc:{orders}:dlq:billing", "length": 1}
    (undrained,) = view["migration"]["undrained"]
    age = undrained.pop("oldest_pending_age_ms")
    assert age == rows["v1:0"]["oldest_pending_age_ms"] and age >= 0
    assert undrained == {"shard": "v1:0", "owner": "a", "live_members": 1, "lag": 0, "pending": 1}


def test_describe_prefix_names_every_group_and_shard_that_blocks_the_migration(store: MetadataStore) -> None:
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    join(store, "a")
    join(store, "b", group="audit")
    leave(store, "b", group="audit")  # audit has no live member now
    ids = produce(store, "v1:0", 2, 2)
    read(store, "v1:0", "a", 2)  # billing: both pending on v1:0; v1:1 is empty
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # billing and audit have drained the empty v1:1

    view = store.describe_prefix(PREFIX)
    blocking = view["migration"]["blocking"]
    ages = [row.pop("oldest_pending_age_ms") for row in blocking]
    common = {"shard": "v1:0"}
    assert blocking == [
        {**common, "consumer_group": "audit", "owner": None, "live_members": 0, "lag": 2, "pending": 0},
        {**common, "consumer_group": "billing", "owner": "a", "live_members": 1, "lag": 0, "pending": 2},
    ]
    assert ages[0] is None and 0 <= ages[1] <= view["now_ms"] - ms(ids[0])


def test_no_migration_means_no_blocking_rows_and_a_completed_one_has_none(store: MetadataStore) -> None:
    create(store, shard_count=2)
    assert store.describe_prefix(PREFIX)["migration"] is None
    assert store.describe_group(PREFIX, GROUP)["migration"] is None
    store.change_shard_count(PREFIX, 3, OrderingMode.STRICT)
    store.tick()  # nothing was ever appended: drained at once, the migration completes
    assert store.describe_prefix(PREFIX)["migration"]["blocking"] == []
    assert store.describe_group(PREFIX, GROUP)["migration"]["undrained"] == []
    assert [r["shard"] for r in store.backlog(PREFIX, GROUP)] == ["v2:0", "v2:1", "v2:2"]  # v1 retired


def test_describe_group_takes_the_same_few_round_trips_for_2_or_64_shards(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_command, real_pipeline = redis.Redis.execute_command, redis.client.Pipeline.execute

    def command(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[0]))
        return real_command(self, *args, **kwargs)

    def pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("pipeline")
        return real_pipeline(self, *args, **kwargs)

    def round_trips(shard_count: int, prefix_groups: list[str]) -> int:
        for name in prefix_groups:
            create(store, shard_count=shard_count, group=name)
        join(store, "a", group=prefix_groups[0])
        for i in range(0, shard_count, 3):
            produce(store, f"v1:{i}", 1, shard_count)
            read(store, f"v1:{i}", "a", 1, group=prefix_groups[0])  # pending on every third shard
        calls.clear()
        monkeypatch.setattr(redis.Redis, "execute_command", command)
        monkeypatch.setattr(redis.client.Pipeline, "execute", pipeline)
        try:
            store.describe_group(PREFIX, prefix_groups[0])
        finally:
            monkeypatch.undo()
        store.client.flushall()
        return len(calls)

    small, large = round_trips(2, [GROUP]), round_trips(64, [GROUP])
    # load.lua, then the figures, the undelivered counts (backlog_count.lua), the oldest pending entries,
    # the members' parked-key reports
    assert small == large == 5


# ---------------------------------------------------------------------------------------------- release


def _blocked_by_idle_audit(store: MetadataStore) -> dict[str, list[str]]:
    """billing (live member a) consumes everything; audit's only member read one entry and left. The
    prefix then goes from 2 to 4 shards. Returns the entries appended to each old shard."""
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    join(store, "a")
    join(store, "b", group="audit")
    ids = {"v1:0": produce(store, "v1:0", 4, 2), "v1:1": produce(store, "v1:1", 3, 2)}
    read(store, "v1:0", "b", 1, group="audit")
    leave(store, "b", group="audit")
    for shard in ids:
        ack(store, shard, read(store, shard, "a", 10))
    return ids


def test_release_drain_refusals_change_nothing(store: MetadataStore) -> None:
    ids = _blocked_by_idle_audit(store)
    before = store.raw_metadata(PREFIX)
    with pytest.raises(MigrationNotActive):
        store.release_drain(PREFIX, "audit", confirm_unconsumed=0)
    with pytest.raises(MigrationNotActive):
        store.unconsumed_for_release(PREFIX, "audit")
    assert store.raw_metadata(PREFIX) == before

    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    before = store.raw_metadata(PREFIX)
    streams = [stream_state(store, s, g) for s in ids for g in ("audit", GROUP)]
    with pytest.raises(GroupHasLiveMembers) as live:
        store.release_drain(PREFIX, GROUP, confirm_unconsumed=0)
    assert live.value.details["live_members"] == ["a"]
    with pytest.raises(ConfirmationMismatch) as mismatch:
        store.release_drain(PREFIX, "audit", confirm_unconsumed=1)
    assert mismatch.value.details["unconsumed_entries"] == 7  # 6 never delivered + 1 pending
    with pytest.raises(InvalidRequest):
        store.release_drain(PREFIX, "audit", confirm_unconsumed=-1)
    with pytest.raises(GroupNotFound):
        store.release_drain(PREFIX, "nobody", confirm_unconsumed=0)
    assert store.raw_metadata(PREFIX) == before
    assert [stream_state(store, s, g) for s in ids for g in ("audit", GROUP)] == streams


def test_release_drain_of_the_last_blocking_group_completes_the_migration(store: MetadataStore) -> None:
    ids = _blocked_by_idle_audit(store)
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # billing drains both old shards; audit never will
    blocking = store.describe_prefix(PREFIX)["migration"]["blocking"]
    assert [(r["consumer_group"], r["shard"], r["owner"]) for r in blocking] == [
        ("audit", "v1:0", None),
        ("audit", "v1:1", None),
    ]

    unconsumed = store.unconsumed_for_release(PREFIX, "audit")
    assert unconsumed == 7
    result = store.release_drain(PREFIX, "audit", confirm_unconsumed=unconsumed)

    assert (result["released"], result["unconsumed_entries"]) == (["v1:0", "v1:1"], 7)
    migration = result["prefix"]["migration"]
    assert (migration["active"], migration["blocking"]) == (False, [])
    assert migration["completed_at_ms"] is not None
    assert [v["state"] for v in result["prefix"]["topology"]["versions"]] == ["RETIRED", "ACTIVE"]
    for shard in ids:  # audit's offsets and pending list on the old shards are gone; billing's stay
        key = rkeys.stream_key(PREFIX, Shard.parse(shard))
        assert [g["name"] for g in store.client.xinfo_groups(key)] == [GROUP.encode()]
    with pytest.raises(MigrationNotActive):
        store.release_drain(PREFIX, "audit", confirm_unconsumed=0)


def test_release_drain_counts_from_the_groups_position_where_redis_cannot_tell_the_lag(
    store: MetadataStore,
) -> None:
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    join(store, "a")
    produce(store, "v1:0", 2, 2)
    ids = produce(store, "v1:1", 3, 2)
    store.client.xdel(rkeys.stream_key(PREFIX, Shard.parse("v1:1")), ids[1])  # a hole audit has not read
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)

    rows = by_shard(store.backlog(PREFIX, "audit"))
    # Redis's XINFO lag of v1:1 is nil (a deleted entry after the group's position); the count is not.
    info = store.client.xinfo_groups(rkeys.stream_key(PREFIX, Shard.parse("v1:1")))
    assert [g["lag"] for g in info if g["name"] == b"audit"] == [None]
    assert (rows["v1:0"]["lag"], rows["v1:1"]["lag"], rows["v1:1"]["length"]) == (2, 2, 2)
    assert store.unconsumed_for_release(PREFIX, "audit") == 2 + 2
    result = store.release_drain(PREFIX, "audit", confirm_unconsumed=4)
    # billing still holds the migration back: it stays active, and only billing blocks it now.
    assert result["prefix"]["migration"]["active"] is True
    assert {r["consumer_group"] for r in result["prefix"]["migration"]["blocking"]} == {GROUP}
    for shard in ("v1:0", "v1:1"):  # v1 still drains for billing; audit's consumer groups there are gone
        key = rkeys.stream_key(PREFIX, Shard.parse(shard))
        assert [g["name"] for g in store.client.xinfo_groups(key)] == [GROUP.encode()]


def test_a_release_whose_migration_was_replaced_after_the_count_abandons_nothing(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """audit (no live member) has read and acked all of v1, so it counts 0; before the release commits,
    the tick completes that migration, entries arrive in v2 and a second change seals v2. The
    confirmed 0 was about v1: releasing audit from v2 would drop its entries unseen."""
    create(store, shard_count=2)
    create(store, shard_count=2, group="audit")
    join(store, "a")
    for shard in ("v1:0", "v1:1"):
        produce(store, shard, 2, 2)
        for group in (GROUP, "audit"):
            ack(store, shard, read(store, shard, "c", 10, group=group), group=group)
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    real_unconsumed = store.backlog_reads.unconsumed
    after_race: dict[str, Any] = {}

    def count_then_race(state: Any, group: str) -> Any:
        counted = real_unconsumed(state, group)
        if not after_race:
            store.tick()  # both groups drained v1: the migration completes
            after_race["v2"] = produce(store, "v2:0", 3, 4)
            store.change_shard_count(PREFIX, 3, OrderingMode.STRICT)  # v2 drains now
            after_race["meta"] = store.raw_metadata(PREFIX)
        return counted

    monkeypatch.setattr(store.backlog_reads, "unconsumed", count_then_race)
    with pytest.raises(ConfirmationMismatch) as refused:
        store.release_drain(PREFIX, "audit", confirm_unconsumed=0)

    assert refused.value.details["shards"] == ["v2:0", "v2:1", "v2:2", "v2:3"]
    assert refused.value.details["unconsumed_entries"] == 3  # what the operator must confirm now
    assert store.raw_metadata(PREFIX) == after_race["meta"]  # nothing released
    assert [g["name"] for g in store.client.xinfo_groups(rkeys.stream_key(PREFIX, Shard.parse("v2:0")))] == [
        b"audit",
        GROUP.encode(),
    ]


def test_a_group_created_again_right_after_its_release_keeps_the_consumer_groups_it_needs(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer groups on released shards are destroyed after the release's commit. If the group is
    deleted and created again in between, the new group must still drain those shards (billing keeps
    them draining): its consumer groups there stay, and the migration can complete."""
    ids = _blocked_by_idle_audit(store)
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    real_forget = store.backlog_actions._forget_released

    def recreate_then_forget(prefix: str, group: str, shards: Any) -> None:
        store.delete_group(PREFIX, "audit")
        create(store, shard_count=4, group="audit")
        store.client.xgroup_setid(rkeys.stream_key(PREFIX, Shard.parse("v1:0")), "audit", "0")
        real_forget(prefix, group, shards)

    monkeypatch.setattr(store.backlog_actions, "_forget_released", recreate_then_forget)
    store.release_drain(PREFIX, "audit", confirm_unconsumed=7)

    for shard in ids:
        key = rkeys.stream_key(PREFIX, Shard.parse(shard))
        assert [g["name"] for g in store.client.xinfo_groups(key)] == [b"audit", GROUP.encode()]
    # The new audit reads v1:0 from the start, acks it, and the migration completes.
    ack(store, "v1:0", read(store, "v1:0", "c", 10, group="audit"), group="audit")
    store.tick()
    assert store.describe_prefix(PREFIX)["migration"]["active"] is False
