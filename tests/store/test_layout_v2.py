"""Store layout v2 (docs/store.md): a group document that holds the group's header only, one record per
member with its own revision, commits of different members that do not conflict, and metadata of the
previous format (1, the members inside the group document) read as it is and upgraded by the group's
next commit.

The format-1 fixture (fixtures/format1.json) was written by the coordinator at commit 288a9df, the last
version before this layout: stream prefix ``orders``, group ``billing`` (4 shards; ``a`` revoking two
shards for ``b``, which waits for them; ``c`` LEFT) and group ``audit`` (``x`` STABLE), every key of the
metadata hash and of the lease index, and how that version described both groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.protocol.commands import MemberHeartbeat, apply
from coordinator.protocol.describe import describe_group
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore, codec
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_store import assert_derived_fields_consistent

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "format1.json").read_text())
META = rkeys.meta_key(PREFIX)


def redis_now_ms(store: MetadataStore) -> int:
    seconds, micros = store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def load_format1(store: MetadataStore, *, shift_leases: bool) -> None:
    """The fixture's keys into Redis; with ``shift_leases`` every lease moved by the time since it was
    captured (so the members are still live; nothing else moves)."""
    shift = redis_now_ms(store) - FIXTURE["captured_at_ms"] if shift_leases else 0
    meta = {k: (str(int(v) + shift) if k.startswith("l:") else v) for k, v in FIXTURE["meta"].items()}
    store.client.hset(META, mapping=meta)
    store.client.zadd(rkeys.lease_index_key(PREFIX), {t: s + shift for t, s in FIXTURE["lease_index"]})
    store.client.sadd(rkeys.PREFIXES_KEY, PREFIX)


def fields(store: MetadataStore) -> dict[str, bytes]:
    return {k.decode(): v for k, v in store.raw_metadata(PREFIX).items()}


def heartbeat_of(view: dict[str, Any], member: str) -> Heartbeat:
    row = next(m for m in view["members"] if m["member_id"] == member)
    owned = frozenset(Shard.parse(s["shard"]) for s in row["current_assignment"])
    return Heartbeat(member_id=member, member_epoch=row["member_epoch"], owned=owned)


def test_format1_metadata_reads_as_the_previous_version_described_it(store: MetadataStore) -> None:
    load_format1(store, shift_leases=False)
    state = store._load(PREFIX, None).state
    assert state is not None
    for name, before in FIXTURE["describe"].items():
        view = without_static_fields(describe_group(state, name, before["now_ms"]))
        assert view == {k: before[k] for k in view}, name


def without_static_fields(view: dict[str, Any]) -> dict[str, Any]:
    """A description without what static membership added after the fixture was taken (format 1 has no
    static members: their instance_id and held_until_ms are None, and no target is held)."""
    assert view["held_instances"] == []
    members = []
    for m in view["members"]:
        assert (m["instance_id"], m["held_until_ms"]) == (None, None)
        members.append({k: v for k, v in m.items() if k not in ("instance_id", "held_until_ms")})
    return {**{k: v for k, v in view.items() if k != "held_instances"}, "members": members}


def test_the_next_commit_writes_the_group_in_format2_and_it_reads_the_same(store: MetadataStore) -> None:
    load_format1(store, shift_leases=True)
    loaded = store._load(PREFIX, None)
    assert loaded.state is not None
    v1 = loaded.state.groups[GROUP]
    view = describe_group(loaded.state, GROUP, loaded.now_ms)

    # b heartbeats (it still waits for a's shards): the group's first commit since the upgrade.
    store.heartbeat(PREFIX, GROUP, heartbeat_of(view, "b"))

    stored = fields(store)
    header = json.loads(stored[f"g:{GROUP}"])
    assert header["format"] == codec.GROUP_FORMAT and "members" not in header
    assert {m: json.loads(stored[f"d:{GROUP}:{m}"])["state"] for m in "abc"} == {
        "a": "UNREVOKED_SHARDS",
        "b": "UNRELEASED_SHARDS",
        "c": "LEFT",
    }
    assert {stored[f"d#:{GROUP}:{m}"] for m in "abc"} == {b"1"}
    # The other group was not part of that commit: still format 1, and it reads as before.
    assert "members" in json.loads(stored["g:audit"]) and "d:audit:x" not in stored

    fresh = MetadataStore(store.client)._load(PREFIX, None).state  # a process with nothing kept
    assert fresh is not None and fresh == store._load(PREFIX, None).state
    v2 = fresh.groups[GROUP]
    assert (v2.config, v2.group_epoch, v2.assignment_epoch, v2.target, v2.drained, v2.created_at_ms) == (
        v1.config,
        v1.group_epoch,
        v1.assignment_epoch,
        v1.target,
        v1.drained,
        v1.created_at_ms,
    )
    assert v2.members["a"] == v1.members["a"] and v2.members["c"] == v1.members["c"]  # untouched
    assert v2.members["b"].member_epoch == v2.assignment_epoch > v1.members["b"].member_epoch  # b moved on
    # Derived fields and both indexes as format 2 keeps them: a's revocation deadline in the schedule index.
    assert_derived_fields_consistent(store, legacy=("audit",))
    a = v2.members["a"]
    assert a.revocation_deadline_ms is not None
    assert store.client.zscore(rkeys.schedule_index_key(PREFIX), f"{GROUP}:a") == a.revocation_deadline_ms
    assert stored[f"ts:{GROUP}"].split()[0] == b"-"  # the deadlines live in the index now


def test_the_tick_finds_a_format1_groups_revocation_deadline_and_upgrades_the_group(
    store: MetadataStore,
) -> None:
    load_format1(store, shift_leases=True)  # a's revocation deadline (30 s after the capture) has passed
    # As the index and ts: say, nothing more.
    report = store.ticker.tick_prefix(PREFIX, 600_000, 100, full=False)
    assert report is not None and report.expired == ((GROUP, "a"),)
    state = store._load(PREFIX, None).state
    assert state is not None
    a = state.groups[GROUP].members["a"]
    assert (a.state.value, a.end_reason and a.end_reason.value) == ("EXPIRED", "REVOCATION_TIMEOUT")
    assert "members" not in json.loads(fields(store)[f"g:{GROUP}"])
    assert_derived_fields_consistent(store, legacy=("audit",))


# ------------------------------------------------------------------------------------ concurrent commits


@pytest.fixture
def reconciling(store: MetadataStore) -> dict[str, Any]:
    """a and b STABLE with two shards each, then c joins: a and b must each revoke one shard."""
    create(store, shard_count=4)
    for member in ("a", "b"):
        store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=0, capacity=1))
    for _ in range(2):
        view = store.describe_group(PREFIX, GROUP)
        for member in ("a", "b"):
            store.heartbeat(PREFIX, GROUP, heartbeat_of(view, member))
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="c", member_epoch=0, capacity=1))
    return store.describe_group(PREFIX, GROUP)


def decide(store: MetadataStore, hb: Heartbeat) -> tuple[Any, Any]:
    loaded = store._load(PREFIX, [GROUP])
    command = MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb)
    outcome = apply(loaded.state, command, loaded.now_ms)
    assert outcome.state is not None and outcome.state != loaded.state
    return loaded, outcome


def test_heartbeats_of_different_members_decided_on_the_same_state_both_commit(
    store: MetadataStore, reconciling: dict[str, Any]
) -> None:
    other = MetadataStore(store.client)
    a_loaded, a_outcome = decide(store, heartbeat_of(reconciling, "a"))
    b_loaded, b_outcome = decide(other, heartbeat_of(reconciling, "b"))
    assert store.committer.commit(PREFIX, a_loaded, a_outcome)
    # b's decision did not read a's change: no conflict
    assert other.committer.commit(PREFIX, b_loaded, b_outcome)
    after = MetadataStore(store.client)._load(PREFIX, None).state
    assert after is not None
    members = after.groups[GROUP].members
    for member, outcome in (("a", a_outcome), ("b", b_outcome)):
        assert outcome.state is not None
        decided = outcome.state.groups[GROUP].members[member]
        assert members[member].assigned == decided.assigned and members[member].state is decided.state
    assert_derived_fields_consistent(store)


def test_the_same_member_decided_twice_on_one_state_commits_once(
    store: MetadataStore, reconciling: dict[str, Any]
) -> None:
    first = decide(store, heartbeat_of(reconciling, "a"))
    second = decide(MetadataStore(store.client), heartbeat_of(reconciling, "a"))
    assert store.committer.commit(PREFIX, *first)
    assert not store.committer.commit(PREFIX, *second)  # its record moved on: decide again


def test_a_group_wide_change_and_a_members_change_never_both_commit_on_one_state(
    store: MetadataStore, reconciling: dict[str, Any]
) -> None:
    join = Heartbeat(member_id="d", member_epoch=0, capacity=1)  # an epoch bump: group-wide
    a = heartbeat_of(reconciling, "a")
    # The member's change first: the join, decided before it, read a's record as it was.
    join_decision, a_decision = decide(store, join), decide(store, a)
    assert store.committer.commit(PREFIX, *a_decision)
    assert not store.committer.commit(PREFIX, *join_decision)
    # The join first: the member's change, decided before it, read the old header (its target).
    view = store.describe_group(PREFIX, GROUP)
    a = heartbeat_of(view, "a")
    join_decision, a_decision = decide(store, join), decide(store, a)
    assert store.committer.commit(PREFIX, *join_decision)
    assert not store.committer.commit(PREFIX, *a_decision)
    assert_derived_fields_consistent(store)
