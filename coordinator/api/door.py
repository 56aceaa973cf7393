"""The heartbeat door: steady heartbeats answered at the WSGI layer, before Django's request handling.

Theory of operation
-------------------
A steady heartbeat is most of the API's traffic, and its answer is one script call (fastpath.py). Even
after the pre-DRF fast path, Django's handler cost several times that call: the middleware chain (eight
classes, most of them for browser sessions), URL resolution, the request signals. ``HeartbeatDoor``
wraps the project's WSGI application (``config/wsgi.py``; a host project wraps its own the same way,
docs/plugin.md) and answers a request itself only when the answer is certainly the one Django would
give; anything else, and anything it is unsure of, goes to the wrapped application untouched:

* ``POST`` to the heartbeat URL (found by ``reverse``, so wherever the project mounts the API), without
  a ``Cookie`` header (so session, CSRF and message middleware have nothing to do);
* only when every class in ``settings.MIDDLEWARE`` is one the door knows to change nothing in a
  cookie-less token request's answer (``_NOTHING_TO_DO``), or one whose own request and response hooks
  the door runs (``_RUN``: security, common, clickjacking): so a host project's own middleware (CORS,
  request ids, logging) switches the door off (logged once) rather than being skipped;
* Django's own checks first, by Django's own code: the host (``request.get_host()`` against
  ``ALLOWED_HOSTS``), the HTTPS redirect and the disallowed user agents (the request hooks of the
  middleware in ``_RUN``); any of them not passing, Django answers;
* then fastpath.steady_body with ``cached_only``: the credentials must be in this process's cache
  (the door never reads the database), and the script checks the cache's generation atomically with
  the renewal (docs/protocol.md section 12, "Credential changes").

The answer goes through the response hooks of the middleware in ``_RUN``, in Django's order, so its
headers are Django's; a 4xx is logged as Django logs it. A steady member's answer (a 200 with the stored
response's bytes) does so once per ``request.is_secure()``: what those hooks add to it depends on the
settings and that alone, so later answers reuse the headers they learnt, with their own Content-Length
(``_Setup.steady_response``; learnt again after a settings change).

Not steady after the script ran: the environ is marked (``fastpath.FAST_TRIED``) so the view does not
run the script (and count the floor) again. The body is read once and handed on in the environ.
tests/api/test_door.py sends a corpus of requests through the door and through Django alone and
compares status, headers and body, and one door's answers, one after another, with Django's.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import setting_changed
from django.http import HttpResponse
from django.urls import get_script_prefix, reverse
from django.utils.log import log_response
from django.utils.module_loading import import_string

from coordinator import conf
from coordinator.protocol.model import IDENTIFIER_RE
from coordinator.store import get_store

from . import fastpath

log = logging.getLogger(__name__)

# Middleware that does nothing to a cookie-less bearer-token POST to a csrf_exempt view that never
# touches request.session / request.user / messages: lazy session and user, no CSRF cookie to rotate,
# no messages to store, django-axes acts on login attempts only.
_NOTHING_TO_DO = frozenset(
    {
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "axes.middleware.AxesMiddleware",
    }
)
# Middleware whose own hooks the door runs (process_request, then process_response in reverse order).
_RUN = frozenset(
    {
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    }
)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class HeartbeatDoor:
    """WSGI middleware: ``application = HeartbeatDoor(get_wsgi_application())``."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    @cached_property
    def _setup(self) -> _Setup | None:
        """Made at the first heartbeat, when settings and URLs are surely loaded."""
        return _set_up()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if (
            environ.get("REQUEST_METHOD") == "POST"
            and environ.get("PATH_INFO", "").endswith("/heartbeat")
            and "HTTP_COOKIE" not in environ
        ):
            answer = self._answer(environ)
            if answer is not None:
                status, headers, body = answer
                start_response(status, headers)
                return [body]
        return self.app(environ, start_response)

    def _answer(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes] | None:
        setup = self._setup
        if setup is None:
            return None
        match = setup.path.fullmatch(environ["PATH_INFO"])
        if match is None:
            return None
        # Django's request writes the decoded path back into the environ it is given: a copy, so the
        # wrapped application gets the environ exactly as the server made it.
        request = WSGIRequest(environ.copy())
        token = fastpath.plain_token(request)
        if token is None:
            return None  # the body is not read: Django reads it from the untouched input
        try:
            request.get_host()
            for hook in setup.request_hooks:
                if hook(request) is not None:
                    return None  # a redirect: Django's to give
            body = request.body
        except Exception:  # a disallowed host or user agent, an unreadable body: Django answers
            return None
        environ["wsgi.input"] = io.BytesIO(body)  # read once here; the wrapped application reads it again
        try:
            answer = fastpath.steady_body(
                request, match["prefix"], match["group"], cached_only=True, token=token
            )
        except Exception:  # a bug: Django's handler answers (and reports) the same request
            log.exception("heartbeat door failed on %s; Django answers it", request.path)
            return None
        if answer is None:
            if request.META.get(fastpath.FAST_TRIED):  # META is a copy of environ
                environ[fastpath.FAST_TRIED] = True
            return None
        if isinstance(answer, bytes):
            return setup.steady_response(request, answer)
        return _through_hooks(setup, request, answer)


