"""What issue 11 asked of the operator pages: lag and pending on both pages, the member x shard matrix,
migration progress with its reason and an ETA from the drain rate, a 403 that names the permission, and
an audit details column that is not clipped."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client

from admin_ui import drain_samples
from admin_ui.resharding_progress import MIN_SPAN_MS, RATE_WINDOW_MS, STALLED_MS, add_sample, drain_estimate
from coordinator.models import AuditEntry
from coordinator.protocol.model import OrderingMode
from coordinator.store import MetadataStore

from .helpers import (
    GROUP,
    LIST_URL,
    OTHER_GROUP,
    PREFIX,
    busy_group,
    create,
    pend,
    stream,
    table_rows,
    text,
    url,
)


@pytest.fixture(autouse=True)
def no_samples() -> Iterator[None]:
    """The drain-rate samples live in Django's cache: every test starts without any."""
    cache.clear()
    yield
    cache.clear()


# ------------------------------------------------------------------------------------------ matrix


def test_the_matrix_shows_who_holds_each_shard_and_how(viewer: Client, store: MetadataStore) -> None:
    busy_group(store)
    r = viewer.get(url("group_detail"))
    # columns: v1:0..v1:3 (draining), v2:0..v2:7; a row per live member (owned / target), then nobody
    assert table_rows(r, "matrix") == [
        # a: v1:0 and v1:2 drained (given up on its next heartbeat), v1:1 readable, v1:3 being revoked
        # and moving to b; its target's v2:0..v2:3 not owned yet
        ["a 4/5", "D", "R", "D", "X→", "+", "+", "+", "+", "", "", "", ""],
        # b: v1:3 not yet released by a; v2:5 and v2:7 held back by strict ordering (v1:1 and v1:3 have
        # not drained), v2:4 and v2:6 readable (v1:0 and v1:2 have)
        ["b 4/5", "", "", "", "+", "", "", "", "", "R", "H", "R", "H"],
        ["nobody", "", "", "", "", "U", "U", "U", "U", "", "", "", ""],
        ["lag", "0", "1", "0", "1", "0", "0", "0", "0", "0", "0", "0", "0"],
        ["pending", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0"],
    ]
    body = r.content.decode()
    held = "v2:5: b: owned, held back by strict ordering; strict ordering: waits for v1:1 to drain"
    assert f'title="{held}"' in body
    assert 'title="v1:3: a: owned, being revoked; release deadline in' in body
    assert 'title="v2:0: unassigned; granted to a on its next heartbeat"' in body
    legend = "R owned, readable H owned, held back by strict ordering X being revoked + target, not owned yet"
    assert legend in text(r)


def test_the_group_page_totals_lag_and_pending_with_the_oldest_pending_age(
    viewer: Client, store: MetadataStore
) -> None:
    busy_group(store)
    pend(store, "v2:4", 3, consumer="b", age_ms=600_000)
    page = text(viewer.get(url("group_detail")))
    assert "Lag 2 Pending 3 oldest 10 min" in page


# ------------------------------------------------------------------------------------------ groups list


def test_the_groups_list_shows_each_groups_lag_pending_and_oldest_pending(
    viewer: Client, store: MetadataStore
) -> None:
    busy_group(store)  # one undelivered entry on v1:1 and on v1:3 for both groups
    pend(store, "v2:4", 1, consumer="b", deliveries=2, age_ms=7_200_000)  # and one for billing on v2:4
    rows = {row[1]: row for row in table_rows(viewer.get(LIST_URL), "groups")}
    # lag, pending, oldest pending
    assert rows[GROUP][8:11] == ["2", "1", "2 h"]
    assert rows[OTHER_GROUP][8:11] == ["3", "0", "—"]


# ------------------------------------------------------------------------------------------ migration ETA


def test_an_estimate_needs_two_samples_far_enough_apart() -> None:
    now = 1_000_000
    assert drain_estimate([], now, 100, live_members=1)["kind"] == "none_yet"
    assert drain_estimate([(now - MIN_SPAN_MS + 1, 200)], now, 100, live_members=1)["kind"] == "none_yet"
    eta = drain_estimate([(now - 10_000, 200)], now, 100, live_members=1)  # 100 entries in 10 s
    assert (eta["kind"], eta["eta_ms"], eta["rate_per_s"]) == ("eta", 10_000, 10.0)
    assert eta["text"] == "about 10 s at 10 entries/s"


def test_the_rate_is_the_recent_one_and_no_progress_is_said_plainly() -> None:
    now = 10 * RATE_WINDOW_MS
    old = (now - RATE_WINDOW_MS - 1, 10_000)  # outside the window: ignored
    recent = (now - 60_000, 130)  # 30 entries in a minute
    eta = drain_estimate([old, recent], now, 100, live_members=2)
    assert (eta["eta_ms"], eta["text"]) == (200_000, "about 3 min 20 s at 30.0 entries/min")
    brief = drain_estimate([(now - 5_000, 100)], now, 100, live_members=2)
    assert brief["text"] == "no estimate yet (no progress in the last 5 s)"
    stalled = drain_estimate([(now - STALLED_MS, 100)], now, 100, live_members=2)
    assert (stalled["kind"], stalled["text"]) == ("stalled", "not draining: no progress in the last 1 min")


def test_what_no_rate_can_estimate_is_named() -> None:
    assert drain_estimate([(0, 9)], 60_000, 5, live_members=0)["kind"] == "never"
    assert drain_estimate([(0, 9)], 60_000, None, live_members=1)["text"] == (
        "no estimate: Redis cannot tell how many entries are left"
    )
    done = drain_estimate([], 60_000, 0, live_members=1)
    assert done["text"] == "on the next tick (nothing left to consume)"


def test_samples_keep_the_window_and_drop_a_clock_that_went_back() -> None:
    now = 5 * RATE_WINDOW_MS
    samples = [(now - RATE_WINDOW_MS - 1, 9), (now - 1_000, 8), (now + 5, 7)]
    assert add_sample(samples, now, 6) == [(now - 1_000, 8), (now, 6)]


def test_the_group_page_estimates_from_the_samples_of_earlier_refreshes(
    viewer: Client, store: MetadataStore
) -> None:
    busy_group(store)  # billing has 2 entries left on v1 (one undelivered on v1:1 and on v1:3)
    r = viewer.get(url("group_detail"))
    (billing,) = [row for row in table_rows(r, "migration-progress") if row[0] == GROUP]
    assert billing[5] == "no estimate yet (no drain rate measured so far)"
    # As if a refresh a minute ago had seen 32 entries left: 30 consumed in 60 s.
    migration = store.describe_prefix(PREFIX)["migration"]
    (sample,) = cache.get(drain_samples.key(PREFIX, migration, GROUP))
    cache.set(drain_samples.key(PREFIX, migration, GROUP), [(sample[0] - 60_000, 32)])
    r = viewer.get(url("group_detail"))
    (billing,) = [row for row in table_rows(r, "migration-progress") if row[0] == GROUP]
    assert billing[4:6] == ["2", "about 4 s at 30.0 entries/min"]
    # The migration as a whole waits for audit, which has no member: no ETA is invented for it.
    assert "Estimated completion never: no live member" in text(r)


# ------------------------------------------------------------------------------------------ 403


VIEWING = "viewing consumer groups needs the permission admin_ui.view_groups (or coordinator.manage_groups )."
CHANGING = "changing consumer groups needs the permission coordinator.manage_groups ."


@pytest.mark.parametrize(
    ("path", "needs", "listed_as"),
    [
        (LIST_URL, VIEWING, "Can view consumer groups"),
        (url("group_detail"), VIEWING, "Can view consumer groups"),
        (url("group_actions"), CHANGING, "Can manage consumer groups"),
        (
            "/admin/admin_ui/auditentry/",
            "viewing the audit trail needs the permission admin_ui.view_auditentry .",
            "Can view audit entry",
        ),
    ],
)
def test_a_403_names_the_missing_permission(
    path: str, needs: str, listed_as: str, staff: Client, store: MetadataStore
) -> None:
    busy_group(store)
    r = staff.get(path)
    assert r.status_code == 403
    page = text(r)
    assert f"You are signed in as staff , but {needs} [403 Forbidden]" in page
    assert "Authentication and Authorization → Users → staff → User permissions" in page
    assert f"where it is listed as “{listed_as}" in page


def test_an_action_refused_to_a_viewer_names_the_permission(viewer: Client, store: MetadataStore) -> None:
    busy_group(store)
    r = viewer.post(url("set_max_concurrency"), {"max_concurrency": "5"})
    assert r.status_code == 403
    assert CHANGING in text(r)


# ------------------------------------------------------------------------------------------ audit


def test_the_audit_details_column_shows_long_details_whole_one_click_away(
    operator: Client, store: MetadataStore
) -> None:
    short = {"max_concurrency": 5, "previous": 3}
    long = {"skipped": [{"id": f"1700000000000-{n}", "fields": {"payload": "x" * 60}} for n in range(5)]}
    for details in (short, long):
        AuditEntry.objects.create(
            username="operator", action="skip_entries", stream_prefix=PREFIX, consumer_group=GROUP,
            details=details, outcome="ok",
        )  # fmt: skip
    body = operator.get("/admin/admin_ui/auditentry/").content.decode()
    inline = "{&quot;max_concurrency&quot;: 5, &quot;previous&quot;: 3}"
    assert f'<code class="rsc-audit-details">{inline}</code>' in body
    assert '<details class="rsc-audit-details"><summary>' in body
    whole = json.dumps(long, ensure_ascii=False, sort_keys=True, indent=2).replace('"', "&quot;")
    assert f"<pre>{whole}</pre>" in body
    assert "#result_list td, #result_list th { white-space: normal; }" in body  # wraps, not runs off


def test_the_groups_list_names_a_few_blocking_shards_and_counts_the_rest(
    viewer: Client, store: MetadataStore
) -> None:
    create(store, shard_count=6)
    for index in range(6):
        store.client.xadd(stream(f"v1:{index}"), {"k": "v"})
    store.change_shard_count(PREFIX, 3, OrderingMode.RELAXED)
    (row,) = table_rows(viewer.get(LIST_URL), "groups")
    assert row[11] == (
        "migrating v1 → v2 (relaxed): 0/6 drained "
        + " ".join(f"blocked by v1:{i} (no live member; lag 1, pending 0)" for i in range(4))
        + " and 2 more old shards (see the group page)"
        " ETA: never: no live member (start one, or release the group from the drain)"
    )
