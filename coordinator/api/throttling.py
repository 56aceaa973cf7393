"""The admin API's rate limit (at most ``RSC_ADMIN_API_RATE`` requests per credential), the member
heartbeat floor (:func:`heartbeat_floor`) and join admission (:func:`admit_join`).

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
from coordinator.protocol.errors import JoinsThrottled
from coordinator.store import HeartbeatFloor


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
