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
