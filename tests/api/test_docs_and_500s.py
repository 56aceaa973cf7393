"""The docs pages load nothing from a CDN; no route under /api/v1/ answers 5xx to any method; and every
500, from DRF, from a plain Django view or from a middleware, carries an ``incident_id`` and is logged
once, at ERROR, with its traceback, under that id (docs/protocol.md section 12), with DEBUG off.

This module is also the test-only URLconf (``ROOT_URLCONF = __name__``): the real routes plus three
that fail on purpose.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path
from rest_framework.request import Request
from rest_framework.views import APIView

from config import urls as config_urls
from consumers.logcontext import MemberContextFilter
from coordinator.protocol.errors import MetadataCorrupt
from coordinator.store import MetadataStore

from .helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

# ---------------------------------------------------------------------------------------------- URLconf


class Boom(RuntimeError):
    """The exception the failing routes raise; its message must never reach a client."""


SECRET = "internal-secret-detail-42"


def plain_django_view(request: HttpRequest) -> HttpResponse:
    raise Boom(SECRET)


class FailingApiView(APIView):
    authentication_classes = ()
    permission_classes = ()

    def get(self, request: Request) -> HttpResponse:
        raise Boom(SECRET)


class FailingMiddleware:
    """Raises for one path, outside any view (test-only; added to MIDDLEWARE by a test)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.endswith("/middleware-boom"):
            raise Boom(SECRET)
        return self.get_response(request)  # type: ignore[no-any-return]


urlpatterns = [
    path("boom", plain_django_view),
    path("api/v1/test/plain-boom", plain_django_view),
    path("api/v1/test/drf-boom", FailingApiView.as_view()),
    *config_urls.urlpatterns,
]
handler500 = config_urls.handler500


@pytest.fixture
def failing_routes(settings: Any) -> Iterator[Client]:
    """DEBUG off, this module as the URLconf, and a client that returns 500s instead of raising."""
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    settings.MIDDLEWARE = [*django_settings.MIDDLEWARE, f"{__name__}.FailingMiddleware"]
    yield Client(raise_request_exception=False)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog, plus django.request, which does not propagate to the root logger (settings.LOGGING)."""
    loggers = [logging.getLogger("django.request")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO)
    yield caplog
    for logger in loggers:
        logger.removeHandler(caplog.handler)


def assert_logged_once(logs: pytest.LogCaptureFixture, incident: str) -> None:
    """One ERROR record names the incident and carries the traceback; no other 5xx record was logged
    (Django's own "Internal Server Error" line would repeat it without the id)."""
    errors = [r for r in logs.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    (record,) = errors
    assert incident in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], Boom)
    assert SECRET in logs.text and "Traceback" in logs.text


# ---------------------------------------------------------------------------------------------- 500s


@pytest.mark.parametrize(
    "url", ["/api/v1/test/plain-boom", "/api/v1/test/drf-boom", "/api/v1/middleware-boom"]
)
def test_an_api_500_is_a_problem_with_an_incident_id_logged_with_its_traceback(
    failing_routes: Client, logs: pytest.LogCaptureFixture, url: str
) -> None:
    response = failing_routes.get(url)
    problem = assert_problem(response, 500, "INTERNAL_ERROR")
    incident = problem["incident_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", incident)
    assert incident in problem["detail"]
    assert SECRET not in response.content.decode() and "Traceback" not in response.content.decode()
    assert_logged_once(logs, incident)


@pytest.mark.parametrize("url", ["/boom", "/admin/middleware-boom"])
def test_a_500_outside_the_api_is_a_plain_page_that_shows_the_incident_id(
    failing_routes: Client, logs: pytest.LogCaptureFixture, url: str
) -> None:
    response = failing_routes.get(url)
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    match = re.search(r'<code id="incident-id">([0-9a-f]{32})</code>', page)
    assert match is not None, page
    assert SECRET not in page and "Traceback" not in page
    assert_logged_once(logs, match[1])