def _through_hooks(
    setup: _Setup, request: WSGIRequest, response: HttpResponse
) -> tuple[str, list[tuple[str, str]], bytes]:
    """The response after the response hooks of the middleware in _RUN, in Django's order, logged as
    Django logs a 4xx."""
    for hook in setup.response_hooks:
        response = hook(request, response)
    if response.status_code >= 400:
        log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
    return f"{response.status_code} {response.reason_phrase}", list(response.items()), response.content


# Bumped by any settings change (django.core.signals.setting_changed: tests, override_settings): the
# headers the door learnt from the hooks (_Setup.steady_response) are learnt again.
_settings_changes = 0


def _forget_learnt_headers(**kwargs: Any) -> None:
    global _settings_changes
    _settings_changes += 1


setting_changed.connect(_forget_learnt_headers)


@dataclass(slots=True)
class _Setup:
    path: re.Pattern[str]  # the heartbeat URL, with groups "prefix" and "group"
    hooks: list[Any]  # instances of the middleware in _RUN, in settings.MIDDLEWARE order
    request_hooks: list[Any] = field(init=False)  # their process_request, in order
    response_hooks: list[Any] = field(init=False)  # their process_response, in reverse order
    # The headers of a steady answer, by request.is_secure(), with the index of Content-Length in them:
    # learnt from the first answer the hooks finalized, made anew after a settings change.
    learnt: dict[bool, tuple[int, list[tuple[str, str]], int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.request_hooks = [h.process_request for h in self.hooks if hasattr(h, "process_request")]
        self.response_hooks = [h.process_response for h in reversed(self.hooks)]

    def steady_response(self, request: WSGIRequest, body: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        """A steady member's answer (the stored response's bytes) as Django would send it.

        What the hooks in _RUN add to a 200 answer of the heartbeat view depends on the settings (read
        when the hooks were made, and X_FRAME_OPTIONS on every call) and on request.is_secure() (HSTS)
        only; Content-Length is the body's length. So the hooks finalize the first such answer, per
        is_secure(), and later ones reuse its headers with their own Content-Length: the same headers
        in the same order (tests/api/test_door.py compares them with Django's, answer after answer)."""
        secure = request.is_secure()
        learnt = self.learnt.get(secure)
        if learnt is not None and learnt[0] == _settings_changes:
            _changes, headers, at = learnt
            headers = headers.copy()
            headers[at] = ("Content-Length", str(len(body)))
            return "200 OK", headers, body
        changes = _settings_changes
        status, headers, content = _through_hooks(self, request, fastpath.stored_response(body))
        length = ("Content-Length", str(len(body)))
        if status == "200 OK" and content == body and headers.count(length) == 1:
            self.learnt[secure] = (changes, headers.copy(), headers.index(length))
        return status, headers, content


def _set_up() -> _Setup | None:
    """What the door needs, or None (logged) when it must stay off."""
    try:
        return _setup_or_reason()
    except Exception:  # NoReverseMatch (a project that mounts the API differently), anything else
        log.exception("heartbeat door off: it could not be set up (heartbeats take Django's path)")
        return None


def _setup_or_reason() -> _Setup | None:
    if not conf.settings().RSC_HEARTBEAT_DOOR:
        return None
    unknown = [m for m in settings.MIDDLEWARE if m not in _NOTHING_TO_DO | _RUN]
    if unknown:
        log.warning(
            "heartbeat door off: it would skip %s (heartbeats take Django's path; docs/plugin.md)",
            ", ".join(unknown),
        )
        return None
    if not get_store().checks_credentials_in_script:
        log.info("heartbeat door off: a Redis Cluster cannot check credentials in the heartbeat script")
        return None
    marker = "rscdoorprefix", "rscdoorgroup"
    path = reverse("api-v1:heartbeat", kwargs={"stream_prefix": marker[0], "consumer_group": marker[1]})
    # reverse() starts with this thread's script prefix (SCRIPT_NAME of its last request); PATH_INFO,
    # which the pattern is matched against, never does.
    path = "/" + path.removeprefix(get_script_prefix())
    identifier = IDENTIFIER_RE.pattern.removeprefix("^").removesuffix("$")  # ASCII only
    escaped = re.escape(path).replace(marker[0], f"(?P<prefix>{identifier})")
    escaped = escaped.replace(marker[1], f"(?P<group>{identifier})")
    hooks = [import_string(m)(_unreachable) for m in settings.MIDDLEWARE if m in _RUN]
    return _Setup(re.compile(escaped), hooks)


def _unreachable(request: Any) -> Any:  # the door calls the hooks, never get_response
    raise AssertionError("the heartbeat door never calls get_response")
