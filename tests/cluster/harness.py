"""A private Redis Cluster on 127.0.0.1: ``masters`` primaries (and ``replicas_per_master`` replicas each),
each a :class:`config.embedded_redis.RedisServer` with cluster mode on, on free ports (never 6379), in
throw-away directories, joined with ``redis-cli --cluster create``.

The cluster bus port is given explicitly (``--cluster-port``, a second free port): the default, port +
10000, does not exist for the ephemeral ports the kernel hands out above 55535.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field

import redis

from config.embedded_redis import FORBIDDEN_PORT, HOST, RedisServer, free_port

NODE_TIMEOUT_MS = 1500


def _cli() -> str:
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not on PATH: the cluster tests need it to create the cluster")
    return cli


@dataclass
class LocalCluster:
    masters: int = 3
    replicas_per_master: int = 0
    servers: list[RedisServer] = field(default_factory=list)
    kill_to_promotion_s: list[float] = field(default_factory=list)  # of kill_and_wait_promotion

    # -------------------------------------------------------------------------------- lifecycle

    def start(self) -> LocalCluster:
        count = self.masters * (1 + self.replicas_per_master)
        try:
            for _ in range(count):
                port, bus = free_port(), free_port()
                assert FORBIDDEN_PORT not in (port, bus)
                server = RedisServer(
                    port,
                    extra_args=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-port",
                        str(bus),
                        "--cluster-node-timeout",
                        str(NODE_TIMEOUT_MS),
                        # A replica must be able to take over even if it lost its primary a while ago.
                        "--cluster-replica-validity-factor",
                        "0",
                    ],
                )
                self.servers.append(server.start())
            subprocess.run(
                [
                    _cli(),
                    "--cluster",
                    "create",
                    *(f"{HOST}:{s.port}" for s in self.servers),
                    "--cluster-replicas",
                    str(self.replicas_per_master),
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------------------------- views

    @property
    def url(self) -> str:
        """The product's cluster URL (docs/cluster.md), seeded with the first node."""
        return f"redis+cluster://{HOST}:{self.servers[0].port}/"

    def node(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(host=HOST, port=server.port, socket_timeout=5, decode_responses=True)

    def role_of(self, server: RedisServer) -> str:
        with self.node(server) as client:
            return str(client.execute_command("ROLE")[0])

    def primaries(self) -> list[RedisServer]:
        return [s for s in self.servers if s.running and self.role_of(s) == "master"]

    def replicas(self) -> list[RedisServer]:
        return [s for s in self.servers if s.running and self.role_of(s) == "slave"]

    def server_for_slot(self, slot: int) -> RedisServer:
        with self.node(self.servers[0]) as client:
            for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    return next(s for s in self.servers if s.port == port)
        raise LookupError(f"slot {slot} is not served")

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Every running node says ``cluster_state:ok`` and knows every node; every replica is in
        sync with its primary."""
        deadline = time.monotonic() + timeout_s
        problem = "not checked"
        while time.monotonic() < deadline:
            problem = self._problem()
            if not problem:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the local Redis Cluster did not become healthy: {problem}")

    def _problem(self) -> str:
        running = [s for s in self.servers if s.running]
        for server in running:
            with self.node(server) as client:
                fields = {k: str(v) for k, v in client.cluster("INFO").items()}
                if fields.get("cluster_state") != "ok":
                    return f"{server.port}: cluster_state {fields.get('cluster_state')}"
                if int(fields.get("cluster_known_nodes", 0)) < len(running):
                    return f"{server.port}: knows {fields.get('cluster_known_nodes')} nodes"
                replication = client.info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return f"{server.port}: replica link {replication.get('master_link_status')}"
        views = {server.port: self._slot_owners(server) for server in running}
        if len({tuple(v) for v in views.values()}) > 1:
            return f"the nodes do not agree on the slot map yet: {views}"
        return ""

    def _slot_owners(self, server: RedisServer) -> list[tuple[int, int, int]]:
        with self.node(server) as client:
            rows = client.execute_command("CLUSTER SLOTS")
        return sorted((int(a), int(b), int(p[1])) for a, b, p, *_ in rows)

    # -------------------------------------------------------------------------------- actions

    def flushall(self) -> None:
        for server in self.primaries():
            with self.node(server) as client:
                client.flushall()

    def script_flush(self) -> None:
        for server in self.servers:
            if server.running:
                with self.node(server) as client:
                    client.script_flush()

    def function_flush(self) -> None:
        """FUNCTION FLUSH on every primary (it replicates to their replicas)."""
        for server in self.primaries():
            with self.node(server) as client:
                client.function_flush()

    def failover(self, replica: RedisServer, timeout_s: float = 30.0) -> None:
        """``CLUSTER FAILOVER`` on ``replica`` (a coordinated switch: no acknowledged write is lost),
        then wait until it is a primary and the cluster is healthy."""
        with self.node(replica) as client:
            client.execute_command("CLUSTER FAILOVER")
        deadline = time.monotonic() + timeout_s
        while self.role_of(replica) != "master":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{replica.port} did not take over")
            time.sleep(0.05)
        self.wait_healthy(timeout_s)

    def kill_and_wait_promotion(
        self, primary: RedisServer, replica: RedisServer, timeout_s: float = 30.0
    ) -> int:
        """SIGKILL ``primary`` (no hand-over: its replica takes over once the others mark it failed,
        ``NODE_TIMEOUT_MS`` and an election later; meanwhile the nodes answer ``CLUSTERDOWN``), and
        return ``time.monotonic_ns()`` at the first poll that finds ``replica`` a primary."""
        killed_ns = time.monotonic_ns()
        primary.kill()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.role_of(replica) == "master":
                    promoted_ns = time.monotonic_ns()
                    self.kill_to_promotion_s.append((promoted_ns - killed_ns) / 1e9)
                    return promoted_ns
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{replica.port} did not take over from {primary.port}")
            time.sleep(0.005)

    def node_id(self, server: RedisServer) -> str:
        with self.node(server) as client:
            return str(client.execute_command("CLUSTER MYID"))

    def begin_slot_move(self, slot: int, target: RedisServer) -> RedisServer:
        """Mark ``slot`` as migrating from its primary to ``target`` (keys stay put: a command on a key
        that is not there yet is answered ``ASK``). Returns the source."""
        source = self.server_for_slot(slot)
        with self.node(target) as dst, self.node(source) as src:
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", self.node_id(source))
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", self.node_id(target))
        return source

    def finish_slot_move(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """Move every key of ``slot`` to ``target`` and give it the slot (clients then get ``MOVED``)."""
        with self.node(source) as src:
            while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", HOST, target.port, "", 0, 5000, "KEYS", *keys)
        target_id = self.node_id(target)
        for server in self.primaries():
            with self.node(server) as client:
                client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        self.wait_healthy()

    def move_slot(self, slot: int, target: RedisServer) -> None:
        self.finish_slot_move(slot, self.begin_slot_move(slot, target), target)
