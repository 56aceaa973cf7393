"""Actions: POST only, CSRF-protected, permission-checked, confirmed when destructive, audited, and
the store's refusals shown as messages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from config.embedded_redis import RedisServer
from coordinator.models import AuditEntry
from coordinator.protocol.model import OrderingMode
from coordinator.store import MetadataStore

from .conftest import logged_in, staff_user
from .helpers import (
    GROUP,
    LIST_URL,
    OTHER_GROUP,
    PREFIX,
    busy_group,
    create,
    messages_of,
    store_gone_after_create,
    table_rows,
    text,
    url,
)


def audit_trail() -> list[tuple[str, str, str, str, str, dict[str, Any]]]:
    return [
        (e.username, e.action, e.stream_prefix, e.consumer_group, e.outcome, e.details)
        for e in AuditEntry.objects.order_by("id")
    ]


# ------------------------------------------------------------------------------------------ max_concurrency


def test_set_max_concurrency_bumps_the_group_epoch_and_is_audited(
    operator: Client, store: MetadataStore
) -> None:
    create(store)
    r = operator.post(url("set_max_concurrency"), {"max_concurrency": "6"}, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert messages_of(r) == [f"max_concurrency of {PREFIX}/{GROUP} set to 6; group epoch is now 1."]
    view = store.describe_group(PREFIX, GROUP)
    assert (view["config"]["max_concurrency"], view["group_epoch"]) == (6, 1)
    assert "max_concurrency 6" in text(r)
    assert audit_trail() == [
        ("operator", "set_max_concurrency", PREFIX, GROUP, "ok", {"max_concurrency": 6, "previous": 1})
    ]


@pytest.mark.parametrize("value", ["0", "1025", "many", ""])
def test_an_invalid_max_concurrency_redisplays_the_form_and_changes_nothing(
    value: str, operator: Client, store: MetadataStore
) -> None:
    create(store)
    before = store.raw_metadata(PREFIX)
    r = operator.post(url("set_max_concurrency"), {"max_concurrency": value})
    assert r.status_code == 400
    assert r.context["max_concurrency_form"].errors["max_concurrency"]
    assert store.raw_metadata(PREFIX) == before and audit_trail() == []


# ------------------------------------------------------------------------------------------ shard count


def test_a_shard_count_change_is_confirmed_then_started_and_audited(
    operator: Client, store: MetadataStore
) -> None:
    create(store)
    create(store, group=OTHER_GROUP)
    before = store.raw_metadata(PREFIX)
    r = operator.post(url("change_shard_count"), {"shard_count": "6", "ordering": "strict"})
    assert r.status_code == 200 and store.raw_metadata(PREFIX) == before  # only a confirmation page
    page = text(r)
    assert "version v1 with 4 shards becomes DRAINING" in page
    assert "v2 with 6 shards becomes ACTIVE" in page and "Ordering: strict" in page
    assert "must drain v1 (each group's epoch is bumped): audit, billing" in page
    # gcd(4, 6) = 2: new shard j waits for the old shards of the same parity.
    assert table_rows(r, "dependencies")[:3] == [
        ["v2:0", "v1:0, v1:2"],
        ["v2:1", "v1:1, v1:3"],
        ["v2:2", "v1:0, v1:2"],
    ]
    confirmation = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', r.content.decode()))
    assert confirmation.pop("csrfmiddlewaretoken")
    assert confirmation == {"shard_count": "6", "ordering": "strict", "from_version": "1", "confirm": "yes"}

    r = operator.post(url("change_shard_count"), confirmation, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert messages_of(r) == [
        f"Shard-count change started on stream prefix {PREFIX}: v1 (4 shards) → v2 (6 shards), "
        "strict ordering. Groups draining v1: audit, billing."
    ]
    prefix = store.describe_prefix(PREFIX)
    assert (prefix["topology"]["active_version"], prefix["topology"]["shard_count"]) == (2, 6)
    assert prefix["migration"]["ordering"] == "strict" and prefix["migration"]["active"]
    assert audit_trail() == [
        (
            "operator",
            "change_shard_count",
            PREFIX,
            GROUP,
            "ok",
            {
                "shard_count": 6,
                "ordering": "strict",
                "from_version": 1,
                "from_shard_count": 4,
                "to_version": 2,
                "groups": ["audit", "billing"],
            },
        )
    ]


def test_a_shard_count_change_during_a_migration_is_refused_with_a_clear_message(
    operator: Client, store: MetadataStore
) -> None:
    busy_group(store)
    before = store.raw_metadata(PREFIX)
    confirm = {"shard_count": "16", "ordering": "relaxed", "from_version": "2", "confirm": "yes"}
    r = operator.post(url("change_shard_count"), confirm, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    (message,) = messages_of(r)
    assert message.startswith("Migration in progress: ") and message.endswith("[MIGRATION_IN_PROGRESS]")
    assert store.raw_metadata(PREFIX) == before
    assert [(e[1], e[4]) for e in audit_trail()] == [("change_shard_count", "MIGRATION_IN_PROGRESS")]
    assert AuditEntry.objects.get().message in message


def test_an_unchanged_shard_count_is_refused(operator: Client, store: MetadataStore) -> None:
    create(store)
    r = operator.post(url("change_shard_count"), {"shard_count": "4", "ordering": "strict", "confirm": "yes"})
    assert r.status_code == 302
    assert [(e[1], e[4]) for e in audit_trail()] == [("change_shard_count", "SHARD_COUNT_UNCHANGED")]


def test_a_confirmation_reviewed_against_another_topology_is_refused(
    operator: Client, store: MetadataStore
) -> None:
    create(store)
    store.change_shard_count(PREFIX, 8, OrderingMode.RELAXED)  # another operator, meanwhile
    confirm = {"shard_count": "6", "ordering": "strict", "from_version": "1", "confirm": "yes"}
    r = operator.post(url("change_shard_count"), confirm, follow=True)
    (message,) = messages_of(r)
    assert message.startswith("Confirmation does not match: the active routing version changed from v1 to v2")
    assert store.describe_prefix(PREFIX)["topology"]["active_version"] == 2
    assert [(e[1], e[4]) for e in audit_trail()] == [("change_shard_count", "CONFIRMATION_MISMATCH")]


@pytest.mark.parametrize(
    "body", [{"shard_count": "0", "ordering": "strict"}, {"shard_count": "4", "ordering": "sideways"}]
)
def test_an_invalid_shard_count_form_redisplays_the_form(
    body: dict[str, str], operator: Client, store: MetadataStore
) -> None:
    create(store)
    r = operator.post(url("change_shard_count"), {**body, "confirm": "yes"})
    assert r.status_code == 400 and r.context["shard_count_form"].errors
    assert audit_trail() == []


# ------------------------------------------------------------------------------------------ delete


def test_deleting_a_group_is_confirmed_then_done_and_audited(operator: Client, store: MetadataStore) -> None:
    create(store)
    create(store, group=OTHER_GROUP)
    r = operator.post(url("delete_group"))
    assert r.status_code == 200
    assert 'id="unconsumed-lag">0<' in r.content.decode()
    assert 'name="force"' not in r.content.decode()  # nothing to lose: no force asked
    assert GROUP in store.describe_prefix(PREFIX)["groups"]  # not yet
    r = operator.post(url("delete_group"), {"confirm": "yes"}, follow=True)
    assert r.redirect_chain == [(LIST_URL, 302)]
    assert messages_of(r) == [f"Consumer group {PREFIX}/{GROUP} deleted."]
    assert store.describe_prefix(PREFIX)["groups"] == [OTHER_GROUP]
    assert [row[1] for row in table_rows(r, "groups")] == [OTHER_GROUP]
    assert audit_trail() == [
        (
            "operator",
            "delete_group",
            PREFIX,
            GROUP,
            "ok",
            {"force": False, "reason": "", "unconsumed": {"lag": 0, "pending": 0}},
        )
    ]


def test_deleting_a_group_with_unconsumed_entries_shows_the_counts_and_needs_force(
    operator: Client, store: MetadataStore
) -> None:
    busy_group(store)  # two undelivered entries (v1:1, v1:3); members a and b live
    r = operator.post(url("delete_group"))
    assert r.status_code == 200
    page = text(r)
    assert "2 live members (a, b) will lose their shards at once" in page
    assert "This group has 2 entries not yet delivered and 0 pending." in page
    body = r.content.decode()
    assert 'id="unconsumed-lag">2<' in body and 'id="unconsumed-pending">0<' in body
    assert 'name="force"' in body
    before = store.raw_metadata(PREFIX)

    r = operator.post(url("delete_group"), {"confirm": "yes"}, follow=True)  # force not ticked
    assert r.redirect_chain == [(url("group_detail"), 302)]
    (message,) = messages_of(r)
    assert message.startswith("Group has unconsumed entries: ")
    assert message.endswith("[GROUP_HAS_UNCONSUMED_ENTRIES]")
    assert store.raw_metadata(PREFIX) == before
    assert GROUP in store.describe_prefix(PREFIX)["groups"]

    r = operator.post(url("delete_group"), {"confirm": "yes", "force": "on"}, follow=True)
    assert r.redirect_chain == [(LIST_URL, 302)]
    assert store.describe_prefix(PREFIX)["groups"] == [OTHER_GROUP]
    assert [(e[4], e[5]["force"], e[5]["unconsumed"]) for e in audit_trail()] == [
        ("GROUP_HAS_UNCONSUMED_ENTRIES", False, {"lag": 2, "pending": 0}),
        ("ok", True, {"lag": 2, "pending": 0}),
    ]


def test_deleting_a_missing_group_is_an_error_message(operator: Client, store: MetadataStore) -> None:
    create(store)
    r = operator.post(url("delete_group", group="gone"), {"confirm": "yes"}, follow=True)
    assert any(m.endswith("[GROUP_NOT_FOUND]") for m in messages_of(r))
    assert r.status_code == 200  # the detail page sent it back to the list
    assert [(e[1], e[3], e[4]) for e in audit_trail()] == [("delete_group", "gone", "GROUP_NOT_FOUND")]


# ------------------------------------------------------------------------------------------ refusals

ACTIONS = {
    "set_max_concurrency": {"max_concurrency": "5"},
    "change_shard_count": {"shard_count": "8", "ordering": "strict", "confirm": "yes"},
    "delete_group": {"confirm": "yes"},
}


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_refuse_get(action: str, operator: Client, store: MetadataStore) -> None:
    create(store)
    before = store.raw_metadata(PREFIX)
    assert operator.get(url(action), ACTIONS[action]).status_code == 405
    assert store.raw_metadata(PREFIX) == before and audit_trail() == []


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_refuse_users_without_the_manage_permission(
    action: str, viewer: Client, staff: Client, client: Client, store: MetadataStore
) -> None:
    create(store)
    before = store.raw_metadata(PREFIX)
    assert viewer.post(url(action), ACTIONS[action]).status_code == 403
    assert staff.post(url(action), ACTIONS[action]).status_code == 403
    anonymous = client.post(url(action), ACTIONS[action])
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    assert store.raw_metadata(PREFIX) == before and audit_trail() == []


def test_a_superuser_may_act_without_explicit_permissions(store: MetadataStore) -> None:
    create(store)
    root = User.objects.create_superuser("root", email=None, password=None)
    r = logged_in(root).post(url("set_max_concurrency"), {"max_concurrency": "2"})
    assert r.status_code == 302 and store.describe_group(PREFIX, GROUP)["config"]["max_concurrency"] == 2


def test_actions_need_the_csrf_token(store: MetadataStore) -> None:
    create(store)
    browser = logged_in(staff_user("careful", "coordinator.manage_groups"), enforce_csrf_checks=True)
    assert browser.post(url("set_max_concurrency"), {"max_concurrency": "5"}).status_code == 403
    assert store.describe_group(PREFIX, GROUP)["config"]["max_concurrency"] == 1
    form_page = browser.get(url("group_actions"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form_page.content.decode())
    assert token
    r = browser.post(
        url("set_max_concurrency"), {"max_concurrency": "5", "csrfmiddlewaretoken": token.group(1)}
    )
    assert r.status_code == 302
    assert store.describe_group(PREFIX, GROUP)["config"]["max_concurrency"] == 5


# ------------------------------------------------------------------------------------------ store down


def test_an_action_with_the_store_down_is_an_error_message_and_audited(
    operator: Client, settings: Any, disposable_redis: RedisServer
) -> None:
    store_gone_after_create(settings, disposable_redis)
    r = operator.post(url("set_max_concurrency"), {"max_concurrency": "5"}, follow=True)
    assert r.redirect_chain == [(url("group_detail"), 302)]
    assert r.status_code == 503  # the detail page cannot be drawn either: an error page, not a 500
    (message,) = messages_of(r)
    assert message.startswith("Metadata store unavailable: the metadata store is unreachable")
    assert message.endswith("[STORE_UNAVAILABLE] This is usually temporary: retry shortly.")
    assert message in text(r)
    assert [(e[1], e[4]) for e in audit_trail()] == [("set_max_concurrency", "STORE_UNAVAILABLE")]


# ------------------------------------------------------------------------------------------ audit trail


def test_the_audit_trail_is_visible_and_read_only_in_the_admin(
    operator: Client, store: MetadataStore
) -> None:
    create(store)
    operator.post(url("set_max_concurrency"), {"max_concurrency": "4"})
    detail = operator.get(url("group_detail"))
    audit_url = f"/admin/admin_ui/auditentry/?stream_prefix={PREFIX}&group={GROUP}"
    assert f'href="{audit_url.replace("&", "&amp;")}"' in detail.content.decode()
    r = operator.get(audit_url)
    assert r.status_code == 200
    page = text(r)
    assert "operator" in page and "set max_concurrency" in page and '"previous": 1' in page
    entry = AuditEntry.objects.get()
    assert operator.get("/admin/admin_ui/auditentry/add/").status_code == 403
    change = operator.get(f"/admin/admin_ui/auditentry/{entry.pk}/change/")
    assert change.status_code == 200 and 'name="_save"' not in change.content.decode()
    assert operator.post(f"/admin/admin_ui/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.count() == 1


def test_the_group_page_s_audit_link_includes_its_prefix_s_reshards(
    operator: Client, store: MetadataStore
) -> None:
    """A shard-count change concerns every group of the prefix, whichever page (or the API) started it:
    the group page's audit link shows it, and not the other group's own changes (issue 31)."""
    create(store)
    create(store, group=OTHER_GROUP)
    operator.post(url("set_max_concurrency", group=OTHER_GROUP), {"max_concurrency": "3"})
    operator.post(url("set_max_concurrency"), {"max_concurrency": "4"})
    confirm = {"shard_count": "6", "ordering": "strict", "from_version": "1", "confirm": "yes"}
    assert operator.post(url("change_shard_count", group=OTHER_GROUP), confirm).status_code == 302
    detail = operator.get(url("group_detail")).content.decode()
    link = re.search(r'href="(/admin/admin_ui/auditentry/\?[^"]+)"', detail)
    assert link is not None
    r = operator.get(link.group(1).replace("&amp;", "&"))
    assert r.status_code == 200
    rows = [(row.consumer_group, row.action) for row in r.context["cl"].result_list]
    assert sorted(rows) == sorted([(GROUP, "set_max_concurrency"), (OTHER_GROUP, "change_shard_count")])
