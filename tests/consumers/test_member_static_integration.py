"""Static members against the real store and data plane (docs/consumers.md, "Static membership"): a
second live member given the same instance id is refused, logs one ERROR and joins again with backoff,
never fencing the first and never in a tight loop; once the first leaves for now, it takes its shards
over."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from consumers.client import StoreCoordinatorClient
from consumers.member.state import Phase

from .harness import Cluster, Recorder, eventually


class CountingClient(StoreCoordinatorClient):
    """The in-process coordinator client, counting the joins it sends."""

    joins = 0

    def heartbeat(self, stream_prefix: str, consumer_group: str, request: Any) -> dict[str, Any]:
        if request.member_epoch == 0:
            self.joins += 1
        return super().heartbeat(stream_prefix, consumer_group, request)


def test_a_second_member_with_the_instance_id_waits_with_backoff_then_takes_the_shards_over(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    first = cluster.member(recorder, instance="pod-a", index=0)
    eventually(lambda: first.phase is Phase.MEMBER and len(first.running_shards) == 4, what="first owns all")
    epoch = cluster.member_view(first.member_id)["member_epoch"]

    caplog.set_level(logging.DEBUG, logger="consumers")
    counting = CountingClient(cluster.store)
    second = cluster.member(recorder, instance="pod-a", index=0, coordinator=counting)
    assert second.instance_id == first.instance_id == "pod-a.bill.0"
    eventually(lambda: counting.joins >= 2, what="a refused join, then another")
    time.sleep(3)  # a window to count the joins in (a tight loop would send hundreds)
    assert 2 <= counting.joins <= 10, counting.joins
    errors = [
        r for r in caplog.records if r.levelno >= logging.ERROR and "UNRELEASED_INSTANCE_ID" in r.getMessage()
    ]
    assert len(errors) == 1 and "pod-a.bill.0" in errors[0].getMessage(), [r.getMessage() for r in errors]
    # The first was never fenced: the same epoch, all its shards.
    view = cluster.member_view(first.member_id)
    assert (view["state"], view["member_epoch"]) == ("STABLE", epoch)
    assert len(first.running_shards) == 4 and not second.running_shards

    first.stop(5.0)  # a clean stop: it leaves for now, its shards held for pod-a.bill.0
    assert first.wait(10.0)
    eventually(lambda: len(second.running_shards) == 4, what="the second takes the held shards over")
    assert cluster.member_view(first.member_id)["state"] == "LEFT"
    assert any("released after" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
