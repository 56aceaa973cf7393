"""Property-based fuzzing of every endpoint (Hypothesis): random JSON bodies, near-valid bodies, random
bytes, random paths, content types, methods and credentials, against the real API and a real Redis.

For every request: never a 5xx; every error is problem+json with the documented members; and a rejected
(4xx) request leaves Redis byte-for-byte as it was (``store.raw_metadata`` of every prefix, and the key
set, so not even a stream is created by a rejected request).
"""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import IDENTIFIER_RE, GroupConfig
from coordinator.store import MetadataStore, get_store

from .helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, expires_by_itself

FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
SHARDS = ["v1:0", "v1:1", "v1:2", "v1:3", "v2:0", "v1:9"]
PROBLEM_KEYS = {"type", "title", "status", "detail", "code", "retriable", "details"}

# ---------------------------------------------------------------------------------------------- values

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
identifiers = st.one_of(
    st.sampled_from([PREFIX, GROUP, "other", "m1", "m2"]),
    st.from_regex(IDENTIFIER_RE, fullmatch=True),
)
small_ints = st.integers(min_value=-3, max_value=1100)


def _mutate(body: dict[str, Any], how: str, key: str, junk: Any, extra: str) -> Any:
    if how == "replace" and key in body:
        return {**body, key: junk}
    if how == "drop":
        return {k: v for k, v in body.items() if k != key}
    if how == "extra" and extra not in body:
        return {**body, extra: junk}
    return junk if how == "whole" else body


