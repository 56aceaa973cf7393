"""The lifecycle actions of the operator pages: POST only, CSRF, the manage permission, a confirmation
page for the destructive ones, every change through coordinator.operations (audited there, first), and
the store's refusals as messages with nothing changed."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import DatabaseError
from django.test import Client
from django.urls import reverse

from coordinator.models import AuditEntry
from coordinator.protocol.model import OrderingMode, RetentionPolicy
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .helpers import (
    GROUP,
    LIST_URL,
    OTHER_GROUP,
    PREFIX,
    add_dead_letter,
    busy_group,
    create,
    hb,
    messages_of,
    pend,
    pending_ids,
    stream,
    table_rows,
    text,
    url,
)


def shard_action(name: str, shard: str = "v1:0", group: str = GROUP) -> str:
    kwargs = {"stream_prefix": PREFIX, "consumer_group": group, "shard": shard}
    return reverse(f"admin:admin_ui_{name}", kwargs=kwargs)


def trail() -> list[tuple[str, str, str, str, str]]:
    """(user, action, source, group, outcome) of every audit row, oldest first."""
    return [
        (e.username, e.action, e.source, e.consumer_group, e.outcome)
        for e in AuditEntry.objects.order_by("id")
    ]


def hidden_inputs(response: Any) -> dict[str, str]:
    found = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', response.content.decode()))
    found.pop("csrfmiddlewaretoken", None)
    return found


def two_shards_owned_by_a(store: MetadataStore) -> None:
    create(store, shard_count=2)
    a = hb(store, "a", 0, [], capacity=2)
    hb(store, "a", 1, [s["shard"] for s in a["shards"]])


# ------------------------------------------------------------------------------------------ refusals

ACTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "redeliver": (shard_action("redeliver"), {"reason": "r"}),
    "skip": (shard_action("skip_entries"), {"entry_ids": "1-0", "reason": "r", "confirm": "yes"}),
    "release_drain": (url("release_drain"), {"confirm_unconsumed": "0", "reason": "r", "confirm": "yes"}),
    "replay": (url("replay_dead_letters"), {"ids": "1-0"}),
    "purge": (url("purge_dead_letters"), {"all": "1", "reason": "r", "confirm": "yes"}),
    "retention": (url("set_retention"), {"retired_grace_ms": "0"}),
    "delete_prefix": (url("delete_prefix"), {"force": "on", "confirm": "yes"}),
}


@pytest.mark.parametrize("action", ACTIONS)
def test_lifecycle_actions_refuse_get(action: str, operator: Client, store: MetadataStore) -> None:
    create(store)
    before = store.raw_metadata(PREFIX)
    action_url, body = ACTIONS[action]
    assert operator.get(action_url, body).status_code == 405
    assert store.raw_metadata(PREFIX) == before and trail() == []


@pytest.mark.parametrize("action", ACTIONS)
def test_lifecycle_actions_refuse_users_without_the_manage_permission(
    action: str, viewer: Client, staff: Client, client: Client, store: MetadataStore
) -> None:
    create(store)
    add_dead_letter(store, 1)
    before = store.raw_metadata(PREFIX)
    action_url, body = ACTIONS[action]
    assert viewer.post(action_url, body).status_code == 403
    assert staff.post(action_url, body).status_code == 403
    anonymous = client.post(action_url, body)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    assert store.raw_metadata(PREFIX) == before and trail() == []
    assert store.client.xlen(rkeys.dead_letter_key(PREFIX, GROUP)) == 1


def test_lifecycle_actions_need_the_csrf_token(store: MetadataStore) -> None:
    from .conftest import logged_in, staff_user

    two_shards_owned_by_a(store)
    browser = logged_in(staff_user("careful", "coordinator.manage_groups"), enforce_csrf_checks=True)
    assert browser.post(shard_action("redeliver"), {"reason": "r"}).status_code == 403
    assert trail() == []


# ------------------------------------------------------------------------------------------ skip


def test_skipping_listed_entries_is_confirmed_then_acks_exactly_them_and_audits_their_fields(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    first, second, third = pend(store, "v1:0", 3, deliveries=4)
    r = operator.post(shard_action("skip_entries"), {"entry_ids": f"{first}, {third}", "reason": "poison"})
    assert r.status_code == 200 and pending_ids(store, "v1:0") == [first, second, third]  # not yet
    rows = table_rows(r, "entries-to-skip")
    assert [(row[0], row[2], row[3]) for row in rows] == [(first, "a", "4"), (third, "a", "4")]
    assert rows[1][4].startswith("event_id=e-v1:0-2, partition_key=k2, payload=body 2 xxx")
    assert "Reason: poison" in text(r)
    confirmation = hidden_inputs(r)
    assert confirmation == {"entry_ids": f"{first} {third}", "reason": "poison", "confirm": "yes"}

    r = operator.post(shard_action("skip_entries"), confirmation, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert messages_of(r) == [
        f"Skipped 2 entries of shard v1:0 of {PREFIX}/{GROUP} (acknowledged without being handled; each "
        f"one's fields are in the audit trail): {first}, {third}."
    ]
    assert pending_ids(store, "v1:0") == [second]
    assert trail() == [("operator", "skip_entries", "admin_ui", GROUP, "ok")]
    details = AuditEntry.objects.get().details
    assert details["reason"] == "poison" and details["entry_ids"] == [first, third]
    assert [(s["id"], s["consumer"], s["deliveries"]) for s in details["skipped"]] == [
        (first, "a", 4),
        (third, "a", 4),
    ]
    assert details["skipped"][0]["fields"] == {
        "event_id": "e-v1:0-0",
        "partition_key": "k0",
        "payload": "body 0 " + "x" * 100,
    }


def test_skipping_by_age_lists_the_old_entries_and_confirms_their_ids(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    old = pend(store, "v1:1", 2, age_ms=3_600_000)
    young = pend(store, "v1:1", 1)
    r = operator.post(shard_action("skip_entries", "v1:1"), {"older_than_s": "600", "reason": "stale"})
    assert [row[0] for row in table_rows(r, "entries-to-skip")] == old
    assert "(every pending entry at least 600 s old)" in text(r)
    confirmation = hidden_inputs(r)
    assert confirmation["entry_ids"] == " ".join(old)  # exactly what was shown, not the age again
    operator.post(shard_action("skip_entries", "v1:1"), confirmation)
    assert pending_ids(store, "v1:1") == young
    assert AuditEntry.objects.get().details["count"] == 2


def test_skipping_by_an_age_nothing_has_reached_changes_nothing(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    pend(store, "v1:0", 1)
    r = operator.post(shard_action("skip_entries"), {"older_than_s": "3600", "reason": "r"}, follow=True)
    assert messages_of(r) == ["No pending entry of shard v1:0 is 3600 s old: nothing to skip."]
    assert len(pending_ids(store, "v1:0")) == 1 and trail() == []


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"entry_ids": "1-0", "reason": ""}, "reason", "This field is required."),
        ({"entry_ids": "banana", "reason": "r"}, "entry_ids", "'banana' is not a stream entry id"),
        ({"reason": "r"}, "__all__", "Give either entry ids or an age, not both and not neither."),
        ({"entry_ids": "1-0", "older_than_s": "5", "reason": "r"}, "__all__", "Give either entry ids"),
        ({"older_than_s": "-1", "reason": "r"}, "older_than_s", "greater than or equal to 0"),
    ],
)
def test_an_invalid_skip_form_is_shown_again_and_nothing_is_skipped(
    body: dict[str, str], field: str, error: str, operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    ids = pend(store, "v1:0", 1)
    r = operator.post(shard_action("skip_entries"), {**body, "confirm": "yes"})
    assert r.status_code == 400
    assert any(error in e for e in r.context["skip_form"].errors[field])
    assert pending_ids(store, "v1:0") == ids and trail() == []


def test_an_id_that_is_not_pending_is_a_form_error_before_any_confirmation(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    ids = pend(store, "v1:0", 1)
    r = operator.post(shard_action("skip_entries"), {"entry_ids": f"{ids[0]} 1-1", "reason": "r"})
    assert r.status_code == 400
    assert r.context["skip_form"].errors["entry_ids"] == ["Not pending for this group on v1:0: 1-1."]
    assert pending_ids(store, "v1:0") == ids and trail() == []


def test_a_confirmed_entry_that_was_acked_meanwhile_is_refused_and_nothing_is_skipped(
    operator: Client, store: MetadataStore
) -> None:
    two_shards_owned_by_a(store)
    first, second = pend(store, "v1:0", 2)
    store.client.xack(stream("v1:0"), GROUP, first)  # the member handled it after all
    confirm = {"entry_ids": f"{first} {second}", "reason": "r", "confirm": "yes"}
    r = operator.post(shard_action("skip_entries"), confirm, follow=True)
    (message,) = messages_of(r)
    assert message.startswith("Entry not pending: ") and message.endswith("[ENTRY_NOT_PENDING]")
    assert pending_ids(store, "v1:0") == [second]
    assert trail() == [("operator", "skip_entries", "admin_ui", GROUP, "ENTRY_NOT_PENDING")]


def test_skipping_on_an_unknown_shard_is_an_error_message(operator: Client, store: MetadataStore) -> None:
    create(store, shard_count=2)
    confirm = {"entry_ids": "1-0", "reason": "r", "confirm": "yes"}
    r = operator.post(shard_action("skip_entries", "v1:9"), confirm, follow=True)
    assert messages_of(r)[0].endswith("[SHARD_NOT_FOUND]")
    assert trail() == [("operator", "skip_entries", "admin_ui", GROUP, "SHARD_NOT_FOUND")]


# ------------------------------------------------------------------------------------------ redeliver


def test_redeliver_moves_the_shards_token_and_is_audited(operator: Client, store: MetadataStore) -> None:
    two_shards_owned_by_a(store)
    pend(store, "v1:1", 1)
    r = operator.post(shard_action("redeliver", "v1:1"), {"reason": "handler fixed"}, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert messages_of(r) == [
        f"Redelivery requested on shard v1:1 of {PREFIX}/{GROUP}: its owner a re-reads its pending entries "
        "before anything new (redeliver token 1)."
    ]
    assert store.client.hget(rkeys.redeliver_key(PREFIX, GROUP), "v1:1") == b"1"
    assert trail() == [("operator", "redeliver", "admin_ui", GROUP, "ok")]
    assert AuditEntry.objects.get().details["reason"] == "handler fixed"


# ------------------------------------------------------------------------------------------ release drain


def test_releasing_a_group_without_members_shows_what_it_abandons_then_completes_the_migration(
    operator: Client, store: MetadataStore
) -> None:
    busy_group(store)  # audit: no member; v1:1 and v1:3 hold one undelivered entry each
    r = operator.post(url("release_drain", group=OTHER_GROUP))
    assert r.status_code == 200
    assert (
        '<strong id="unconsumed">2</strong> entries: not yet delivered plus delivered' in r.content.decode()
    )
    assert "will never be handled by this group" in text(r)
    assert [row[:4] for row in table_rows(r, "undrained")] == [
        ["v1:1", "no live member", "1", "0"],
        ["v1:3", "no live member", "1", "0"],
    ]
    assert hidden_inputs(r) == {"confirm_unconsumed": "2", "confirm": "yes"}
    assert store.describe_prefix(PREFIX)["migration"]["drained"][OTHER_GROUP] == ["v1:0", "v1:2"]  # not yet

    confirm = {"confirm_unconsumed": "2", "reason": "decommissioned", "confirm": "yes"}
    r = operator.post(url("release_drain", group=OTHER_GROUP), confirm, follow=True)
    assert r.redirect_chain == [(url("group_detail", group=OTHER_GROUP), 302)]
    assert messages_of(r) == [
        f"Group {OTHER_GROUP} released from the drain of stream prefix {PREFIX}: v1:1, v1:3 count as "
        "drained for it; 2 unconsumed entries will not be handled by this group."
    ]
    assert store.describe_prefix(PREFIX)["migration"]["drained"][OTHER_GROUP] == [
        "v1:0",
        "v1:1",
        "v1:2",
        "v1:3",
    ]
    assert trail() == [("operator", "release_drain", "admin_ui", OTHER_GROUP, "ok")]
    assert AuditEntry.objects.get().details["unconsumed_entries"] == 2
    # The store drops its Redis consumer groups on the released shards: the page still draws.
    r = operator.get(shard_action("shard", "v1:1", group=OTHER_GROUP))
    assert r.status_code == 200 and "Nothing pending on this shard for audit." in text(r)


def test_a_release_confirmed_against_another_count_is_refused(operator: Client, store: MetadataStore) -> None:
    busy_group(store)
    before = store.raw_metadata(PREFIX)
    confirm = {"confirm_unconsumed": "2", "reason": "r", "confirm": "yes"}
    store.client.xadd(stream("v1:1"), {"k": "late"})  # meanwhile: 3 unconsumed now
    r = operator.post(url("release_drain", group=OTHER_GROUP), confirm, follow=True)
    (message,) = messages_of(r)
    assert message.endswith("[CONFIRMATION_MISMATCH]") and "has 3 unconsumed entries" in message
    assert store.raw_metadata(PREFIX) == before
    assert trail() == [("operator", "release_drain", "admin_ui", OTHER_GROUP, "CONFIRMATION_MISMATCH")]


def test_a_release_without_a_reason_shows_the_confirmation_again(
    operator: Client, store: MetadataStore
) -> None:
    busy_group(store)
    before = store.raw_metadata(PREFIX)
    r = operator.post(url("release_drain", group=OTHER_GROUP), {"confirm_unconsumed": "2", "confirm": "yes"})
    assert r.status_code == 400 and r.context["form"].errors["reason"] == ["This field is required."]
    assert store.raw_metadata(PREFIX) == before and trail() == []


def test_a_group_with_live_members_cannot_be_released(operator: Client, store: MetadataStore) -> None:
    busy_group(store)
    r = operator.post(url("release_drain"), follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert messages_of(r)[0].endswith("[GROUP_HAS_LIVE_MEMBERS]")
    assert trail() == []  # only the confirmation page was asked for


# ------------------------------------------------------------------------------------------ dead letters


def dlq_ids(store: MetadataStore) -> list[str]:
    return [i.decode() for i, _ in store.client.xrange(rkeys.dead_letter_key(PREFIX, GROUP))]


def test_replaying_selected_dead_letters_appends_them_to_the_active_version(
    operator: Client, store: MetadataStore
) -> None:
    create(store, shard_count=2)
    ids = [add_dead_letter(store, n) for n in range(3)]
    r = operator.post(url("replay_dead_letters"), {"ids": [ids[0], ids[2]], "reason": "fixed"}, follow=True)
    assert r.redirect_chain == [(url("dead_letters"), 302)]
    (message,) = messages_of(r)
    assert message.startswith(
        f"Replayed 2 dead letters into the active version (every group of {PREFIX} receives them again): "
        f"{ids[0]} → v1:"
    )
    assert dlq_ids(store) == [ids[1]]
    appended = [f[b"event_id"] for s in ("v1:0", "v1:1") for _, f in store.client.xrange(stream(s))]
    assert sorted(appended) == [b"dead-0", b"dead-2"]
    assert trail() == [("operator", "replay_dead_letters", "admin_ui", GROUP, "ok")]


def test_replaying_a_forged_dead_letter_is_refused_and_unsigned_ones_need_the_tick_box(
    operator: Client, store: MetadataStore
) -> None:
    create(store, shard_count=2)
    real = add_dead_letter(store, 0)
    key = rkeys.dead_letter_key(PREFIX, GROUP)
    forged = store.client.xadd(key, {"event_id": "evil", "dlq_mac": "0" * 40}).decode()
    unsigned = store.client.xadd(key, {"event_id": "old", "partition_key": "k"}).decode()
    r = operator.post(url("replay_dead_letters"), {"ids": [real, forged]}, follow=True)
    (message,) = messages_of(r)
    assert "not written by the dead-letter function" in message and "FORGED" in message
    assert message.endswith("[DEAD_LETTER_NOT_VERIFIED]")
    r = operator.post(url("replay_dead_letters"), {"ids": [unsigned]}, follow=True)
    assert "UNSIGNED" in messages_of(r)[0]
    assert dlq_ids(store) == [real, forged, unsigned]  # nothing replayed
    chosen = {"ids": [real, unsigned], "accept_unsigned": "on"}
    r = operator.post(url("replay_dead_letters"), chosen, follow=True)
    assert messages_of(r)[0].startswith("Replayed 2 dead letters")
    assert dlq_ids(store) == [forged]
    assert [row[-1].split(":")[0] for row in trail()] == ["DEAD_LETTER_NOT_VERIFIED"] * 2 + ["ok"]


def test_replaying_nothing_selected_is_an_error_message(operator: Client, store: MetadataStore) -> None:
    create(store)
    r = operator.post(url("replay_dead_letters"), {}, follow=True)
    assert messages_of(r) == ["Select dead letters."] and trail() == []


def test_purging_selected_dead_letters_asks_for_a_reason_then_deletes_them(
    operator: Client, store: MetadataStore
) -> None:
    create(store)
    ids = [add_dead_letter(store, n) for n in range(3)]
    r = operator.post(url("purge_dead_letters"), {"ids": ids[:2]})
    assert r.status_code == 200 and dlq_ids(store) == ids  # only the confirmation
    assert "Purge these 2 dead letters of group billing (of 3)?" in text(r)
    r = operator.post(url("purge_dead_letters"), {"ids": ids[:2], "confirm": "yes"})
    assert r.status_code == 400 and r.context["form"].errors["reason"] == ["This field is required."]
    assert dlq_ids(store) == ids and trail() == []
    r = operator.post(
        url("purge_dead_letters"), {"ids": ids[:2], "reason": "junk", "confirm": "yes"}, follow=True
    )
    assert messages_of(r) == [f"Purged 2 dead letters of {PREFIX}/{GROUP}."]
    assert dlq_ids(store) == [ids[2]]
    assert trail() == [("operator", "purge_dead_letters", "admin_ui", GROUP, "ok")]


def test_purging_all_dead_letters(operator: Client, store: MetadataStore) -> None:
    create(store)
    for n in range(3):
        add_dead_letter(store, n)
    r = operator.post(url("purge_dead_letters"), {"all": "1"})
    assert "Purge every dead letter of group billing : 3 now, and any that arrive before you confirm" in text(
        r
    )
    assert hidden_inputs(r) == {"all": "1", "confirm": "yes"}
    r = operator.post(url("purge_dead_letters"), {**hidden_inputs(r), "reason": "reset"}, follow=True)
    assert messages_of(r) == [f"Purged 3 dead letters of {PREFIX}/{GROUP}."] and dlq_ids(store) == []
    assert AuditEntry.objects.get().details["all"] is True


# ------------------------------------------------------------------------------------------ retention


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_age_ms": "59999", "retired_grace_ms": "0", "accept_data_loss": "on"}, "max_age_ms"),
        ({"max_len": "999", "retired_grace_ms": "0", "accept_data_loss": "on"}, "max_len"),
        ({"max_len": "1000000001", "retired_grace_ms": "0", "accept_data_loss": "on"}, "max_len"),
        ({"retired_grace_ms": "31536000001"}, "retired_grace_ms"),
        ({"retired_grace_ms": "-1"}, "retired_grace_ms"),
        ({"retired_grace_ms": ""}, "retired_grace_ms"),
        ({"max_len": "5000", "retired_grace_ms": "0"}, "accept_data_loss"),  # a cap, not acknowledged
    ],
)
def test_an_invalid_retention_form_is_shown_again_and_changes_nothing(
    body: dict[str, str], field: str, operator: Client, store: MetadataStore
) -> None:
    create(store)
    before = store.raw_metadata(PREFIX)
    r = operator.post(url("set_retention"), body)
    assert r.status_code == 400 and r.context["retention_form"].errors[field]
    assert store.raw_metadata(PREFIX) == before and trail() == []


def test_setting_retention_with_a_cap_is_audited_and_shown(operator: Client, store: MetadataStore) -> None:
    create(store)
    body = {"max_age_ms": "604800000", "max_len": "", "retired_grace_ms": "3600000", "accept_data_loss": "on"}
    r = operator.post(url("set_retention"), {**body, "reason": "disk"}, follow=True)
    assert messages_of(r) == [
        f"Retention of stream prefix {PREFIX} set: acknowledged entries are trimmed; caps max_age_ms "
        "604800000 (may drop unconsumed entries: data loss); retired versions' streams kept 1 h after "
        "retiring."
    ]
    assert store.describe_prefix(PREFIX)["retention"] == {
        "mode": "acked",
        "max_age_ms": 604_800_000,
        "max_len": None,
        "retired_grace_ms": 3_600_000,
    }
    assert "max_age_ms 604800000 (7 d) may drop unconsumed entries (data loss)" in text(r)
    assert trail() == [("operator", "set_retention", "admin_ui", "", "ok")]
    # The actions page offers the current policy to edit, but the acknowledgement must be given again.
    form = operator.get(url("group_actions")).context["retention_form"]
    assert form.initial["max_age_ms"] == 604_800_000 and not form.initial.get("accept_data_loss")


def test_clearing_the_caps_needs_no_acknowledgement(operator: Client, store: MetadataStore) -> None:
    create(store)
    store.set_retention(PREFIX, RetentionPolicy(max_len=5_000))
    operator.post(url("set_retention"), {"max_age_ms": "", "max_len": "", "retired_grace_ms": "0"})
    assert store.describe_prefix(PREFIX)["retention"]["max_len"] is None


# ------------------------------------------------------------------------------------------ delete prefix


def test_deleting_a_prefix_shows_its_usage_and_needs_force_while_it_is_in_use(
    operator: Client, store: MetadataStore
) -> None:
    busy_group(store)
    add_dead_letter(store, 1)
    r = operator.post(url("delete_prefix"))
    assert r.status_code == 200
    page = text(r)
    assert "Consumer groups 2: audit, billing Unconsumed entries 3 Streams 12" in page
    assert "It still has 2 groups and 3 unconsumed entries" in page
    r = operator.post(url("delete_prefix"), {"confirm": "yes"})
    assert r.status_code == 400 and r.context["form"].errors["force"]
    assert store.stream_prefixes() == [PREFIX] and trail() == []

    r = operator.post(url("delete_prefix"), {"confirm": "yes", "force": "on", "reason": "gone"}, follow=True)
    assert r.redirect_chain == [(LIST_URL, 302)]
    (message,) = messages_of(r)
    assert message.startswith(f"Stream prefix {PREFIX} deleted with its groups, streams and dead letters (")
    assert store.stream_prefixes() == [] and store.client.keys(f"rsc:{{{PREFIX}}}:*") == []
    assert trail() == [("operator", "delete_prefix", "admin_ui", "", "ok")]
    assert AuditEntry.objects.get().details["usage"]["groups"] == [OTHER_GROUP, GROUP]


# ------------------------------------------------------------------------------------------ audit down


def test_an_action_whose_audit_row_cannot_be_written_changes_nothing(
    operator: Client, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_shards_owned_by_a(store)
    ids = pend(store, "v1:0", 1)

    def database_down(**_: Any) -> None:
        raise DatabaseError("the database is gone")

    monkeypatch.setattr("coordinator.audit.begin", database_down)
    confirm = {"entry_ids": ids[0], "reason": "r", "confirm": "yes"}
    r = operator.post(shard_action("skip_entries"), confirm, follow=True)
    (message,) = messages_of(r)
    assert message.startswith(
        "Audit trail unavailable: the audit trail cannot be written, so nothing was changed"
    )
    assert message.endswith("[AUDIT_UNAVAILABLE] This is usually temporary: retry shortly.")
    assert pending_ids(store, "v1:0") == ids and trail() == []


def test_a_completed_migration_shows_every_old_shard_drained(operator: Client, store: MetadataStore) -> None:
    """Completion retires the old version and forgets which shards each group drained; the page still
    says they all were (issue 31: a completed migration showed "0/4 drained, 0%")."""
    create(store)
    store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)
    store.tick()  # the old shards are empty: drained, and the migration completes
    migration = store.describe_prefix(PREFIX)["migration"]
    assert not migration["active"] and migration["drained"].get(GROUP, []) == []
    r = operator.get(url("group_detail"))
    assert "completed" in text(r)
    [row] = table_rows(r, "migration-progress")
    assert row[:3] == [GROUP, "4/4", "100% 100%"], row
