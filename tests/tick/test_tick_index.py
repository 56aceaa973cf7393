"""The tick index (docs/store.md, "The tick index"): the tick reads only the groups with something due
(a lease, a revocation deadline, a clock to start, ended members to forget), finds them in
O(due) through the lease index ``rsc:{P}:lz`` and each group's ``ts:`` field, and still reads every
group once a minute whatever the index says."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.protocol.errors import ConcurrentUpdate
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore, ticking
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, SHORT_LEASE, Member, create_group, member_view, wait_for_lease_end

META, INDEX = rkeys.meta_key(PREFIX), rkeys.lease_index_key(PREFIX)
LONG_LEASE = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)


def indexed(store: MetadataStore) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in store.client.zrange(INDEX, 0, -1, withscores=True)}


def leases(store: MetadataStore) -> dict[str, int]:
    """Every live member's l: field (the index holds exactly these)."""
    meta = {k.decode(): v.decode() for k, v in store.client.hgetall(META).items()}
    return {k[2:]: int(meta["l:" + k[2:]]) for k in meta if k.startswith("m:")}


def loads(store: MetadataStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str] | None]:
    """The groups every load of the store asks for (None: all), from now on."""
    seen: list[list[str] | None] = []
    original = store.reader.load

    def counting(prefix: str, groups: list[str] | None, lease_of: str | None = None) -> Any:
        seen.append(None if groups is None else list(groups))
        return original(prefix, groups, lease_of)

    monkeypatch.setattr(store.reader, "load", counting)
    return seen


def leave(store: MetadataStore, member: Member) -> None:
    store.heartbeat(PREFIX, member.group, Heartbeat(member_id=member.member_id, member_epoch=-1))


def partial_tick(store: MetadataStore, **kwargs: int) -> Any:
    """A tick that trusts the index (not the once-a-minute full one)."""
    store.ticker.full_tick_at[PREFIX] = time.monotonic()
    return store.tick(**kwargs)


def test_the_index_holds_every_live_member_at_its_lease(store: MetadataStore) -> None:
    create_group(store, config=LONG_LEASE)
    create_group(store, "other", config=LONG_LEASE)
    a, b, c = Member(store, "a"), Member(store, "b"), Member(store, "c", "other")
    for member in (a, b, c, a, b, a, b):
        member.heartbeat()
    assert indexed(store) == leases(store) and set(indexed(store)) == {"billing:a", "billing:b", "other:c"}
    a.heartbeat()  # a steady heartbeat: the fast path moves the index entry with the l: field
    assert indexed(store) == leases(store)
    leave(store, a)
    assert set(indexed(store)) == {"billing:b", "other:c"} and indexed(store) == leases(store)
    store.delete_group(PREFIX, "other")
    assert set(indexed(store)) == {"billing:b"}
    store.delete_prefix(PREFIX, force=True)
    assert not store.client.exists(INDEX)


