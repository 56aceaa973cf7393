"""Who may call the API: bearer tokens (environment or database) and staff sessions, and two roles.

Theory of operation
-------------------
Roles: ``member`` may heartbeat and read routing; ``admin`` may do everything (members' endpoints
included). A request gets its role from exactly one credential, in this order:

1. ``Authorization: Bearer <token>``. When the header is present it decides alone: a token that matches
   nothing is a 401 even if the browser also sends a valid session (no silent fall-back to a weaker or
   different identity). Which credential a token is, and how the database credentials are cached and
   a change applies in every process: coordinator/credentials.py (:func:`match_token`), below this
   layer, since ``/metrics`` and the credential admin use it too.
2. A logged-in Django session (the operator pages): admin if the user is active staff with the
   permission ``coordinator.manage_groups``, otherwise no role (403). DRF enforces CSRF for unsafe
   methods on session-authenticated requests.

No credential is a 401 with ``WWW-Authenticate: Bearer``; a credential without the role is a 403.
Tokens never appear in a log line or an error body: only a credential's *name* is ever reported.

Scopes and ownership (docs/protocol.md section 13, "Credentials and scopes"): a *member* credential from
the database carries a :class:`~coordinator.credentials.Scope` (stream-prefix and group patterns, a
member-id prefix) that :func:`require_scope` checks on the member endpoints (403
OUTSIDE_CREDENTIAL_SCOPE). Every request has an *identity* (:func:`identity_of`): ``database:<pk>``,
``environment:<digest>`` or ``session:<user pk>``, which a join records as the member's owner; the
protocol core then refuses a heartbeat, leave or rejoin of that member id from any other identity
(MEMBER_ID_NOT_OWNED). Environment tokens are unscoped (development, or a deliberately broad
credential; ``check --deploy`` warns).

If the database cannot be read, environment tokens keep working (heartbeats must not depend on the
credential database); a token that could only have been a database credential then gets a 503.
"""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from coordinator.credentials import MANAGE_GROUPS_PERMISSION, Role, TokenPrincipal, match_token
from coordinator.protocol.errors import CoordinatorError

from .errors import ApiErrorCode

BEARER = "bearer"
REALM = "coordinator"


class OutsideCredentialScope(CoordinatorError):
    """A member credential used for a stream prefix, group or member id outside its scope (403).
    ``details``: ``scope`` (which part), ``value`` and ``allowed``; nothing was read or changed."""

    code = ApiErrorCode.OUTSIDE_CREDENTIAL_SCOPE  # type: ignore[assignment]


_WHAT = {
    "stream_prefixes": "stream prefix",
    "consumer_groups": "consumer group",
    "member_id_prefix": "member id",
}


def check_scope(
    principal: TokenPrincipal,
    stream_prefix: str,
    consumer_group: str | None = None,
    member_id: str | None = None,
) -> None:
    """Raise OutsideCredentialScope for the first part of the request outside the principal's scope
    (unscoped: never)."""
    if principal.scope is None:
        return
    refused = principal.scope.refusal(stream_prefix, consumer_group, member_id)
    if refused is None:
        return
    scope, value, allowed = refused
    raise OutsideCredentialScope(
        f"credential {principal.name!r} may not use {_WHAT[scope]} {value!r}: its "
        f"scope {scope} is {allowed!r} (an admin can widen it in the credential's admin page)",
        scope=scope,
        value=value,
        allowed=allowed,
    )


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>``. Absent header: not this authenticator's business (None)."""

    def authenticate(self, request: Request) -> tuple[TokenPrincipal, None] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != BEARER:
            raise exceptions.AuthenticationFailed("use 'Authorization: Bearer <token>'")
        token = token.strip()
        if not token or " " in token:
            raise exceptions.AuthenticationFailed("malformed bearer token")
        principal = match_token(token)
        if principal is None:
            raise exceptions.AuthenticationFailed("invalid or inactive token")
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        return f'Bearer realm="{REALM}"'


class StaffSessionAuthentication(authentication.SessionAuthentication):
    """A logged-in Django user (CSRF enforced for unsafe methods); its role is decided by role_of."""


def identity_of(request: Request) -> str:
    """Who the request acts as, for member ownership: a token's identity or ``session:<user pk>``."""
    user: Any = request.user
    if isinstance(user, TokenPrincipal):
        return user.identity
    return f"session:{user.pk}"


def require_scope(
    request: Request, stream_prefix: str, consumer_group: str | None = None, member_id: str | None = None
) -> None:
    """Raise OutsideCredentialScope unless the request's credential may use these (unscoped: always)."""
    user: Any = request.user
    if isinstance(user, TokenPrincipal):
        check_scope(user, stream_prefix, consumer_group, member_id)


def role_of(request: Request) -> Role | None:
    user: Any = request.user
    if isinstance(user, TokenPrincipal):
        return user.role
    if (
        user is not None
        and user.is_authenticated
        and user.is_active
        and user.is_staff
        and user.has_perm(MANAGE_GROUPS_PERMISSION)
    ):
        return Role.ADMIN
    return None


class _RolePermission(permissions.BasePermission):
    allowed: frozenset[Role] = frozenset()
    message = ""

    def has_permission(self, request: Request, view: Any) -> bool:
        return role_of(request) in self.allowed


class IsMember(_RolePermission):
    allowed = frozenset({Role.MEMBER, Role.ADMIN})
    message = "this endpoint needs a member or admin credential"


class IsAdmin(_RolePermission):
    allowed = frozenset({Role.ADMIN})
    message = (
        "this endpoint needs an admin credential (a member token is not enough; a staff session needs "
        f"the permission {MANAGE_GROUPS_PERMISSION})"
    )
