"""API credentials change only through the operations layer (coordinator/operations.py): issued,
deactivated, re-activated and re-scoped from every entry point (the credential admin, the
``create_api_credential`` and ``api_credential`` commands) with an audit row committed first; if it
cannot be written, nothing changes. Re-activating needs what issuing needs (``manage_groups``), not
merely ``change_apicredential``."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.test import Client

from coordinator import operations
from coordinator.models import ApiCredential, AuditEntry

from .helpers import Api

CHANGELIST = "/admin/coordinator/apicredential/"
CLERK = ("view_apicredential", "change_apicredential")
LEAD = (*CLERK, "manage_groups")


def staff(username: str, *codenames: str) -> Client:
    user = User.objects.create_user(username, password=None, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def change_url(credential: ApiCredential) -> str:
    return f"{CHANGELIST}{credential.pk}/change/"


def post_change(client: Client, credential: ApiCredential, **fields: Any) -> Any:
    data = {
        "role": credential.role,
        "active": "on" if credential.active else "",
        "stream_prefixes": credential.stream_prefixes,
        "consumer_groups": credential.consumer_groups,
        "member_id_prefix": credential.member_id_prefix,
        **fields,
    }
    return client.post(change_url(credential), {k: v for k, v in data.items() if v != ""}, follow=True)


def seen_by_api(api: Api, token: str) -> str:
    status = api.get("admin/groups", token=token).status_code
    return {200: "admin", 403: "member", 401: "refused"}[status]


def rows() -> list[tuple[str, str, str, str, str]]:
    return [
        (e.username.split(":")[0], e.source, e.action, e.details.get("credential", ""), e.outcome)
        for e in AuditEntry.objects.order_by("id")
    ]


def deactivated(credential: ApiCredential) -> ApiCredential:
    ApiCredential.objects.filter(pk=credential.pk).update(active=False)
    credential.refresh_from_db()
    return credential


@pytest.fixture
def audit_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**fields: Any) -> Any:
        raise DatabaseError("database is locked")

    monkeypatch.setattr(AuditEntry.objects, "create", refuse)


# ------------------------------------------------------------------------------------------ every entry point


def test_issuing_with_the_command_is_audited_without_the_token() -> None:
    out = io.StringIO()
    call_command(
        "create_api_credential", "orders-workers", role="member", stream_prefixes="orders-*",
        reason="new team", stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    token = out.getvalue().strip()
    credential = ApiCredential.objects.get(name="orders-workers")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.source, entry.outcome, entry.stream_prefix) == (
        "issue_credential", "command", "ok", ""
    )  # fmt: skip
    assert entry.username.startswith("command:create_api_credential:")
    assert entry.details == {
        "credential": "orders-workers",
        "credential_id": credential.pk,
        "role": "member",
        "stream_prefixes": "orders-*",
        "consumer_groups": "*",
        "member_id_prefix": "",
        "reason": "new team",
    }
    assert token not in str(entry.details) and token not in entry.message
    assert "credential orders-workers" in str(entry)


def test_every_change_in_the_admin_is_audited_first(api: Api) -> None:
    credential, token = ApiCredential.issue("orders-workers", "member")
    clerk, lead = staff("clerk", *CLERK), staff("lead", *LEAD)

    assert post_change(clerk, credential, active="").status_code == 200  # deactivate (a clerk may)
    assert seen_by_api(api, token) == "refused"
    credential.refresh_from_db()
    assert post_change(lead, credential, active="on").status_code == 200  # re-activate
    assert seen_by_api(api, token) == "member"
    credential.refresh_from_db()
    post_change(lead, credential, stream_prefixes="orders-*,  billing", member_id_prefix="orders-")
    credential.refresh_from_db()
    post_change(lead, credential, role="admin")
    assert seen_by_api(api, token) == "admin"

    assert rows() == [
        ("clerk", "admin_ui", "deactivate_credential", "orders-workers", "ok"),
        ("lead", "admin_ui", "reactivate_credential", "orders-workers", "ok"),
        ("lead", "admin_ui", "change_credential", "orders-workers", "ok"),
        ("lead", "admin_ui", "change_credential", "orders-workers", "ok"),
    ]
    scope, role = (e.details["changes"] for e in AuditEntry.objects.order_by("id")[2:])
    assert scope == {"stream_prefixes": ["*", "orders-* billing"], "member_id_prefix": ["", "orders-"]}
    assert role == {"role": ["member", "admin"]}
    assert AuditEntry.objects.filter(user__username="clerk").count() == 1


def test_the_admin_deactivate_action_writes_a_row_per_credential(api: Api) -> None:
    issued = [ApiCredential.issue(name, "member")[0] for name in ("a-workers", "b-workers")]
    r = staff("clerk", *CLERK).post(
        CHANGELIST, {"action": "deactivate", "_selected_action": [c.pk for c in issued]}, follow=True
    )
    assert "2 credential(s) deactivated." in r.content.decode()
    assert rows() == [
        ("clerk", "admin_ui", "deactivate_credential", "a-workers", "ok"),
        ("clerk", "admin_ui", "deactivate_credential", "b-workers", "ok"),
    ]


def test_the_command_deactivates_reactivates_and_rescopes_audited(api: Api) -> None:
    credential, token = ApiCredential.issue("orders-workers", "member")
    out = io.StringIO()
    call_command("api_credential", "deactivate", "orders-workers", reason="leaked", stdout=out)
    assert seen_by_api(api, token) == "refused"
    call_command("api_credential", "reactivate", "orders-workers", stdout=out)
    assert seen_by_api(api, token) == "member"
    call_command("api_credential", "set-scope", "orders-workers", groups="billing", stdout=out)
    call_command("api_credential", "list", stdout=out)
    assert "orders-workers  member  active  prefixes='*' groups='billing'" in out.getvalue()
    assert rows() == [
        ("command", "command", "deactivate_credential", "orders-workers", "ok"),
        ("command", "command", "reactivate_credential", "orders-workers", "ok"),
        ("command", "command", "change_credential", "orders-workers", "ok"),
    ]
    assert AuditEntry.objects.order_by("id")[0].details["reason"] == "leaked"
    with pytest.raises(CommandError, match=r"INVALID_REQUEST.*is not a pattern"):
        call_command("api_credential", "set-scope", "orders-workers", groups="a:b", stdout=out)
    assert ApiCredential.objects.get(pk=credential.pk).consumer_groups == "billing"
    assert len(rows()) == 3  # a malformed change writes no row


def test_an_unchanged_save_writes_no_row() -> None:
    credential, _ = ApiCredential.issue("orders-workers", "member")
    post_change(staff("lead", *LEAD), credential)
    assert rows() == []


def test_credentials_are_not_deleted_in_the_admin() -> None:
    credential, _ = ApiCredential.issue("orders-workers", "member")
    superuser = User.objects.create_superuser("root", password=None)
    client = Client()
    client.force_login(superuser)
    assert client.get(f"{CHANGELIST}{credential.pk}/delete/").status_code == 403
    assert ApiCredential.objects.filter(pk=credential.pk).exists()


# ------------------------------------------------------------------------------------------ re-activation


def test_a_user_with_only_change_permission_cannot_reactivate_a_member_credential(api: Api) -> None:
    """Re-activation needs what issuing needs: a leaked token a clerk (or a colleague) deactivated is not
    brought back with change_apicredential alone, member credentials included."""
    credential, token = ApiCredential.issue("orders-workers", "member")
    credential = deactivated(credential)
    clerk = staff("clerk", *CLERK)
    assert 'name="active"' not in clerk.get(change_url(credential)).content.decode()
    post_change(clerk, credential, active="on")  # a hand-made POST: the field is not in the form
    assert ApiCredential.objects.get(pk=credential.pk).active is False
    assert seen_by_api(api, token) == "refused"
    assert rows() == []


def test_the_operations_layer_refuses_a_reactivation_by_a_deactivator_too() -> None:
    credential, _ = ApiCredential.issue("orders-workers", "member")
    credential = deactivated(credential)
    clerk = operations.Actor(
        username="clerk", source="admin_ui", is_admin=False, may_deactivate_credentials=True
    )
    with pytest.raises(operations.PermissionDeniedError, match=r"coordinator\.manage_groups"):
        operations.reactivate_credential(clerk, credential.pk)
    for change in ({"role": "admin"}, {"stream_prefixes": "other"}, {"active": False, "role": "admin"}):
        with pytest.raises(operations.PermissionDeniedError):
            operations.change_credential(clerk, credential.pk, **change)
    nobody = operations.Actor(username="viewer", source="admin_ui", is_admin=False)
    active, _ = ApiCredential.issue("b-workers", "member")
    with pytest.raises(operations.PermissionDeniedError):
        operations.deactivate_credential(nobody, active.pk)
    with pytest.raises(operations.PermissionDeniedError):
        operations.issue_credential(clerk, "c-workers", "member")
    assert ApiCredential.objects.get(pk=credential.pk).active is False
    assert ApiCredential.objects.get(pk=active.pk).active is True
    assert not ApiCredential.objects.filter(name="c-workers").exists() and rows() == []
    assert operations.deactivate_credential(clerk, active.pk).active is False  # what a clerk may do


# ------------------------------------------------------------------------------------------ fail closed


@pytest.mark.usefixtures("audit_down")
def test_when_the_audit_row_cannot_be_written_the_admin_changes_nothing(api: Api) -> None:
    credential, token = ApiCredential.issue("orders-workers", "member")
    r = post_change(staff("clerk", *CLERK), credential, active="")
    assert "Nothing was changed: the audit trail cannot be written" in r.content.decode()
    assert ApiCredential.objects.get(pk=credential.pk).active is True
    assert seen_by_api(api, token) == "member"

    r = staff("other-clerk", *CLERK).post(
        CHANGELIST, {"action": "deactivate", "_selected_action": [credential.pk]}, follow=True
    )
    assert "were not deactivated" in r.content.decode()
    assert ApiCredential.objects.get(pk=credential.pk).active is True

    off, _ = ApiCredential.issue("b-workers", "member")
    off = deactivated(off)
    post_change(staff("lead", *LEAD), off, active="on", stream_prefixes="orders")
    assert (off.active, off.stream_prefixes) == (False, "*")
    off.refresh_from_db()
    assert (off.active, off.stream_prefixes) == (False, "*")


@pytest.mark.usefixtures("audit_down")
def test_when_the_audit_row_cannot_be_written_the_commands_change_nothing() -> None:
    with pytest.raises(CommandError, match=r"audit trail cannot be written.*nothing was created"):
        call_command("create_api_credential", "orders-workers", role="member", stdout=io.StringIO())
    assert not ApiCredential.objects.exists()
    credential, _ = ApiCredential.issue("b-workers", "member")
    with pytest.raises(CommandError, match="AUDIT_UNAVAILABLE"):
        call_command("api_credential", "deactivate", "b-workers", stdout=io.StringIO())
    assert ApiCredential.objects.get(pk=credential.pk).active is True
