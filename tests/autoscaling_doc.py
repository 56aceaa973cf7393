"""What docs/autoscaling.md tells KEDA, read from the document itself so that the tests and the documented
``ScaledObject`` cannot drift: the trigger's URL route, ``valueLocation``, thresholds and auth."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

DOC = Path(__file__).resolve().parents[1] / "docs" / "autoscaling.md"
ROUTE = re.compile(r"^(?P<base>/.*/autoscaling)/(?P<prefix>[^/]+)/(?P<group>[^/]+)$")


@dataclass(frozen=True, slots=True)
class Trigger:
    route: str  # the URL path up to the prefix and group: "/api/v1/autoscaling"
    value_location: str
    target_value: float
    activation_target_value: float
    max_replica_count: int

    def path(self, stream_prefix: str, consumer_group: str) -> str:
        return f"{self.route}/{stream_prefix}/{consumer_group}"


def _yaml_documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return [d for block in blocks for d in yaml.safe_load_all(block) if isinstance(d, dict)]


def documented_trigger() -> Trigger:
    """The ``metrics-api`` trigger of the document's ``ScaledObject``, checked against its
    ``TriggerAuthentication`` (a bearer token)."""
    docs = _yaml_documents()
    (scaled,) = [d for d in docs if d.get("kind") == "ScaledObject"]
    (auth,) = [d for d in docs if d.get("kind") == "TriggerAuthentication"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "metrics-api"
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    metadata = trigger["metadata"]
    assert metadata["authMode"] == "bearer"
    assert [r["parameter"] for r in auth["spec"]["secretTargetRef"]] == ["token"]
    match = ROUTE.match(urlparse(metadata["url"]).path)
    assert match, metadata["url"]
    return Trigger(
        route=match["base"],
        value_location=metadata["valueLocation"],
        target_value=float(metadata["targetValue"]),
        activation_target_value=float(metadata.get("activationTargetValue", 0)),
        max_replica_count=int(scaled["spec"]["maxReplicaCount"]),
    )


def value_at(document: Any, location: str) -> float:
    """``location`` applied to ``document`` as KEDA's GJSON does, for the subset a plain path uses
    (dot-separated keys and array indexes); anything else is refused rather than guessed."""
    assert re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", location), location
    value = document
    for part in location.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    assert isinstance(value, int | float) and not isinstance(value, bool), value
    return float(value)
