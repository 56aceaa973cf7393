"""The retention pass against a real Redis: trimming never removes what a group still needs, the opt-in
caps drop entries (documented data loss), retired versions' streams go only after their grace period and
once fully acked, and the work per pass is bounded by a cursor.

Entries are appended and consumed with plain stream commands (XADD, XREADGROUP, XACK): the data plane's
fencing is not what is tested here, the streams' contents are.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from coordinator.protocol.commands import CreateGroup, ReleaseDrain
from coordinator.protocol.errors import InvalidRequest
from coordinator.protocol.model import GroupConfig, OrderingMode, RetentionPolicy, Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys
from rsc_redis.keys import RETENTION_CURSOR_KEY

from .conftest import GROUP, PREFIX, create

V1_0 = rkeys.stream_key(PREFIX, Shard(version=1, index=0))


def produce(store: MetadataStore, key: str, count: int, ids: list[str] | None = None) -> list[str]:
    pipe = store.client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(key, {"n": str(i)}, id=ids[i] if ids else "*")
    return [x.decode() for x in pipe.execute()]


def read(store: MetadataStore, key: str, group: str, count: int, consumer: str = "c") -> list[str]:
    if count <= 0:
        return []
    reply = store.client.xreadgroup(group, consumer, {key: ">"}, count=count)
    return [entry_id.decode() for entry_id, _ in reply[0][1]] if reply else []


def entry_ids(store: MetadataStore, key: str) -> list[str]:
    return [entry_id.decode() for entry_id, _ in store.client.xrange(key)]


def pending_ids(store: MetadataStore, key: str, group: str) -> set[str]:
    rows = store.client.xpending_range(key, group, min="-", max="+", count=100_000)
    return {row["message_id"].decode() for row in rows}


def create_groups(store: MetadataStore, names: list[str], shard_count: int = 1) -> None:
    for name in names:
        create(store, shard_count=shard_count, group=name)


def pass_report(store: MetadataStore, **kwargs: Any) -> Any:
    reports = store.retention_pass(**kwargs)
    return {r.stream_prefix: r for r in reports}.get(PREFIX)


def id_key(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


# ------------------------------------------------------------------------------------------ acked mode


@pytest.mark.parametrize("seed", range(20))
def test_trim_never_removes_an_entry_pending_or_undelivered_for_any_group(
    store: MetadataStore, seed: int
) -> None:
    """Several groups at random positions: each read some entries, acked a run of the oldest of them and
    a random part of the rest (the rest stays pending)."""
    rng = random.Random(seed)
    groups = [f"g{i}" for i in range(rng.randint(1, 4))]
    create_groups(store, groups)
    ids = produce(store, V1_0, rng.randint(1, 60))
    needed: set[str] = set()
    for group in groups:
        delivered = read(store, V1_0, group, rng.randint(len(ids) // 2, len(ids)))
        run = rng.randint(0, len(delivered))
        acked = delivered[:run] + [i for i in delivered[run:] if rng.random() < 0.5]
        if acked:
            store.client.xack(V1_0, group, *acked)
        needed |= set(ids[len(delivered) :])  # never delivered to this group
        needed |= set(delivered) - set(acked)  # pending for it
    # The oldest entry some group still needs, and everything after it, must stay; the rest goes.
    floor = min(needed, key=id_key) if needed else None
    expected = [i for i in ids if floor is not None and id_key(i) >= id_key(floor)]

    report = pass_report(store)

    assert entry_ids(store, V1_0) == expected
    assert needed <= set(entry_ids(store, V1_0))
    assert dict(report.trimmed) == ({V1_0: len(ids) - len(expected)} if len(expected) < len(ids) else {})
    assert report.trimmed_by_caps == {}
    for group in groups:  # nothing about the groups changed
        assert store.client.xinfo_groups(V1_0)[groups.index(group)]["name"].decode() == group
    again = pass_report(store)
    assert again.trimmed == {} and entry_ids(store, V1_0) == expected  # idempotent


def test_a_group_created_at_latest_does_not_hold_back_what_came_before_it(store: MetadataStore) -> None:
    create(store, shard_count=1, group="early")
    ids = produce(store, V1_0, 10)
    store.client.xack(V1_0, "early", *read(store, V1_0, "early", 10))
    create(store, shard_count=1, group="late")  # start_from latest: it never needs the first 10
    later = produce(store, V1_0, 3)
    pass_report(store)
    assert entry_ids(store, V1_0) == later
    assert len(ids) == 10


def test_a_stream_without_consumer_groups_is_trimmed_only_by_the_caps(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.delete_group(PREFIX, GROUP)  # destroys the Redis consumer groups
    ids = produce(store, V1_0, 1_200)
    pass_report(store)
    assert entry_ids(store, V1_0) == ids  # acked mode: nobody consumed them, nobody trims them
    store.set_retention(PREFIX, RetentionPolicy(max_len=1_000))
    report = pass_report(store)
    assert entry_ids(store, V1_0) == ids[200:]
    assert dict(report.trimmed) == dict(report.trimmed_by_caps) == {V1_0: 200}


def test_a_group_that_has_read_nothing_holds_back_everything(store: MetadataStore) -> None:
    """Last-delivered 0-0: a group created before the first entry that has not read yet, or one created
    with start_from=earliest on a stream that already has entries. Its floor is the very first entry."""
    create(store, shard_count=1, group="early")
    create(store, shard_count=1, group="idle")  # at 0-0: the stream was empty
    ids = produce(store, V1_0, 10)
    store.client.xack(V1_0, "early", *read(store, V1_0, "early", 10))
    assert pass_report(store).trimmed == {} and entry_ids(store, V1_0) == ids
    store.delete_group(PREFIX, "idle")
    config = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)
    store.create_group(CreateGroup(stream_prefix=PREFIX, consumer_group="replay", config=config), "earliest")
    assert pass_report(store).trimmed == {} and entry_ids(store, V1_0) == ids
    store.client.xack(V1_0, "replay", *read(store, V1_0, "replay", 4))
    assert pass_report(store).trimmed == {V1_0: 4} and entry_ids(store, V1_0) == ids[4:]


def test_each_trim_removes_at_most_max_trim_per_stream_entries(store: MetadataStore) -> None:
    """A stream never trimmed before (or a cap just set) is trimmed over several passes, each bounded,
    never past what a group still needs, and exactly to the floor in the end."""
    create(store, shard_count=1)
    ids = produce(store, V1_0, 5_000)
    delivered = read(store, V1_0, GROUP, 4_500)
    store.client.xack(V1_0, GROUP, *delivered[:4_200])  # 300 stay pending
    trimmed = []
    for _ in range(20):
        report = pass_report(store, max_trim_per_stream=1_000)
        trimmed.append(report.trimmed.get(V1_0, 0))
        assert set(ids[4_200:]) <= set(entry_ids(store, V1_0))
    assert 0 < max(trimmed) <= 1_000 and len([n for n in trimmed if n]) >= 5
    assert entry_ids(store, V1_0) == ids[4_200:]

    more = produce(store, V1_0, 2_000)
    store.set_retention(PREFIX, RetentionPolicy(max_len=1_000))  # opt-in data loss, bounded the same way
    capped = [pass_report(store, max_trim_per_stream=250).trimmed_by_caps.get(V1_0, 0) for _ in range(15)]
    assert 0 < max(capped) <= 250 and sum(capped) == 1_800
    assert entry_ids(store, V1_0) == more[1_000:]


# ------------------------------------------------------------------------------------------ caps


def test_max_len_drops_unconsumed_and_pending_entries(store: MetadataStore) -> None:
    """Documented data loss: the caps trim regardless of consumption, pending entries included."""
    create(store, shard_count=1)
    ids = produce(store, V1_0, 1_300)
    delivered = read(store, V1_0, GROUP, 100)  # pending, never acked
    store.set_retention(PREFIX, RetentionPolicy(max_len=1_000))
    report = pass_report(store)
    assert entry_ids(store, V1_0) == ids[300:]
    assert dict(report.trimmed) == dict(report.trimmed_by_caps) == {V1_0: 300}
    assert pending_ids(store, V1_0, GROUP) == set(delivered)  # still in the pending list, entry gone


def test_max_age_drops_entries_older_than_the_cap_by_redis_time(store: MetadataStore) -> None:
    create(store, shard_count=1)
    now_ms = store.describe_prefix(PREFIX)["now_ms"]
    old = produce(store, V1_0, 3, ids=[f"{now_ms - 3_600_000}-{i}" for i in range(1, 4)])
    fresh = produce(store, V1_0, 2)
    store.client.xack(V1_0, GROUP, *read(store, V1_0, GROUP, 1))  # the group acked only the first one
    store.set_retention(PREFIX, RetentionPolicy(max_age_ms=600_000))
    report = pass_report(store)
    assert entry_ids(store, V1_0) == fresh
    assert report.trimmed == {V1_0: 3}
    assert report.trimmed_by_caps == {V1_0: 2}  # the acked one was the acked mode's; two unconsumed dropped
    assert len(old) == 3


def test_caps_are_off_by_default_and_set_retention_is_described(store: MetadataStore) -> None:
    create(store, shard_count=1)
    assert store.describe_prefix(PREFIX)["retention"] == {
        "mode": "acked",
        "max_age_ms": None,
        "max_len": None,
        "retired_grace_ms": 0,
    }
    view = store.set_retention(PREFIX, RetentionPolicy(max_age_ms=86_400_000, retired_grace_ms=5_000))
    assert view["retention"] == {
        "mode": "acked",
        "max_age_ms": 86_400_000,
        "max_len": None,
        "retired_grace_ms": 5_000,
    }
    assert store.describe_prefix(PREFIX)["retention"] == view["retention"]


def test_a_refused_retention_changes_nothing(store: MetadataStore) -> None:
    create(store, shard_count=1)
    before = store.raw_metadata(PREFIX)
    with pytest.raises(InvalidRequest) as error:
        store.set_retention(PREFIX, RetentionPolicy(max_len=10))
    assert error.value.details == {"field": "max_len"}
    assert store.raw_metadata(PREFIX) == before


# ------------------------------------------------------------------------------------------ retired versions


def retire_v1(store: MetadataStore, *, consume: bool = True) -> list[str]:
    """Prefix with 2 shards and entries in v1; reshard to 4 and retire v1 (drained, or released)."""
    create(store, shard_count=2)
    keys = [rkeys.stream_key(PREFIX, Shard(version=1, index=i)) for i in range(2)]
    for key in keys:
        produce(store, key, 5)
        if consume:
            store.client.xack(key, GROUP, *read(store, key, GROUP, 5))
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    if consume:
        store.tick()  # observes the drain, retires v1
    else:
        store.committer.execute(ReleaseDrain(stream_prefix=PREFIX, consumer_group=GROUP), None)
    assert store.describe_prefix(PREFIX)["topology"]["versions"][0]["state"] == "RETIRED"
    return keys


def test_a_retired_versions_streams_are_deleted_once_fully_acked_and_the_record_stays(
    store: MetadataStore,
) -> None:
    keys = retire_v1(store)
    report = pass_report(store)
    assert sorted(report.deleted_keys) == keys
    assert store.client.exists(*keys) == 0
    versions = store.describe_prefix(PREFIX)["topology"]["versions"]
    assert [(v["version"], v["state"]) for v in versions] == [(1, "RETIRED"), (2, "ACTIVE")]
    # The active version's streams are untouched, and a second pass finds nothing to delete.
    assert store.client.exists(*(rkeys.stream_key(PREFIX, Shard(version=2, index=i)) for i in range(4))) == 4
    again = pass_report(store)
    assert again.deleted_keys == () and again.waiting == ()


def test_retired_streams_wait_for_the_grace_period(store: MetadataStore) -> None:
    create(store, shard_count=2)
    store.set_retention(PREFIX, RetentionPolicy(retired_grace_ms=3_600_000))
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # nothing was ever appended: drained at once
    keys = [rkeys.stream_key(PREFIX, Shard(version=1, index=i)) for i in range(2)]
    report = pass_report(store)
    assert report.deleted_keys == ()
    assert len(report.waiting) == 1 and report.waiting[0].startswith(
        "v1: retired, its streams are kept until"
    )
    assert store.client.exists(*keys) == 2
    store.set_retention(PREFIX, RetentionPolicy(retired_grace_ms=0))
    assert sorted(pass_report(store).deleted_keys) == keys


def test_retired_streams_a_group_has_not_finished_with_are_kept_and_the_reason_given(
    store: MetadataStore,
) -> None:
    """A group released from the drain left entries behind: its consumer group still holds them."""
    keys = retire_v1(store, consume=False)
    report = pass_report(store)
    assert report.deleted_keys == ()
    assert sorted(report.waiting) == [
        f"v1:{i}: group {GROUP} has not finished with it (0 pending, last delivered 0-0, last entry "
        f"{entry_ids(store, keys[i])[-1]})"
        for i in range(2)
    ]
    assert store.client.exists(*keys) == 2
    for key in keys:  # the group catches up after all: the next pass deletes the streams
        store.client.xack(key, GROUP, *read(store, key, GROUP, 5))
    assert sorted(pass_report(store).deleted_keys) == keys


def test_a_sealed_stream_whose_unread_entries_a_cap_trimmed_still_drains_and_is_deleted(
    store: MetadataStore,
) -> None:
    """A draining stream only ages: max_age_ms trims it whole, entries its group never read included.
    The group's last-delivered id then stays behind the stream's last-generated id for ever; the shard
    must count as drained all the same (nothing is left to read), or the migration never completes."""
    create(store, shard_count=1)
    now_ms = store.describe_prefix(PREFIX)["now_ms"]
    produce(store, V1_0, 5, ids=[f"{now_ms - 3_600_000}-{i}" for i in range(1, 6)])
    store.client.xack(V1_0, GROUP, *read(store, V1_0, GROUP, 2))  # 3 entries never read
    store.change_shard_count(PREFIX, 2, OrderingMode.STRICT)
    store.tick()
    assert store.describe_prefix(PREFIX)["migration"]["active"] is True  # the group has 3 to read

    store.set_retention(PREFIX, RetentionPolicy(max_age_ms=600_000))
    assert pass_report(store).trimmed_by_caps == {V1_0: 3}
    assert entry_ids(store, V1_0) == [] and read(store, V1_0, GROUP, 10) == []
    row = next(r for r in store.backlog(PREFIX, GROUP) if r["shard"] == "v1:0")
    assert (row["length"], row["lag"], row["pending"]) == (0, 0, 0)  # Redis itself still says lag 3

    store.tick()
    prefix = store.describe_prefix(PREFIX)
    assert prefix["migration"]["active"] is False
    assert [v["state"] for v in prefix["topology"]["versions"]] == ["RETIRED", "ACTIVE"]
    assert pass_report(store).deleted_keys == (V1_0,)


# ------------------------------------------------------------------------------------------ bounded work


def test_each_pass_visits_at_most_max_streams_and_the_cursor_continues(store: MetadataStore) -> None:
    config = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)
    for prefix in ("alpha", "beta", "gamma"):
        store.create_group(
            CreateGroup(stream_prefix=prefix, consumer_group=GROUP, shard_count=2, config=config)
        )
    visited: list[list[tuple[str, int]]] = []
    cursors: list[bytes] = []
    for _ in range(3):
        reports = store.retention_pass(max_streams=4)
        visited.append([(r.stream_prefix, r.streams_visited) for r in reports])
        cursors.append(store.client.get(RETENTION_CURSOR_KEY))
    assert visited[0] == [("alpha", 2), ("beta", 2)]
    assert cursors == [b"beta v1:1", b"alpha v1:1", b"gamma v1:1"]
    assert visited[1] == [("gamma", 2), ("alpha", 2)]  # wraps around within the pass
    assert visited[2] == [("beta", 2), ("gamma", 2)]
    assert sum(n for run in visited for _, n in run) == 12  # every one of the 6 streams twice

    # A budget above the total visits every stream exactly once.
    reports = store.retention_pass(max_streams=100)
    assert sorted((r.stream_prefix, r.streams_visited) for r in reports) == [
        ("alpha", 2),
        ("beta", 2),
        ("gamma", 2),
    ]


def test_a_split_prefix_is_one_report_and_an_unreadable_cursor_restarts(store: MetadataStore) -> None:
    create(store, shard_count=3)
    assert [r.streams_visited for r in store.retention_pass(max_streams=2)] == [2]
    assert store.client.get(RETENTION_CURSOR_KEY) == b"orders v1:1"
    # orders v1:2, then orders v1:0 again: both in one report for the prefix.
    assert [(r.stream_prefix, r.streams_visited) for r in store.retention_pass(max_streams=2)] == [
        ("orders", 2)
    ]
    store.client.set(RETENTION_CURSOR_KEY, "garbage")
    assert [r.streams_visited for r in store.retention_pass(max_streams=100)] == [3]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
@pytest.mark.parametrize("name", ["max_streams", "max_trim_per_stream"])
def test_the_bounds_must_be_positive(store: MetadataStore, name: str, bad: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        store.retention_pass(**{name: bad})
    assert refused.value.details == {"field": name}


def test_a_prefix_that_cannot_be_read_is_reported_and_the_others_are_trimmed(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.client.sadd(rkeys.PREFIXES_KEY, "broken")
    store.client.hset(rkeys.meta_key("broken"), mapping={"t": "{not json", "t#": "1"})
    ids = produce(store, V1_0, 3)
    store.client.xack(V1_0, GROUP, *read(store, V1_0, GROUP, 3))
    reports = {r.stream_prefix: r for r in store.retention_pass()}
    assert reports["broken"].error is not None and reports["broken"].error.code.value == "METADATA_CORRUPT"
    assert reports[PREFIX].trimmed == {V1_0: 3} and len(ids) == 3
