"""The Redis metadata store against a real Redis server started by the suite."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from config.embedded_redis import RedisServer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import (
    CoordinatorError,
    FencedMemberEpoch,
    GroupAlreadyExists,
    GroupNotFound,
    InvalidRequest,
    MigrationInProgress,
    StoreUnavailable,
)
from coordinator.protocol.group import Heartbeat, revocation_schedule_ms
from coordinator.protocol.model import GroupConfig, OrderingMode, Shard
from coordinator.store import MetadataStore, codec
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create

COMMIT_KEYS = codec.commit_keys(PREFIX)


def hb(
    store: MetadataStore, member: str, epoch: int, owned: Any = None, capacity: int | None = None
) -> dict[str, Any]:
    owned_set = None if owned is None else frozenset(Shard.parse(s) for s in owned)
    return store.heartbeat(
        PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=epoch, owned=owned_set, capacity=capacity)
    )


def shards_of(response: dict[str, Any]) -> list[str]:
    return [s["shard"] for s in response["shards"]]


def fields(store: MetadataStore) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in store.raw_metadata(PREFIX).items()}


def answered_from(stored_response: str, assignment_epoch: str, group_epoch: str) -> str:
    """What fast_heartbeat.lua answers from a stored r: value: the same JSON with the group's current
    epochs (the stored one starts with the epochs of the commit that wrote it)."""
    head, rest = stored_response.split(',"heartbeat_interval_ms":', 1)
    assert head.startswith('{"assignment_epoch":') and ',"group_epoch":' in head, stored_response
    epochs = f'{{"assignment_epoch":{assignment_epoch},"group_epoch":{group_epoch}'
    return f'{epochs},"heartbeat_interval_ms":{rest}'


def assert_derived_fields_consistent(store: MetadataStore, legacy: tuple[str, ...] = ()) -> None:
    """What is stored equals what the documents imply: the commit's diff writing lost nothing, and left
    no signature of a member that is not settled. A stored response (r:) may carry the epochs of an
    earlier commit (a bump that left its member settled does not rewrite it): what the fast path answers
    from it, with the group's current epochs, is exactly what the documents imply. ``legacy``: groups
    not committed since the version before s: wrote them (their f: signatures, responses and missing
    ge: are that version's, which this one's fast path never reads)."""
    _, state = store._read(PREFIX, None)
    assert state is not None

    def compared(k: str) -> bool:
        kind, _, rest = k.partition(":")
        if kind in {"s", "f", "r", "ge"} and rest.split(":", 1)[0] in legacy:
            return False
        return kind in {"route", "ml", "lt", "ae", "ge", "ts", "m", "o", "rv", "s", "r", "f"}

    expected = {k: v for k, v in codec.derived_fields(state).items() if compared(k)}
    stored = {k: v for k, v in fields(store).items() if compared(k)}
    for k, v in list(stored.items()):
        if k.startswith("r:"):
            name = k.split(":")[1]
            stored[k] = answered_from(v, stored[f"ae:{name}"], stored[f"ge:{name}"])
    assert stored == expected
    # The schedule index: one entry per live member the tick must look at, scored by when.
    schedule = {
        f"{name}:{mid}": at
        for name, group in state.groups.items()
        for mid, member in group.members.items()
        if (at := revocation_schedule_ms(group, member)) is not None
    }
    indexed = store.client.zrange(rkeys.schedule_index_key(PREFIX), 0, -1, withscores=True)
    assert {tag.decode(): int(score) for tag, score in indexed} == schedule


def test_hand_over_between_two_members(store: MetadataStore) -> None:
    create(store, shard_count=4)
    a = hb(store, "a", 0, [], capacity=2)
    assert (a["member_epoch"], shards_of(a)) == (1, ["v1:0", "v1:1", "v1:2", "v1:3"])
    assert a["shards"][0]["stream_key"] == "rsc:{orders}:v1:0"
    b = hb(store, "b", 0, [], capacity=2)
    assert (b["member_state"], b["member_epoch"], shards_of(b)) == ("UNRELEASED_SHARDS", 2, [])
    a = hb(store, "a", 1)
    assert (a["member_state"], a["revoking"]) == ("UNREVOKED_SHARDS", ["v1:2", "v1:3"])
    assert fields(store)["o:billing:v1:2"] == "a 0 V"  # still a's (ack only) until released
    a = hb(store, "a", 1, ["v1:0", "v1:1"])
    assert (a["member_state"], a["member_epoch"]) == ("STABLE", 2)
    b = hb(store, "b", 2)
    assert (b["member_state"], shards_of(b)) == ("STABLE", ["v1:2", "v1:3"])
    assert fields(store)["o:billing:v1:2"] == "b 2 R"
    assert_derived_fields_consistent(store)
    view = store.describe_group(PREFIX, GROUP)
    assert (view["state"], view["group_epoch"], view["assignment_epoch"]) == ("STABLE", 2, 2)


def redis_ms(store: MetadataStore) -> int:
    """Redis's clock in ms, the clock leases are measured with."""
    seconds, micros = store.client.time()
    return seconds * 1000 + micros // 1000


