"""A member process scaled in (SIGTERM from Kubernetes, docs/autoscaling.md "Scaling in") leaves its
group within a bound that does not depend on its handlers: a handler still running when the shutdown
timeout ends does not keep the process, and the member leaves (LEFT, its shards handed over at once)
instead of expiring after its lease."""

from __future__ import annotations

import signal
import time

from tests.consumers.harness import Cluster
from tests.consumers.test_process import busy_member


def test_a_member_with_a_stuck_handler_still_leaves_within_the_shutdown_bound(
    cluster: Cluster, redis_url: str
) -> None:
    run = busy_member(cluster, redis_url, 2)
    try:
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(60) == 0  # it left: a clean exit, far below the handler's 300 s
        # ... and within the documented bound (docs/autoscaling.md "Scaling in": the shutdown timeout,
        # 2 s here, + 2 s + one heartbeat timeout, 5 s): 9 s, plus 6 s for a loaded machine. A member
        # that waited for its handler or its lease would take 300 s or the lease TTL.
        assert time.monotonic() - sent < 15
    finally:
        run.kill()
    assert {v["state"] for v in cluster.describe()["members"]} == {"LEFT"}
    assert run.logged("shutdown timeout: abandoning [v1:0]")
    assert run.logged("left the group")
    # The entry whose handler never finished is not acked: it stays pending for the next owner.
    assert sum(len(rows) for rows in cluster.all_pending().values()) == 1
