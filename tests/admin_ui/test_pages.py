"""The operator pages show what the store says: epochs, both assignments, revocations, migration."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from config.embedded_redis import RedisServer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore, reset_store
from rsc_redis import keys as rkeys

from .helpers import (
    GROUP,
    LIST_URL,
    PREFIX,
    busy_group,
    create,
    hb,
    messages_of,
    table_rows,
    text,
    url,
)

REFRESH_META = '<meta http-equiv="refresh" content="5">'


def test_groups_list_shows_every_group_with_epochs_members_shards_and_a_migration_badge(
    viewer: Client, store: MetadataStore
) -> None:
    busy_group(store)
    store.create_group(CreateGroup(stream_prefix="payments", consumer_group="ledger", shard_count=3))
    r = viewer.get(LIST_URL)
    assert r.status_code == 200
    migrating = "migrating v1 → v2 (strict): 2/4 drained"
    rows = table_rows(r, "groups")
    # prefix, group, state, group epoch, assignment epoch, live members, shards, version, lag, pending,
    # oldest pending, migration
    assert [row[:11] for row in rows] == [
        ["orders", "audit", "EMPTY", "2", "2", "0", "8", "v2", "2", "0", "—"],
        ["orders", "billing", "RECONCILING", "4", "4", "2", "8", "v2", "2", "0", "—"],
        ["payments", "ledger", "EMPTY", "0", "0", "0", "3", "v1", "0", "0", "—"],
    ]
    audit, billing, ledger = (row[11] for row in rows)
    # Progress, then each old shard that holds the group back (owner; lag, pending), then the ETA.
    assert audit == (
        f"{migrating} blocked by v1:1 (no live member; lag 1, pending 0) blocked by v1:3 (no live member; "
        "lag 1, pending 0) ETA: never: no live member (start one, or release the group from the drain)"
    )
    assert billing == (
        f"{migrating} blocked by v1:1 (a; lag 1, pending 0) blocked by v1:3 (a; lag 1, pending 0) "
        "ETA: no estimate yet (no drain rate measured so far)"
    )
    assert ledger == "none"
    body = r.content.decode()
    assert f'href="{url("group_detail")}"' in body
    assert REFRESH_META in body


def test_group_detail_shows_epochs_members_shards_revocations_and_migration(
    viewer: Client, store: MetadataStore
) -> None:
    view = busy_group(store)
    assert (view["group_epoch"], view["assignment_epoch"], view["state"]) == (4, 4, "RECONCILING")
    r = viewer.get(url("group_detail"))
    assert r.status_code == 200
    page = text(r)
    assert "Group epoch 4" in page and "Assignment epoch 4" in page and "RECONCILING" in page
    assert "Live members 2" in page and "Active version v2 (8 shards)" in page

    members = table_rows(r, "members")
    # member id, state, member epoch (previous), lease left, last heartbeat, capacity / effective
    # concurrency (min(capacity, max_concurrency 3)), client, current, target, revoking
    assert [row[:3] for row in members] == [
        ["a", "UNREVOKED_SHARDS", "1 (0)"],
        ["b", "UNRELEASED_SHARDS", "4 (2)"],
    ]
    a, b = members
    lease = re.fullmatch(r"(\d+\.\d) s", a[3])
    assert lease and float(lease.group(1)) <= 60  # lease left of a 60 s TTL
    assert re.fullmatch(r"\d+\.\d s ago", a[4])
    assert a[5:7] == ["2 / 2", "10.0.0.1 pid 4097 ship 1.2.3"]
    assert b[5:7] == ["4 / 3", "10.0.0.2 pid 4098 ship 1.2.3"]
    # current assignment grouped by assignment epoch, target, revoking with its deadline
    assert a[7:9] == ["v1:0, v1:1 @ 1", "v1:1, v2:0, v2:1, v2:2, v2:3"]
    deadline = re.fullmatch(r"v1:2, v1:3 deadline in (\d+\.\d) s", a[9])
    assert deadline and float(deadline.group(1)) <= 30  # the revocation timeout
    assert b[7:10] == ["v2:4, v2:5, v2:6, v2:7 @ 4", "v1:3, v2:4, v2:5, v2:6, v2:7", "none"]

    shards = {row[0]: row for row in table_rows(r, "shards")}
    assert list(shards) == [f"v1:{i}" for i in range(4)] + [f"v2:{i}" for i in range(8)]
    # shard, stream key, version state, owner, assignment epoch, state, target
    assert shards["v1:1"][:7] == ["v1:1", "rsc:{orders}:v1:1", "DRAINING", "a", "1", "readable", "a"]
    # Drained (the core's verdict comes first) although a has not acknowledged its revocation yet.
    assert shards["v1:2"][3:7] == ["a", "—", "drained", "—"]
    assert shards["v1:3"][3:7] == ["a", "—", "being revoked", "b"]
    assert "moves to b once released" in shards["v1:3"][7]
    assert shards["v2:0"][3:7] == ["—", "—", "awaiting pickup", "a"]
    assert shards["v2:4"][3:7] == ["b", "4", "readable", "b"]  # waits for v1:0, which has drained
    assert shards["v2:5"][3:7] == ["b", "4", "held by strict ordering", "b"]
    assert "strict ordering: waits for v1:1 to drain" in shards["v2:5"][7]
    assert shards["v2:7"][5] == "held by strict ordering"

    assert [row[:2] for row in table_rows(r, "pending-revocations")] == [["v1:2", "a"], ["v1:3", "a"]]
    assert table_rows(r, "unreleased-shards") == [["v1:3", "b", "a"]]
    assert (
        "Awaiting pickup (owned by nobody, granted on the target member's next heartbeat): "
        "v2:0, v2:1, v2:2, v2:3" in page
    )

    assert "v1 → v2 (strict ordering)" in page and "in progress since" in page
    progress = table_rows(r, "migration-progress")
    # group, drained, progress, blocked by, entries left, ETA
    assert [(row[0], row[1], row[4]) for row in progress] == [("audit", "2/4", "2"), ("billing", "2/4", "2")]
    assert progress[0][3] == (
        "v1:1 : no live member ; lag 1, pending 0 v1:3 : no live member ; lag 1, pending 0"
    )
    assert progress[1][3] == "v1:1 : a; lag 1, pending 0 v1:3 : a; lag 1, pending 0"
    assert progress[0][5] == "never: no live member (start one, or release the group from the drain)"
    assert progress[1][5] == "no estimate yet (no drain rate measured so far)"
    assert (
        "Estimated completion never: no live member (start one, or release the group from the drain): "
        "group audit" in page
    )
    assert [row[:3] for row in table_rows(r, "versions")] == [["v1", "DRAINING", "4"], ["v2", "ACTIVE", "8"]]
    assert "max_concurrency 3" in page
    assert REFRESH_META in r.content.decode()


def test_a_converged_group_shows_stable_and_nothing_in_flight(viewer: Client, store: MetadataStore) -> None:
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=1)
    hb(store, "a", 1, [s["shard"] for s in a["shards"]])
    r = viewer.get(url("group_detail"))
    page = text(r)
    assert "State STABLE" in page and "Group epoch 1" in page and "Assignment epoch 1" in page
    assert "Nothing in flight: every live member holds exactly its target." in page
    assert "This stream prefix has never been resharded." in page
    assert [row[5] for row in table_rows(r, "shards")] == ["readable", "readable"]


def test_a_live_member_whose_lease_ran_out_is_flagged_until_the_tick_expires_it(
    viewer: Client, store: MetadataStore
) -> None:
    create(store)
    hb(store, "a", 0, [], capacity=1)
    store.client.hset(rkeys.meta_key(PREFIX), f"l:{GROUP}:a", "1")  # the lease ran out long ago
    (row,) = table_rows(viewer.get(url("group_detail")), "members")
    assert row[3] == "ran out the next tick expires it"
    store.tick()
    r = viewer.get(url("group_detail"))
    assert "No live members." in text(r)  # ended members are folded away, under the live ones
    (row,) = table_rows(r, "ended-members-table")
    assert (row[1], row[3]) == ("EXPIRED", "—")
    assert "ended: LEASE_EXPIRED" in row[0]
    assert "1 ended member (kept for a while, then forgotten)" in text(r)


def test_auto_refresh_can_be_paused(viewer: Client, store: MetadataStore) -> None:
    create(store)
    for page_url in (LIST_URL, url("group_detail")):
        r = viewer.get(page_url, {"refresh": "off"})
        assert r.status_code == 200
        assert REFRESH_META not in r.content.decode() and "Auto-refresh paused" in text(r)


def test_an_unknown_group_leads_back_to_the_list_with_an_error_message(
    viewer: Client, store: MetadataStore
) -> None:
    create(store)
    r = viewer.get(url("group_detail", group="nope"), follow=True)
    assert r.redirect_chain == [(LIST_URL, 302)]
    assert messages_of(r) == [
        f"Group not found: group 'nope' does not exist on stream prefix '{PREFIX}' [GROUP_NOT_FOUND]"
    ]


def test_the_admin_index_lists_the_pages_for_viewers_only(viewer: Client, staff: Client) -> None:
    assert LIST_URL in viewer.get("/admin/").content.decode()
    assert LIST_URL in viewer.get("/admin/admin_ui/").content.decode()  # the breadcrumbs' app page
    assert LIST_URL not in staff.get("/admin/").content.decode()


@pytest.mark.parametrize("name", ["groups_list", "group_detail", "group_actions"])
def test_pages_are_refused_to_staff_without_the_permission(
    name: str, staff: Client, viewer: Client, client: Client, store: MetadataStore
) -> None:
    create(store)
    page_url = LIST_URL if name == "groups_list" else url(name)
    assert staff.get(page_url).status_code == 403
    assert client.get(page_url).status_code == 302  # anonymous: to the login page
    # The actions page shows forms that change things: viewing is not enough.
    assert viewer.get(page_url).status_code == (403 if name == "group_actions" else 200)


def test_store_down_is_an_error_page_not_a_500(
    viewer: Client, settings: Any, disposable_redis: RedisServer
) -> None:
    settings.REDIS_URL = disposable_redis.url
    reset_store()
    create_on(disposable_redis)
    assert viewer.get(url("group_detail")).status_code == 200
    disposable_redis.kill()
    for page_url in (LIST_URL, url("group_detail")):
        r = viewer.get(page_url)
        assert r.status_code == 503
        page = text(r)
        assert "Metadata store unavailable: the metadata store is unreachable" in page
        assert "[STORE_UNAVAILABLE]" in page and "Nothing was changed." in page
        assert "Traceback" not in page
        assert REFRESH_META in r.content.decode()  # it retries on its own
    disposable_redis.restart()  # empty again (no persistence), but answering
    r = viewer.get(LIST_URL)
    assert r.status_code == 200 and "No consumer group exists yet." in text(r)


def test_no_redis_configured_is_an_error_page(viewer: Client, settings: Any) -> None:
    settings.REDIS_URL = None
    reset_store()
    r = viewer.get(LIST_URL)
    assert r.status_code == 503
    assert "REDIS_URL is not configured [STORE_UNAVAILABLE]" in text(r)


def create_on(server: RedisServer) -> None:
    store = MetadataStore.from_url(server.url)
    try:
        create(store)
    finally:
        store.client.close()


def test_group_identifiers_are_escaped(viewer: Client, store: MetadataStore) -> None:
    r = viewer.get(url("group_detail", group="a<b"), follow=True)
    assert r.status_code == 200
    assert "a<b" not in r.content.decode() and "a&lt;b" in r.content.decode()
    assert [m.rsplit(" ", 1)[1] for m in messages_of(r)] == ["[INVALID_IDENTIFIER]"]


def test_static_members_show_their_instance_id_and_a_held_target(
    viewer: Client, store: MetadataStore
) -> None:
    """Static membership (docs/protocol.md section 3): the members table names each member's instance
    id; after a temporary leave the page lists the held target and marks its shards held for restart."""

    create(store, shard_count=2)

    def send(member: str, epoch: int, **kw: Any) -> dict[str, Any]:
        return store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=epoch, **kw))

    a = send("a1", 0, capacity=1, instance_id="pod-a.ship.0")
    b = send("b1", 0, capacity=1, instance_id="pod-b.ship.0")
    for _ in range(2):
        a = send("a1", a["member_epoch"], owned=frozenset(Shard.parse(s["shard"]) for s in a["shards"]))
        b = send("b1", b["member_epoch"], owned=frozenset(Shard.parse(s["shard"]) for s in b["shards"]))
    (b_shard,) = [s["shard"] for s in b["shards"]]
    r = viewer.get(url("group_detail"))
    rows = {row[0].split()[0]: row for row in table_rows(r, "members")}
    assert "instance id pod-a.ship.0" in rows["a1"][0] and "instance id pod-b.ship.0" in rows["b1"][0]
    send("b1", -2)
    r = viewer.get(url("group_detail"))
    (held,) = table_rows(r, "held-instances")
    assert held[:3] == ["pod-b.ship.0", "b1", b_shard]
    (ended,) = table_rows(r, "ended-members-table")
    assert "ended: LEFT" in ended[0] and "target held" in ended[0]
    assert "held for restart" in text(r) and "held for instance pod-b.ship.0" in text(r)


def test_the_group_page_shows_the_keys_members_report_parked(viewer: Client, store: MetadataStore) -> None:
    """Issue 27: the keys waiting for a retry, per shard and member, as the members report them; a member
    that ended is no longer shown; the keys are escaped (a member's report is not trusted markup)."""
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=1)
    hb(store, "a", 1, [s["shard"] for s in a["shards"]])
    r = viewer.get(url("group_detail"))
    assert "No key is parked: no member reports a key waiting for a retry." in text(r)
    keys = [f"k{i}" for i in range(15)] + ["<b>x</b>"]
    store.parked.record(
        PREFIX, GROUP, "a", {"v1:1": {"count": 40, "keys": keys}, "v1:0": {"count": 1, "keys": ["z"]}}
    )
    r = viewer.get(url("group_detail"))
    rows = table_rows(r, "parked-keys-table")
    assert [row[:3] for row in rows] == [["v1:0", "a", "1"], ["v1:1", "a", "40"]]
    assert rows[1][3].endswith("and 24 more")
    assert "&lt;b&gt;x&lt;/b&gt;" in r.content.decode() and "<b>x</b>" not in r.content.decode()
    hb(store, "a", -1, [])
    assert "No key is parked" in text(viewer.get(url("group_detail")))