def test_a_500_from_the_core_carries_an_incident_id_too(
    api: Api, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def corrupt(*args: Any) -> Any:
        raise MetadataCorrupt("unreadable group document", consumer_group=GROUP)

    monkeypatch.setattr(MetadataStore, "routing", corrupt)
    problem = assert_problem(api.get(f"routing/{PREFIX}"), 500, "METADATA_CORRUPT")
    incident = problem["incident_id"]
    (record,) = [r for r in logs.records if r.levelno >= logging.ERROR]
    assert incident in record.getMessage() and record.exc_info is not None


def test_django_request_errors_reach_the_console_whatever_debug_and_admins_say() -> None:
    handlers = logging.getLogger("django.request").handlers
    consoles = [h for h in handlers if type(h) is logging.StreamHandler]
    # no filter that could drop a record (RequireDebugFalse): only the member-context one, which adds
    assert consoles and all(isinstance(f, MemberContextFilter) for h in consoles for f in h.filters)
    assert logging.getLogger("django.request").getEffectiveLevel() <= logging.ERROR


# ---------------------------------------------------------------------------------------------- every route

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
SAMPLE_PARAMS = {
    "stream_prefix": PREFIX,
    "consumer_group": GROUP,
    "shard": "v1:0",
    "dead_letter_id": "1-0",
}


def api_v1_urls() -> list[str]:
    """One concrete URL per route under /api/v1/, read from the URLconf, parameters filled in."""

    def resolvers(patterns: list[Any], prefix: str) -> list[tuple[str, URLResolver]]:
        found = []
        for p in patterns:
            if isinstance(p, URLResolver):
                found.append((prefix + str(p.pattern), p))
                found += resolvers(p.url_patterns, prefix + str(p.pattern))
        return found

    # the project includes coordinator.urls, which includes the API under api/v1/
    (api_v1,) = [r for path, r in resolvers(get_resolver().url_patterns, "") if path == "api/v1/"]
    urls = []
    for pattern in api_v1.url_patterns:
        assert isinstance(pattern, URLPattern)
        route = str(pattern.pattern)
        urls.append("/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLE_PARAMS[m[1]], route))
    return urls


def test_every_route_answers_every_method_without_a_5xx(logs: pytest.LogCaptureFixture) -> None:
    api = Api(Client(raise_request_exception=False))
    urls = api_v1_urls()
    assert {"/api/v1/docs/", "/api/v1/redoc/", "/api/v1/schema/"} <= set(urls)
    assert len(urls) >= 18
    api.create_group(shard_count=2)
    failures = []
    for token in (None, MEMBER_TOKEN, ADMIN_TOKEN):
        for url in [*urls, "/api/v1/no/such/route"]:
            for method in METHODS:
                body: Any = {} if method in ("POST", "PUT", "PATCH") else None
                kwargs: dict[str, Any] = {"token": token}
                if body is not None:
                    kwargs["body"] = body
                response = api.request(method, url, **kwargs)
                if response.status_code >= 500:
                    failures.append((method, url, token, response.status_code, response.content[:200]))
    assert failures == []
    assert not [r for r in logs.records if r.levelno >= logging.ERROR]


def test_the_docs_pages_answer_only_get_and_head(api: Api) -> None:
    for page in ("docs/", "redoc/", "schema/"):
        assert api.request("HEAD", page, token=None).status_code == 200
        for method in ("OPTIONS", "POST", "DELETE"):
            response = api.request(method, page, token=None)
            assert_problem(response, 405, "METHOD_NOT_ALLOWED")
            assert sorted(response["Allow"].split(", ")) == ["GET", "HEAD"]


# ---------------------------------------------------------------------------------------------- docs pages


@pytest.mark.parametrize(("page", "marker"), [("docs/", "swagger-ui"), ("redoc/", "redoc")])
def test_the_docs_pages_load_their_assets_from_this_site_only(api: Api, page: str, marker: str) -> None:
    response = api.get(page, token=None)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert marker in html.lower()
    assert not re.search(r"https?://|//cdn|fonts\.g", html), "a page must not load anything from elsewhere"
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    static = [url for url in assets if url.startswith("/static/")]
    assert static and set(assets) - set(static) <= {"/api/v1/schema/"}, assets
    for url in static:
        assert finders.find(url.removeprefix("/static/")) is not None, url  # served by staticfiles
    if page == "docs/":
        assert {u.rsplit("/", 1)[1] for u in static} >= {
            "swagger-ui.css",
            "swagger-ui-bundle.js",
            "swagger-ui-standalone-preset.js",
            "favicon-32x32.png",
        }
        assert '"validatorUrl": null' in html  # no calls to validator.swagger.io either
    else:
        assert [u.rsplit("/", 1)[1] for u in static] == ["redoc.standalone.js"]
        assert '<redoc spec-url="/api/v1/schema/">' in html


def test_the_docs_page_points_at_the_schema_it_serves(api: Api) -> None:
    html = api.get("docs/", token=None).content.decode()
    assert '"/api/v1/schema/"' in html
    schema = api.get("schema/", token=None, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert json.loads(schema.content)["openapi"].startswith("3.")
