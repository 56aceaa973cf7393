"""The whole product as real processes on a Redis Cluster: tests/e2e/stack.py's :class:`Stack` with
``REDIS_URL`` pointing at a :class:`tests.cluster.harness.LocalCluster` (``redis+cluster://``), and
its own private plain Redis kept as the Celery broker only (Celery's broker is not a cluster client:
docs/cluster.md).

Several coordinators: :meth:`ClusterStack.start_api` / :meth:`start_tick` may be called again for a
second API server on another port and a second tick loop (``manage.py run_tick``) next to the Celery one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from consumers.dataplane import redis_client
from consumers.producer import Producer
from coordinator.store import MetadataStore
from tests.cluster.harness import LocalCluster
from tests.e2e.stack import Api, Proc, ProducerLoop, Stack, free_port, wait_until


class ClusterStack(Stack):
    def __init__(self, cluster: LocalCluster, workdir: Path | None = None, **kwargs: Any) -> None:
        super().__init__(workdir, **kwargs)
        self.cluster = cluster
        self.extra_apis: list[tuple[int, Proc]] = []
        self.tick_loops: list[Proc] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = super().env(**extra)
        env["REDIS_URL"] = self.cluster.url
        # The broker: the stack's own plain Redis (super() points CELERY_BROKER_URL at its database 1).
        assert not env["CELERY_BROKER_URL"].startswith("redis+cluster")
        return env

    # -- more coordinators ---------------------------------------------------------------------------

    def start_second_api(self) -> int:
        """Another API (``config.serve``) on its own port, same cluster, same SQLite; returns its port."""
        port = free_port()
        argv = [
            sys.executable, "-m", "config.serve", "--bind", f"127.0.0.1:{port}", "--workers", "1",
            "--threads", "8", "--graceful-s", "5",
        ]  # fmt: skip
        proc = self.spawn(f"api-{port}", argv, self.env(RSC_EXIT_WITH_PARENT="1"))
        self.extra_apis.append((port, proc))
        wait_until(
            lambda: _answers(port, proc), timeout_s=60, interval_s=0.05, what=f"the second API on {port}"
        )
        return port

    def start_tick_loop(self, interval_ms: int) -> Proc:
        """A second tick runner: ``manage.py run_tick`` (its own loop, not Celery's)."""
        argv = [sys.executable, "manage.py", "run_tick", "--interval-ms", str(interval_ms)]
        proc = self.spawn(f"tick-loop-{len(self.tick_loops)}", argv, self.env())
        self.tick_loops.append(proc)
        return proc

    def describe_from_store(self, prefix: str = "e2e", group: str = "e2e-workers") -> dict[str, Any]:
        store = MetadataStore.from_url(self.cluster.url)
        try:
            return dict(store.describe_group(prefix, group))
        finally:
            store.client.close()

    def client(self) -> Any:
        if self._client is None:
            self._client = redis_client(self.cluster.url, socket_timeout=10)
        return self._client


def _answers(port: int, proc: Proc) -> bool:
    assert proc.alive, proc.output()[-3000:]
    try:
        return Api(port).call("GET", "admin/groups")[0] == 200
    except OSError:
        return False


class ClusterProducerLoop(ProducerLoop):
    """tests/e2e/stack.py's producer thread, producing through a cluster client."""

    def __init__(self, cluster_url: str, prefix: str, **kwargs: Any) -> None:
        super().__init__("redis://127.0.0.1:1/0", prefix, **kwargs)  # a client never used (no I/O)
        self.client.close()
        self.client = redis_client(cluster_url)
        self.producer = Producer(self.client)