def near_valid(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Half plausible bodies (known fields, plausible values), half mutated ones: one field replaced by
    any JSON value, dropped, or an unknown field added, or the whole body replaced."""
    plausible = st.fixed_dictionaries(required, optional=optional)
    mutated = st.builds(
        _mutate,
        plausible,
        st.sampled_from(["replace", "replace", "drop", "extra", "whole"]),
        st.sampled_from(sorted({*required, *optional})),
        json_values,
        st.text(max_size=10),
    )
    return st.one_of(plausible, mutated)


heartbeat_bodies = near_valid(
    {"member_id": st.sampled_from(["m1", "m2", "m3"]), "member_epoch": st.sampled_from([1, 0, -1, 2, 3, -2])},
    {
        "owned_shards": st.none() | st.lists(st.sampled_from(SHARDS), max_size=5),
        "capacity": st.none() | st.integers(1, 1024) | small_ints,
        "client": st.none()
        | st.fixed_dictionaries(
            {},
            optional={
                "host": st.text(max_size=10),
                "pid": small_ints,
                "listener": st.text(),
                "version": st.text(),
            },
        ),
    },
)
create_bodies = near_valid(
    {"stream_prefix": identifiers, "consumer_group": identifiers},
    {
        "shard_count": small_ints,
        "max_concurrency": small_ints,
        "lease_ttl_ms": st.integers(0, 4_000_000),
        "heartbeat_interval_ms": st.integers(0, 700_000),
        "revocation_timeout_ms": st.integers(0, 4_000_000),
        "max_members": st.integers(0, 11_000),
        "start_from": st.sampled_from(["latest", "earliest", "now"]),
    },
)
max_concurrency_bodies = near_valid({"max_concurrency": small_ints}, {})
shard_count_bodies = near_valid(
    {"shard_count": small_ints}, {"ordering": st.sampled_from(["strict", "relaxed", "STRICT"])}
)
entry_ids = st.one_of(
    st.sampled_from(["1-0", "0-1", "1700000000000-0", "99999999999999999999-0", "1-x", "", "-", "1"]),
    st.from_regex(r"[0-9]{1,14}-[0-9]{1,3}", fullmatch=True),
)
reasons = st.one_of(st.sampled_from(["", " ", "poison", "x" * 501]), st.text(max_size=20))
skip_bodies = near_valid(
    {"reason": reasons},
    {
        "entry_ids": st.lists(entry_ids, max_size=3),
        "older_than_ms": st.sampled_from([0, -1, 60_000, 31_536_000_000, 31_536_000_001]),
    },
)
redeliver_bodies = near_valid({}, {"reason": reasons})
release_bodies = near_valid({"confirm_unconsumed": small_ints, "reason": reasons}, {})
replay_bodies = near_valid({"ids": st.lists(entry_ids, max_size=3)}, {"reason": reasons})
purge_bodies = near_valid(
    {"reason": reasons},
    {"ids": st.lists(entry_ids, max_size=3), "all": st.sampled_from([True, False, "true"])},
)
retention_bodies = near_valid(
    {
        "max_age_ms": st.none() | st.sampled_from([59_999, 60_000, 31_536_000_000, 31_536_000_001]),
        "max_len": st.none() | st.sampled_from([999, 1_000, 1_000_000_000, 1_000_000_001]),
    },
    {"retired_grace_ms": st.sampled_from([-1, 0, 31_536_000_000, 31_536_000_001]), "reason": reasons},
)
queries = st.sampled_from(
    ["", "", "?force=true", "?force=false", "?force=yes", "?count=0", "?count=10", "?after=1-0", "?x=1",
     "?count=1&count=2", "?reason=cleanup"]
)  # fmt: skip

# (method, path template, body strategy or None)
ENDPOINTS: list[tuple[str, str, st.SearchStrategy[Any] | None]] = [
    ("POST", "groups/{p}/{g}/heartbeat", heartbeat_bodies),
    ("GET", "routing/{p}", None),
    ("GET", "admin/groups", None),
    ("POST", "admin/groups", create_bodies),
    ("GET", "admin/groups/{p}/{g}", None),
    ("DELETE", "admin/groups/{p}/{g}", None),
    ("PUT", "admin/groups/{p}/{g}/max-concurrency", max_concurrency_bodies),
    ("POST", "admin/stream-prefixes/{p}/shard-count", shard_count_bodies),
    ("GET", "admin/stream-prefixes/{p}", None),
    ("POST", "admin/groups/{p}/{g}/shards/{s}/redeliver", redeliver_bodies),
    ("POST", "admin/groups/{p}/{g}/shards/{s}/skip", skip_bodies),
    ("POST", "admin/groups/{p}/{g}/release-drain", release_bodies),
    ("GET", "admin/groups/{p}/{g}/dead-letters", None),
    ("GET", "admin/groups/{p}/{g}/dead-letters/{i}", None),
    ("POST", "admin/groups/{p}/{g}/dead-letters/replay", replay_bodies),
    ("POST", "admin/groups/{p}/{g}/dead-letters/purge", purge_bodies),
    ("PUT", "admin/stream-prefixes/{p}/retention", retention_bodies),
    ("DELETE", "admin/stream-prefixes/{p}", None),
]

segments = st.one_of(
    identifiers,
    identifiers,
    identifiers,
    st.text(max_size=70),
    st.text(alphabet=string.printable, min_size=1, max_size=10),
    st.sampled_from(["{x}", "a:b", "a b", "-x", ".x", "x" * 65, "caf\u00e9", "a\n", "%2F", ".."]),
)
content_types = st.sampled_from(
    ["application/json"] * 6
    + ["application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded"]
)
tokens = st.sampled_from([ADMIN_TOKEN, ADMIN_TOKEN, ADMIN_TOKEN, MEMBER_TOKEN, MEMBER_TOKEN, None, "bogus"])


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    method, template, bodies = draw(st.sampled_from(ENDPOINTS))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    prefix = draw(st.one_of(st.just(PREFIX), segments))  # the live group half of the time
    group = draw(st.one_of(st.just(GROUP), segments))
    shard = draw(st.one_of(st.sampled_from([*SHARDS, "v1-0", "v0:0", "v1:01"]), segments))
    dead_letter = draw(st.one_of(entry_ids, segments))
    path = template.format(
        p=quote(prefix, safe=""),
        g=quote(group, safe=""),
        s=quote(shard, safe=":"),
        i=quote(dead_letter, safe=""),
    )
    if bodies is None:
        path += draw(queries)
    kind = draw(
        st.sampled_from(
            ["near", "near", "near", "json", "bytes"] if bodies is not None else ["none", "json", "bytes"]
        )
    )
    if kind == "near":
        assert bodies is not None
        raw = json.dumps(draw(bodies)).encode()
    elif kind == "json":
        raw = json.dumps(draw(json_values)).encode()
    elif kind == "bytes":
        raw = draw(st.binary(max_size=64))
    else:
        raw = b""
    return {
        "method": method,
        "path": path,
        "raw": raw,
        "content_type": draw(content_types),
        "token": draw(tokens),
    }


# ---------------------------------------------------------------------------------------------- checks


def snapshot(store: MetadataStore) -> tuple[dict[str, Any], list[bytes]]:
    """Every prefix's metadata and the key set. Not the heartbeat-floor keys (``rsc:{P}:hbr:...``) nor
    the credentials' join rates: a live member's heartbeats (a credential's joins) count against them
    whatever their outcome (a flood of refused ones must be throttled too); they are not metadata and
    expire by themselves."""
    prefixes = {p for p in store.stream_prefixes()} | {PREFIX, "other"}
    keys = sorted(k for k in store.client.keys("*") if not expires_by_itself(k))
    return {p: store.raw_metadata(p) for p in sorted(prefixes)}, keys


def ensure_main_group(store: MetadataStore) -> None:
    """Examples may delete the main group; put it back so that later ones exercise live state."""
    meta = store.raw_metadata(PREFIX)
    if f"g:{GROUP}".encode() not in meta:
        config = GroupConfig(lease_ttl_ms=600_000, heartbeat_interval_ms=1_000)
        shard_count = None if b"t" in meta else 4  # an example may have changed the shard count
        command = CreateGroup(
            stream_prefix=PREFIX, consumer_group=GROUP, shard_count=shard_count, config=config
        )
        store.create_group(command)
        store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=2))


def check_response(response: Any, store: MetadataStore, before: Any, request: dict[str, Any]) -> None:
    status = response.status_code
    event(f"{request['method']} -> {status}")  # `pytest --hypothesis-show-statistics` shows the spread
    assert status < 500, (request, response.content)
    if status >= 400:
        assert response["Content-Type"] == "application/problem+json", (request, response.content)
        body = json.loads(response.content)
        assert set(body) >= PROBLEM_KEYS, body
        assert body["status"] == status
        if status == 401:
            assert response["WWW-Authenticate"].startswith("Bearer")
        assert snapshot(store) == before, (request, body)
    elif status != 204 and request["method"] != "HEAD":
        assert response["Content-Type"] == "application/json"
        json.loads(response.content)


@pytest.fixture
def fuzz_store(api: Api) -> MetadataStore:
    store = get_store()
    ensure_main_group(store)
    return store


@FUZZ
@given(request=requests())
def test_every_endpoint_survives_random_requests(
    api: Api, fuzz_store: MetadataStore, request: dict[str, Any]
) -> None:
    ensure_main_group(fuzz_store)
    before = snapshot(fuzz_store)
    response = api.request(
        request["method"],
        "/api/v1/" + request["path"],
        raw=request["raw"],
        token=request["token"],
        content_type=request["content_type"],
    )
    check_response(response, fuzz_store, before, request)


@settings(FUZZ, max_examples=200)
@given(body=heartbeat_bodies, member_token=st.booleans())
def test_heartbeats_with_random_bodies(
    api: Api, fuzz_store: MetadataStore, body: dict[str, Any], member_token: bool
) -> None:
    """The heartbeat is the hot path: here every request reaches it, so joins, renewals, leaves and
    fencing happen between the rejections."""
    ensure_main_group(fuzz_store)
    before = snapshot(fuzz_store)
    request = {"method": "POST", "path": f"groups/{PREFIX}/{GROUP}/heartbeat", "body": body}
    response = api.post(request["path"], body, token=MEMBER_TOKEN if member_token else ADMIN_TOKEN)
    check_response(response, fuzz_store, before, request)
    if response.status_code == 200:
        event(f"member_state {response.json()['member_state']}")
    elif response.status_code == 400:
        for e in response.json().get("errors", [{"field": "-", "code": response.json()["code"]}]):
            event(f"400 {e['field']} {e['code']}")


@settings(FUZZ, max_examples=100)
@given(
    path=st.text(max_size=40).map(lambda t: quote(t, safe="/")),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    token=tokens,
    raw=st.binary(max_size=32),
)
def test_random_paths_under_api(
    api: Api, fuzz_store: MetadataStore, path: str, method: str, token: str | None, raw: bytes
) -> None:
    before = snapshot(fuzz_store)
    for prefix in ("/api/", "/api/v1/", "/api/v1/admin/"):
        request = {"method": method, "path": prefix + path, "raw": raw}
        response = api.request(method, prefix + path, raw=raw, token=token)
        check_response(response, fuzz_store, before, request)


@settings(FUZZ, max_examples=60)
@given(header=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=60))
def test_random_authorization_headers(api: Api, fuzz_store: MetadataStore, header: str) -> None:
    before = snapshot(fuzz_store)
    response = api.request("GET", "admin/groups", token=None, HTTP_AUTHORIZATION=header)
    assert response.status_code in (200, 401), response.content
    if response.status_code == 401:
        check_response(response, fuzz_store, before, {"header": header, "method": "GET"})