def test_a_tick_with_nothing_due_reads_no_group_and_one_with_a_lease_due_reads_only_its_group(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_group(store)  # a short lease
    create_group(store, "busy", config=LONG_LEASE)
    m1, m3 = Member(store, "m1"), Member(store, "m3", "busy")
    m1.heartbeat()
    m3.heartbeat()
    seen = loads(store, monkeypatch)
    [report] = partial_tick(store)
    assert seen == [] and report.expired == ()

    wait_for_lease_end(store, "m1")
    seen.clear()  # the waiting read the group (describe)
    [report] = partial_tick(store)
    assert report.expired == ((GROUP, "m1"),)
    assert seen == [[GROUP]]  # the busy group was not read
    assert "billing:m1" not in indexed(store)


def test_a_member_renewing_its_own_lease_is_reindexed_not_expired_and_its_group_not_read(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_group(store)
    m1 = Member(store, "m1")
    m1.heartbeat()
    epoch = store.client.hget(META, f"m:{GROUP}:m1").decode()
    wait_for_lease_end(store, "m1")
    seconds, micros = store.client.time()
    far = seconds * 1000 + micros // 1000 + SHORT_LEASE.lease_ttl_ms // 2  # within a lease TTL, as written
    store.client.hset(rkeys.lease_records_key(PREFIX), f"{GROUP}:m1", f"{epoch} {far}")  # renew_lease.lua's
    seen = loads(store, monkeypatch)
    [report] = partial_tick(store)
    assert report.expired == () and seen == []
    assert indexed(store)[f"{GROUP}:m1"] == far
    assert member_view(store, "m1")["state"] == "STABLE"


def test_revocation_deadlines_clocks_and_ended_members_make_a_group_due(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_group(store, config=LONG_LEASE)
    m1, m2 = Member(store, "m1"), Member(store, "m2")
    m1.heartbeat()
    m2.heartbeat()  # the target now takes shards from m1, which has not heard of it: a clock to start
    seen = loads(store, monkeypatch)
    partial_tick(store)
    assert seen == [[GROUP]]
    assert member_view(store, "m1")["revocation_deadline_ms"] is not None
    seen.clear()  # (describe reads the group too)
    partial_tick(store)
    assert seen == []  # started: nothing is due before the deadline (60 s on)

    leave(store, m2)  # m1 owes nothing any more: its clock must stop (due now)
    seen.clear()
    partial_tick(store)
    assert seen == [[GROUP]]
    assert member_view(store, "m1")["revocation_deadline_ms"] is None
    # An ended member (m2): forgotten at once under a cap of 0, kept under the default cap.
    seen.clear()
    partial_tick(store)
    assert seen == []
    [report] = partial_tick(store, max_ended_members=0)
    assert seen == [[GROUP]] and report.collected == ((GROUP, "m2"),)


def test_metadata_from_before_the_index_is_ticked_and_indexed_by_its_next_commit(
    store: MetadataStore,
) -> None:
    create_group(store)
    m1, m2 = Member(store, "m1"), Member(store, "m2")
    m1.heartbeat()
    m2.heartbeat()
    store.client.delete(INDEX)
    store.client.hdel(META, f"ts:{GROUP}")  # as the previous format left the hash
    m3 = Member(store, "m3")
    m3.heartbeat()  # a join (always a commit): the group is indexed whole
    assert set(indexed(store)) == {f"{GROUP}:m{i}" for i in (1, 2, 3)} and indexed(store) == leases(store)

    store.client.delete(INDEX)
    store.client.hdel(META, f"ts:{GROUP}")
    wait_for_lease_end(store, "m1", keep_alive=(m2, m3))
    [report] = partial_tick(store)  # no ts: field: the group is due, whatever the index holds
    assert report.expired == ((GROUP, "m1"),)


def test_the_tick_reads_every_group_once_a_minute_whatever_the_index_says(store: MetadataStore) -> None:
    create_group(store)
    m1 = Member(store, "m1")
    m1.heartbeat()
    store.client.zrem(INDEX, f"{GROUP}:m1")  # an index that lost an entry (a bug, a hand edit)
    wait_for_lease_end(store, "m1")
    [report] = partial_tick(store)
    assert report.expired == ()  # the index passed the group over...
    store.ticker.full_tick_at[PREFIX] = time.monotonic() - 61
    [report] = store.tick()
    assert report.expired == ((GROUP, "m1"),)  # ...for at most a minute


def test_a_full_tick_that_failed_is_tried_again_at_the_next_tick(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_group(store)
    Member(store, "m1").heartbeat()
    original = store.committer.execute

    def conflicting(*args: Any, **kwargs: Any) -> Any:
        raise ConcurrentUpdate("a conflict storm")

    monkeypatch.setattr(store.committer, "execute", conflicting)
    [report] = store.tick()
    assert report.error is not None and PREFIX not in store.ticker.full_tick_at
    monkeypatch.setattr(store.committer, "execute", original)
    seen = loads(store, monkeypatch)
    store.tick()
    assert seen == [None] and PREFIX in store.ticker.full_tick_at  # full again, and only now marked done


def test_past_due_entries_beyond_what_one_tick_looks_at_are_repaired_a_batch_per_tick(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_group(store)
    members = [Member(store, f"m{i}") for i in range(3)]
    for member in members:
        member.heartbeat()
    records = rkeys.lease_records_key(PREFIX)
    wait_for_lease_end(store, "m0")
    wait_for_lease_end(store, "m1")
    wait_for_lease_end(store, "m2")
    for member in members:  # all three renew themselves (the API is down, say)
        epoch = store.client.hget(META, f"m:{GROUP}:{member.member_id}").decode()
        far = int(store.client.hget(META, f"l:{GROUP}:{member.member_id}")) + 30_000
        store.client.hset(records, f"{GROUP}:{member.member_id}", f"{epoch} {far}")
    monkeypatch.setattr(ticking, "TICK_INDEX_LOOK", 2)
    seen = loads(store, monkeypatch)
    partial_tick(store)  # two entries looked at and moved; beyond them, unknown: every group is read
    assert seen == [None]
    seen.clear()
    [report] = partial_tick(store)  # the last one moved: nothing is due
    assert seen == [] and report.expired == ()
    assert all(score > time.time() * 1000 for score in indexed(store).values())
