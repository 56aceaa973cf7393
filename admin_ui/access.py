"""Who may see and who may change consumer groups on the operator pages.

* Seeing (groups list, group detail, the actions form): ``admin_ui.view_groups`` or the permission to
  change, since nobody should confirm a change they cannot look at.
* Changing (max_concurrency, shard count, delete): ``coordinator.manage_groups``, the very permission
  that makes a staff session an admin of the coordinator's HTTP API (coordinator/api/auth.py). One
  permission for one power: a user who may change groups through the API may change them here, and
  the reverse, so revoking it in one place revokes it everywhere.

Both also require an active staff user; ``AdminSite.admin_view`` sends anyone else to the login page.
A staff user without the permission gets :class:`MissingPermission`, which the admin renders as a 403
page naming the permission (``admin_ui/admin.py``), not Django's bare "403 Forbidden".
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

from coordinator.credentials import MANAGE_GROUPS_PERMISSION

VIEW_PERMISSION = "admin_ui.view_groups"
MANAGE_PERMISSION = MANAGE_GROUPS_PERMISSION


class MissingPermission(PermissionDenied):
    """A staff user lacks ``permission`` for ``doing`` (e.g. "viewing consumer groups"); any of
    ``alternatives`` would do as well."""

    def __init__(self, permission: str, doing: str, alternatives: tuple[str, ...] = ()) -> None:
        self.permission = permission
        self.doing = doing
        self.alternatives = alternatives
        others = "".join(f" (or {p})" for p in alternatives)
        super().__init__(f"{doing} needs the permission {permission}{others}")


def _is_staff(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def can_manage(user: Any) -> bool:
    return _is_staff(user) and bool(user.has_perm(MANAGE_PERMISSION))


def can_view(user: Any) -> bool:
    return _is_staff(user) and (bool(user.has_perm(VIEW_PERMISSION)) or can_manage(user))


def raise_unless_can_view(user: Any) -> None:
    if not can_view(user):
        raise MissingPermission(VIEW_PERMISSION, "viewing consumer groups", (MANAGE_PERMISSION,))


def raise_unless_can_manage(user: Any) -> None:
    if not can_manage(user):
        raise MissingPermission(MANAGE_PERMISSION, "changing consumer groups")
