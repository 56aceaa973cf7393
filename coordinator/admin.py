"""Django admin for API credentials: list, inspect, (de)activate. Tokens are issued by
``manage.py create_api_credential`` only, which prints the token once; the admin never sees one.

Who may do what
---------------
``change_apicredential`` lets a staff user deactivate credentials and rename nothing else of
consequence. Anything that gives a token *more* power needs ``coordinator.manage_groups`` as well, the
permission that already stands for "may administer the coordinator": changing a role (a member token
promoted to admin could then delete groups), changing a member credential's scope (stream prefixes,
groups, member-id prefix: a wider scope reaches other teams' groups) and re-activating an admin
credential. Without it those fields are read-only in the form, and ``save_model`` refuses them again,
so a hand-made POST gains nothing either.

Every deactivation, re-activation and role change is logged at WARNING on ``coordinator.admin`` (kept at
LOG_LEVEL=WARNING) and recorded in the admin's own history (``LogEntry``, "Recent actions"), naming the
user and the credentials. A deactivation applies in this process at once (the cache is dropped when it
commits, see ``coordinator.credentials.forget_cached_credentials``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from .credentials import MANAGE_GROUPS_PERMISSION, forget_cached_credentials
from .models import ApiCredential

log = logging.getLogger(__name__)


def may_raise_privileges(request: HttpRequest) -> bool:
    return request.user.has_perm(MANAGE_GROUPS_PERMISSION)


SCOPE_FIELDS = ("stream_prefixes", "consumer_groups", "member_id_prefix")
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

    def get_readonly_fields(self, request: HttpRequest, obj: ApiCredential | None = None) -> tuple[str, ...]:
        readonly = tuple(super().get_readonly_fields(request, obj))
        if may_raise_privileges(request):
            return readonly
        locked = ("active",) if _is_inactive_admin(obj) else ()
        return readonly + PRIVILEGED_FIELDS + locked

    def save_model(self, request: HttpRequest, obj: ApiCredential, form: ModelForm, change: bool) -> None:
        raise_if_privileges_raised(request, obj, form)
        super().save_model(request, obj, form, change)
        if "role" in form.changed_data:
            log.warning(
                "API credential %r: role changed to %s by %s", obj.name, obj.role, request.user.get_username()
            )
        for field in SCOPE_FIELDS:
            if field in form.changed_data:
                log.warning(
                    "API credential %r: %s changed to %r by %s",
                    obj.name,
                    field,
                    getattr(obj, field),
                    request.user.get_username(),
                )
        if "active" in form.changed_data:
            verb = "re-activated" if obj.active else "deactivated"
            log.warning("API credential %r %s by %s", obj.name, verb, request.user.get_username())

    # permissions: an action without them is offered to anyone who may merely view the list.
    @admin.action(description="Deactivate the selected credentials (refused at once)", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[ApiCredential]) -> None:
        targets = list(queryset.filter(active=True).order_by("name"))
        updated = queryset.filter(pk__in=[c.pk for c in targets]).update(active=False)
        # update() sends no post_save: clear this process's cache explicitly.
        forget_cached_credentials(using=queryset.db)
        for credential in targets:
            credential.active = False  # as saved, so the history names it "inactive"
            self.log_change(request, credential, "Deactivated (admin action).")
        if targets:
            log.warning(
                "API credentials deactivated by %s: %s",
                request.user.get_username(),
                ", ".join(repr(c.name) for c in targets),
            )
        self.message_user(request, f"{updated} credential(s) deactivated.")


def _is_inactive_admin(obj: ApiCredential | None) -> bool:
    return obj is not None and not obj.active and obj.role == ApiCredential.Role.ADMIN


def raise_if_privileges_raised(request: HttpRequest, obj: ApiCredential, form: ModelForm) -> None:
    """Refuse a save that gives a token more power unless the user holds manage_groups.

    The form normally makes those fields read-only already; this is the check that a crafted POST (or a
    form changed later) cannot get around.
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
    elif "active" in form.changed_data and obj.active and obj.role == ApiCredential.Role.ADMIN:
        refused = f"re-activating the admin credential {obj.name!r}"
    else:
        return
    user = request.user.get_username()
    log.warning("%s by %s refused: it needs %s", refused, user, MANAGE_GROUPS_PERMISSION)
    raise PermissionDenied(f"{refused.capitalize()} needs the permission {MANAGE_GROUPS_PERMISSION}.")
