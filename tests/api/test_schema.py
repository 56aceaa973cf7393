"""The OpenAPI schema: valid without a single warning, served with Swagger UI, and true to the API.

"True" is checked by validating real responses (success and problem) against the schema's documented
response for that operation and status, with every documented object closed (``additionalProperties:
false``): an undocumented field, a missing required one or a wrong type fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
import yaml
from django.core.management import call_command
from django.db import DatabaseError
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from coordinator import operations
from coordinator.api.schemas import END, ENTRY_ID_PATTERN, whole
from coordinator.models import AuditEntry
from coordinator.protocol.describe import GroupState
from coordinator.protocol.errors import CoordinatorError, StoreUnavailable
from coordinator.protocol.limits import GROUP_CONFIG_RANGES
from coordinator.protocol.model import (
    IDENTIFIER_RE,
    EndReason,
    MemberState,
    OrderingMode,
    VersionState,
    validate_identifier,
    validate_member_id,
)
from coordinator.store import MetadataStore, get_store

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, add_dead_letter, assert_problem, make_pending

ALL = ["v1:0", "v1:1", "v1:2", "v1:3"]


def test_spectacular_validates_the_schema_without_warnings(tmp_path: Path) -> None:
    GENERATOR_STATS.reset()  # warnings of earlier generations in this process are not ours
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    assert set(schema["components"]["securitySchemes"]) == {"bearerAuth", "staffSession"}
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    operations = {
        (method.upper(), path): op for path, item in schema["paths"].items() for method, op in item.items()
    }
    assert set(operations) == {
        ("POST", "/api/v1/groups/{stream_prefix}/{consumer_group}/heartbeat"),
        ("GET", "/api/v1/routing/{stream_prefix}"),
        ("GET", "/api/v1/autoscaling/{stream_prefix}/{consumer_group}"),
        ("GET", "/api/v1/admin/groups"),
        ("POST", "/api/v1/admin/groups"),
        ("GET", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}"),
        ("DELETE", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}"),
        ("PUT", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/max-concurrency"),
        ("POST", "/api/v1/admin/stream-prefixes/{stream_prefix}/shard-count"),
        ("GET", "/api/v1/admin/stream-prefixes/{stream_prefix}"),
        ("DELETE", "/api/v1/admin/stream-prefixes/{stream_prefix}"),
        ("PUT", "/api/v1/admin/stream-prefixes/{stream_prefix}/retention"),
        ("POST", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/shards/{shard}/redeliver"),
        ("POST", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/shards/{shard}/skip"),
        ("POST", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/release-drain"),
        ("GET", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/dead-letters"),
        ("GET", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/dead-letters/{dead_letter_id}"),
        ("POST", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/dead-letters/replay"),
        ("POST", "/api/v1/admin/groups/{stream_prefix}/{consumer_group}/dead-letters/purge"),
    }
    for (method, path), op in operations.items():
        assert op["security"] == [{"bearerAuth": []}, {"staffSession": []}], (method, path)
        statuses = set(op["responses"])
        assert {"401", "403", "405", "500", "503"} <= statuses, (method, path)
        for status, response in op["responses"].items():
            if status >= "400":
                assert set(response["content"]) == {"application/problem+json"}, (method, path, status)
        assert "Retry-After" in op["responses"]["503"]["headers"]
        if method in ("POST", "PUT"):
            assert {"400", "413", "415"} <= statuses
            assert set(op["requestBody"]["content"]) == {"application/json"}


def test_the_schema_and_swagger_ui_are_served(api: Api) -> None:
    r = api.get("schema/", token=None, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert r.status_code == 200
    assert json.loads(r.content)["info"]["title"] == "redis-stream-coordinator API"
    docs = api.get("docs/", token=None)
    assert docs.status_code == 200 and b"swagger-ui" in docs.content.lower()


# ---------------------------------------------------------------------------------------------- conformance


def to_json_schema(node: Any, components: dict[str, Any]) -> Any:
    """OpenAPI 3.0 -> JSON Schema: refs inlined, ``nullable`` as a null alternative, objects closed."""
    if isinstance(node, list):
        return [to_json_schema(n, components) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return to_json_schema(components[node["$ref"].rsplit("/", 1)[1]], components)
    out = {k: to_json_schema(v, components) for k, v in node.items() if k not in ("example", "readOnly")}
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    if out.pop("nullable", False):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return dict(json.loads(json.dumps(schema)))  # plain types (lazy strings, ordered dicts)


class Recorder:
    """Sends requests through ``api`` and validates each response against its documented schema."""

    def __init__(self, api: Api, openapi: dict[str, Any]) -> None:
        self.api = api
        self.openapi = openapi
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(self, method: str, path: str, template: str, body: Any = None, **kwargs: Any) -> Any:
        if body is not None:
            kwargs["body"] = body
        response = self.api.request(method, path, **kwargs)
        operation = self.openapi["paths"]["/api/v1/" + template][method.lower()]
        documented = operation["responses"].get(str(response.status_code))
        assert documented is not None, (method, template, response.status_code, response.content)
        self.seen.add((method, template, response.status_code))
        if response.status_code == 204:
            assert "content" not in documented and response.content == b""
            return response
        media_type = response["Content-Type"]
        schema = documented["content"][media_type]["schema"]
        components = self.openapi["components"]["schemas"]
        jsonschema.validate(json.loads(response.content), to_json_schema(schema, components))
        return response


def test_real_responses_match_the_documented_schemas(
    api: Api, openapi: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    call = Recorder(api, openapi)
    hb, group = (
        "groups/{stream_prefix}/{consumer_group}/heartbeat",
        "admin/groups/{stream_prefix}/{consumer_group}",
    )
    prefix_t, routing = "admin/stream-prefixes/{stream_prefix}", "routing/{stream_prefix}"
    hb_path, group_path = f"groups/{PREFIX}/{GROUP}/heartbeat", f"admin/groups/{PREFIX}/{GROUP}"

    call(
        "POST",
        "admin/groups",
        "admin/groups",
        {"stream_prefix": PREFIX, "consumer_group": GROUP, "shard_count": 4},
    )
    client = {"host": "h", "pid": 1, "listener": "l", "version": "v"}
    join = {"member_epoch": 0, "capacity": 2, "client": client}
    call("POST", hb_path, hb, {"member_id": "a", **join})
    call("POST", hb_path, hb, {"member_id": "b", **join})
    revoking = call("POST", hb_path, hb, {"member_id": "a", "member_epoch": 1, "owned_shards": ALL})
    assert revoking.json()["revoking"] == ["v1:2", "v1:3"]
    call("GET", group_path, group)  # pending revocations, unreleased shards, RECONCILING
    call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", prefix_t + "/shard-count", {"shard_count": 6})
    call("GET", group_path, group)  # with a strict migration: readable false, shards_to_drain
    call("POST", hb_path, hb, {"member_id": "b", "member_epoch": 2})
    call("POST", hb_path, hb, {"member_id": "a", "member_epoch": -1})  # the leave answer
    call("GET", group_path, group)  # an ended member: end_reason, ended_at_ms
    call("GET", f"routing/{PREFIX}", routing, token=MEMBER_TOKEN)
    call("GET", f"admin/stream-prefixes/{PREFIX}", prefix_t)
    call("GET", "admin/groups", "admin/groups")
    call("PUT", f"{group_path}/max-concurrency", group + "/max-concurrency", {"max_concurrency": 3})

    # Problems, including the extension members (errors, details, incident_id).
    call("POST", hb_path, hb, {"member_id": "a", "member_epoch": "x", "zz": 1})
    call("POST", hb_path, hb, {"member_id": "b", "member_epoch": 9})
    call("POST", hb_path, hb, {"member_id": "b", "member_epoch": 2}, content_type="text/plain")
    call("GET", "routing/none", routing)
    call("GET", "routing/{bad}", routing)
    call("GET", "admin/groups", "admin/groups", token=None)
    call("GET", "admin/groups", "admin/groups", token=MEMBER_TOKEN)
    call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", prefix_t + "/shard-count", {"shard_count": 2})
    call("POST", hb_path, hb, raw=b"[" * 70_000)
    monkeypatch.setattr(MetadataStore, "describe_prefix", lambda *a: 1 / 0)
    call("GET", f"admin/stream-prefixes/{PREFIX}", prefix_t)
    call("DELETE", group_path, group)

    def unavailable(*args: Any) -> Any:
        raise StoreUnavailable("the metadata store is unreachable: connection refused")

    monkeypatch.setattr(MetadataStore, "routing", unavailable)
    call("GET", f"routing/{PREFIX}", routing)

    statuses = {status for _m, _t, status in call.seen}
    assert statuses == {200, 201, 202, 204, 400, 401, 403, 404, 409, 413, 415, 500, 503}


def test_the_conformance_check_is_not_vacuous(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    routing = to_json_schema({"$ref": "#/components/schemas/Topology"}, components)
    good = {
        "stream_prefix": "p",
        "active_version": 1,
        "shard_count": 2,
        "versions": [],
        "sealed_versions": [],
    }
    jsonschema.validate(good, routing)
    for bad in (
        {**good, "surprise": 1},
        {k: v for k, v in good.items() if k != "shard_count"},
        {**good, "shard_count": "2"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, routing)
    member = to_json_schema({"$ref": "#/components/schemas/MemberView"}, components)
    assert member["properties"]["end_reason"]["anyOf"][-1] == {"type": "null"}


def test_lifecycle_responses_match_the_documented_schemas(
    api: Api, openapi: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator actions and dead-letter reads, success and problem, against their schemas."""
    call = Recorder(api, openapi)
    client = get_store().client
    group_t = "admin/groups/{stream_prefix}/{consumer_group}"
    shard_t, dlq_t = group_t + "/shards/{shard}", group_t + "/dead-letters"
    prefix_t = "admin/stream-prefixes/{stream_prefix}"
    group_path = f"admin/groups/{PREFIX}/{GROUP}"
    shard_path, dlq_path = f"{group_path}/shards/v1:0", f"{group_path}/dead-letters"

    api.create_group(shard_count=2)
    api.create_group(group="idle", shard_count=2)
    api.join("m1")
    ids = make_pending(client, 3)
    call("POST", f"{shard_path}/redeliver", shard_t + "/redeliver", {"reason": "r"})
    call("POST", f"{shard_path}/skip", shard_t + "/skip", {"entry_ids": ids[:1], "reason": "r"})
    call("POST", f"{shard_path}/skip", shard_t + "/skip", {"entry_ids": ids[:1], "reason": "r"})  # 409
    call("POST", f"{group_path}/shards/v1-0/skip", shard_t + "/skip", {"older_than_ms": 0, "reason": "r"})
    call("POST", f"{group_path}/shards/v9:0/redeliver", shard_t + "/redeliver", {})  # SHARD_NOT_FOUND
    call("POST", f"{shard_path}/redeliver", shard_t + "/redeliver", {}, token=MEMBER_TOKEN)

    dead = [add_dead_letter(client, i) for i in range(3)]
    call("GET", f"{dlq_path}?count=2", dlq_t)
    call("GET", f"{dlq_path}?count=0", dlq_t)
    call("GET", f"{dlq_path}/{dead[0]}", dlq_t + "/{dead_letter_id}")
    call("GET", f"{dlq_path}/1-0", dlq_t + "/{dead_letter_id}")
    call("POST", f"{dlq_path}/replay", dlq_t + "/replay", {"ids": dead[:1]})
    call("POST", f"{dlq_path}/purge", dlq_t + "/purge", {"all": True, "reason": "r"})

    call("PUT", f"admin/stream-prefixes/{PREFIX}/retention", prefix_t + "/retention", {
        "max_age_ms": 3_600_000, "max_len": None})  # fmt: skip
    call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", prefix_t + "/shard-count", {"shard_count": 4})
    call("GET", group_path, group_t)  # the migration's undrained rows, the backlog
    call("GET", f"admin/stream-prefixes/{PREFIX}", prefix_t)  # blocking rows, retention
    release = {"confirm_unconsumed": 0, "reason": "idle is gone"}
    call("POST", f"{group_path}/release-drain", group_t + "/release-drain", release)  # live members: 409
    call("POST", f"admin/groups/{PREFIX}/idle/release-drain", group_t + "/release-drain", release)
    call("DELETE", f"admin/stream-prefixes/{PREFIX}", prefix_t)  # 409: groups

    def refuse(**fields: Any) -> Any:
        raise DatabaseError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(AuditEntry.objects, "create", refuse)
        call("DELETE", f"admin/stream-prefixes/{PREFIX}?force=true", prefix_t)  # 503
    call("DELETE", f"admin/stream-prefixes/{PREFIX}?force=true", prefix_t)  # 204

    statuses = {status for _m, _t, status in call.seen}
    assert statuses == {200, 202, 204, 400, 403, 404, 409, 503}