def test_steady_state_heartbeat_is_one_round_trip_renewing_only_the_lease(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=1)
    before = fields(store)
    # The lease is Redis's clock in ms plus the TTL: let that clock move on, so the renewal differs.
    joined_ms = redis_ms(store)
    while redis_ms(store) <= joined_ms:
        time.sleep(0.001)
    sent: list[object] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent.append(command)
        original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    store.client.config_resetstat()
    sent.clear()
    again = hb(store, "a", 1, shards_of(a))
    assert len(sent) == 1  # one round trip
    monkeypatch.undo()
    stats = store.client.info("commandstats")
    # A single script, and exactly one write inside it.
    assert stats["cmdstat_evalsha"]["calls"] == 1 and stats["cmdstat_hset"]["calls"] == 1
    after = fields(store)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {"l:billing:a"}
    assert again == a
    # The lease is Redis's clock plus the TTL.
    seconds, micros = store.client.time()
    assert 0 <= int(after["l:billing:a"]) - (seconds * 1000 + micros // 1000) <= 10_000


def test_create_group_creates_streams_and_consumer_groups_idempotently(store: MetadataStore) -> None:
    create(store, shard_count=3)
    for i in range(3):
        groups = store.client.xinfo_groups(f"rsc:{{orders}}:v1:{i}")
        assert [g["name"] for g in groups] == [b"billing"]
    with pytest.raises(GroupAlreadyExists):
        create(store, shard_count=3)
    create(store, shard_count=3, group="audit")  # a second group shares the topology
    assert {g["name"] for g in store.client.xinfo_groups("rsc:{orders}:v1:0")} == {b"billing", b"audit"}
    assert store.stream_prefixes() == ["orders"]


def test_rejected_commands_change_nothing(store: MetadataStore) -> None:
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=1)
    before = store.raw_metadata(PREFIX)
    with pytest.raises(FencedMemberEpoch):
        hb(store, "a", 7, shards_of(a))
    with pytest.raises(InvalidRequest):
        hb(store, "a", 0, [])  # join without capacity
    with pytest.raises(GroupNotFound):
        store.heartbeat(PREFIX, "nope", Heartbeat(member_id="a", member_epoch=1))
    with pytest.raises(InvalidRequest):
        store.set_max_concurrency(PREFIX, GROUP, 0)
    assert store.raw_metadata(PREFIX) == before


def test_resharding_creates_the_new_version_and_the_tick_retires_the_old(store: MetadataStore) -> None:
    create(store, shard_count=2)
    store.client.xadd("rsc:{orders}:v1:0", {"k": "v"})
    a = hb(store, "a", 0, [], capacity=1)
    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    assert fields(store)["route"] == "2 4 1"
    with pytest.raises(MigrationInProgress):
        store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)
    for i in range(4):
        assert [g["name"] for g in store.client.xinfo_groups(f"rsc:{{orders}}:v2:{i}")] == [b"billing"]
    (report,) = store.tick()
    assert report.drained == (("billing", "v1:1"),)  # v1:0 still has an undelivered entry
    a = hb(store, "a", a["member_epoch"])
    # Read and ack the entry (the data plane does this fenced); then v1:0 drains too.
    entries = store.client.xreadgroup("billing", "a", {"rsc:{orders}:v1:0": ">"})
    store.client.xack("rsc:{orders}:v1:0", "billing", entries[0][1][0][0])
    (report,) = store.tick()
    assert (report.drained, report.retired_versions) == ((("billing", "v1:0"),), (1,))
    assert fields(store)["route"] == "2 4 -"
    assert_derived_fields_consistent(store)


