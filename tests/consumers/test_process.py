"""A whole consumer process: member fan-out, Redis outages, and ``manage.py run_member`` as a real process
(signals, discovery, settings)."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config.embedded_redis import RedisServer
from consumers import conf as member_conf
from consumers.client import StoreCoordinatorClient
from consumers.dataplane import DataPlane
from consumers.listener import Listener
from consumers.member.state import Phase
from consumers.process import ConsumerProcess
from tests.consumers.harness import FAST, GROUP, PREFIX, Cluster, Recorder, eventually, make_client

ROOT = Path(__file__).resolve().parents[2]


def test_concurrency_n_runs_n_independent_members_with_their_own_ids(cluster: Cluster) -> None:
    recorder = Recorder()
    item = Listener(recorder, stream_prefix=PREFIX, consumer_group=GROUP, name="bill", concurrency="2")
    process = ConsumerProcess(
        [item],
        coordinator=lambda: StoreCoordinatorClient(cluster.store),
        dataplane_factory=lambda prefix, group: DataPlane(cluster.client, prefix, group),
        runtime=FAST,
        concurrency={"bill": 3},  # a settings override wins over the declaration
    )
    assert len(process.members) == 3
    assert len({m.member_id for m in process.members}) == 3
    process.start()
    try:
        eventually(lambda: cluster.stable(*process.members), what="three members, stable")
        sizes = sorted(len(m.assignment) for m in process.members)
        assert sizes == [1, 1, 2]  # shards spread over members; capacity is no weight
        live = [v for v in cluster.describe()["members"] if v["state"] != "LEFT"]
        assert sorted(v["member_id"] for v in live) == sorted(m.member_id for m in process.members)
        assert {v["capacity"] for v in live} == {FAST.max_concurrency}
        sent = cluster.send_many([cluster.key_for(i) for i in range(4)], per_key=5)
        eventually(lambda: recorder.count() == sent, what="consumed by the three")
    finally:
        assert process.stop(5.0)
    assert {cluster.member_view(m.member_id)["state"] for m in process.members} == {"LEFT"}


@pytest.mark.parametrize("freeze", [True, False])
def test_serve_freezes_the_heap_once_the_members_started_unless_told_not_to(
    cluster: Cluster, freeze: bool
) -> None:
    """A full collection then scans what came after start, not Django and the modules (consumers/process.py
    freeze_heap): objects alive before serve() are frozen, one made after it is not."""
    gc.unfreeze()
    before: list[Any] = []  # alive while serve() starts
    item = Listener(Recorder(), stream_prefix=PREFIX, consumer_group=GROUP, name="bill")
    process = ConsumerProcess(
        [item],
        coordinator=lambda: StoreCoordinatorClient(cluster.store),
        dataplane_factory=lambda prefix, group: DataPlane(cluster.client, prefix, group),
        runtime=dataclasses.replace(FAST, freeze_heap=freeze),
    )
    served: list[bool] = []
    thread = threading.Thread(target=lambda: served.append(process.serve(5.0, install_signal_handlers=False)))
    try:
        thread.start()
        eventually(lambda: cluster.stable(*process.members), what="the member, stable")
        if freeze:  # serve() freezes right after start(): wait for it, not for the member alone
            eventually(lambda: gc.get_freeze_count() > 1000, what="the heap frozen (the modules, at least)")
        after: list[Any] = []  # made once the process runs
        tracked = gc.get_objects()  # what the collector's passes scan (frozen objects are not in it)
        assert any(o is after for o in tracked)
        assert any(o is before for o in tracked) is not freeze
    finally:
        process.request_stop()
        thread.join(10)
        frozen = gc.get_freeze_count()
        gc.unfreeze()  # the rest of the test session collects as before
    assert served == [True]
    assert (frozen > 1000) if freeze else (frozen == 0)  # off: not frozen at any point of serve()


# ------------------------------------------------------------------------------------------ Redis outages


@pytest.fixture
def fragile(disposable_redis: RedisServer) -> Iterator[tuple[RedisServer, Cluster]]:
    cluster = Cluster(disposable_redis.url)
    try:
        yield disposable_redis, cluster
    finally:
        disposable_redis.ensure_running()
        cluster.close()


def short_timeouts(url: str) -> Any:
    return make_client(url, socket_timeout=0.2, socket_connect_timeout=0.2)


def test_a_paused_redis_is_waited_out_and_consumption_resumes(fragile: tuple[RedisServer, Cluster]) -> None:
    server, cluster = fragile
    recorder = Recorder()
    fast_fail = short_timeouts(server.url)
    from coordinator.store.redis_store import MetadataStore

    coordinator = StoreCoordinatorClient(MetadataStore(fast_fail))
    m = cluster.member(recorder, coordinator=coordinator, client=fast_fail)
    eventually(lambda: cluster.stable(m), what="joined")
    server.pause()
    try:
        eventually(lambda: m.stats.heartbeat_failures >= 1, what="the outage is noticed")
        assert m.phase is Phase.MEMBER  # it keeps its assignment through the outage
    finally:
        server.resume()
    cluster.send(cluster.key_for(0))
    eventually(lambda: recorder.count() == 1 and m.phase is Phase.MEMBER, what="consuming again")
    assert m.running_shards == m.assignment


def test_a_restarted_empty_redis_is_survived_and_the_member_rejoins_once_the_group_is_back(
    fragile: tuple[RedisServer, Cluster],
) -> None:
    server, cluster = fragile
    recorder = Recorder()
    fast_fail = short_timeouts(server.url)
    from coordinator.store.redis_store import MetadataStore

    coordinator = StoreCoordinatorClient(MetadataStore(fast_fail))
    m = cluster.member(recorder, coordinator=coordinator, client=fast_fail)
    eventually(lambda: cluster.stable(m), what="joined")
    server.kill()
    eventually(lambda: m.stats.heartbeat_failures >= 2, what="failures while Redis is down")
    server.restart()  # empty: the group is gone, so the member is fenced and cannot rejoin yet
    eventually(lambda: m.phase is Phase.JOINING, what="fenced")
    cluster.recreate_group()
    eventually(lambda: cluster.stable(m), what="rejoined")
    cluster.send(cluster.key_for(3))
    eventually(lambda: recorder.count() == 1, what="consuming again")
    assert m._thread.is_alive()


# ------------------------------------------------------------------------------------------ run_member


class RunMember:
    """``manage.py run_member`` in a child process, its stderr collected line by line."""

    def __init__(self, redis_url: str, *args: str, **env: str) -> None:
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.consumers.demo.settings",
            "REDIS_URL": redis_url,
            "RSC_COORDINATOR_URL": "inprocess",
            "RSC_RUNTIME_MAX_CONCURRENCY": "2",
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_member", *args],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def demo_cluster(redis_url: str) -> Iterator[Cluster]:
    c = Cluster(redis_url)
    try:
        yield c
    finally:
        c.close()


def handled(cluster: Cluster) -> list[dict[str, Any]]:
    return [json.loads(x) for x in cluster.client.lrange("demo:handled", 0, -1)]


def test_run_member_runs_discovered_listeners_and_stops_gracefully_on_sigterm(
    demo_cluster: Cluster, redis_url: str
) -> None:
    run = RunMember(redis_url, "bill", RSC_LISTENER_CONCURRENCY="bill=2")
    try:
        eventually(lambda: run.count("joined at epoch") == 2, timeout_s=120, what="two members joined")
        eventually(lambda: demo_cluster.describe()["state"] == "STABLE", what="stable")
        live = [v for v in demo_cluster.describe()["members"] if v["state"] != "LEFT"]
        assert len(live) == 2
        assert {v["capacity"] for v in live} == {2}
        sent = demo_cluster.send_many([demo_cluster.key_for(i) for i in range(4)], per_key=5)
        eventually(lambda: len(handled(demo_cluster)) == sent, what="consumed")
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(120) == 0
    finally:
        run.kill()
    assert {v["state"] for v in demo_cluster.describe()["members"]} == {"LEFT"}
    assert run.logged("assigned [")
    assert run.logged("left the group")
    assert not any(demo_cluster.all_pending().values())


def busy_member(cluster: Cluster, redis_url: str, shutdown_timeout_s: int) -> RunMember:
    """``run_member bill``, joined, with a handler busy for 300 s (the caller kills it in the end)."""
    run = RunMember(redis_url, "bill", "--shutdown-timeout", str(shutdown_timeout_s))
    try:
        eventually(lambda: run.logged("joined at epoch"), timeout_s=120, what="joined")
        cluster.send(cluster.key_for(0), sleep=300)
        eventually(lambda: cluster.client.get("demo:sleeping"), what="a handler is busy")
    except BaseException:
        run.kill()
        raise
    return run


def test_a_second_signal_exits_at_once(demo_cluster: Cluster, redis_url: str) -> None:
    run = busy_member(demo_cluster, redis_url, 300)
    try:
        run.proc.send_signal(signal.SIGTERM)
        eventually(lambda: run.logged("stopping gracefully"), what="the first signal is handled")
        assert run.proc.poll() is None  # waiting for the busy handler (up to 300 s)
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(60) != 0  # not the 300 s the handler and the timeout would take
        assert run.logged("exiting at once")
    finally:
        run.kill()


def test_run_member_refuses_unknown_listener_names(redis_url: str) -> None:
    run = RunMember(redis_url, "nobody")
    try:
        assert run.proc.wait(120) != 0
        eventually(lambda: run.logged("no listener named 'nobody'"), what="the error")
    finally:
        run.kill()


def test_run_member_lists_the_discovered_listeners(redis_url: str) -> None:
    run = RunMember(redis_url, "--list", RSC_LISTENER_CONCURRENCY="bill=3")
    try:
        assert run.proc.wait(120) == 0
        assert run.proc.stdout is not None
        assert run.proc.stdout.read().split("\n")[0] == "bill: orders/billing x3"
    finally:
        run.kill()


def test_the_runtime_setting_is_validated_by_run_member(redis_url: str) -> None:
    run = RunMember(redis_url, "--list", RSC_RUNTIME_MAX_CONCURRENCY="0")
    try:
        assert run.proc.wait(120) != 0
        eventually(lambda: run.logged("max_concurrency must be an integer"), what="the error")
    finally:
        run.kill()


def test_run_member_refuses_plain_http_to_another_machine_unless_allowed(redis_url: str) -> None:
    """The bearer token would travel in clear: the system check stops run_member at start."""
    url = "http://coordinator.internal:8000"
    run = RunMember(redis_url, "--list", RSC_COORDINATOR_URL=url)
    try:
        assert run.proc.wait(120) != 0
        eventually(lambda: run.logged("consumers.E005"), what="the check's error")
    finally:
        run.kill()
    run = RunMember(redis_url, "--list", RSC_COORDINATOR_URL=url, RSC_ALLOW_INSECURE_COORDINATOR_URL="true")
    try:
        assert run.proc.wait(120) == 0
    finally:
        run.kill()


def test_the_member_command_refuses_plain_http_when_it_makes_its_client(settings: Any) -> None:
    from django.core.management.base import CommandError

    from consumers.management.commands.run_member import _coordinator_factory
    from consumers.runtime import load_runtime

    settings.RSC_COORDINATOR_URL = "http://coordinator.internal:8000"
    settings.RSC_MEMBER_TOKEN = "t"
    runtime = load_runtime({"max_concurrency": 1})
    with pytest.raises(CommandError, match="in clear"):
        _coordinator_factory(member_conf.settings(), runtime)
    settings.RSC_ALLOW_INSECURE_COORDINATOR_URL = True
    client = _coordinator_factory(member_conf.settings(), runtime)()
    assert client.base_url == "http://coordinator.internal:8000"  # type: ignore[attr-defined]


def test_run_refuses_plain_http_to_another_machine_before_starting() -> None:
    from consumers.process import run

    with pytest.raises(ValueError, match="in clear"):
        run([], coordinator_url="http://coordinator.internal:8000", token="t", redis_client=object())
