"""Delta loads (docs/store.md, "Delta loads"): a store that knows a group as it was at a position of the
change log reads only the member records written since, and a heartbeat reads only its own lease (and
those of the members whose records changed). Whatever it reads that way must be what a process that
never read the prefix reads, also after the log wrapped, after a commit that touched many records, and
after Redis went back to an older state (a restored snapshot)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import ClientInfo, Group, Shard
from coordinator.store import MetadataStore
from coordinator.store.replies import text
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_store import _steady, assert_derived_fields_consistent

META = rkeys.meta_key(PREFIX)


class Spy:
    """What each load of one store read, per group row: (group, whole, records read, leases read)."""

    def __init__(self, store: MetadataStore) -> None:
        self.rows: list[tuple[str, int, list[str], list[str]]] = []
        script = store.reader.load_script

        def spying(*, keys: list[str], args: list[Any]) -> Any:
            reply = script(keys=keys, args=args)
            for row in reply[4]:
                read, leases = [text(m) for m in row[5]], [text(m) for m in row[8]]
                self.rows.append((text(row[0]), int(row[4]), read, leases))
            return reply

        store.reader.load_script = spying

    def last(self) -> tuple[str, int, list[str], list[str]]:
        return self.rows[-1]


def fresh(store: MetadataStore) -> Any:
    """What a process that never read this prefix reads (every record, every lease)."""
    return MetadataStore(store.client)._load(PREFIX, None).state


def new_client(store: MetadataStore, member: str, view: dict[str, Any], version: str) -> dict[str, Any]:
    """A full-path heartbeat of a steady member (its client version changed): it rewrites its record."""
    hb = replace(_steady_hb(view), client=ClientInfo(version=version))
    return store.heartbeat(PREFIX, GROUP, hb)


@pytest.fixture
def formed(store: MetadataStore) -> dict[str, dict[str, Any]]:
    create(store, shard_count=8, max_members=200)
    return _steady(store, [f"m{i:02d}" for i in range(30)])


def test_a_store_that_knows_the_group_reads_only_the_records_written_since(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    other = MetadataStore(store.client)  # another API process
    spy = Spy(store)
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1:3] == (0, [])  # nothing written since its own last commit
    new_client(other, "m03", formed["m03"], "2")
    new_client(other, "m07", formed["m07"], "2")
    view = store.describe_group(PREFIX, GROUP)
    name, whole, records, leases = spy.last()
    assert (name, whole, records) == (GROUP, 0, ["m03", "m07"])
    assert len(leases) == 30  # a description shows every member's lease
    assert {m["member_id"]: m["client"]["version"] for m in view["members"]}["m07"] == "2"
    assert store._load(PREFIX, None).state == fresh(store)

    # A heartbeat reads its own lease and those of the members whose records it reads, nothing else.
    new_client(other, "m11", formed["m11"], "3")
    new_client(store, "m05", formed["m05"], "3")
    heartbeat_row = next(r for r in reversed(spy.rows) if r[2] == ["m11"])
    assert heartbeat_row[1:] == (0, ["m11"], ["m05", "m11"])
    # Its own commit came right after its load: it knows the group at that commit's position.
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1:3] == (0, [])
    assert store._load(PREFIX, None).state == fresh(store)
    assert_derived_fields_consistent(store)


def test_a_heartbeat_decides_on_the_same_group_but_for_the_other_members_leases(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    seen = store._load(PREFIX, None).state
    assert seen is not None
    was = {m: seen.groups[GROUP].members[m].lease_deadline_ms for m in ("m01", "m02")}
    for m in ("m01", "m02"):  # both leases renewed past the store's view (as the fast path renews them)
        store.client.hset(META, f"l:{GROUP}:{m}", was[m] + 5_000)
    partial = store._load(PREFIX, [GROUP], lease_of="m01").state
    whole = fresh(store)
    assert partial is not None and whole is not None
    p, w = partial.groups[GROUP], whole.groups[GROUP]
    assert p.members["m01"] == w.members["m01"]  # its own lease, read afresh
    assert p.members["m01"].lease_deadline_ms == was["m01"] + 5_000
    assert p.members["m02"].lease_deadline_ms == was["m02"]  # another's lease as the store last saw it
    assert w.members["m02"].lease_deadline_ms == was["m02"] + 5_000
    assert without_leases(p) == without_leases(w)


def _steady_hb(view: dict[str, Any]) -> Heartbeat:
    owned = frozenset(Shard.parse(a["shard"]) for a in view["shards"])
    return Heartbeat(member_id=view["member_id"], member_epoch=view["member_epoch"], owned=owned)


def without_leases(group: Group) -> Group:
    members = {
        mid: replace(m, lease_deadline_ms=0, last_heartbeat_ms=0) for mid, m in group.members.items()
    }
    return replace(group, members=members)


def test_a_store_reads_the_group_whole_once_the_log_has_wrapped(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    other = MetadataStore(store.client)
    spy = Spy(store)
    store.describe_group(PREFIX, GROUP)
    view = formed["m04"]
    for i in range(520):  # more commits than the log keeps (LOG_SLOTS)
        view = new_client(other, "m04", view, f"v{i}")
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1] == 1
    assert store._load(PREFIX, None).state == fresh(store)
    new_client(other, "m09", formed["m09"], "x")
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1:3] == (0, ["m09"])  # and from there on a delta again


def test_a_commit_of_many_records_names_the_group_whole(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    other = MetadataStore(store.client)
    more = _steady(other, [f"n{i:02d}" for i in range(70)])  # 100 members now
    spy = Spy(store)
    store.describe_group(PREFIX, GROUP)
    for m in more:  # 70 leases end behind the store's back; one tick expires them in one commit
        store.client.hset(META, f"l:{GROUP}:{m}", 1)
    [report] = other.tick()
    assert len(report.expired) == 70
    entry = text(store.client.hget(META, f"dl:{int(store.client.hget(META, 'ds')) % 512}"))
    assert entry.split(" ")[2:] == [f"{GROUP}:*"]
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1] == 1
    assert store._load(PREFIX, None).state == fresh(store)


def test_a_store_notices_that_redis_went_back_to_an_older_state(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    """A restored snapshot (or a replica promoted before it caught up) holds an older change log; the
    commits after it reuse its sequence numbers, never its tokens."""
    other = MetadataStore(store.client)
    spy = Spy(store)
    snapshot = store.client.dump(META)
    new_client(other, "m03", formed["m03"], "lost")  # this commit will be lost
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1:3] == (0, ["m03"])
    store.client.restore(META, 0, snapshot, replace=True)
    new_client(other, "m08", formed["m08"], "after")  # the same sequence number again, another token
    new_client(other, "m09", formed["m09"], "after")
    view = store.describe_group(PREFIX, GROUP)
    assert spy.last()[1] == 1
    assert store._load(PREFIX, None).state == fresh(store)
    versions = {m["member_id"]: m["client"]["version"] for m in view["members"]}
    assert (versions["m03"], versions["m08"]) == ("", "after")


def test_metadata_without_a_change_log_is_read_whole_until_its_next_commit(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    """Metadata written before the change log existed has no ds or dl: fields."""
    other = MetadataStore(store.client)
    store.client.hdel(META, "ds", *[k for k in store.client.hkeys(META) if k.startswith(b"dl:")])
    spy = Spy(store)
    store.describe_group(PREFIX, GROUP)
    store.describe_group(PREFIX, GROUP)
    assert [r[1] for r in spy.rows] == [1, 1]
    new_client(other, "m02", formed["m02"], "2")  # the first commit starts the log
    store.describe_group(PREFIX, GROUP)
    new_client(other, "m06", formed["m06"], "2")
    store.describe_group(PREFIX, GROUP)
    assert [r[1:3] for r in spy.rows[2:]] == [(1, spy.rows[2][2]), (0, ["m06"])]
    assert store._load(PREFIX, None).state == fresh(store)


def _old_coordinator_commit(store: MetadataStore, member: str, version: str, token: str) -> None:
    """What a coordinator from before the change log commits for a member's new client version: the
    record, its revision, gm# and its token, but no ds and no dl: entry."""
    record = json.loads(store.client.hget(META, f"d:{GROUP}:{member}"))
    record["client"]["version"] = version
    rev = int(store.client.hget(META, f"d#:{GROUP}:{member}"))
    store.client.hset(
        META,
        mapping={
            f"d:{GROUP}:{member}": json.dumps(record, sort_keys=True, separators=(",", ":")),
            f"d#:{GROUP}:{member}": rev + 1,
            "txn": token,
        },
    )
    store.client.hincrby(META, f"gm#:{GROUP}", 1)