# ---------------------------------------------------------------------------------------------- constraints

# Identifier candidates on both sides of the rule (docs/protocol.md section 13): lengths 64/65 and
# 128/129, a leading '.', '-' or '_', separators the keys use ('{', ':', '/'), non-ASCII letters and
# digits, whitespace and a trailing newline.
IDENTIFIER_SAMPLES = [
    "a", "orders", "A.b_c-1", "0", "x" * 64, "x" * 65, "x" * 128, "x" * 129, "", "-a", ".a", "_a",
    "a b", "a/b", "a:b", "{a}", "ä", "a\u0661", "a\n", " a", "a\t",
]  # fmt: skip


def schema_accepts(pattern: str, value: str) -> bool:
    """Whether a JSON Schema validator takes ``value`` for ``pattern``, asked of two regex engines that
    read it as the schema's readers do: Python's ``re`` (schemathesis's generators, Python validators)
    and Rust's (jsonschema_rs, schemathesis's validator; like ECMA-262, ``$``-free patterns mean the same
    there). They must agree."""
    by_python = re.search(pattern, value) is not None
    by_rust = jsonschema_rs.validator_for({"type": "string", "pattern": pattern}).is_valid(value)
    assert by_python == by_rust, (pattern, value)
    return by_python


def core_accepts(validate: Any, value: str) -> bool:
    try:
        validate(value)
    except CoordinatorError:
        return False
    return True


