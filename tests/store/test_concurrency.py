"""Several coordinator processes and many threads on one group at once: no lost update, no two owners.

Each process is a separate "coordinator" (its own MetadataStore and connection pool) whose threads act
as members: join, heartbeat, acknowledge revocations, sometimes leave and rejoin. Meanwhile another
process ticks and the test thread checks every snapshot of the metadata for two owners of one shard.
At the end every member reconciles and the group must be complete, balanced and consistent.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from typing import Any

from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_store import assert_derived_fields_consistent

PROCESSES, THREADS, MEMBERS_PER_THREAD, SECONDS = 3, 4, 2, 4.0


def _member_thread(
    store: MetadataStore, names: list[str], deadline: float, seed: int, out: list[Any]
) -> None:
    rnd = random.Random(seed)
    view: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for name in names:
            mine = view.get(name)
            try:
                if mine is None:
                    r = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=name, member_epoch=0, capacity=2))
                elif rnd.random() < 0.03:
                    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=name, member_epoch=-1))
                    view.pop(name)
                    continue
                else:
                    owned = frozenset(Shard.parse(s["shard"]) for s in mine["shards"])
                    r = store.heartbeat(
                        PREFIX,
                        GROUP,
                        Heartbeat(member_id=name, member_epoch=mine["member_epoch"], owned=owned),
                    )
            except CoordinatorError as e:
                out.append(("error", name, e.code.value))
                view.pop(name, None)
                continue
            if mine is not None and r["member_epoch"] < mine["member_epoch"]:
                out.append(("epoch went back", name, mine["member_epoch"], r["member_epoch"]))
            out.append(("epoch", name, r["member_epoch"]))
            view[name] = r


def _coordinator_process(url: str, index: int, seconds: float, queue: Any) -> None:
    store = MetadataStore.from_url(url)
    deadline = time.monotonic() + seconds  # from this process's start: spawn may be slow on a busy host
    out: list[Any] = []
    threads = [
        threading.Thread(
            target=_member_thread,
            args=(
                store,
                [f"p{index}-t{t}-m{m}" for m in range(MEMBERS_PER_THREAD)],
                deadline,
                index * 100 + t,
                out,
            ),
        )
        for t in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put(out)


def _ticker_process(url: str, seconds: float) -> None:
    store = MetadataStore.from_url(url)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        store.tick()
        time.sleep(0.05)


def _owners_snapshot(store: MetadataStore) -> None:
    _, state = store._read(PREFIX, None)
    assert state is not None
    seen: dict[Shard, str] = {}
    for member in state.groups[GROUP].live_members():
        for shard in member.owned:
            assert shard not in seen, f"{shard} owned by {seen[shard]} and {member.member_id}"
            seen[shard] = member.member_id


def test_many_coordinators_and_members_at_once(redis_url: str) -> None:
    store = MetadataStore.from_url(redis_url)
    create(
        store, shard_count=16, lease_ttl_ms=30_000, heartbeat_interval_ms=500, revocation_timeout_ms=30_000
    )
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_coordinator_process, args=(redis_url, i, SECONDS, queue))
        for i in range(PROCESSES)
    ]
    procs.append(ctx.Process(target=_ticker_process, args=(redis_url, SECONDS)))
    for p in procs:
        p.start()
    snapshots = 0
    results: list[Any] = []
    give_up = time.monotonic() + 120
    while len(results) < PROCESSES and time.monotonic() < give_up:
        _owners_snapshot(store)
        snapshots += 1
        while not queue.empty():
            results.append(queue.get())
    assert len(results) == PROCESSES
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    events = [e for r in results for e in r]
    assert not [e for e in events if e[0] == "epoch went back"]
    unexpected = {e[2] for e in events if e[0] == "error"} - {"FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"}
    assert not unexpected, unexpected
    assert sum(1 for e in events if e[0] == "epoch") > 100 and snapshots > 10

    # Quiesce: every live member heartbeats, acknowledging, until the group is stable.
    _, state = store._read(PREFIX, None)
    assert state is not None
    live = sorted(m.member_id for m in state.groups[GROUP].live_members())
    assert live
    for _ in range(4):
        for name in live:
            member = store._read(PREFIX, None)[1].groups[GROUP].members[name]  # type: ignore[union-attr]
            store.heartbeat(
                PREFIX,
                GROUP,
                Heartbeat(member_id=name, member_epoch=member.member_epoch, owned=frozenset(member.assigned)),
            )
    view = store.describe_group(PREFIX, GROUP)
    assert view["state"] == "STABLE"
    counts = [len(m["current_assignment"]) for m in view["members"] if m["state"] == "STABLE"]
    assert sum(counts) == 16 and max(counts) - min(counts) <= 1
    _owners_snapshot(store)
    assert_derived_fields_consistent(store)
    owners = {k: v for k, v in store.raw_metadata(PREFIX).items() if k.startswith(b"o:")}
    assert len(owners) == 16
    assert rkeys.meta_key(PREFIX) == "rsc:{orders}:meta"
