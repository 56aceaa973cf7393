"""The lifecycle figures on the operator pages: backlog per shard, why a migration is stuck, dead letters,
the retention policy. Entries are made pending for real (XREADGROUP without XACK) in the suite's Redis."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from admin_ui import presenters
from config.embedded_redis import RedisServer
from coordinator.protocol.model import RetentionPolicy
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .helpers import (
    GROUP,
    OTHER_GROUP,
    PREFIX,
    add_dead_letter,
    busy_group,
    create,
    hb,
    messages_of,
    pend,
    store_gone_after_create,
    stream,
    table_rows,
    text,
    url,
)


def shard_url(shard: str, group: str = GROUP) -> str:
    return reverse(
        "admin:admin_ui_shard", kwargs={"stream_prefix": PREFIX, "consumer_group": group, "shard": shard}
    )


def dlq_url(dlq_id: str | None = None) -> str:
    if dlq_id is None:
        return url("dead_letters")
    kwargs = {"stream_prefix": PREFIX, "consumer_group": GROUP, "dlq_id": dlq_id}
    return reverse("admin:admin_ui_dead_letter", kwargs=kwargs)


def two_shards_owned_by_a(store: MetadataStore) -> None:
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=2)
    hb(store, "a", 1, [s["shard"] for s in a["shards"]])


# ------------------------------------------------------------------------------------------ backlog


def test_the_group_page_shows_each_shards_backlog_and_flags_entries_that_keep_failing(
    viewer: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    failing = pend(store, "v1:0", 2, deliveries=3, age_ms=600_000)  # 10 min old, delivered 3 times
    store.client.xadd(stream("v1:1"), {"k": "v"})  # not yet delivered: lag 1
    r = viewer.get(url("group_detail"))
    assert r.status_code == 200
    v10, v11 = table_rows(r, "backlog")
    # shard, version, owner, length, lag, pending, oldest pending, max deliveries, notes (no actions column)
    assert v10[:6] == ["v1:0", "ACTIVE", "a", "2", "0", "2"]
    assert re.fullmatch(rf"{failing[0]} 10 min( \d+ s)? old", v10[6])
    assert v10[7] == "3"
    assert v10[8].startswith(
        "delivered up to 3 times: its handler may be failing oldest pending entry is 10 min"
    )
    assert v11 == ["v1:1", "ACTIVE", "a", "1", "1", "0", "—", "0", ""]
    assert 'class="rsc-warn"' in r.content.decode()
    assert "redeliver / skip…" not in text(r)  # viewers see the figures, not the actions


def test_idle_shards_are_folded_away_and_managers_get_a_link_per_shard(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    r = operator.get(url("group_detail"))
    assert "Nothing pending and nothing undelivered on any shard." in text(r)
    assert "2 shards with nothing pending or undelivered" in text(r)
    idle = table_rows(r, "backlog-idle-table")
    assert [(row[0], row[-1]) for row in idle] == [
        ("v1:0", "redeliver / skip…"),
        ("v1:1", "redeliver / skip…"),
    ]
    pend(store, "v1:1", 1)
    r = operator.get(url("group_detail"))
    assert [row[0] for row in table_rows(r, "backlog")] == ["v1:1"]
    assert [row[0] for row in table_rows(r, "backlog-idle-table")] == ["v1:0"]
    assert f'href="{shard_url("v1:1")}"' in r.content.decode()


def test_a_shards_page_lists_its_oldest_pending_entries_with_a_preview_of_their_fields(
    operator: Client, viewer: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    ids = pend(store, "v1:0", 2, deliveries=2)
    r = operator.get(shard_url("v1:0"))
    assert r.status_code == 200
    rows = table_rows(r, "pending-entries")
    assert [row[0] for row in rows] == ids
    assert [row[2:4] for row in rows] == [["a", "2"], ["a", "2"]]
    assert rows[0][4].startswith("event_id=e-v1:0-0, partition_key=k0, payload=body 0 xxx")
    assert rows[0][4].endswith("…")  # cut to a preview
    page = text(r)
    assert "Redeliver" in page and "Skip" in page and "Older than (seconds)" in page
    assert viewer.get(shard_url("v1:0")).status_code == 403  # it shows forms that change things


def test_an_unknown_shard_leads_back_to_the_group_with_an_error(
    operator: Client, store: MetadataStore
) -> None:
    create(store, shard_count=2)
    r = operator.get(shard_url("v1:7"), follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    (message,) = messages_of(r)
    assert message.startswith("Shard not found: shard 'v1:7' is not a shard") and message.endswith(
        "[SHARD_NOT_FOUND]"
    )


# ------------------------------------------------------------------------------------------ migration


def test_a_stuck_migration_says_why_for_each_undrained_shard(operator: Client, store: MetadataStore) -> None:
    busy_group(store)  # v1:1 and v1:3 each hold one undelivered entry; audit has no member at all
    pend(store, "v1:1", 1, consumer="a", deliveries=2)  # and billing has one pending on v1:1
    r = operator.get(url("group_detail"))
    undrained = {row[0]: row for row in table_rows(r, "undrained")}
    assert list(undrained) == ["v1:1", "v1:3"]
    # shard, owner, lag, pending, oldest pending age, why
    assert undrained["v1:1"][1:4] == ["a", "1", "1"]
    assert undrained["v1:1"][4].endswith(" old")
    assert "1 entry not yet delivered" in undrained["v1:1"][5]
    assert "1 delivered but not acknowledged" in undrained["v1:1"][5]
    assert undrained["v1:3"][1:4] == ["a", "1", "0"]
    assert 'id="release-drain"' not in r.content.decode()  # billing has live members

    r = operator.get(url("group_detail", group=OTHER_GROUP))
    rows = table_rows(r, "undrained")
    # audit has read nothing: the entry pending for billing is not yet delivered to audit
    assert [row[:4] for row in rows] == [
        ["v1:1", "no live member", "2", "0"],
        ["v1:3", "no live member", "1", "0"],
    ]
    assert all("the group has no live member, so nobody reads this shard" in row[5] for row in rows)
    assert 'id="release-drain"' in r.content.decode()
    assert f'action="{url("release_drain", group=OTHER_GROUP)}"' in r.content.decode()


def test_viewers_see_why_but_get_no_release_button(viewer: Client, store: MetadataStore) -> None:
    busy_group(store)
    r = viewer.get(url("group_detail", group=OTHER_GROUP))
    assert len(table_rows(r, "undrained")) == 2
    assert 'id="release-drain"' not in r.content.decode()


# ------------------------------------------------------------------------------------------ retention


def test_the_retention_policy_is_shown_and_its_caps_flagged_as_data_loss(
    viewer: Client, store: MetadataStore
) -> None:
    create(store)
    r = viewer.get(url("group_detail"))
    page = text(r)
    assert "Mode acked" in page and "max_age_ms none" in page and "max_len none" in page
    assert "data loss" not in page
    store.set_retention(
        PREFIX, RetentionPolicy(max_age_ms=86_400_000, max_len=5_000, retired_grace_ms=60_000)
    )
    page = text(viewer.get(url("group_detail")))
    assert "max_age_ms 86400000 (1 d) may drop unconsumed entries (data loss)" in page
    assert "max_len 5000 entries per shard stream may drop unconsumed entries (data loss)" in page
    assert "retired_grace_ms 60000 (1 min)" in page
    assert "A retention cap is set on this stream prefix" in page


# ------------------------------------------------------------------------------------------ dead letters


def test_the_group_page_links_to_its_dead_letters(viewer: Client, store: MetadataStore) -> None:
    create(store)
    add_dead_letter(store, 1)
    add_dead_letter(store, 2)
    r = viewer.get(url("group_detail"))
    assert "Dead letters: 2 (entries its members gave up on, in rsc:{orders}:dlq:billing )" in text(r)
    assert f'href="{dlq_url()}"' in r.content.decode()


def test_the_dead_letter_list_is_paged_and_each_can_be_inspected(
    viewer: Client, operator: Client, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store)
    ids = [add_dead_letter(store, n, error="ValueError: " + "bad " * 40) for n in range(3)]
    monkeypatch.setattr("admin_ui.lifecycle_views.DEAD_LETTERS_PER_PAGE", 2)
    r = viewer.get(dlq_url())
    assert r.status_code == 200
    rows = table_rows(r, "dead-letters")
    assert [row[0] for row in rows] == ids[:2]  # no selection column for a viewer
    # id, written by, at, source, deliveries, error (cut), event id / key, member
    assert rows[0][1:5] == ["signed", "2023-11-14 22:13:20 UTC", "v1:1 1700000000000-0", "5"]
    assert rows[0][5].startswith("ValueError: bad bad") and rows[0][5].endswith("…")
    assert rows[0][6:] == ["dead-0 / key-0", "a"]
    assert "3 dead letters" in text(r) and "Replay selected" not in text(r)
    page2 = viewer.get(dlq_url(), {"after": ids[1]})
    assert [row[0] for row in table_rows(page2, "dead-letters")] == [ids[2]]
    assert 'href="?after=' in r.content.decode() and 'id="next-page"' not in page2.content.decode()

    r = viewer.get(dlq_url(ids[0]))
    assert r.status_code == 200
    page = text(r)
    assert "Source shard v1:1 Source entry id 1700000000000-0 Deliveries 5 Given up by a" in page
    assert "Event id dead-0 Partition key key-0" in page
    assert ("ValueError: " + "bad " * 40).strip() in page  # the whole error
    assert table_rows(r, "dead-letter-fields") == [
        ["event_id", "dead-0"],
        ["partition_key", "key-0"],
        ["content_type", "application/json"],
        ["payload", '{"n": 0}'],
        ["headers", "{}"],
    ]
    assert "Replay" not in page  # a viewer cannot act
    managed = operator.get(dlq_url())
    assert [row[0] for row in table_rows(managed, "dead-letters")][:1] == [""]  # the checkbox cell
    assert 'value="Replay selected"' in managed.content.decode()
    assert 'value="Purge all 3 dead letters…"' in managed.content.decode()


def test_a_dead_letter_the_function_did_not_write_is_shown_as_refused(
    viewer: Client, store: MetadataStore
) -> None:
    """What a member's Redis user can append with XADD: the pages say so (docs/protocol.md section 14)."""
    create(store)
    real = add_dead_letter(store, 0)
    key = rkeys.dead_letter_key(PREFIX, GROUP)
    forged = store.client.xadd(key, {"event_id": "evil", "dlq_mac": "0" * 40, "dlq_at_ms": "0"}).decode()
    unsigned = store.client.xadd(key, {"event_id": "old", "dlq_at_ms": "0"}).decode()
    rows = {row[0]: row[1] for row in table_rows(viewer.get(dlq_url()), "dead-letters")}
    assert rows == {
        real: "signed",
        forged: "refused: not written by the dead-letter function",
        unsigned: "unsigned",
    }
    page = text(viewer.get(dlq_url(forged)))
    assert "Written by refused: not written by the dead-letter function" in page
    assert "its MAC does not verify" in page and "dlq_mac" not in page


