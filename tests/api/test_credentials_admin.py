"""The credential admin (coordinator/admin.py): who may give a token more power, and deactivation that
applies at once and leaves a trace (a WARNING log line and the admin's own history)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.sites import site
from django.contrib.auth.models import Permission, User
from django.core.exceptions import PermissionDenied
from django.forms import modelform_factory
from django.test import Client, RequestFactory

from coordinator.admin import ApiCredentialAdmin
from coordinator.models import ApiCredential

from .helpers import Api

ADMIN_LOGGER = "coordinator.admin"


def staff_with(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password=None, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change_url(credential: ApiCredential) -> str:
    return f"/admin/coordinator/apicredential/{credential.pk}/change/"


CHANGELIST = "/admin/coordinator/apicredential/"


def post_change(client: Client, credential: ApiCredential, **fields: Any) -> Any:
    data = {
        "role": credential.role,
        "active": "on" if credential.active else "",
        "stream_prefixes": credential.stream_prefixes,
        "consumer_groups": credential.consumer_groups,
        "member_id_prefix": credential.member_id_prefix,
        **fields,
    }
    return client.post(change_url(credential), {k: v for k, v in data.items() if v != ""})


def role_seen_by_api(api: Api, token: str) -> str:
    """'admin', 'member' or 'refused', from what the admin API answers the token."""
    status = api.get("admin/groups", token=token).status_code
    return {200: "admin", 403: "member", 401: "refused"}[status]


@pytest.fixture
def member() -> tuple[ApiCredential, str]:
    return ApiCredential.issue("orders-workers", ApiCredential.Role.MEMBER)


# --------------------------------------------------------------------------------------- role changes


def test_without_manage_groups_the_role_is_read_only(api: Api, member: tuple[ApiCredential, str]) -> None:
    credential, token = member
    client = logged_in(staff_with("clerk", "view_apicredential", "change_apicredential"))

    page = client.get(change_url(credential))
    assert page.status_code == 200
    assert 'name="role"' not in page.content.decode()  # shown, not editable
    assert 'name="active"' in page.content.decode()  # deactivating stays possible

    # A hand-made POST with the field is ignored: the role is not part of the form.
    r = post_change(client, credential, role=ApiCredential.Role.ADMIN)
    assert r.status_code == 302
    credential.refresh_from_db()
    assert credential.role == ApiCredential.Role.MEMBER
    assert role_seen_by_api(api, token) == "member"


def test_save_model_refuses_a_role_change_without_manage_groups(
    member: tuple[ApiCredential, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The second line of defence: a form that does carry the role (a subclass, a later edit) still
    cannot save it."""
    credential, _ = member
    form = modelform_factory(ApiCredential, fields=("role", "active"))(
        data={"role": "admin", "active": "on"}, instance=credential
    )
    assert form.is_valid()
    request = RequestFactory().post("/")
    request.user = staff_with("clerk", "change_apicredential")
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)

    with pytest.raises(PermissionDenied, match=r"coordinator\.manage_groups"):
        ApiCredentialAdmin(ApiCredential, site).save_model(request, form.instance, form, change=True)

    assert ApiCredential.objects.get(pk=credential.pk).role == ApiCredential.Role.MEMBER
    assert "changing the role of 'orders-workers' to admin by clerk refused" in caplog.text


def test_with_manage_groups_the_role_can_change_and_is_logged(
    api: Api, member: tuple[ApiCredential, str], caplog: pytest.LogCaptureFixture
) -> None:
    credential, token = member
    client = logged_in(staff_with("lead", "view_apicredential", "change_apicredential", "manage_groups"))
    assert 'name="role"' in client.get(change_url(credential)).content.decode()
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)

    assert post_change(client, credential, role=ApiCredential.Role.ADMIN).status_code == 302

    credential.refresh_from_db()
    assert credential.role == ApiCredential.Role.ADMIN
    assert role_seen_by_api(api, token) == "admin"
    assert "API credential 'orders-workers': role changed to admin by lead" in caplog.text


def test_reactivating_an_admin_credential_needs_manage_groups(api: Api) -> None:
    credential, token = ApiCredential.issue("break-glass", ApiCredential.Role.ADMIN)
    ApiCredential.objects.filter(pk=credential.pk).update(active=False)
    credential.refresh_from_db()
    clerk = logged_in(staff_with("clerk", "view_apicredential", "change_apicredential"))

    assert 'name="active"' not in clerk.get(change_url(credential)).content.decode()
    assert post_change(clerk, credential, active="on").status_code == 302
    assert role_seen_by_api(api, token) == "refused"

    lead = logged_in(staff_with("lead", "view_apicredential", "change_apicredential", "manage_groups"))
    assert post_change(lead, credential, active="on").status_code == 302
    assert role_seen_by_api(api, token) == "admin"


# --------------------------------------------------------------------------------------- scopes