def test_tick_expires_on_redis_time_and_a_renewal_racing_it_wins(store: MetadataStore) -> None:
    create(store, shard_count=2, lease_ttl_ms=1_000, heartbeat_interval_ms=100)
    a = hb(store, "a", 0, [], capacity=1)
    # Push a's lease into the past in Redis (as if Redis's clock had moved on).
    store.client.hset(rkeys.meta_key(PREFIX), "l:billing:a", 1)
    loaded = store._load(PREFIX, None)
    # A renewal lands between the tick's load and its commit: the commit must refuse the expiry.
    store.client.hset(rkeys.meta_key(PREFIX), "l:billing:a", 2**52)
    from coordinator.protocol.commands import Tick, apply

    outcome = apply(loaded.state, Tick(stream_prefix=PREFIX), loaded.now_ms)
    assert outcome.state is not None and outcome.state.groups[GROUP].members["a"].state.value == "EXPIRED"
    assert store.committer.commit(PREFIX, loaded, outcome) is False
    assert hb(store, "a", 1, shards_of(a))["member_state"] == "STABLE"


def test_store_unavailable_then_recovers_by_itself(disposable_redis: RedisServer) -> None:
    store = MetadataStore.from_url(disposable_redis.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    create(store, shard_count=2)
    hb(store, "a", 0, [], capacity=1)
    disposable_redis.pause()
    try:
        with pytest.raises(StoreUnavailable):
            store.describe_group(PREFIX, GROUP)
    finally:
        disposable_redis.resume()
    assert store.describe_group(PREFIX, GROUP)["group_epoch"] == 1
    disposable_redis.kill()
    with pytest.raises(StoreUnavailable) as raised:
        hb(store, "a", 1)
    assert raised.value.retriable and not isinstance(raised.value.__cause__, StoreUnavailable)
    assert isinstance(raised.value.__cause__, redis.RedisError)
    disposable_redis.restart()  # an empty server: no persistence in tests
    with pytest.raises(GroupNotFound):
        hb(store, "a", 1)
    create(store, shard_count=2)
    assert hb(store, "a", 0, [], capacity=1)["member_epoch"] == 1


def test_deleting_a_group_forgets_its_offsets(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.client.xadd("rsc:{orders}:v1:0", {"k": "old"})
    store.client.xreadgroup("billing", "a", {"rsc:{orders}:v1:0": ">"})  # consumed (pending) by the group
    store.delete_group(PREFIX, GROUP)
    assert store.client.xinfo_groups("rsc:{orders}:v1:0") == []
    with pytest.raises(GroupNotFound):
        store.describe_group(PREFIX, GROUP)
    # Re-created from the start: the old entry is delivered again, nothing is pending from before.
    from coordinator.protocol.commands import CreateGroup
    from coordinator.protocol.model import GroupConfig

    store.create_group(
        CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, config=GroupConfig()), start_from="earliest"
    )
    (group,) = store.client.xinfo_groups("rsc:{orders}:v1:0")
    assert (group["pending"], group["last-delivered-id"]) == (0, b"0-0")


def test_an_unreadable_prefix_does_not_hide_the_others_from_listings(store: MetadataStore) -> None:
    create(store, shard_count=1)
    store.client.sadd("rsc:prefixes", "aaa")
    store.client.hset(rkeys.meta_key("aaa"), mapping={"t": "{not json", "t#": "1"})
    assert [(r["stream_prefix"], r["consumer_group"]) for r in store.list_groups()] == [(PREFIX, GROUP)]


def test_a_commit_replayed_after_a_lost_reply_is_recognised_not_applied_twice(store: MetadataStore) -> None:
    create(store, shard_count=1)
    rev = fields(store)["t#"]
    args = ["token-1", "0", "2", "t#", rev, "2", "t#", str(int(rev) + 1), "0", "0", "0", "0", "0"]
    assert store.committer.commit_script(keys=COMMIT_KEYS, args=args)[0] == 1
    # The same commit again (redis-py retrying after a lost reply): the revision moved on, but the token
    # says it was ours, so it reports committed and writes nothing.
    assert store.committer.commit_script(keys=COMMIT_KEYS, args=args) == [2]
    assert fields(store)["t#"] == str(int(rev) + 1)
    other = ["token-2", *args[1:]]
    assert store.committer.commit_script(keys=COMMIT_KEYS, args=other) == [0]  # a real conflict


# ------------------------------------------------------------------------------------------ lost races
# Issue 10 item 7: a losing concurrent create_group or shard-count change leaves no orphan stream keys or
# consumer groups. Both racers run their before_commit (creating streams and consumer groups) before
# either commits: a barrier in front of the first commit of each.


def _racing(redis_url: str, barrier: threading.Barrier) -> MetadataStore:
    racer = MetadataStore.from_url(redis_url)
    commit = racer.committer.commit
    first = [True]

    def commit_after_the_rival_prepared(*args: Any) -> bool:
        if first[0]:
            first[0] = False
            barrier.wait(timeout=10)
        return commit(*args)

    racer.committer.commit = commit_after_the_rival_prepared  # type: ignore[method-assign]
    return racer


def _race(redis_url: str, *actions: Callable[[MetadataStore], Any]) -> list[Any]:
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(i: int) -> None:
        racer = _racing(redis_url, barrier)
        try:
            results[i] = actions[i](racer)
        except CoordinatorError as e:
            results[i] = e
        finally:
            racer.client.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def _layout(store: MetadataStore) -> dict[str, list[str]]:
    """Every stream key of PREFIX with the names of its Redis consumer groups."""
    keys = sorted(k.decode() for k in store.client.keys(f"rsc:{{{PREFIX}}}:v*"))
    return {k: sorted(g["name"].decode() for g in store.client.xinfo_groups(k)) for k in keys}


def _expected(versions: dict[int, int], groups: list[str]) -> dict[str, list[str]]:
    return {
        f"rsc:{{{PREFIX}}}:v{v}:{i}": sorted(groups) for v, count in versions.items() for i in range(count)
    }


def _create(group: str, shard_count: int) -> Callable[[MetadataStore], Any]:
    config = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)
    command = CreateGroup(stream_prefix=PREFIX, consumer_group=group, shard_count=shard_count, config=config)
    return lambda s: s.create_group(command)


