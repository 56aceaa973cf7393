"""The admin API's rate limit: at most ``RSC_ADMIN_API_RATE`` requests per credential.

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
With the default ``LocMemCache`` that cache is per process: behind N gunicorn workers a credential gets up
to N times the rate. That is accepted: the limit stops a runaway script or a leaked token hammering the
admin API, it is not an exact quota. A shared cache (Redis, Memcached) in ``CACHES`` makes it exact.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from .auth import TokenPrincipal

DEFAULT_ADMIN_API_RATE = "600/min"


class AdminRateThrottle(SimpleRateThrottle):
    """``RSC_ADMIN_API_RATE`` (e.g. ``"600/min"``) per admin credential or staff user."""

    scope = "admin_api"

    def get_rate(self) -> str:
        return str(getattr(settings, "RSC_ADMIN_API_RATE", DEFAULT_ADMIN_API_RATE))

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user: Any = request.user
        if isinstance(user, TokenPrincipal):
            ident = f"token:{user.source}:{user.name}"
        elif user is not None and user.is_authenticated:
            ident = f"user:{user.pk}"
        else:  # not reached behind IsAdmin; no credential, nothing to count against
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}