def test_a_missing_dead_letter_leads_back_to_the_list(viewer: Client, store: MetadataStore) -> None:
    create(store)
    r = viewer.get(dlq_url("1-0"), follow=True)
    assert r.redirect_chain == [(dlq_url(), 302)]
    (message,) = messages_of(r)
    assert message.endswith("[DEAD_LETTER_NOT_FOUND]")
    assert "No dead letters." in text(r)


def test_a_malformed_after_is_an_error_message(viewer: Client, store: MetadataStore) -> None:
    create(store)
    r = viewer.get(dlq_url(), {"after": "nope"}, follow=True)
    assert messages_of(r) == ["'after' must be a dead letter's id (like 1700000000000-0); got 'nope'."]


def test_dead_letter_pages_need_the_view_permission(staff: Client, store: MetadataStore) -> None:
    create(store)
    dlq_id = add_dead_letter(store, 1)
    assert staff.get(dlq_url()).status_code == 403
    assert staff.get(dlq_url(dlq_id)).status_code == 403


def test_dead_letters_of_a_missing_group_lead_back_to_the_list(viewer: Client, store: MetadataStore) -> None:
    create(store)
    r = viewer.get(url("dead_letters", group="gone"), follow=True)
    assert r.redirect_chain[-1][0] == "/admin/admin_ui/consumergroup/"
    assert messages_of(r)[0].endswith("[GROUP_NOT_FOUND]")


def test_with_the_store_down_the_new_pages_are_error_pages_not_500s(
    operator: Client, settings: Any, disposable_redis: RedisServer
) -> None:
    store_gone_after_create(settings, disposable_redis)
    r = operator.get(dlq_url())
    assert r.status_code == 503 and "[STORE_UNAVAILABLE]" in text(r)
    r = operator.get(shard_url("v1:0"), follow=True)  # back to the group page, which cannot be drawn either
    assert r.redirect_chain == [(url("group_detail"), 302)] and r.status_code == 503
    assert messages_of(r)[0].endswith("[STORE_UNAVAILABLE] This is usually temporary: retry shortly.")


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (None, "—"),
        (850, "850 ms"),
        (45_000, "45 s"),
        (725_400, "12 min 5 s"),
        (3 * 3_600_000 + 5_000, "3 h"),  # the two largest units; a zero second one is left out
        (2 * 86_400_000 + 4 * 3_600_000 + 59_000, "2 d 4 h"),
    ],
)
def test_ages_are_human_readable(ms: int | None, shown: str) -> None:
    assert presenters.duration(ms) == shown