@pytest.mark.parametrize("groups", [("billing", "billing"), ("billing", "audit")], ids=["same", "other"])
def test_a_lost_create_race_leaves_no_debris(
    groups: tuple[str, str], store: MetadataStore, redis_url: str
) -> None:
    results = _race(redis_url, _create(groups[0], 4), _create(groups[1], 8))
    errors = [r for r in results if isinstance(r, CoordinatorError)]
    assert len(errors) == 1, results
    assert errors[0].code in ("GROUP_ALREADY_EXISTS", "SHARD_COUNT_CONFLICT")
    won = store.describe_prefix(PREFIX)
    (winner,) = won["groups"]
    assert _layout(store) == _expected({1: won["topology"]["shard_count"]}, [winner])


def test_a_lost_shard_count_race_leaves_no_debris(store: MetadataStore, redis_url: str) -> None:
    create(store, shard_count=4)
    create(store, shard_count=4, group="audit")
    results = _race(
        redis_url,
        lambda s: s.change_shard_count(PREFIX, 8, OrderingMode.RELAXED),
        lambda s: s.change_shard_count(PREFIX, 16, OrderingMode.RELAXED),
    )
    errors = [r for r in results if isinstance(r, CoordinatorError)]
    assert [e.code for e in errors] == ["MIGRATION_IN_PROGRESS"], results
    won = store.describe_prefix(PREFIX)["topology"]
    assert won["active_version"] == 2
    assert _layout(store) == _expected({1: 4, 2: won["shard_count"]}, [GROUP, "audit"])


# ---------------------------------------------------------------- settled members, the fast path (issue 8)


def _steady(store: MetadataStore, members: list[str]) -> dict[str, dict[str, Any]]:
    """Join ``members`` one by one and heartbeat until every one is settled (STABLE, owning exactly its
    target) and the group STABLE."""
    views = {m: hb(store, m, 0, [], capacity=1) for m in members}
    for _ in range(10):
        for m, v in views.items():
            views[m] = hb(store, m, v["member_epoch"], shards_of(v))
        stable = all(v["member_state"] == "STABLE" for v in views.values())
        if stable and store.describe_group(PREFIX, GROUP)["state"] == "STABLE":
            return views
    raise AssertionError(f"not steady: {views}")


def _body(view: dict[str, Any]) -> Heartbeat:
    owned = frozenset(Shard.parse(s) for s in shards_of(view))
    return Heartbeat(member_id=view["member_id"], member_epoch=view["member_epoch"], owned=owned)