def scope_seen_by_api(api: Api, token: str, prefix: str) -> int:
    return int(api.get(f"routing/{prefix}", token=token).status_code)


def test_without_manage_groups_a_scope_is_read_only(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    api.create_group()
    credential, token = ApiCredential.issue("orders-workers", "member", stream_prefixes="payments")
    clerk = logged_in(staff_with("clerk", "view_apicredential", "change_apicredential"))
    page = clerk.get(change_url(credential)).content.decode()
    assert 'name="stream_prefixes"' not in page and 'name="consumer_groups"' not in page
    assert post_change(clerk, credential, stream_prefixes="*").status_code == 302
    credential.refresh_from_db()
    assert credential.stream_prefixes == "payments"
    assert scope_seen_by_api(api, token, "orders") == 403

    # save_model refuses a widened scope even if a form carries it.
    form = modelform_factory(ApiCredential, fields=("stream_prefixes",))(
        data={"stream_prefixes": "*"}, instance=credential
    )
    assert form.is_valid()
    request = RequestFactory().post("/")
    request.user = staff_with("other-clerk", "change_apicredential")
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)
    with pytest.raises(PermissionDenied, match=r"coordinator\.manage_groups"):
        ApiCredentialAdmin(ApiCredential, site).save_model(request, form.instance, form, change=True)
    assert ApiCredential.objects.get(pk=credential.pk).stream_prefixes == "payments"
    assert "changing the scope (stream_prefixes) of 'orders-workers' by other-clerk refused" in caplog.text


def test_with_manage_groups_a_scope_changes_at_once_is_validated_and_logged(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api.create_group()
    credential, token = ApiCredential.issue("orders-workers", "member", stream_prefixes="payments")
    assert scope_seen_by_api(api, token, "orders") == 403
    lead = logged_in(staff_with("lead", "view_apicredential", "change_apicredential", "manage_groups"))
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)

    bad = post_change(lead, credential, stream_prefixes="orders:v1")
    assert bad.status_code == 200 and "is not a pattern" in bad.content.decode()  # the form's error
    assert post_change(lead, credential, stream_prefixes="orders payments").status_code == 302

    assert scope_seen_by_api(api, token, "orders") == 200
    assert (
        "API credential 'orders-workers': stream_prefixes changed to 'orders payments' by lead" in caplog.text
    )


# --------------------------------------------------------------------------------------- deactivation


def test_deactivating_in_the_form_applies_at_once_and_is_logged(
    api: Api, member: tuple[ApiCredential, str], caplog: pytest.LogCaptureFixture
) -> None:
    credential, token = member
    assert role_seen_by_api(api, token) == "member"  # the credential cache is now warm
    user = staff_with("clerk", "view_apicredential", "change_apicredential")
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)

    assert post_change(logged_in(user), credential, active="").status_code == 302

    assert role_seen_by_api(api, token) == "refused"  # not ~5 s later: the next request
    assert "API credential 'orders-workers' deactivated by clerk" in caplog.text
    assert LogEntry.objects.filter(user=user, object_id=str(credential.pk), action_flag=CHANGE).exists()


def test_the_deactivate_action_applies_at_once_and_names_who_and_which(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    issued = {name: ApiCredential.issue(name, "member") for name in ("a-workers", "b-workers", "c-workers")}
    ApiCredential.objects.filter(name="c-workers").update(active=False)  # already off: not counted
    for name in ("a-workers", "b-workers"):
        assert role_seen_by_api(api, issued[name][1]) == "member"
    user = staff_with("clerk", "view_apicredential", "change_apicredential")
    caplog.set_level(logging.WARNING, logger=ADMIN_LOGGER)

    r = logged_in(user).post(
        CHANGELIST,
        {"action": "deactivate", "_selected_action": [c.pk for c, _ in issued.values()]},
        follow=True,
    )

    assert "2 credential(s) deactivated." in r.content.decode()
    for name in ("a-workers", "b-workers"):
        assert role_seen_by_api(api, issued[name][1]) == "refused"
    assert "API credentials deactivated by clerk: 'a-workers', 'b-workers'" in caplog.text
    logged = LogEntry.objects.filter(user=user, action_flag=CHANGE).values_list("object_repr", flat=True)
    assert sorted(logged) == ["a-workers (member, inactive)", "b-workers (member, inactive)"]


def test_a_view_only_user_cannot_run_the_deactivate_action(
    api: Api, member: tuple[ApiCredential, str]
) -> None:
    credential, token = member
    client = logged_in(staff_with("auditor", "view_apicredential"))
    assert client.get(CHANGELIST).status_code == 200

    client.post(CHANGELIST, {"action": "deactivate", "_selected_action": [credential.pk]})

    credential.refresh_from_db()
    assert credential.active
    assert role_seen_by_api(api, token) == "member"
