"""``/metrics`` (coordinator/metrics.py): who may scrape, and that every figure is the store's truth.
Real API, real private Redis."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from coordinator.store import MetadataStore
from tests.api.helpers import ADMIN_TOKEN, GROUP, MEMBER_TOKEN, PREFIX, Api

METRICS_TOKEN = "test-metrics-token-1b2c3d4e5f60718293a4"


@pytest.fixture(autouse=True)
def api_environment(settings: Any, redis_url: str, db: None) -> Any:
    from django.core.cache import cache

    from coordinator.store import reset_store

    settings.REDIS_URL = redis_url
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN]
    settings.RSC_ADMIN_TOKENS = [ADMIN_TOKEN]
    settings.RSC_METRICS_TOKENS = [METRICS_TOKEN]
    cache.clear()
    reset_store()
    yield
    reset_store()


@pytest.fixture
def api(client: Client) -> Api:
    return Api(client)


def scrape(client: Client, token: str | None = METRICS_TOKEN) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.get("/metrics", **headers)


def samples(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = scrape(client)
    assert response.status_code == 200, response.content
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_only_admin_and_scrape_tokens_may_read_metrics(client: Client) -> None:
    """Each refusal says what is wrong (issue 31: a wrong token got the missing-token text): no token,
    a token nobody issued (RFC 6750 invalid_token), a member credential (insufficient_scope)."""
    missing, wrong, member = scrape(client, None), scrape(client, "wrong"), scrape(client, MEMBER_TOKEN)
    assert (missing.status_code, missing["WWW-Authenticate"]) == (401, 'Bearer realm="metrics"')
    assert missing.content.decode().startswith("metrics need 'Authorization: Bearer <token>'")
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"] == 'Bearer realm="metrics", error="invalid_token"'
    assert "neither an RSC_METRICS_TOKENS token nor an API credential" in wrong.content.decode()
    assert member.status_code == 403
    assert member["WWW-Authenticate"] == 'Bearer realm="metrics", error="insufficient_scope"'
    assert member.content.decode().startswith("a member token cannot read metrics")
    assert len({missing.content, wrong.content, member.content}) == 3
    assert scrape(client, ADMIN_TOKEN).status_code == 200
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").status_code == 405


def test_the_figures_are_the_groups_state(api: Api, client: Client, redis_url: str) -> None:
    store = MetadataStore.from_url(redis_url)
    api.create_group(heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    epoch = api.join("m1")["member_epoch"]
    for _ in range(3):
        assert api.heartbeat(member_id="m1", member_epoch=epoch).status_code == 200  # fast path
    api.heartbeat(member_id="ghost", member_epoch=5)  # refused: unknown member
    for index in range(5):
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:2", {"n": str(index)})
    store.tick()

    found = samples(client)
    group = (("consumer_group", GROUP), ("stream_prefix", PREFIX))
    assert found[("rsc_metadata_up", ())] == 1
    assert found[("rsc_group_epoch", group)] == 1
    assert found[("rsc_assignment_epoch", group)] == 1
    assert found[("rsc_members", tuple(sorted((*group, ("state", "STABLE")))))] == 1
    assert found[("rsc_shards", tuple(sorted((*group, ("assignment", "READABLE")))))] == 4
    assert found[("rsc_shards", tuple(sorted((*group, ("assignment", "UNASSIGNED")))))] == 0
    assert found[("rsc_shard_lag", tuple(sorted((*group, ("shard", "v1:2")))))] == 5
    assert found[("rsc_shard_lag", tuple(sorted((*group, ("shard", "v1:0")))))] == 0
    assert found[("rsc_shard_pending", tuple(sorted((*group, ("shard", "v1:2")))))] == 0
    assert found[("rsc_migration_shards_to_drain", group)] == 0
    assert found[("rsc_routing_version", (("stream_prefix", PREFIX),))] == 1
    assert found[("rsc_heartbeat_seconds_count", (("path", "fast"),))] >= 3
    assert found[("rsc_heartbeat_seconds_count", (("path", "full"),))] >= 1
    assert found[("rsc_heartbeat_seconds_count", (("path", "refused"),))] >= 1
    assert found[("rsc_tick_runs_total", ())] == 1
    assert found[("rsc_tick_seconds_total", ())] > 0
    assert found[("rsc_members_expired_total", ())] == 0


def test_redis_down_is_a_gauge_not_an_error(client: Client, settings: Any, disposable_redis: Any) -> None:
    from coordinator.store import reset_store

    settings.REDIS_URL = disposable_redis.url
    reset_store()
    disposable_redis.stop()
    found = samples(client)
    assert found[("rsc_metadata_up", ())] == 0


def test_the_dashboard_queries_only_metrics_that_exist() -> None:
    """docs/grafana-dashboard.json: every rsc_* series it queries is one the coordinator or a member
    exports (a renamed metric would leave an empty panel nobody notices)."""
    import json
    import re
    from pathlib import Path

    from prometheus_client import REGISTRY

    import consumers.metrics  # noqa: F401  (registers the member metrics)
    from coordinator.metrics import _Families
    from coordinator.store.instruments import METRICS_FIELDS

    exported = {m.name for m in REGISTRY.collect()}
    exported |= {f.name for f in _Families().all()} | {"rsc_metadata_up"}
    exported |= {name for name, _help in METRICS_FIELDS.values()}
    series = set()
    for name in exported:  # histograms and counters as PromQL sees them
        series |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    dashboard = json.loads((Path(__file__).parents[1] / "docs" / "grafana-dashboard.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\brsc_[a-z_]+", target["expr"])
    }
    assert len(queried) >= 15
    assert queried <= series, queried - series
