"""``GET /api/v1/autoscaling/<prefix>/<group>`` (coordinator/api/scaling.py) through the real URLconf and
views on a private Redis: who may read it, its answers to bad input, zeros for a missing group, and the
same figures as the ``rsc_group_*`` gauges of ``/metrics``. The live stack's run of the documented KEDA
path (produce, trim, reshard, consume) is tests/e2e/test_autoscaling.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from consumers.producer import Producer
from coordinator.store import MetadataStore
from tests.api.helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api, assert_problem
from tests.autoscaling_doc import documented_trigger, value_at
from tests.backlog_truth import true_backlog

METRICS_TOKEN = "test-scaler-token-0a1b2c3d4e5f60718293"
TRIGGER = documented_trigger()


@pytest.fixture(autouse=True)
def scrape_tokens(settings: Any) -> None:
    settings.RSC_METRICS_TOKENS = [METRICS_TOKEN]


def fetch(client: Client, prefix: str = PREFIX, group: str = GROUP, token: str | None = METRICS_TOKEN) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.get(TRIGGER.path(prefix, group), **headers)


def test_only_scrape_and_admin_tokens_may_read_it(client: Client) -> None:
    missing = assert_problem(fetch(client, token=None), 401, "UNAUTHENTICATED")
    assert "need 'Authorization: Bearer <token>'" in missing["detail"]
    wrong = assert_problem(fetch(client, token="wrong"), 401, "UNAUTHENTICATED")
    assert wrong["detail"].startswith("this token may not read autoscaling figures: it is not")
    member = assert_problem(fetch(client, token=MEMBER_TOKEN), 403, "PERMISSION_DENIED")
    assert member["detail"].startswith("this token may not read autoscaling figures: it must be")
    for token in (METRICS_TOKEN, ADMIN_TOKEN):
        assert fetch(client, token=token).status_code == 200
    response = client.post(TRIGGER.path(PREFIX, GROUP), HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert_problem(response, 405, "METHOD_NOT_ALLOWED")
    assert response["Allow"] == "GET, HEAD"


def test_a_malformed_identifier_is_a_problem_and_reads_nothing(client: Client) -> None:
    for prefix, group in (("bad prefix!", GROUP), (PREFIX, "x" * 300)):
        body = assert_problem(fetch(client, prefix, group), 400, "INVALID_IDENTIFIER")
        assert body["details"]["field"] in ("stream_prefix", "consumer_group")


def test_a_group_that_does_not_exist_answers_zeros(client: Client, api: Api) -> None:
    for prefix, group in ((PREFIX, GROUP), ("elsewhere", "nobody")):
        response = fetch(client, prefix, group)
        assert response.status_code == 200
        document = json.loads(response.content)
        assert document["exists"] is False
        assert value_at(document, TRIGGER.value_location) == 0 <= TRIGGER.activation_target_value
    api.create_group()
    assert json.loads(fetch(client, PREFIX, "other").content)["exists"] is False


def test_the_json_and_the_gauges_agree_with_the_true_backlog(
    client: Client, api: Api, redis_url: str
) -> None:
    store = MetadataStore.from_url(redis_url)
    api.create_group(shard_count=4)
    producer = Producer(store.client)
    for n in range(9):
        producer.send(PREFIX, f"key-{n}", {"n": n})
    key = f"rsc:{{{PREFIX}}}:v1:0"
    store.client.xreadgroup(GROUP, "c", {key: ">"}, count=2)
    document = json.loads(fetch(client).content)
    state = store.reader.read(PREFIX, None)[1]
    assert state is not None
    truth = true_backlog(store.client, state, GROUP)
    assert value_at(document, TRIGGER.value_location) == truth.backlog == 9
    assert (document["exists"], document["shards"], document["active_shards"]) == (True, 4, 4)
    assert document["shards_with_backlog"] == truth.shards_with_backlog
    assert document["pending"] == truth.pending
    scraped = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    expected = {
        "rsc_group_backlog": document["backlog"],
        "rsc_group_undelivered": document["undelivered"],
        "rsc_group_shards": document["shards"],
        "rsc_group_shards_with_backlog": document["shards_with_backlog"],
        # read a moment apart: the age moves on
        "rsc_group_oldest_undelivered_age_seconds": pytest.approx(
            document["oldest_undelivered_age_seconds"], abs=60
        ),
    }
    gauges = {
        s.name: s.value
        for family in text_string_to_metric_families(scraped.content.decode())
        for s in family.samples
        if s.name in expected and s.labels == {"stream_prefix": PREFIX, "consumer_group": GROUP}
    }
    assert gauges == expected