def parameters_of(openapi: dict[str, Any], where: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for item in openapi["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == where:
                    found.setdefault(parameter["name"], []).append(parameter["schema"])
    return found


def test_every_path_parameter_states_its_pattern(openapi: dict[str, Any]) -> None:
    params = parameters_of(openapi, "path")
    assert set(params) == {"stream_prefix", "consumer_group", "shard", "dead_letter_id"}
    for name, schemas in params.items():
        assert all(schema == schemas[0] for schema in schemas), name  # one definition per name
        assert schemas[0]["type"] == "string" and "pattern" in schemas[0], name
    for name in ("stream_prefix", "consumer_group"):
        assert params[name][0]["pattern"] == whole(IDENTIFIER_RE.pattern)
        assert params[name][0]["maxLength"] == 64
    assert schema_accepts(params["shard"][0]["pattern"], "v1:0")
    assert not schema_accepts(params["shard"][0]["pattern"], "v1:0\n")
    assert schema_accepts(params["dead_letter_id"][0]["pattern"], "1700000000000-0")


def test_identifier_patterns_accept_exactly_what_the_core_accepts(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    path_identifier = parameters_of(openapi, "path")["stream_prefix"][0]["pattern"]
    cases = [
        (path_identifier, lambda v: validate_identifier(v, "stream_prefix")),
        (components["CreateGroupRequest"]["properties"]["stream_prefix"]["pattern"],
         lambda v: validate_identifier(v, "stream_prefix")),
        (components["CreateGroupRequest"]["properties"]["consumer_group"]["pattern"],
         lambda v: validate_identifier(v, "consumer_group")),
        (components["HeartbeatRequest"]["properties"]["member_id"]["pattern"], validate_member_id),
    ]  # fmt: skip
    for pattern, validate in cases:
        for value in IDENTIFIER_SAMPLES:
            assert schema_accepts(pattern, value) == core_accepts(validate, value), (pattern, value)


def integer_fields(node: Any, where: str) -> Any:
    """(where, schema) of every integer in a schema tree (properties, array items, allOf...); not in
    the combinations of fields (anyOf / oneOf / not: they narrow properties stated in full already)."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            yield where, node
        for key, value in node.items():
            if key not in ("anyOf", "oneOf", "not"):
                yield from integer_fields(value, f"{where}.{key}")
    elif isinstance(node, list):
        for value in node:
            yield from integer_fields(value, where)


def test_every_integer_a_client_sends_states_its_range(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    requests = {name: schema for name, schema in components.items() if name.endswith("Request")}
    fields = [f for name, schema in requests.items() for f in integer_fields(schema, name)]
    fields += [(f"query {name}", s) for name, (s, *_) in parameters_of(openapi, "query").items()
               if s.get("type") == "integer"]  # fmt: skip
    assert len(fields) >= 15
    for where, schema in fields:
        assert "minimum" in schema and "maximum" in schema, where
        assert schema["minimum"] <= schema["maximum"], where


# Operations whose integer fields are checked at both ends: (component, method, path, a valid body).
RANGE_CHECKED = [
    ("CreateGroupRequest", "POST", "admin/groups",
     {"stream_prefix": PREFIX, "consumer_group": GROUP, "shard_count": 2}),
    ("MaxConcurrencyRequest", "PUT", f"admin/groups/{PREFIX}/{GROUP}/max-concurrency",
     {"max_concurrency": 1}),
    ("ShardCountRequest", "POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 3}),
    ("RetentionRequest", "PUT", f"admin/stream-prefixes/{PREFIX}/retention",
     {"max_age_ms": None, "max_len": None}),
]  # fmt: skip


@pytest.mark.parametrize(("component", "method", "path", "body"), RANGE_CHECKED, ids=lambda v: str(v)[:40])
def test_the_stated_ranges_are_the_ones_the_api_enforces(
    api: Api, openapi: dict[str, Any], component: str, method: str, path: str, body: dict[str, Any]
) -> None:
    """One step outside a stated range is refused as INVALID_REQUEST naming the field; nothing changes.
    (lease_ttl_ms's minimum is the tick interval's rule, INVALID_CONFIG: schemas.LeaseTtlScheme.)"""
    if component != "CreateGroupRequest":
        api.create_group(shard_count=2)
    properties = openapi["components"]["schemas"][component]["properties"]
    for field, schema in properties.items():
        if schema.get("type") != "integer":
            continue
        for outside in (schema["minimum"] - 1, schema["maximum"] + 1):
            response = api.request(method, path, {**body, field: outside, **RULE_KEEPERS.get(field, {})})
            if field == "lease_ttl_ms" and outside < schema["minimum"]:
                problem = assert_problem(response, 400, "INVALID_CONFIG")
                assert problem["details"]["field"] == field, problem
                continue
            problem = assert_problem(response, 400, "INVALID_REQUEST")
            assert problem["errors"][0]["field"] == field, (field, outside, problem)


def test_the_served_schema_states_heartbeat_below_lease_as_the_api_enforces_it(
    api: Api, settings: Any
) -> None:
    """heartbeat_interval_ms < lease_ttl_ms, either the server's default (issue 31: enforced, not stated):
    the served schema says so for tools (``x-less-than``) and in both fields' descriptions with this
    server's defaults; the figures it states are the ones the API holds a request to."""
    settings.RSC_MEMBER_LEASE_TTL_MS, settings.RSC_HEARTBEAT_INTERVAL_MS = 12_000, 4_000
    served = api.get("schema/", token=None, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    body = json.loads(served.content)["components"]["schemas"]["CreateGroupRequest"]
    assert body["x-less-than"] == {"heartbeat_interval_ms": "lease_ttl_ms"}
    lease_text = body["properties"]["lease_ttl_ms"]["description"]
    heartbeat_text = body["properties"]["heartbeat_interval_ms"]["description"]
    lease_match = re.search(r"below lease_ttl_ms: .*?RSC_MEMBER_LEASE_TTL_MS \((\d+)\)", heartbeat_text)
    heartbeat_match = re.search(r"above heartbeat_interval_ms: .*?\((\d+)\)", lease_text)
    assert lease_match and heartbeat_match, (heartbeat_text, lease_text)
    stated_lease, stated_heartbeat = int(lease_match[1]), int(heartbeat_match[1])
    assert (stated_lease, stated_heartbeat) == (12_000, 4_000)

    def create(group: str, **fields: int) -> Any:
        return api.post("admin/groups", {"stream_prefix": PREFIX, "consumer_group": group, "shard_count": 2,
                                         **fields})  # fmt: skip

    for group, fields in [
        ("hb-at-default-lease", {"heartbeat_interval_ms": stated_lease}),
        ("lease-at-default-hb", {"lease_ttl_ms": stated_heartbeat}),
        ("equal", {"heartbeat_interval_ms": 5_000, "lease_ttl_ms": 5_000}),
    ]:
        problem = assert_problem(create(group, **fields), 400, "INVALID_CONFIG")
        assert "heartbeat_interval_ms" in problem["detail"], problem
    assert create("hb-below-default-lease", heartbeat_interval_ms=stated_lease - 1).status_code == 201
    assert create("lease-above-default-hb", lease_ttl_ms=stated_heartbeat + 1).status_code == 201


# Fields the cross-field rule (heartbeat below lease) would otherwise refuse for another reason.
RULE_KEEPERS: dict[str, dict[str, int]] = {"lease_ttl_ms": {"heartbeat_interval_ms": 100}}


# ---------------------------------------------------------------------------------------------- requests
# What schemathesis found (tests/api/test_schemathesis.py): requests the schema called valid that the API
# refused, on the operations whose bodies had rules the schema did not state. Each rule is checked here
# at both ends: the schema's verdict on a body is the API's.


def every_pattern(node: Any, where: str = "") -> Any:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield where, node["pattern"]
        for key, value in node.items():
            yield from every_pattern(value, f"{where}.{key}")
    elif isinstance(node, list):
        for value in node:
            yield from every_pattern(value, where)


def test_every_pattern_ends_the_same_in_every_regex_dialect(openapi: dict[str, Any]) -> None:
    """No ``$`` (Python also matches it before a final newline: a generator sends "a\\n", which the server
    refuses) and no ``\\d`` (Unicode digits in Python, ASCII in ECMA): each pattern is anchored with END."""
    patterns = list(every_pattern(openapi))
    assert len(patterns) >= 10
    for where, pattern in patterns:
        assert pattern.startswith("^") and pattern.endswith(END), where
        assert "$" not in pattern and "\\d" not in pattern, where


def test_every_request_body_refuses_unknown_fields(openapi: dict[str, Any]) -> None:
    requests = {n: c for n, c in openapi["components"]["schemas"].items() if n.endswith("Request")}
    assert len(requests) >= 10
    for name, component in requests.items():
        assert component["additionalProperties"] is False, name


def schema_validator(openapi: dict[str, Any], component: str) -> Any:
    components = openapi["components"]["schemas"]
    return jsonschema.Draft7Validator(to_json_schema(components[component], components))


def test_entry_id_pattern_accepts_exactly_what_the_core_accepts(openapi: dict[str, Any]) -> None:
    """Both parts decimal and below 2**64, leading zeros allowed (the core reads ``05-0`` as ``5-0``)."""
    pattern = parameters_of(openapi, "path")["dead_letter_id"][0]["pattern"]
    top = 2**64 - 1
    samples = [
        "0-0", "1700000000000-0", f"{top}-{top}", f"{top + 1}-0", f"0-{top + 1}", f"000{top}-1",
        f"{10**19}-0", f"{10**20}-0", f"{top - 1}-0", f"{top // 10}9-0", "1-", "-1", "1", "1-1-1",
        "1-1\n", " 1-1", "1 -1", "\u0661-1", "+1-1", "0x1-1", "",
    ]  # fmt: skip
    for value in samples:
        assert schema_accepts(pattern, value) == core_accepts(operations.validate_entry_id, value), value


@hypothesis_settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_entry_ids_the_pattern_generates_are_accepted_and_random_ones_agree(data: st.DataObject) -> None:
    value = data.draw(st.from_regex(ENTRY_ID_PATTERN))
    assert core_accepts(operations.validate_entry_id, value), value
    digits = data.draw(st.from_regex(r"[0-9]{1,22}-[0-9]{1,22}", fullmatch=True))
    assert schema_accepts(ENTRY_ID_PATTERN, digits) == core_accepts(operations.validate_entry_id, digits)


# Reasons on both sides of the rule: NUL anywhere is refused (DRF), and a required reason must hold
# something once Python's str.strip() is done (which strips U+001C..U+001F and U+0085, not U+FEFF).
REASONS = ["r", " r ", "", " ", "\t\n", "\u3000", "\x1c", "\x85", "\ufeff", "r\x00", "\x00", "ä", "😀"]


def test_a_required_reason_is_refused_by_the_schema_exactly_when_the_api_refuses_it(
    api: Api, openapi: dict[str, Any]
) -> None:
    api.create_group(shard_count=1)
    validator = schema_validator(openapi, "PurgeDeadLettersRequest")
    for reason in REASONS:
        body = {"all": True, "reason": reason}
        response = api.post(f"admin/groups/{PREFIX}/{GROUP}/dead-letters/purge", body)
        assert response.status_code in (200, 400), response.content
        assert validator.is_valid(body) == (response.status_code == 200), (reason, response.content)


def test_an_optional_text_is_refused_by_the_schema_exactly_when_the_api_refuses_it(
    api: Api, openapi: dict[str, Any]
) -> None:
    api.create_group(shard_count=1)
    validator = schema_validator(openapi, "HeartbeatRequest")
    for i, text in enumerate(REASONS):
        body = {"member_id": f"m{i}", "member_epoch": 0, "capacity": 1, "client": {"host": text}}
        response = api.heartbeat(**body)
        assert response.status_code in (200, 400), response.content
        assert validator.is_valid(body) == (response.status_code == 200), (text, response.content)


# Bodies whose fields combine: (component, path template, bodies). The API's verdict is "400 or not":
# a valid body may still be refused for the state (404, 409), never with 400.
COMBINATIONS = [
    ("HeartbeatRequest", "groups/{p}/{g}/heartbeat", [
        {"member_id": "m1", "member_epoch": 0},
        {"member_id": "m1", "member_epoch": 0, "capacity": None},
        {"member_id": "m1", "member_epoch": 0, "capacity": 2},
        {"member_id": "m2", "member_epoch": 3},
        {"member_id": "m2", "member_epoch": 3, "capacity": None},
        {"member_id": "m3", "member_epoch": -1},
    ]),
    ("SkipRequest", "admin/groups/{p}/{g}/shards/v1:0/skip", [
        {"reason": "r"},
        {"reason": "r", "older_than_ms": 0},
        {"reason": "r", "entry_ids": ["1-0"]},
        {"reason": "r", "entry_ids": ["1-0"], "older_than_ms": 0},
    ]),
    ("PurgeDeadLettersRequest", "admin/groups/{p}/{g}/dead-letters/purge", [
        {"reason": "r"},
        {"reason": "r", "all": True},
        {"reason": "r", "all": False},
        {"reason": "r", "ids": ["1-0"]},
        {"reason": "r", "ids": ["1-0"], "all": False},
        {"reason": "r", "ids": ["1-0"], "all": True},
    ]),
    ("CreateGroupRequest", "admin/groups", [
        {"stream_prefix": "p2", "consumer_group": "g", "shard_count": 1, "unknown": 1},
        {"stream_prefix": "p3", "consumer_group": "g", "shard_count": 1, "lease_ttl_ms": 1001,
         "heartbeat_interval_ms": 100},
    ]),
]  # fmt: skip


@pytest.mark.parametrize(("component", "template", "bodies"), COMBINATIONS, ids=lambda v: str(v)[:24])
def test_the_schema_states_which_fields_go_together(
    api: Api, openapi: dict[str, Any], component: str, template: str, bodies: list[dict[str, Any]]
) -> None:
    api.create_group(shard_count=1)
    validator = schema_validator(openapi, component)
    for body in bodies:
        response = api.post(template.format(p=PREFIX, g=GROUP), body)
        assert (response.status_code != 400) == validator.is_valid(body), (body, response.content)


def test_the_lease_minimum_follows_the_tick_interval(settings: Any) -> None:
    settings.RSC_TICK_INTERVAL_MS = 5_000
    fresh = SchemaGenerator().get_schema(request=None, public=True)
    lease = fresh["components"]["schemas"]["CreateGroupRequest"]["properties"]["lease_ttl_ms"]
    assert lease["minimum"] == 5_001


def test_the_group_config_ranges_are_the_cores(openapi: dict[str, Any], settings: Any) -> None:
    """The schema's ranges of a group's configuration are GROUP_CONFIG_RANGES (coordinator/protocol/
    limits.py), which GroupConfig.validated() and the settings table's group defaults use too; the
    lease's minimum is also above the tick interval."""
    components = openapi["components"]["schemas"]
    create = components["CreateGroupRequest"]["properties"]
    stated = {name: (create[name]["minimum"], create[name]["maximum"]) for name in GROUP_CONFIG_RANGES}
    low, high = GROUP_CONFIG_RANGES["lease_ttl_ms"]
    lease = (max(low, settings.RSC_TICK_INTERVAL_MS + 1), high)
    assert stated == {**GROUP_CONFIG_RANGES, "lease_ttl_ms": lease}
    cap = components["MaxConcurrencyRequest"]["properties"]["max_concurrency"]
    assert (cap["minimum"], cap["maximum"]) == GROUP_CONFIG_RANGES["max_concurrency"]


def test_every_admin_operation_documents_429_with_retry_after(openapi: dict[str, Any]) -> None:
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            admin = "admin" in operation["tags"]
            responses = operation["responses"]
            assert ("429" in responses) == (admin or operation["operationId"] == "heartbeat"), (method, path)
            for status in ("429", "503"):
                if status in responses:
                    assert responses[status]["headers"]["Retry-After"]["schema"]["type"] == "integer"


def test_a_throttled_admin_request_matches_its_documented_429(
    api: Api, openapi: dict[str, Any], settings: Any
) -> None:
    settings.RSC_ADMIN_API_RATE = "1/min"
    call = Recorder(api, openapi)
    call("GET", "admin/groups", "admin/groups")
    throttled = call("GET", "admin/groups", "admin/groups")
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) >= 1
    assert throttled.json()["code"] == "TOO_MANY_REQUESTS"


def test_every_enum_component_has_all_the_values_of_its_python_enum(openapi: dict[str, Any]) -> None:
    """drf-spectacular names enums by field name: BacklogRow's two-valued version_state once took the name
    VersionStateEnum, so every topology with a RETIRED version violated the schema (found by
    schemathesis's stateful phase)."""
    components = openapi["components"]["schemas"]
    for name, enum in {
        "VersionStateEnum": VersionState,
        "MemberStateEnum": MemberState,
        "GroupStateEnum": GroupState,
        "EndReasonEnum": EndReason,
        "OrderingEnum": OrderingMode,
    }.items():
        assert components[name]["enum"] == [m.value for m in enum], name


def test_a_topology_with_a_retired_version_matches_the_schema(api: Api, openapi: dict[str, Any]) -> None:
    call = Recorder(api, openapi)
    api.create_group(shard_count=2)
    api.delete(f"admin/groups/{PREFIX}/{GROUP}")
    prefix_t = "admin/stream-prefixes/{stream_prefix}"
    call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", prefix_t + "/shard-count", {"shard_count": 3})
    call("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", prefix_t + "/shard-count", {"shard_count": 4})
    described = call("GET", f"admin/stream-prefixes/{PREFIX}", prefix_t).json()
    assert "RETIRED" in {v["state"] for v in described["topology"]["versions"]}, described
