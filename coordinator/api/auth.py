"""Who may call the API: bearer tokens (environment or database) and staff sessions, and two roles.

Theory of operation
-------------------
Roles: ``member`` may heartbeat and read routing; ``admin`` may do everything (members' endpoints
included). A request gets its role from exactly one credential, in this order:

1. ``Authorization: Bearer <token>``. When the header is present it decides alone: a token that matches
   nothing is a 401 even if the browser also sends a valid session (no silent fall-back to a weaker or
   different identity). The token's SHA-256 is compared with every candidate's, each with
   ``hmac.compare_digest`` and without stopping at the first match, so the time taken depends on the
   number of credentials, never on how much of a token was right. Candidates: ``RSC_MEMBER_TOKENS`` and
   ``RSC_ADMIN_TOKENS`` (settings, from the environment) and every active :class:`ApiCredential`
   (read from the database at most every ``DB_CREDENTIALS_TTL_S`` per process, so a heartbeat costs
   no query; a change saved in the same process applies from the first request that starts after it
   committed, see ``forget_cached_credentials``).
   A token in both lists (or in both sources) gets the higher role.
2. A logged-in Django session (the operator pages): admin if the user is active staff with the
   permission ``coordinator.manage_groups``, otherwise no role (403). DRF enforces CSRF for unsafe
   methods on session-authenticated requests.

No credential is a 401 with ``WWW-Authenticate: Bearer``; a credential without the role is a 403.
Tokens never appear in a log line or an error body: only a credential's *name* is ever reported.

If the database cannot be read, environment tokens keep working (heartbeats must not depend on the
credential database); a token that could only have been a database credential then gets a 503.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from coordinator.models import ApiCredential, token_digest
from coordinator.protocol.errors import StoreUnavailable

log = logging.getLogger(__name__)

MANAGE_GROUPS_PERMISSION = "coordinator.manage_groups"
BEARER = "bearer"
REALM = "coordinator"


class Role(StrEnum):
    MEMBER = "member"
    ADMIN = "admin"


_RANK = {Role.MEMBER: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class TokenPrincipal:
    """The ``request.user`` of a token-authenticated request. It never holds the token."""

    name: str
    role: Role
    source: str  # "environment" or "database"

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False

    def __str__(self) -> str:
        return f"{self.source} credential {self.name!r} ({self.role})"


def _candidates_from_settings() -> list[tuple[bytes, str, Role]]:
    found = []
    for setting, role in (("RSC_MEMBER_TOKENS", Role.MEMBER), ("RSC_ADMIN_TOKENS", Role.ADMIN)):
        for index, token in enumerate(getattr(settings, setting, None) or ()):
            if token:
                found.append((token_digest(token), f"{setting}[{index}]", role))
    return found


# Database credentials are read at most once per DB_CREDENTIALS_TTL_S per process: a heartbeat must
# not cost a database query. A credential created or deactivated takes effect within that time; a change
# made in this process, from the first request that starts after its transaction committed.
#
# Why a generation counter and two invalidations: post_save fires inside the change's transaction,
# before the commit, and until the commit other connections still read the old rows (the credential
# active). A fill that read them could store them after the signal cleared the cache, and a deactivated
# token would then work for up to DB_CREDENTIALS_TTL_S. So every invalidation bumps the generation, a
# fill stores its rows only if the generation has not moved since it started, and a change invalidates
# twice: at once (this thread's later reads see it, even inside the transaction) and on commit (which
# discards whatever was stored, or is still being read, from before the commit).
DB_CREDENTIALS_TTL_S = 5.0
_Candidates = list[tuple[bytes, str, Role]]
_db_cache: tuple[float, _Candidates] | None = None
_db_generation = 0
_db_cache_lock = threading.Lock()


def _read_active_credentials() -> _Candidates:
    """The query behind the cache (its own function so a test can interleave a change with it)."""
    rows = ApiCredential.objects.filter(active=True).values_list("token_sha256", "name", "role")
    return [(bytes.fromhex(digest), name, Role(role)) for digest, name, role in rows]


def _candidates_from_database() -> _Candidates:
    global _db_cache
    now = time.monotonic()
    # No lock to read (every authenticated request passes here): each is one reference read, and a pair
    # torn by a concurrent invalidation only makes the generation check below refuse to store the fill.
    generation, cached = _db_generation, _db_cache
    if cached is not None and now - cached[0] < DB_CREDENTIALS_TTL_S:
        return cached[1]
    found = _read_active_credentials()
    with _db_cache_lock:
        if _db_generation == generation:  # no change began or committed while we read: keep it
            _db_cache = (now, found)
    return found


def _invalidate_cached_credentials() -> None:
    global _db_cache, _db_generation
    with _db_cache_lock:
        _db_generation += 1
        _db_cache = None


@receiver(post_save, sender=ApiCredential, dispatch_uid="rsc-forget-credentials-on-save")
@receiver(post_delete, sender=ApiCredential, dispatch_uid="rsc-forget-credentials-on-delete")
def forget_cached_credentials(using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """Drop the cached database credentials now and again when the change commits (or at once, in
    autocommit): a change made in this process applies from the first request that starts after its
    commit (other processes see it within DB_CREDENTIALS_TTL_S)."""
    _invalidate_cached_credentials()
    transaction.on_commit(_invalidate_cached_credentials, using=using)


def match_token(token: str) -> TokenPrincipal | None:
    """The principal whose token this is (highest role wins), or None. Constant time per candidate."""
    presented = token_digest(token)
    best: TokenPrincipal | None = None

    def consider(candidates: list[tuple[bytes, str, Role]], source: str) -> None:
        nonlocal best
        for digest, name, role in candidates:  # no early exit: every candidate is compared
            matched = hmac.compare_digest(digest, presented)
            if matched and (best is None or _RANK[role] > _RANK[best.role]):
                best = TokenPrincipal(name=name, role=role, source=source)

    consider(_candidates_from_settings(), "environment")
    try:
        from_db = _candidates_from_database()
    except DatabaseError as e:
        log.error("API credentials database unreadable; only environment tokens are accepted", exc_info=e)
        if best is None:
            raise StoreUnavailable("the credential database is unavailable; retry shortly") from e
        return best
    consider(from_db, "database")
    return best


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
