"""Django admin for API credentials: list, inspect, (de)activate, change a role or scope. Tokens are
issued by ``manage.py create_api_credential`` only, which prints the token once; the admin never sees
one.

Every change goes through the operations layer (``coordinator.operations.change_credential``): authorized,
audited first (an "Audit entries" row, committed before the credential is saved; if it cannot be written,
nothing is saved and the page says so), then saved. Django's own change form saves inside one
transaction; this one does not (:meth:`ApiCredentialAdmin.changeform_view`), because an audit row
inside it would only be written with the change, and lost with it.

Who may do what
---------------
``change_apicredential`` lets a staff user deactivate credentials, and nothing else of consequence.
Anything that gives a token *more* power needs ``coordinator.manage_groups`` as well, the permission
that already stands for "may administer the coordinator" and that issuing a credential needs (the
command acts as an admin): changing a role (a member token promoted to admin could then delete groups),
changing a member credential's scope (stream prefixes, groups, member-id prefix: a wider scope reaches
other teams' groups) and re-activating any credential (a leaked token deactivated by a clerk is not
brought back by one). Without it those fields are read-only in the form; ``save_model`` refuses them
again, and so does the operations layer, so a hand-made POST gains nothing either. Credentials are never
deleted here (deactivate them): the audit trail and the members they joined keep naming them.

Every deactivation, re-activation and role or scope change is also logged at WARNING on
``coordinator.admin`` (kept at LOG_LEVEL=WARNING) and recorded in the admin's own history
(``LogEntry``, "Recent actions"), naming the user and the credentials. A deactivation applies in every
process from the next request (``coordinator.credentials.forget_cached_credentials``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import csrf_protect_m
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from . import operations
from .credentials import MANAGE_GROUPS_PERMISSION
from .models import ApiCredential
from .protocol.errors import InvalidRequest

log = logging.getLogger(__name__)

CHANGE_PERMISSION = "coordinator.change_apicredential"


def may_raise_privileges(request: HttpRequest) -> bool:
    return request.user.has_perm(MANAGE_GROUPS_PERMISSION)


def actor_from_credential_admin(request: HttpRequest) -> operations.Actor:
    """The credential admin's user as the operations layer sees it: an admin with manage_groups; one
    that may only deactivate with change_apicredential."""
    return operations.Actor.of_user(
        request.user,
        source=operations.Source.ADMIN_UI,
        is_admin=may_raise_privileges(request),
        may_deactivate_credentials=request.user.has_perm(CHANGE_PERMISSION),
    )


SCOPE_FIELDS = operations.SCOPE_FIELDS
# Fields only a user with manage_groups may change (read-only in the form for the others).
PRIVILEGED_FIELDS = ("role", *SCOPE_FIELDS)


@admin.register(ApiCredential)
class ApiCredentialAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "active", *SCOPE_FIELDS, "created_at")
    list_filter = ("role", "active")
    search_fields = ("name",)
    readonly_fields = ("name", "token_sha256", "created_at")
    fields = ("name", "role", "active", *SCOPE_FIELDS, "token_sha256", "created_at")
    actions = ("deactivate",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token must be shown once to whoever creates it: use the management command

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deactivate instead: the audit trail and the members it joined keep naming it

    def get_readonly_fields(self, request: HttpRequest, obj: ApiCredential | None = None) -> tuple[str, ...]:
        readonly = tuple(super().get_readonly_fields(request, obj))
        if may_raise_privileges(request):
            return readonly
        locked = ("active",) if obj is not None and not obj.active else ()
        return readonly + PRIVILEGED_FIELDS + locked

    @csrf_protect_m
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Not inside one transaction (Django's own wraps a POST in one): the operations layer commits the
        # audit row before the change, which it cannot do inside a transaction still open.
        try:
            return self._changeform_view(request, object_id, form_url, extra_context)
        except (operations.AuditUnavailable, InvalidRequest) as e:
            self.message_user(request, f"Nothing was changed: {e.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: HttpRequest, obj: ApiCredential, form: ModelForm, change: bool) -> None:
        raise_if_privileges_raised(request, obj, form)
        changes = {f: getattr(obj, f) for f in form.changed_data if f in operations.CREDENTIAL_FIELDS}
        try:
            saved = operations.change_credential(actor_from_credential_admin(request), obj.pk, **changes)
        except operations.PermissionDeniedError as e:
            raise PermissionDenied(e.message) from e
        for field in changes:
            setattr(obj, field, getattr(saved, field))  # as stored (patterns normalised)
        user = request.user.get_username()
        if "role" in changes:
            log.warning("API credential %r: role changed to %s by %s", obj.name, obj.role, user)
        for field in SCOPE_FIELDS:
            if field in changes:
                value = getattr(obj, field)
                log.warning("API credential %r: %s changed to %r by %s", obj.name, field, value, user)
        if "active" in changes:
            verb = "re-activated" if obj.active else "deactivated"
            log.warning("API credential %r %s by %s", obj.name, verb, user)

    # permissions: an action without them is offered to anyone who may merely view the list.
    @admin.action(description="Deactivate the selected credentials (refused at once)", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[ApiCredential]) -> None:
        actor = actor_from_credential_admin(request)
        done: list[ApiCredential] = []
        for credential in queryset.filter(active=True).order_by("name"):
            try:
                operations.deactivate_credential(actor, credential.pk)
            except (operations.AuditUnavailable, operations.PermissionDeniedError) as e:
                self.message_user(
                    request, f"{credential.name} and the ones after it were not deactivated: {e.message}",
                    messages.ERROR,
                )  # fmt: skip
                break
            credential.active = False  # as saved, so the history names it "inactive"
            self.log_change(request, credential, "Deactivated (admin action).")
            done.append(credential)
        if done:
            log.warning(
                "API credentials deactivated by %s: %s",
                request.user.get_username(),
                ", ".join(repr(c.name) for c in done),
            )
        self.message_user(request, f"{len(done)} credential(s) deactivated.")


def raise_if_privileges_raised(request: HttpRequest, obj: ApiCredential, form: ModelForm) -> None:
    """Refuse a save that gives a token more power unless the user holds manage_groups.

    The form normally makes those fields read-only already; this is the check that a crafted POST (or a
    form changed later) cannot get around (and the operations layer checks it once more).
    """
    if may_raise_privileges(request):
        return
    scope_changed = [
        f for f in SCOPE_FIELDS if f in form.changed_data and getattr(obj, f) != form.initial.get(f)
    ]
    if "role" in form.changed_data and obj.role != form.initial.get("role"):
        refused = f"changing the role of {obj.name!r} to {obj.role}"
    elif scope_changed:
        refused = f"changing the scope ({', '.join(scope_changed)}) of {obj.name!r}"
    elif "active" in form.changed_data and obj.active:
        refused = f"re-activating the credential {obj.name!r}"
    else:
        return
    user = request.user.get_username()
    log.warning("%s by %s refused: it needs %s", refused, user, MANAGE_GROUPS_PERMISSION)
    raise PermissionDenied(f"{refused.capitalize()} needs the permission {MANAGE_GROUPS_PERMISSION}.")
