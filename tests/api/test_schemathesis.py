"""schemathesis against the real API: the served OpenAPI schema and the server must agree.

The schema is fetched from ``/api/v1/schema/`` through the WSGI app (as ``config.wsgi`` serves it), and
every request goes through that app in process, to the real views, store and a real private Redis
(tests/conftest.py, via the API fixtures of tests/api/conftest.py); the audit rows go to the test
database.

Every operation is tested with an admin token and with a member token, in schemathesis's phases:
examples, coverage (boundary values, each constraint broken on its own) and fuzzing (positive and
negative), with its default checks: not_a_server_error, status_code_conformance,
content_type_conformance, response_headers_conformance, response_schema_conformance,
positive_data_acceptance (a request the schema calls valid is not refused with 400), negative_data_rejection
(a request it calls invalid is refused), missing_required_header, unsupported_method, ignored_auth.
Then the stateful phase: schemathesis's state machine follows the OpenAPI links of :data:`LINKS` (create a
group, describe it, join and heartbeat, change it, delete it...), with the same checks plus the stateful
ones (use_after_free, ensure_resource_availability).

The run is seeded and derandomized, so CI sees the same requests every time; the budget (examples per
operation, steps) keeps the module well under a minute and a half on two shared cores.

Two rules are filtered rather than stated (:func:`_keep_case` says why): a group's
``heartbeat_interval_ms`` must be below its ``lease_ttl_ms`` (JSON Schema cannot compare two fields, let
alone a field with a server default, so the schema says it in words), and a new stream prefix needs a
``shard_count`` (a rule about the server's state).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import override_settings
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings

from coordinator.store import get_store

from .helpers import ADMIN_TOKEN, MEMBER_TOKEN

SEED = 20_261_201
# What config.wsgi serves, without a second django.setup() (pytest-django has set Django up).
application = WSGIHandler()
SCHEMA_URL = "/api/v1/schema/?format=json"


def _config(token: str, max_examples: int, **extra: Any) -> Any:
    return schemathesis.Config.from_dict(
        {
            **extra,
            "seed": SEED,
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {"max-examples": max_examples, "deterministic": True, "database": "none"},
            "suppress-health-check": ["too_slow", "filter_too_much"],
            # The stateful phase follows LINKS only. Inferred links (from field names, from Location
            # headers) reach a group's shard operations with a made-up shard; the API answers it 404
            # SHARD_NOT_FOUND (a missing resource, which a valid request may meet), but they add little.
            "phases": {"stateful": {"inference": {"algorithms": []}}},
        }
    )


def _load(token: str, max_examples: int, **extra: Any) -> Any:
    # At collection there is no test environment yet: the app refuses any host but the ones allowed.
    with override_settings(ALLOWED_HOSTS=["localhost"]):
        config = _config(token, max_examples, **extra)
        return schemathesis.openapi.from_wsgi(SCHEMA_URL, application, config=config)


ADMIN = _load(ADMIN_TOKEN, max_examples=15)
# A member token gets 403 on every admin operation before its input is read: there a few fuzzed examples
# do, without the coverage phase's hundreds of boundary values. The member operations get everything.
MEMBER = _load(
    MEMBER_TOKEN,
    max_examples=15,
    operations=[
        {
            "include-tag": "admin",
            "phases": {"coverage": {"enabled": False}},
            "generation": {"max-examples": 5},
        }
    ],
)


def _keep_case(context: Any, case: Any) -> bool:
    """Drop the create-group requests that break a rule no schema can state (applied to generated cases,
    in every phase):

    - ``heartbeat_interval_ms`` not below ``lease_ttl_ms``, either given or the server's default (a
      comparison of two fields, one maybe a server setting): 400 INVALID_CONFIG;
    - no ``shard_count`` while the stream prefix does not exist yet (a rule about the server's state):
      400 INVALID_REQUEST naming shard_count. Random prefixes never exist, so without this every such
      body would be a "schema-valid request rejected"; the stateful phase still creates groups.

    Negative cases are kept: they are refused for what they break anyway.
    """
    if case.operation.definition.raw.get("operationId") != "create_group" or not isinstance(case.body, dict):
        return True
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return True
    body = case.body
    lease = body.get("lease_ttl_ms", django_settings.RSC_MEMBER_LEASE_TTL_MS)
    heartbeat = body.get("heartbeat_interval_ms", django_settings.RSC_HEARTBEAT_INTERVAL_MS)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lease, heartbeat)):
        return True  # not a valid body: refused for that
    return bool(heartbeat < lease) and "shard_count" in body


def _with_hooks(schema: Any) -> Any:
    schema.hook("filter_case")(_keep_case)
    return schema


for _schema in (ADMIN, MEMBER):
    _with_hooks(_schema)


@pytest.fixture(autouse=True)
def in_process(api_environment: None, settings: Any) -> Iterator[None]:
    """The WSGI app served in this thread, inside the test's database transaction.

    Django closes the database connection at the end of every request (``close_old_connections``), which
    inside the test's transaction would lose it; its test client disconnects that signal around each
    request, and so does this fixture around the test. The admin rate limit is raised so that the run
    tests the operations, not the throttle (tests/api/test_throttling.py does that).
    """
    settings.ALLOWED_HOSTS = ["localhost"]
    settings.RSC_ADMIN_API_RATE = "1000000/min"
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@ADMIN.parametrize()
def test_every_operation_conforms_with_an_admin_token(case: Any) -> None:
    case.call_and_validate()


@MEMBER.parametrize()
def test_every_operation_conforms_with_a_member_token(case: Any) -> None:
    case.call_and_validate()


# ---------------------------------------------------------------------------------------------- stateful
# OpenAPI links that the state machine follows: from a created group to everything that can be done with
# it, and from a heartbeat to the member's next one. (schemathesis also infers links from the schema; on
# its own it finds few here.) They are added to a copy of the served schema for this test only.

_GROUP = {
    "stream_prefix": "$response.body#/stream_prefix",
    "consumer_group": "$response.body#/consumer_group",
}
_PREFIX = {"stream_prefix": "$response.body#/stream_prefix"}
# A shard the group really has: its backlog lists every live shard (a random one is 404 SHARD_NOT_FOUND).
_SHARD = {**_GROUP, "shard": "$response.body#/backlog/0/shard"}
LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("create_group", "201"): {
        "DescribeGroup": {"operationId": "describe_group", "parameters": _GROUP},
        "Join": {
            "operationId": "heartbeat",
            "parameters": _GROUP,
            "requestBody": {"member_id": "m-1", "member_epoch": 0, "capacity": 2},
        },
        "SetMaxConcurrency": {"operationId": "set_max_concurrency", "parameters": _GROUP},
        "ListDeadLetters": {"operationId": "list_dead_letters", "parameters": _GROUP},
        "PurgeDeadLetters": {"operationId": "purge_dead_letters", "parameters": _GROUP},
        "ReleaseDrain": {"operationId": "release_drain", "parameters": _GROUP},
        "Redeliver": {"operationId": "redeliver_shard", "parameters": _SHARD},
        "Skip": {"operationId": "skip_entries", "parameters": _SHARD},
        "DeleteGroup": {"operationId": "delete_group", "parameters": _GROUP},
        "Routing": {"operationId": "routing", "parameters": _PREFIX},
        "DescribePrefix": {"operationId": "describe_stream_prefix", "parameters": _PREFIX},
        "ChangeShardCount": {"operationId": "change_shard_count", "parameters": _PREFIX},
        "SetRetention": {"operationId": "set_retention", "parameters": _PREFIX},
        "DeletePrefix": {"operationId": "delete_stream_prefix", "parameters": _PREFIX},
    },
    ("heartbeat", "200"): {
        "NextHeartbeat": {
            "operationId": "heartbeat",
            "parameters": {
                "stream_prefix": "$request.path.stream_prefix",
                "consumer_group": "$request.path.consumer_group",
            },
            "requestBody": {
                "member_id": "$response.body#/member_id",
                "member_epoch": "$response.body#/member_epoch",
            },
        },
    },
    ("change_shard_count", "202"): {
        "DescribePrefix": {
            "operationId": "describe_stream_prefix",
            "parameters": {"stream_prefix": "$request.path.stream_prefix"},
        },
    },
}


def _with_links(raw: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(raw)
    operations = {op["operationId"]: op for item in schema["paths"].values() for op in item.values()}
    for (operation_id, status), links in LINKS.items():
        operations[operation_id]["responses"][status]["links"] = links
    return schema


def _workflow_schema() -> Any:
    schema = schemathesis.openapi.from_dict(_with_links(ADMIN.raw_schema), config=_config(ADMIN_TOKEN, 15))
    schema.app = application  # what from_wsgi sets: requests go to the WSGI app in process
    return _with_hooks(schema)


def test_the_stateful_phase_conforms() -> None:
    """Chains of calls along the links: a group created, described, joined and heartbeated on, changed,
    deleted; every response checked as in the other tests (and use-after-free, resource availability)."""

    class Workflow(_workflow_schema().as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Every scenario starts from an empty Redis: what a scenario may do must not depend on what
            # an earlier one left (Hypothesis replays choices and expects the same outcome).
            get_store().client.flushall()
            cache.clear()

    Workflow.run(
        settings=hypothesis_settings(
            max_examples=20,
            stateful_step_count=8,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
    )
