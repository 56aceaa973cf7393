"""The admin API's rate limit (at most ``RSC_ADMIN_API_RATE`` requests per credential), the member
heartbeat floor (:func:`heartbeat_floor`) and join admission: per process (:func:`admit_join`) and per
credential across every process (:func:`admit_credential_join`).

Theory of operation
-------------------
Every admin view (``views.AdminView``, and so every lifecycle view) checks :class:`AdminRateThrottle`
after authentication and the role check, before it reads or changes anything: a throttled request is a
429 TOO_MANY_REQUESTS problem with ``Retry-After`` (``errors.exception_handler`` maps DRF's
``Throttled``) and changes nothing. Unauthenticated and member-only requests are refused (401 / 403)
before the throttle, so they do not use up an admin credential's allowance.

The key is the credential, not the client address: a token's source and *name* (never the token), or a
staff user's id. Two admin credentials have two allowances; the member endpoints (heartbeat, routing)
have no throttle here at all.

The rate is read from settings on every request (not frozen at import as DRF's ``THROTTLE_RATES``
would be), so a changed setting applies at once. The request history lives in Django's default cache.
With the default ``LocMemCache`` that cache is per process: behind N API worker processes a credential gets up
to N times the rate. That is accepted: the limit stops a runaway script or a leaked token hammering the
admin API, it is not an exact quota. A shared cache (Redis, Memcached) in ``CACHES`` makes it exact.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from coordinator import conf
from coordinator.credentials import TokenPrincipal
from coordinator.protocol.errors import CoordinatorError, JoinsThrottled, StoreUnavailable
from coordinator.store import HeartbeatFloor, JoinLimits, MetadataStore


def heartbeat_floor() -> HeartbeatFloor | None:
    """The per-member heartbeat floor (docs/protocol.md section 13): a live member may send
    ``RSC_HEARTBEAT_BURST`` heartbeats back to back, then one per ``RSC_HEARTBEAT_FLOOR_MS``; faster
    ones get 429 HEARTBEAT_TOO_FREQUENT with Retry-After and change nothing. Kept in Redis by the fast
    path's script, so it holds across every API process. ``RSC_HEARTBEAT_FLOOR_MS=0`` turns it off.
    Read on every request, so a changed setting applies at once."""
    period = int(conf.settings().RSC_HEARTBEAT_FLOOR_MS)
    if period <= 0:
        return None
    return HeartbeatFloor(period, max(1, int(conf.settings().RSC_HEARTBEAT_BURST)))


class AdminRateThrottle(SimpleRateThrottle):
    """``RSC_ADMIN_API_RATE`` (e.g. ``"600/min"``) per admin credential or staff user."""

    scope = "admin_api"

    def get_rate(self) -> str:
        return str(conf.settings().RSC_ADMIN_API_RATE)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user: Any = request.user
        if isinstance(user, TokenPrincipal):
            ident = f"token:{user.source}:{user.name}"
        elif user is not None and user.is_authenticated:
            ident = f"user:{user.pk}"
        else:  # not reached behind IsAdmin; no credential, nothing to count against
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}


_joins_lock = threading.Lock()
_joins_running = 0


@contextmanager
def admit_join() -> Iterator[None]:
    """At most ``RSC_MAX_CONCURRENT_JOINS`` joins run at once in this API process; one more is refused
    at once with 429 JOINS_THROTTLED and a jittered ``Retry-After`` (docs/protocol.md section 13,
    "Overload"). A join is the costly heartbeat (it rewrites the group and conflicts with every other
    change to it); shedding joins first keeps steady heartbeats and renewals, hence every live member's
    lease, served under load. ``0`` admits every join."""
    global _joins_running
    limit = int(conf.settings().RSC_MAX_CONCURRENT_JOINS)
    with _joins_lock:
        if limit and _joins_running >= limit:
            wait_ms = 500 + random.randrange(1_500)  # spread the retries of a crowd of joiners
            raise JoinsThrottled(
                f"this coordinator is running {_joins_running} joins at once, its limit "
                f"(RSC_MAX_CONCURRENT_JOINS); retry in {wait_ms} ms",
                retry_after_ms=wait_ms,
            )
        _joins_running += 1
    try:
        yield
    finally:
        with _joins_lock:
            _joins_running -= 1


def credential_join_limits() -> JoinLimits | None:
    """Each credential's limits on joins (docs/protocol.md section 13, "Per credential"):
    ``RSC_CREDENTIAL_MAX_MEMBERS`` live members, one join per ``RSC_CREDENTIAL_JOIN_FLOOR_MS`` after
    ``RSC_CREDENTIAL_JOIN_BURST``; None when both are off. Read on every join."""
    current = conf.settings()
    limits = JoinLimits(
        max_members=int(current.RSC_CREDENTIAL_MAX_MEMBERS),
        period_ms=int(current.RSC_CREDENTIAL_JOIN_FLOOR_MS),
        burst=max(1, int(current.RSC_CREDENTIAL_JOIN_BURST)),
    )
    return None if limits.off else limits


@contextmanager
def admit_credential_join(
    store: MetadataStore, identity: str, stream_prefix: str, consumer_group: str, member_id: str
) -> Iterator[None]:
    """A join by the credential ``identity``, within its join rate and its cap on live members, both
    counted in Redis across every API process (coordinator/store/credential_limits.py): refused at once
    with 429 CREDENTIAL_JOINS_TOO_FREQUENT or CREDENTIAL_MEMBER_LIMIT_REACHED (with
    ``details.retry_after_ms``), changing nothing. A join the coordinator then refuses gives its place
    back; one whose outcome is unknown (Redis failed meanwhile) keeps it, which at worst refuses a
    join early until the next check at the cap finds the member gone."""
    limits = credential_join_limits()
    if limits is None:
        yield
        return
    admission = store.credential_limits.admit(identity, stream_prefix, consumer_group, member_id, limits)
    try:
        yield
    except CoordinatorError as e:
        if not isinstance(e, StoreUnavailable):
            store.credential_limits.release(admission)
        raise


def forget_left_member(
    store: MetadataStore, identity: str, stream_prefix: str, consumer_group: str, member_id: str
) -> None:
    """A member left: it no longer counts against its credential's live members (best effort)."""
    if int(conf.settings().RSC_CREDENTIAL_MAX_MEMBERS) > 0:
        store.credential_limits.forget(identity, stream_prefix, consumer_group, member_id)
