"""Problem details for every error code, statuses as docs/protocol.md section 12 specifies them, and no
HTML or traceback ever, even for routes that do not exist or exceptions nobody expected."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import RequestFactory
from rest_framework import exceptions as drf_exceptions

from coordinator.api import errors
from coordinator.api.errors import HTTP_STATUS, ApiErrorCode
from coordinator.operations import OperationErrorCode
from coordinator.protocol import errors as core
from coordinator.protocol.errors import ErrorCode
from coordinator.store import MetadataStore, get_store

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

SPEC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
HEARTBEAT = f"groups/{PREFIX}/{GROUP}/heartbeat"


def spec_table() -> dict[str, int]:
    """code -> HTTP status, read from the table of docs/protocol.md section 12."""
    text = SPEC.read_text()
    section = text[text.index("## 12. Error codes") : text.index("## 13.")]
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| `([A-Z_]+)` \| (\d{3}) \|", section, re.M)}


def test_the_status_table_is_the_specification() -> None:
    spec = spec_table()
    assert len(spec) >= 18
    assert {code: HTTP_STATUS[code][0] for code in spec} == spec
    # Every core code has a status; the HTTP layer adds only its own codes.
    assert set(ErrorCode) <= set(HTTP_STATUS)
    assert set(HTTP_STATUS) == set(ErrorCode) | set(OperationErrorCode) | set(ApiErrorCode)


@pytest.mark.parametrize(
    ("exception", "status"),
    [
        (core.InvalidRequest("bad", field="x"), 400),
        (core.InvalidIdentifier("bad id", field="stream_prefix"), 400),
        (core.InvalidConfig("bad config", field="heartbeat_interval_ms"), 400),
        (core.UnknownShard("no such shard", shard="v9:0"), 400),
        (core.ShardNotFound("no such shard", shard="v9:0"), 404),
        (core.GroupNotFound("gone", consumer_group=GROUP), 404),
        (core.StreamPrefixNotFound("gone", stream_prefix=PREFIX), 404),
        (core.GroupAlreadyExists("exists"), 409),
        (core.ShardCountConflict("conflict", shard_count=4), 409),
        (core.ShardCountUnchanged("same", shard_count=4), 409),
        (core.MigrationInProgress("busy", from_version=1, to_version=2), 409),
        (core.UnknownMemberId("who", member_id="m"), 409),
        (core.FencedMemberEpoch("fenced", member_id="m", member_epoch=3), 409),
        (core.GroupMaxSizeReached("full", max_members=1), 409),
        (core.IllegalTransition("bug", state="LEFT"), 500),
        (core.MetadataCorrupt("unreadable group document", consumer_group=GROUP), 500),
        (core.StoreUnavailable("redis is down"), 503),
        (core.ConcurrentUpdate("gave up"), 503),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_every_core_error_becomes_its_problem(
    api: Api, monkeypatch: pytest.MonkeyPatch, exception: core.CoordinatorError, status: int
) -> None:
    """Whatever the store raises reaches the client as problem details with its code and details."""

    def raising(*args: Any, **kwargs: Any) -> Any:
        raise exception

    monkeypatch.setattr(MetadataStore, "heartbeat", raising)
    body = {"member_id": "m", "member_epoch": 1}
    problem = assert_problem(api.post(HEARTBEAT, body, token=MEMBER_TOKEN), status, exception.code.value)
    assert problem["detail"] == exception.message
    assert problem["details"] == exception.details
    assert problem["retriable"] is exception.retriable
    assert problem["instance"] == f"/api/v1/{HEARTBEAT}"
    assert problem["type"] == "urn:redis-stream-coordinator:problem:" + exception.code.value.lower().replace(
        "_", "-"
    )


def test_concurrent_update_from_the_real_store_is_a_503_with_retry_after(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.create_group()
    monkeypatch.setattr(get_store().committer, "max_attempts", 0)  # the store gives up at once
    problem = assert_problem(
        api.post("admin/groups", {"stream_prefix": PREFIX, "consumer_group": "g2"}), 503, "CONCURRENT_UPDATE"
    )
    assert problem["retriable"] is True


def test_an_unconfigured_store_is_a_503(api: Api, settings: Any) -> None:
    settings.REDIS_URL = None
    problem = assert_problem(api.get(f"routing/{PREFIX}"), 503, "STORE_UNAVAILABLE")
    assert "REDIS_URL" in problem["detail"]


def test_an_unexpected_exception_is_a_logged_500_problem_without_its_message(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("internal-secret-detail")

    monkeypatch.setattr(MetadataStore, "routing", broken)
    problem = assert_problem(api.get(f"routing/{PREFIX}"), 500, "INTERNAL_ERROR")
    assert "internal-secret-detail" not in str(problem) and "Traceback" not in str(problem)
    incident = problem["incident_id"]
    record = next(r for r in caplog.records if incident in r.getMessage())
    assert record.levelno == logging.ERROR and record.exc_info is not None  # the traceback, server-side
    assert "internal-secret-detail" in caplog.text


def test_an_unexpected_exception_with_debug_on_is_still_a_problem(
    api: Api, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.DEBUG = True
    monkeypatch.setattr(MetadataStore, "list_groups", lambda self: 1 / 0)
    assert_problem(api.get("admin/groups"), 500, "INTERNAL_ERROR")
    assert_problem(api.get("/api/v1/no/such/route"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api"),
        ("GET", "/api/"),
        ("GET", "/api/v1"),
        ("GET", "/api/v1/"),
        ("GET", "/api/v2/routing/orders"),
        ("POST", f"/api/v1/{HEARTBEAT}/"),
        ("POST", "/api/v1/admin/groups/"),
        ("GET", "/api/v1/routing/"),
        ("GET", "/api/v1/routing/a/b"),
        ("DELETE", "/api/v1/admin/stream-prefixes/orders/shard-count/x"),
        ("PUT", "/api/v1/nothing%0Ahere"),
        ("GET", "/api/v1/schema"),
    ],
)
def test_unknown_api_routes_are_a_404_problem(api: Api, method: str, path: str) -> None:
    # No credential on purpose: unknown routes answer the same to everyone (and skip CSRF).
    problem = assert_problem(api.request(method, path, {"x": 1}, token=None), 404, "NOT_FOUND")
    assert problem["instance"].startswith("/api")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", f"routing/{PREFIX}", "GET, HEAD"),
        ("GET", HEARTBEAT, "POST"),
        ("OPTIONS", HEARTBEAT, "POST"),
        ("PATCH", "admin/groups", "GET, HEAD, POST"),
        ("POST", f"admin/groups/{PREFIX}/{GROUP}", "GET, DELETE, HEAD"),
        ("GET", f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", "PUT"),
        ("PUT", f"admin/stream-prefixes/{PREFIX}/shard-count", "POST"),
        ("TRACE", f"admin/stream-prefixes/{PREFIX}", "GET, DELETE, HEAD"),
        ("GET", f"admin/groups/{PREFIX}/{GROUP}/shards/v1:0/skip", "POST"),
        ("DELETE", f"admin/groups/{PREFIX}/{GROUP}/shards/v1:0/redeliver", "POST"),
        ("PUT", f"admin/groups/{PREFIX}/{GROUP}/release-drain", "POST"),
        ("POST", f"admin/groups/{PREFIX}/{GROUP}/dead-letters", "GET, HEAD"),
        ("GET", f"admin/groups/{PREFIX}/{GROUP}/dead-letters/replay", "POST"),
        ("GET", f"admin/groups/{PREFIX}/{GROUP}/dead-letters/purge", "POST"),
        ("DELETE", f"admin/groups/{PREFIX}/{GROUP}/dead-letters/1-0", "GET, HEAD"),
        ("POST", f"admin/stream-prefixes/{PREFIX}/retention", "PUT"),
    ],
)
def test_methods_a_route_lacks_are_a_405_with_allow(api: Api, method: str, path: str, allow: str) -> None:
    r = api.request(method, path, {"x": 1})
    assert_problem(r, 405, "METHOD_NOT_ALLOWED")
    assert sorted(r["Allow"].split(", ")) == sorted(allow.split(", "))


def test_head_works_where_get_does(api: Api) -> None:
    api.create_group()
    r = api.request("HEAD", f"routing/{PREFIX}")
    assert r.status_code == 200 and r.content == b""


def test_the_api_ignores_accept_and_answers_json(api: Api) -> None:
    api.create_group()
    r = api.get(f"routing/{PREFIX}", HTTP_ACCEPT="text/html")
    assert r.status_code == 200 and r["Content-Type"] == "application/json"
    assert_problem(api.get("routing/absent", HTTP_ACCEPT="text/html"), 404, "STREAM_PREFIX_NOT_FOUND")


def test_the_django_handlers_answer_problems_under_api_only() -> None:
    factory = RequestFactory()
    api_request, page_request = factory.get("/api/v1/x"), factory.get("/admin/x")
    for response, status, code in [
        (errors.handler400(api_request, None), 400, "INVALID_REQUEST"),
        (errors.handler403(api_request, None), 403, "PERMISSION_DENIED"),
        (errors.handler404(api_request, None), 404, "NOT_FOUND"),
        (errors.handler500(api_request), 500, "INTERNAL_ERROR"),
    ]:
        assert_problem(response, status, code)
    assert errors.handler404(page_request, None)["Content-Type"].startswith("text/html")
    assert errors.handler500(page_request)["Content-Type"].startswith("text/html")
    # Every 500 names its incident (tests/api/test_docs_and_500s.py: the log and the page).
    assert "incident_id" in json.loads(errors.handler500(api_request).content)
    assert b'id="incident-id"' in errors.handler500(page_request).content


def test_other_drf_views_under_api_answer_problems_too(api: Api) -> None:
    """The schema view is drf-spectacular's; the global exception handler still makes its errors problems."""
    assert_problem(api.get("schema/", token=None, HTTP_ACCEPT="text/csv"), 406, "NOT_ACCEPTABLE")
    assert_problem(api.post("schema/", {"x": 1}, token=None), 405, "METHOD_NOT_ALLOWED")


def test_drf_exceptions_the_views_do_not_raise_today_still_map() -> None:
    request = RequestFactory().get("/api/v1/x")
    context = {"request": request}
    response = errors.exception_handler(drf_exceptions.Throttled(wait=3), context)
    throttled = assert_problem(response, 429, "TOO_MANY_REQUESTS")
    assert response["Retry-After"] == "3"
    assert throttled["retriable"] is True

    class Teapot(drf_exceptions.APIException):
        status_code = 418

    assert_problem(errors.exception_handler(Teapot("short and stout"), context), 400, "INVALID_REQUEST")