def test_a_join_that_moves_no_target_rewrites_the_group_fields_only_and_members_stay_fast(
    store: MetadataStore,
) -> None:
    create(store, shard_count=8, max_members=100)
    members = [f"m{i}" for i in range(20)]
    views = _steady(store, members)
    epoch = store.describe_group(PREFIX, GROUP)["group_epoch"]
    before = fields(store)
    assert (before["ae:billing"], before["ge:billing"]) == (str(epoch), str(epoch))

    hb(store, "late", 0, [], capacity=1)  # a join: the group epoch moves; 8 shards, 21 members: no target

    after = fields(store)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # The group's fields and the joiner's own (and the change log's): no other member's s: or r: was
    # rewritten or deleted.
    group_fields = {"g:billing", "g#:billing", "txn", "ml:billing", "ae:billing", "ge:billing", "ds"}
    changed = {k for k in changed if not k.startswith("dl:")}
    assert {k for k in changed if not k.endswith(":late")} == group_fields, changed
    assert (after["ae:billing"], after["ge:billing"]) == (str(epoch + 1), str(epoch + 1))
    # Every member is still settled: the fast path answers each, at its own epoch, with the group's new
    # epochs, and exactly what the full path would answer.
    for m in members:
        answer = store.fast_heartbeat(PREFIX, GROUP, _body(views[m]), None)
        assert answer is not None, m
        assert codec.loads(answer) == {**views[m], "group_epoch": epoch + 1, "assignment_epoch": epoch + 1}
        assert codec.loads(answer) == store.heartbeat(PREFIX, GROUP, _body(views[m]), fast_tried=True)
    assert store.describe_group(PREFIX, GROUP)["state"] == "STABLE"
    assert_derived_fields_consistent(store)


def test_a_bump_that_moves_a_members_target_takes_its_signature_away(store: MetadataStore) -> None:
    create(store, shard_count=4)
    views = _steady(store, ["a", "b"])
    hb(store, "c", 0, [], capacity=1)  # 4 shards over 3 members: a or b gives one up
    moved = [m for m in "ab" if len(store.describe_group(PREFIX, GROUP)["target_assignment"][m]) == 1]
    assert len(moved) == 1
    [giver], [keeper] = moved, [m for m in "ab" if m not in moved]
    assert f"s:billing:{giver}" not in fields(store) and f"r:billing:{giver}" not in fields(store)
    assert store.fast_heartbeat(PREFIX, GROUP, _body(views[giver]), None) is None  # the full path tells it
    told = hb(store, giver, views[giver]["member_epoch"], shards_of(views[giver]))
    assert told["member_state"] == "UNREVOKED_SHARDS" and len(told["revoking"]) == 1
    assert store.fast_heartbeat(PREFIX, GROUP, _body(views[keeper]), None) is not None
    assert_derived_fields_consistent(store)


def test_signatures_go_with_their_member_and_with_the_group(store: MetadataStore) -> None:
    create(store, shard_count=4)
    _steady(store, ["a", "b"])
    assert {"s:billing:a", "r:billing:a", "s:billing:b"} <= set(fields(store))
    hb(store, "a", -1)  # a leaves: its signature goes
    assert not {"s:billing:a", "r:billing:a"} & set(fields(store))
    store.delete_group(PREFIX, GROUP)
    assert not [k for k in fields(store) if k.endswith(":b") or k.startswith(("ae:", "ge:", "s:", "r:"))]


def test_metadata_from_before_the_s_field_takes_the_full_path_once_per_member(store: MetadataStore) -> None:
    """The version before wrote f: (valid only at the assignment epoch ae:) and no ge:. The fast path
    answers nothing of it; a member's first full-path heartbeat writes its s:, r:, ae: and ge: and
    deletes its f:, and from then on it is answered fast."""
    create(store, shard_count=2)
    a = _steady(store, ["a"])["a"]
    meta = f"rsc:{{{PREFIX}}}:meta"
    legacy = fields(store)["s:billing:a"]
    store.client.hdel(meta, "s:billing:a", "ge:billing")
    store.client.hset(meta, "f:billing:a", legacy)  # as the previous version left it
    assert store.fast_heartbeat(PREFIX, GROUP, _body(a), None) is None
    hb(store, "a", a["member_epoch"], shards_of(a))
    now = fields(store)
    assert "f:billing:a" not in now and now["s:billing:a"] == legacy and "ge:billing" in now
    assert store.fast_heartbeat(PREFIX, GROUP, _body(a), None) is not None
    assert_derived_fields_consistent(store)
