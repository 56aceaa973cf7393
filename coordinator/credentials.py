"""API credentials as the coordinator knows them: which principal a bearer token is, with its role and
scope, read from the environment and the database (:class:`ApiCredential`) through a per-process cache.

Below the HTTP layer on purpose: the API's authentication (coordinator/api/auth.py), the ``/metrics``
endpoint (coordinator/metrics.py), the credential admin (coordinator/admin.py) and the operator pages
(``manage_groups``) all use it; it imports none of them.

Theory of operation
-------------------
:func:`match_token` returns the principal whose token this is, or None. The token's SHA-256 is compared
with every candidate's, each with ``hmac.compare_digest`` and without stopping at the first match, so
the time taken depends on the number of credentials, never on how much of a token was right.
Candidates: ``RSC_MEMBER_TOKENS`` and ``RSC_ADMIN_TOKENS`` (settings, from the environment) and every
active :class:`ApiCredential` (read from the database at most every ``DB_CREDENTIALS_TTL_S`` per
process, so a heartbeat costs no query; a change saved in the same process applies from the first
request that starts after it committed, see :func:`forget_cached_credentials`). A token in both lists
(or in both sources) gets the higher role.

A *member* credential from the database carries a :class:`Scope` (stream-prefix and group patterns, a
member-id prefix); :meth:`Scope.refusal` names what is outside it (the API refuses it: 403
OUTSIDE_CREDENTIAL_SCOPE, ``coordinator.api.auth.check_scope``). Each
principal has an *identity* (``database:<pk>``, ``environment:<digest>``), which a join records as the
member's owner. Environment tokens are unscoped.

A deactivation applies at once in every process: a change sets the shared generation
``rsc:credentials:generation`` in the coordinator's Redis to a fresh random value when it commits, and
every match compares the cached credentials' generation with it (one GET; a steady heartbeat makes the
comparison inside its script instead, :func:`match_token_cached`). If Redis cannot be read, the cache
falls back to its time limit. The signal receivers that start this are connected when the module is
imported (``CoordinatorConfig.ready`` imports it).

If the database cannot be read, environment tokens keep working (heartbeats must not depend on the
credential database); a token that could only have been a database credential then gets
``StoreUnavailable``. Tokens never appear in a log line or an error: only a credential's *name*.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from django.db import DEFAULT_DB_ALIAS, DatabaseError, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from coordinator import conf
from coordinator.models import ANY, ApiCredential, matches_any, parse_patterns, token_digest
from coordinator.protocol.errors import StoreUnavailable
from rsc_redis.keys import CREDENTIALS_GENERATION_KEY

# The logger's name from before the module moved here, kept for whoever filters the log on it.
log = logging.getLogger("coordinator.api.auth")

# Makes a staff user an admin: of the API from a browser session, of the operator pages, and of the
# credential admin (raising a credential's privileges).
MANAGE_GROUPS_PERMISSION = "coordinator.manage_groups"


class Role(StrEnum):
    MEMBER = "member"
    ADMIN = "admin"


_RANK = {Role.MEMBER: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Scope:
    """What a scoped member credential may touch: glob patterns and a member-id prefix."""

    stream_prefixes: tuple[str, ...] = (ANY,)
    consumer_groups: tuple[str, ...] = (ANY,)
    member_id_prefix: str = ""

    def refusal(
        self, stream_prefix: str, consumer_group: str | None = None, member_id: str | None = None
    ) -> tuple[str, str | None, Any] | None:
        """The first part of a request outside this scope, as (the scope field, the value, what the field
        allows); None when all of it is inside. The API refuses it (coordinator/api/auth.py)."""
        refusals = (
            ("stream_prefixes", stream_prefix, not matches_any(stream_prefix, self.stream_prefixes)),
            (
                "consumer_groups",
                consumer_group,
                consumer_group is not None and not matches_any(consumer_group, self.consumer_groups),
            ),
            (
                "member_id_prefix",
                member_id,
                member_id is not None and not member_id.startswith(self.member_id_prefix),
            ),
        )
        for scope, value, refused in refusals:
            if refused:
                allowed: Any = (
                    self.member_id_prefix if scope == "member_id_prefix" else list(getattr(self, scope))
                )
                return scope, value, allowed
        return None


@dataclass(frozen=True, slots=True)
class TokenPrincipal:
    """The ``request.user`` of a token-authenticated request. It never holds the token."""

    name: str
    role: Role
    source: str  # "environment" or "database"
    identity: str = ""  # "database:<pk>" / "environment:<digest>": who owns the members it joins
    scope: Scope | None = None  # None: unscoped (admin credentials, environment tokens)

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False

    def __str__(self) -> str:
        return f"{self.source} credential {self.name!r} ({self.role})"


@dataclass(frozen=True, slots=True)
class _Candidate:
    digest: bytes
    principal: TokenPrincipal


_TOKEN_SETTINGS = (("RSC_MEMBER_TOKENS", Role.MEMBER), ("RSC_ADMIN_TOKENS", Role.ADMIN))
_from_settings: tuple[tuple[Any, ...], list[_Candidate]] | None = None  # (the settings' tokens, candidates)


def _candidates_from_settings() -> list[_Candidate]:
    """The environment tokens' candidates, hashed again only when the settings' tokens change."""
    global _from_settings
    current = conf.settings()
    tokens = tuple(tuple(getattr(current, setting) or ()) for setting, _role in _TOKEN_SETTINGS)
    kept = _from_settings
    if kept is not None and kept[0] == tokens:
        return kept[1]
    found = []
    for (setting, role), listed in zip(_TOKEN_SETTINGS, tokens, strict=True):
        for index, token in enumerate(listed):
            if token:
                digest = token_digest(token)
                # The identity is the token's (not its place in the list): reordering the setting
                # does not hand one token's members to another. 64 bits of a SHA-256 leak nothing.
                identity = f"environment:{digest.hex()[:16]}"
                principal = TokenPrincipal(f"{setting}[{index}]", role, "environment", identity)
                found.append(_Candidate(digest, principal))
    _from_settings = (tokens, found)
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
#
# Across processes: the same commit also sets SHARED_GENERATION_KEY in the coordinator's Redis to a fresh
# value, and a cached fill is used only while that shared value is the one it was read under. So a
# deactivation in one API worker process (or the admin's process) is refused by every other process from
# the next request.
DB_CREDENTIALS_TTL_S: float = conf.default("RSC_CREDENTIAL_CACHE_S")  # the setting RSC_CREDENTIAL_CACHE_S


def _cache_ttl_s() -> float:
    return float(conf.settings().RSC_CREDENTIAL_CACHE_S)

SHARED_GENERATION_KEY = CREDENTIALS_GENERATION_KEY
_Candidates = list[_Candidate]
_db_cache: tuple[float, bytes | None, _Candidates] | None = None  # (filled at, shared generation, rows)
_db_generation = 0
_db_cache_lock = threading.Lock()
_shared_failure_logged_at = 0.0


def _scope_of(row: dict[str, Any]) -> Scope | None:
    if row["role"] != Role.MEMBER:
        return None
    scope = Scope(
        parse_patterns(row["stream_prefixes"], "stream_prefixes"),
        parse_patterns(row["consumer_groups"], "consumer_groups"),
        row["member_id_prefix"],
    )
    return None if scope == Scope() else scope


def _read_active_credentials() -> _Candidates:
    """The query behind the cache (its own function so a test can interleave a change with it)."""
    rows = ApiCredential.objects.filter(active=True).values(
        "pk", "token_sha256", "name", "role", "stream_prefixes", "consumer_groups", "member_id_prefix"
    )
    found = []
    for row in rows:
        try:
            scope = _scope_of(row)
        except Exception:  # a malformed scope saved around the model's validation: refuse that token
            log.error("API credential %r has a malformed scope; it is refused until fixed", row["name"])
            continue
        principal = TokenPrincipal(row["name"], Role(row["role"]), "database", f"database:{row['pk']}", scope)
        found.append(_Candidate(bytes.fromhex(row["token_sha256"]), principal))
    return found


def _shared_generation() -> bytes | None:
    """The shared generation in the coordinator's Redis, or None if it cannot be read (then the cache
    falls back to its time limit; logged at most once per DB_CREDENTIALS_TTL_S)."""
    global _shared_failure_logged_at
    from coordinator.store import get_store  # not at import: auth is loaded before the store is set up

    if not conf.settings().REDIS_URL:
        return None
    try:
        value = get_store().client.get(SHARED_GENERATION_KEY)
    except Exception as e:  # redis errors, or no store configured
        now = time.monotonic()
        if now - _shared_failure_logged_at >= DB_CREDENTIALS_TTL_S:
            _shared_failure_logged_at = now
            log.warning(
                "credential generation unreadable (%s); credential changes made in other "
                "processes apply within %.0f s",
                e,
                DB_CREDENTIALS_TTL_S,
            )
        return None
    return value if isinstance(value, bytes) else b"0" if value is None else str(value).encode()


def _candidates_from_database() -> _Candidates:
    global _db_cache
    now = time.monotonic()
    shared = _shared_generation()
    # No lock to read (every authenticated request passes here): each is one reference read, and a pair
    # torn by a concurrent invalidation only makes the generation check below refuse to store the fill.
    generation, cached = _db_generation, _db_cache
    if _within_time_limit(cached, now) and (shared is None or cached[1] == shared):
        return cached[2]
    found = _read_active_credentials()
    with _db_cache_lock:
        if _db_generation == generation:  # no change began or committed while we read: keep it
            _db_cache = (now, shared, found)
    return found


def _within_time_limit(
    cached: tuple[float, bytes | None, _Candidates] | None, now: float
) -> TypeGuard[tuple[float, bytes | None, _Candidates]]:
    """A fill exists and is younger than the cache's time limit (whatever its generation)."""
    return cached is not None and now - cached[0] < _cache_ttl_s()