def test_a_commit_that_is_not_in_the_log_makes_every_store_read_the_group_whole(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    """During an upgrade a coordinator of the version before the change log may still commit: its
    commit is not in the log, and neither a delta up to it nor one across it may be read."""
    other = MetadataStore(store.client)
    spy = Spy(store)
    store.describe_group(PREFIX, GROUP)
    _old_coordinator_commit(store, "m03", "old-1", "token-of-an-old-coordinator")
    view = store.describe_group(PREFIX, GROUP)  # the last commit is not in the log
    assert spy.last()[1] == 1
    assert {m["member_id"]: m["client"]["version"] for m in view["members"]}["m03"] == "old-1"
    new_client(other, "m02", formed["m02"], "new")  # in the log again: the store knows a position
    store.describe_group(PREFIX, GROUP)
    _old_coordinator_commit(store, "m04", "old-2", "another-old-token")
    new_client(other, "m05", formed["m05"], "new")  # a commit after it, in the log: it says the log broke
    view = store.describe_group(PREFIX, GROUP)
    assert spy.last()[1] == 1
    versions = {m["member_id"]: m["client"]["version"] for m in view["members"]}
    assert (versions["m03"], versions["m04"], versions["m05"]) == ("old-1", "old-2", "new")
    assert store._load(PREFIX, None).state == fresh(store)
    new_client(other, "m06", formed["m06"], "new")  # and from there on a delta again
    store.describe_group(PREFIX, GROUP)
    assert spy.last()[1:3] == (0, ["m06"])


def test_groups_known_at_the_same_sequence_are_checked_each_by_its_own_token(store: MetadataStore) -> None:
    """Two groups known at one sequence number, one of them since re-read at that number after a
    rollback (the prefix deleted and made again): the other must not take the first one's verdict."""
    other = MetadataStore(store.client)
    create(store, group="alpha")
    create(store, group="beta")
    for m in ("old1", "old2"):
        store.heartbeat(PREFIX, "beta", Heartbeat(member_id=m, member_epoch=0, capacity=1))
    store._load(PREFIX, None)  # both groups known at (S, T)
    seq = int(store.client.hget(META, "ds"))
    other.delete_prefix(PREFIX, force=True)
    create(other, group="alpha")
    create(other, group="beta")
    other.heartbeat(PREFIX, "beta", Heartbeat(member_id="new1", member_epoch=0, capacity=1))
    n = 0
    while int(store.client.hget(META, "ds")) < seq:  # the same sequence number again, another token
        other.set_max_concurrency(PREFIX, "alpha", 1 + n % 4)
        n += 1
    assert int(store.client.hget(META, "ds")) == seq
    store._load(PREFIX, ["alpha"])  # read whole: alpha is now known at (S, T'), beta still at (S, T)
    state = store._load(PREFIX, None).state
    assert state is not None and sorted(state.groups["beta"].members) == ["new1"]
    assert state == fresh(store)


def test_a_first_logged_commit_after_an_unlogged_one_leaves_its_committer_without_a_position(
    store: MetadataStore, formed: dict[str, dict[str, Any]]
) -> None:
    """Metadata without a log, an old coordinator's commit between a store's load and its commit: the
    store's commit is the log's first, and says nothing of what came before it."""
    store.client.hdel(META, "ds", *[k for k in store.client.hkeys(META) if k.startswith(b"dl:")])
    racing = MetadataStore(store.client)
    script = racing.committer.commit_script
    raced: list[bool] = []

    def commit_after_an_old_one(*, keys: list[str], args: list[Any]) -> Any:
        if not raced:
            raced.append(True)
            _old_coordinator_commit(store, "m03", "old-1", "token-of-an-old-coordinator")
        return script(keys=keys, args=args)

    racing.committer.commit_script = commit_after_an_old_one  # type: ignore[method-assign]
    new_client(racing, "m05", formed["m05"], "new")
    assert racing.reader.decoded[(PREFIX, GROUP)].position is None
    view = racing.describe_group(PREFIX, GROUP)
    assert {m["member_id"]: m["client"]["version"] for m in view["members"]}["m03"] == "old-1"
    assert racing._load(PREFIX, None).state == fresh(store)
