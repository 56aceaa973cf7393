"""A member's handler latencies are observed once per batch (consumers/metrics.py): the histogram must hold
exactly what one ``observe`` per handler call would have put there."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from consumers.metrics import MemberMetrics

# Every bucket's edge, just inside and just outside it, zero and beyond the last finite bound.
LATENCIES = [0.0, 0.0004, 0.0005, 0.00051, 0.001, 0.003, 0.0999, 0.1, 0.3, 2.5, 9.9, 10.0, 11.0, 120.0]


def series(metrics: MemberMetrics) -> dict[str, Any]:
    labels = {"stream_prefix": "p", "consumer_group": "g", "member_id": metrics.member_id}
    found = {}
    for family in REGISTRY.collect():
        if family.name != "rsc_member_handler_seconds":
            continue
        for sample in family.samples:
            if {k: sample.labels.get(k) for k in labels} == labels and not sample.name.endswith("_created"):
                found[sample.name + sample.labels.get("le", "")] = sample.value
    return found


def fresh() -> MemberMetrics:
    return MemberMetrics("p", "g", f"m-{uuid.uuid4().hex[:8]}")


def test_a_batch_observes_what_one_observation_per_call_would() -> None:
    one_by_one, batched = fresh(), fresh()
    for value in LATENCIES * 3:
        one_by_one.observe(value)
    batched.observe_batch(LATENCIES)
    batched.observe_batch([])
    batched.observe_batch(LATENCIES * 2)

    expected, got = series(one_by_one), series(batched)
    assert got.pop("rsc_member_handler_seconds_sum") == pytest.approx(
        expected.pop("rsc_member_handler_seconds_sum")
    )
    assert got == expected
    assert got["rsc_member_handler_seconds_count"] == 3 * len(LATENCIES)
    assert got["rsc_member_handler_seconds_bucket0.0005"] == 3 * 3  # 0.0, 0.0004 and 0.0005 itself


def test_without_the_histograms_internals_each_value_is_observed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prometheus-client that keeps its buckets elsewhere: observe() per value, the same figures."""
    metrics = fresh()

    class Child:
        def __init__(self) -> None:
            self.values: list[float] = []

        def observe(self, value: float) -> None:
            self.values.append(value)

    child = Child()
    object.__setattr__(metrics, "_seconds", child)
    metrics.observe_batch(LATENCIES)
    assert child.values == LATENCIES


# ------------------------------------------------------------------------------------------ the server


def scrape(port: int, host: str = "127.0.0.1", token: str | None = None) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_server_listens_on_the_loopback_by_default() -> None:
    from consumers import metrics

    server = metrics.start_server(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        status, body = scrape(server.server_port)
        assert status == 200 and b"rsc_member_handled_total" in body
    finally:
        server.shutdown()
        server.server_close()


def test_run_member_serves_on_the_loopback_unless_an_address_is_given(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """run_member's metrics: RSC_MEMBER_METRICS_ADDR (127.0.0.1) unless --metrics-addr; the token from
    RSC_MEMBER_METRICS_TOKEN."""
    from django.core.management import call_command

    from consumers import metrics
    from consumers.management.commands import run_member

    served: list[tuple[int, str, str]] = []

    class Stop(Exception):
        pass

    def serve(port: int, addr: str = metrics.DEFAULT_ADDR, token: str = "") -> int:
        served.append((port, addr, token))
        raise Stop

    monkeypatch.setattr(metrics, "serve", serve)
    monkeypatch.setattr(run_member, "autodiscover_listeners", lambda: _Listeners())
    with pytest.raises(Stop):
        call_command("run_member", "--metrics-port", "9105", skip_checks=True)
    settings.RSC_MEMBER_METRICS_TOKEN = "scrape-me"
    with pytest.raises(Stop):
        call_command("run_member", "--metrics-port", "9105", "--metrics-addr", "0.0.0.0", skip_checks=True)
    assert served == [(9105, "127.0.0.1", ""), (9105, "0.0.0.0", "scrape-me")]


class _Listeners:
    def select(self, names: list[str]) -> list[Any]:
        from consumers.listener import Listener

        return [Listener(print, name="bill", stream_prefix="orders", consumer_group="billing")]


def test_with_a_token_a_scrape_must_present_it() -> None:
    from consumers import metrics

    server = metrics.start_server(0, "127.0.0.1", token="s3cret-token")
    try:
        port = server.server_port
        assert scrape(port)[0] == 401
        assert scrape(port, token="wrong")[0] == 401
        assert scrape(port, token="s3cret-token-and-more")[0] == 401
        status, body = scrape(port, token="s3cret-token")
        assert status == 200 and b"rsc_member_handled_total" in body
    finally:
        server.shutdown()
        server.server_close()


def test_an_ipv6_address_binds_ipv6() -> None:
    import socket

    from consumers import metrics

    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        server = metrics.start_server(0, "::1")
    except OSError as e:  # a kernel without an IPv6 loopback
        pytest.skip(f"no ::1 here: {e}")
    try:
        assert server.address_family == socket.AF_INET6
        assert scrape(server.server_port, host="::1")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