def _invalidate_cached_credentials() -> None:
    global _db_cache, _db_generation
    with _db_cache_lock:
        _db_generation += 1
        _db_cache = None


def _publish_change() -> None:
    """After a commit: this process forgets its fill, and every other one is told through Redis."""
    _invalidate_cached_credentials()
    from coordinator.store import get_store

    if not conf.settings().REDIS_URL:  # no coordinator Redis (a process that only manages credentials)
        return
    try:
        # A fresh random value, not a counter: a counter that Redis lost (a restart without persistence,
        # a failover to a lagging replica) could count up again to the very value a process cached.
        get_store().client.set(SHARED_GENERATION_KEY, uuid.uuid4().hex)
    except Exception as e:
        log.warning(
            "credential change not published to other processes (%s); they apply it within %.0f s",
            e,
            DB_CREDENTIALS_TTL_S,
        )


@receiver(post_save, sender=ApiCredential, dispatch_uid="rsc-forget-credentials-on-save")
@receiver(post_delete, sender=ApiCredential, dispatch_uid="rsc-forget-credentials-on-delete")
def forget_cached_credentials(using: str = DEFAULT_DB_ALIAS, **_: Any) -> None:
    """Drop the cached database credentials now and again when the change commits (or at once, in
    autocommit), and then tell every other process: a change applies everywhere from the first request
    that starts after its commit."""
    _invalidate_cached_credentials()
    transaction.on_commit(_publish_change, using=using)


