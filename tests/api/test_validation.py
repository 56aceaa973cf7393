"""Strict request validation: every rejection is a 4xx problem and changes nothing in Redis."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from coordinator.api.errors import PayloadTooLarge
from coordinator.api.parsers import StrictJSONParser
from coordinator.protocol.errors import InvalidRequest
from coordinator.protocol.limits import GROUP_CONFIG_RANGES
from coordinator.protocol.model import GroupConfig

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem

HEARTBEAT = f"groups/{PREFIX}/{GROUP}/heartbeat"
JOIN = {"member_id": "m1", "member_epoch": 0, "capacity": 1}
CREATE = {"stream_prefix": "fresh", "consumer_group": "g", "shard_count": 2}


@pytest.fixture(autouse=True)
def existing_group(api: Api) -> None:
    api.create_group(shard_count=4)


@pytest.fixture
def snapshot(store: Any) -> Any:
    """Asserts on exit that the metadata of both prefixes is byte-for-byte what it was."""
    before = {p: store.raw_metadata(p) for p in (PREFIX, "fresh")}
    keys = sorted(store.client.keys("*"))
    yield
    assert {p: store.raw_metadata(p) for p in (PREFIX, "fresh")} == before
    assert sorted(store.client.keys("*")) == keys


def fields_of(problem: dict[str, Any]) -> dict[str | None, str]:
    return {e["field"]: e["code"] for e in problem["errors"]}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({**JOIN, "extra": 1}, {"extra": "unknown_field"}),
        ({**JOIN, "client": {"host": "h", "port": 1}}, {"client.port": "unknown_field"}),
        ({**JOIN, "member_epoch": True}, {"member_epoch": "invalid"}),
        ({**JOIN, "member_epoch": "0"}, {"member_epoch": "invalid"}),
        ({**JOIN, "member_epoch": 0.0}, {"member_epoch": "invalid"}),
        ({**JOIN, "member_epoch": -3}, {"member_epoch": "min_value"}),
        ({**JOIN, "member_epoch": 2**53 + 1}, {"member_epoch": "max_value"}),
        ({**JOIN, "capacity": 0}, {"capacity": "min_value"}),
        ({**JOIN, "capacity": 1025}, {"capacity": "max_value"}),
        ({**JOIN, "capacity": False}, {"capacity": "invalid"}),
        ({**JOIN, "owned_shards": "v1:0"}, {"owned_shards": "not_a_list"}),
        ({**JOIN, "owned_shards": ["v1:0", "v0:1"]}, {"owned_shards[1]": "invalid_shard"}),
        ({**JOIN, "owned_shards": ["v1:01"]}, {"owned_shards[0]": "invalid_shard"}),
        ({**JOIN, "owned_shards": [1]}, {"owned_shards[0]": "invalid"}),
        ({**JOIN, "owned_shards": ["v1:0"] * 2049}, {"owned_shards": "max_length"}),
        ({**JOIN, "client": {"pid": -1}}, {"client.pid": "min_value"}),
        ({**JOIN, "client": {"host": 5}}, {"client.host": "invalid"}),
        ({**JOIN, "client": {"version": "x" * 65}}, {"client.version": "max_length"}),
        ({**JOIN, "client": {"listener": "a\x00b"}}, {"client.listener": "null_characters_not_allowed"}),
        ({**JOIN, "client": "host"}, {"client": "invalid"}),
        ({"member_epoch": 0}, {"member_id": "required"}),
        ({"member_id": "m1"}, {"member_epoch": "required"}),
        ({**JOIN, "member_id": None}, {"member_id": "null"}),
        ([JOIN], {None: "invalid"}),
        ("m1", {None: "invalid"}),
        (None, {None: "null"}),
    ],
)
def test_heartbeat_body_is_strict(
    api: Api, snapshot: None, body: Any, expected: dict[str | None, str]
) -> None:
    problem = assert_problem(api.post(HEARTBEAT, body, token=MEMBER_TOKEN), 400, "INVALID_REQUEST")
    assert fields_of(problem) == expected
    assert problem["detail"].startswith("the request body is invalid")


def test_null_optional_heartbeat_fields_mean_not_reported(api: Api) -> None:
    api.join("m1")
    body = {"member_id": "m1", "member_epoch": 1, "owned_shards": None, "capacity": None, "client": None}
    r = api.post(HEARTBEAT, body, token=MEMBER_TOKEN)
    assert r.status_code == 200 and r.json()["member_epoch"] == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({**CREATE, "shard_count": 0}, {"shard_count": "min_value"}),
        ({**CREATE, "shard_count": 1025}, {"shard_count": "max_value"}),
        ({**CREATE, "shard_count": "2"}, {"shard_count": "invalid"}),
        ({**CREATE, "max_concurrency": True}, {"max_concurrency": "invalid"}),
        ({**CREATE, "lease_ttl_ms": 999}, {"lease_ttl_ms": "min_value"}),
        ({**CREATE, "heartbeat_interval_ms": 600_001}, {"heartbeat_interval_ms": "max_value"}),
        ({**CREATE, "revocation_timeout_ms": 1.5}, {"revocation_timeout_ms": "invalid"}),
        ({**CREATE, "max_members": 10_001}, {"max_members": "max_value"}),
        ({**CREATE, "start_from": "now"}, {"start_from": "invalid_choice"}),
        ({**CREATE, "start_from": 0}, {"start_from": "invalid_choice"}),
        ({**CREATE, "shard_count": None}, {"shard_count": "null"}),
        ({**CREATE, "topic": "x"}, {"topic": "unknown_field"}),
        ({**CREATE, "stream_prefix": 7}, {"stream_prefix": "invalid"}),
        ({"consumer_group": "g"}, {"stream_prefix": "required"}),
    ],
)
def test_create_body_is_strict(api: Api, snapshot: None, body: Any, expected: dict[str | None, str]) -> None:
    problem = assert_problem(api.post("admin/groups", body), 400, "INVALID_REQUEST")
    assert fields_of(problem) == expected


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        (f"admin/groups/{PREFIX}/{GROUP}/max-concurrency", {}, {"max_concurrency": "required"}),
        (
            f"admin/groups/{PREFIX}/{GROUP}/max-concurrency",
            {"max_concurrency": 0},
            {"max_concurrency": "min_value"},
        ),
        (
            f"admin/groups/{PREFIX}/{GROUP}/max-concurrency",
            {"max_concurrency": "2"},
            {"max_concurrency": "invalid"},
        ),
        (f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 1025}, {"shard_count": "max_value"}),
        (
            f"admin/stream-prefixes/{PREFIX}/shard-count",
            {"shard_count": 2, "ordering": "loose"},
            {"ordering": "invalid_choice"},
        ),
        (f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 2, "x": 1}, {"x": "unknown_field"}),
    ],
)
def test_other_admin_bodies_are_strict(
    api: Api, snapshot: None, path: str, body: Any, expected: dict[str | None, str]
) -> None:
    method = "PUT" if path.endswith("max-concurrency") else "POST"
    problem = assert_problem(api.request(method, path, body), 400, "INVALID_REQUEST")
    assert fields_of(problem) == expected


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "groups/bad:prefix/g/heartbeat", JOIN),
        ("POST", f"groups/{PREFIX}/{{g}}/heartbeat", JOIN),
        ("POST", f"groups/{PREFIX}/_g/heartbeat", JOIN),
        ("GET", "routing/" + "p" * 65, None),
        ("GET", "routing/a%20b", None),
        ("GET", "admin/groups/caf%C3%A9/g", None),
        ("DELETE", f"admin/groups/{PREFIX}/-x", None),
        ("PUT", "admin/groups/a.b/c*/max-concurrency", {"max_concurrency": 2}),
        ("POST", "admin/stream-prefixes/.hidden/shard-count", {"shard_count": 2}),
        ("GET", "admin/stream-prefixes/%7Bx%7D", None),
    ],
)
def test_bad_path_identifiers(api: Api, snapshot: None, method: str, path: str, body: Any) -> None:
    problem = assert_problem(api.request(method, path, body), 400, "INVALID_IDENTIFIER")
    assert problem["details"]["field"] in ("stream_prefix", "consumer_group")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**JOIN, "member_id": "has space"}, "member_id"),
        ({**JOIN, "member_id": ""}, "member_id"),
        ({**JOIN, "member_id": "m" * 129}, "member_id"),
        ({**JOIN, "member_id": "a:b"}, "member_id"),
    ],
)
def test_bad_member_ids(api: Api, snapshot: None, body: Any, field: str) -> None:
    problem = assert_problem(api.post(HEARTBEAT, body, token=MEMBER_TOKEN), 400, "INVALID_IDENTIFIER")
    assert fields_of(problem) == {field: "invalid_identifier"}


def test_bad_identifiers_in_the_create_body(api: Api, snapshot: None) -> None:
    body = {**CREATE, "stream_prefix": "{tag}", "consumer_group": "ok"}
    problem = assert_problem(api.post("admin/groups", body), 400, "INVALID_IDENTIFIER")
    assert fields_of(problem) == {"stream_prefix": "invalid_identifier"}
    # An identifier error mixed with another error is an INVALID_REQUEST listing both.
    problem = assert_problem(api.post("admin/groups", {**body, "shard_count": 0}), 400, "INVALID_REQUEST")
    assert fields_of(problem) == {"stream_prefix": "invalid_identifier", "shard_count": "min_value"}


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b'{"member_id": "m1",}',
        b"",
        b"\xff\xfe{}",
        b'{"member_id": "m1", "member_epoch": NaN}',
        b'{"member_id": "m1", "member_epoch": Infinity}',
        b'{"member_id": "m1", "member_id": "m2", "member_epoch": 0, "capacity": 1}',
        b"[" * 30_000 + b"]" * 30_000,
        b'{"member_epoch": ' + b"9" * 5000 + b"}",
        b'"\\ud800"',
    ],
    ids=[
        "truncated",
        "trailing-comma",
        "empty",
        "not-utf8",
        "nan",
        "infinity",
        "duplicate-key",
        "deep-nesting",
        "huge-number",
        "lone-surrogate",
    ],
)
def test_malformed_json_is_a_400(api: Api, snapshot: None, raw: bytes) -> None:
    r = api.post(HEARTBEAT, raw=raw, token=MEMBER_TOKEN)
    assert_problem(r, 400, "INVALID_REQUEST")


def test_a_lone_surrogate_inside_a_string_field_is_refused(api: Api, snapshot: None) -> None:
    raw = b'{"member_id": "m1", "member_epoch": 0, "capacity": 1, "client": {"host": "\\ud800"}}'
    problem = assert_problem(api.post(HEARTBEAT, raw=raw, token=MEMBER_TOKEN), 400, "INVALID_REQUEST")
    assert fields_of(problem) == {"client.host": "surrogate_characters_not_allowed"}


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/jsonx",
        "application/merge-patch+json",
    ],
)
def test_bodies_must_be_declared_json(api: Api, snapshot: None, content_type: str | None) -> None:
    r = api.post(HEARTBEAT, JOIN, token=MEMBER_TOKEN, content_type=content_type)
    assert_problem(r, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_json_with_a_charset_parameter_is_fine(api: Api) -> None:
    r = api.post(HEARTBEAT, JOIN, token=MEMBER_TOKEN, content_type="Application/JSON; charset=UTF-8")
    assert r.status_code == 200, r.content


def test_oversized_bodies_are_a_413(api: Api, store: Any, settings: Any) -> None:
    padding = {"host": "h" * 255}
    body = json.dumps({**JOIN, "client": padding}).encode()
    before = store.raw_metadata(PREFIX)
    settings.RSC_API_MAX_BODY_BYTES = len(body) - 1
    assert_problem(api.post(HEARTBEAT, raw=body, token=MEMBER_TOKEN), 413, "PAYLOAD_TOO_LARGE")
    assert store.raw_metadata(PREFIX) == before
    # Exactly at the limit is fine.
    settings.RSC_API_MAX_BODY_BYTES = len(body)
    assert api.post(HEARTBEAT, raw=body, token=MEMBER_TOKEN).status_code == 200


def test_a_chunked_body_without_a_length_is_a_411(api: Api, snapshot: None) -> None:
    r = api.post(HEARTBEAT, raw=b"", token=MEMBER_TOKEN, HTTP_TRANSFER_ENCODING="chunked")
    assert_problem(r, 411, "LENGTH_REQUIRED")


def test_the_default_limit_is_64_kib(api: Api, snapshot: None) -> None:
    raw = json.dumps({**JOIN, "owned_shards": ["v1:0"] * 9000}).encode()
    assert len(raw) > 64 * 1024
    assert_problem(api.post(HEARTBEAT, raw=raw, token=MEMBER_TOKEN), 413, "PAYLOAD_TOO_LARGE")


def test_a_body_longer_than_its_declared_length_is_still_bounded(
    api: Api, snapshot: None, settings: Any
) -> None:
    """The parser reads at most limit + 1 bytes whatever Content-Length claims."""

    settings.RSC_API_MAX_BODY_BYTES = 10
    with pytest.raises(PayloadTooLarge):
        StrictJSONParser().parse(io.BytesIO(b'{"a": "' + b"x" * 100 + b'"}'))


@pytest.mark.parametrize("name", sorted(GROUP_CONFIG_RANGES))
def test_config_ranges_agree_with_the_core(name: str) -> None:
    low, high = GROUP_CONFIG_RANGES[name]
    base = {"lease_ttl_ms": 3_600_000, "heartbeat_interval_ms": 100}
    for value in (low, high):
        GroupConfig(**{**base, name: value}).validated()
    for value in (low - 1, high + 1):
        with pytest.raises(InvalidRequest):
            GroupConfig(**{**base, name: value}).validated()