def _best_match(token: str, *candidate_lists: _Candidates) -> TokenPrincipal | None:
    """The principal whose token this is (highest role wins), or None. Constant time per candidate."""
    presented = token_digest(token)
    best: TokenPrincipal | None = None
    for candidates in candidate_lists:
        for candidate in candidates:  # no early exit: every candidate is compared
            matched = hmac.compare_digest(candidate.digest, presented)
            if matched and (best is None or _RANK[candidate.principal.role] > _RANK[best.role]):
                best = candidate.principal
    return best


def match_token(token: str) -> TokenPrincipal | None:
    """The principal whose token this is (highest role wins), or None."""
    from_settings = _candidates_from_settings()
    try:
        from_db = _candidates_from_database()
    except DatabaseError as e:
        log.error("API credentials database unreadable; only environment tokens are accepted", exc_info=e)
        best = _best_match(token, from_settings)
        if best is None:
            raise StoreUnavailable("the credential database is unavailable; retry shortly") from e
        return best
    return _best_match(token, from_settings, from_db)


def match_token_cached(token: str) -> tuple[TokenPrincipal | None, bytes] | None:
    """:func:`match_token` from this process's cache alone, without reading the shared generation: the
    principal (or None) and the shared generation the cached credentials were read under. The caller
    must check that generation against the one in Redis atomically with what it does for the request
    (the heartbeat door passes it to ``fast_heartbeat.lua``, which answers nothing if it moved), so a
    change still applies from the first request that starts after its commit. None when only
    :func:`match_token` can say: nothing cached, the cache past its time limit, or filled while the
    shared generation was unreadable."""
    cached = _db_cache
    if not _within_time_limit(cached, time.monotonic()) or cached[1] is None:
        return None
    return _best_match(token, _candidates_from_settings(), cached[2]), cached[1]
