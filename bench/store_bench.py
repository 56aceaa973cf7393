"""Metadata store benchmark: `make bench` runs it (docs/benchmarks.md, "The metadata store").

One run, one machine, one private Redis; the store is driven in this process (no HTTP), so the
figures are the coordinator's own CPU (this process, ``time.process_time``) and Redis's (``INFO cpu``)
per operation, medians of 3 repetitions:

1. **a join at N members** (100 and 1,000): the group is formed by N joins first (not measured), then
   50 more joins are timed, each a full-path decision (load, decide, commit) with an epoch bump; and at
   10,000 members (``--big-join-sizes``), on a group written in one commit as for the tick below, 20
   joins;
2. **a tick at 10,000 members with nothing to expire**: a 10,000-member group, every member STABLE
   with a 10-minute lease. Forming it by 10,000 joins would take minutes here, so the setup writes
   that state in one commit through the store (the same commit path, one decision); not measured.
   Then: the tick as it runs every interval (it reads only the groups with something due: the tick
   index), and, for comparison, the full tick that reads every group once a minute (from a store that
   has read nothing before, as a newly started tick process would).

3. ``--form-members N,...`` (``make bench``: 1,000 and 10,000; default none): **forming a group in
process**, one run per size, to
rerun here or against another checkout (``PYTHONPATH=<checkout>``): N members join a 64-shard group
through two stores taking turns (as two API processes would), then every member heartbeats, in
rounds, until a round changes nothing; wall and this process's CPU per phase.
``python bench/store_bench.py --join-sizes "" --tick-members 0 --form-members 1000``

Everything is measured here, nothing is typed in: rerun it and compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from config.embedded_redis import RedisServer  # noqa: E402
from coordinator.protocol.assignor import assign  # noqa: E402
from coordinator.protocol.changes import Change, GroupBumped, LeaseSet, MemberChanged  # noqa: E402
from coordinator.protocol.commands import CreateGroup, Outcome  # noqa: E402
from coordinator.protocol.group import Heartbeat, assignable_shards  # noqa: E402
from coordinator.protocol.model import GroupConfig, Member, MemberState, Shard  # noqa: E402
from coordinator.store.redis_store import MetadataStore  # noqa: E402
from rsc_redis.dead_letter_mac import MacKeys  # noqa: E402

# The store's dead-letter MAC keys (without Django settings): its ticks load the data plane's library
# with them, as a coordinator does (coordinator/store/functions.py).
BENCH_KEYS = [MacKeys.derive("store_bench")]

LONG = GroupConfig(
    lease_ttl_ms=600_000, heartbeat_interval_ms=5_000, revocation_timeout_ms=600_000, max_members=10_000
)


def redis_cpu_s(store: MetadataStore) -> float:
    info = store.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(store: MetadataStore, action: Any, count: int) -> dict[str, float]:
    """Run ``action(i)`` ``count`` times: wall, this process's CPU and Redis's CPU, per call (ms)."""
    r0, c0, w0 = redis_cpu_s(store), time.process_time(), time.perf_counter()
    for i in range(count):
        action(i)
    w1, c1, r1 = time.perf_counter(), time.process_time(), redis_cpu_s(store)
    return {
        "wall_ms": (w1 - w0) / count * 1000,
        "coordinator_cpu_ms": (c1 - c0) / count * 1000,
        "redis_cpu_ms": (r1 - r0) / count * 1000,
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {**{k: statistics.median(r[k] for r in runs) for k in runs[0]}, "runs": runs}


def join_runs(url: str, name: str, joins: int, setup: Any) -> list[dict[str, float]]:
    """3 repetitions of ``joins`` timed joins, each on a group ``setup(store, prefix, group)`` made (not
    measured) by the store that then joins: it keeps the group, as an API process keeps the groups it
    serves. Each repetition's prefix is deleted after it, so that the tick below measures its own alone."""
    runs = []
    for rep in range(3):
        store = MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS)
        prefix, group = f"{name}r{rep}", "g"
        setup(store, prefix, group)

        def join(i: int, store: MetadataStore = store, prefix: str = prefix, group: str = group) -> None:
            store.heartbeat(prefix, group, Heartbeat(member_id=f"x{i}", member_epoch=0, capacity=1))

        runs.append(measure(store, join, joins))
        store.delete_prefix(prefix, force=True)
        store.client.close()
    return runs


def join_cost(url: str, members: int, joins: int) -> dict[str, Any]:
    def by_joins(store: MetadataStore, prefix: str, group: str) -> None:
        store.create_group(
            CreateGroup(stream_prefix=prefix, consumer_group=group, shard_count=64, config=LONG)
        )
        for i in range(members):
            store.heartbeat(prefix, group, Heartbeat(member_id=f"m{i}", member_epoch=0, capacity=1))

    runs = join_runs(url, f"join{members}", joins, by_joins)
    return {"members": members, "joins": joins, **median_of(runs)}


def big_group(
    store: MetadataStore, prefix: str, group: str, members: int, config: GroupConfig = LONG
) -> None:
    """One commit of a ``members``-member group, every member STABLE at epoch 1 with its target."""
    store.create_group(CreateGroup(stream_prefix=prefix, consumer_group=group, shard_count=64, config=config))
    loaded = store._load(prefix, [group])
    assert loaded.state is not None
    state, now = loaded.state, loaded.now_ms
    g = state.groups[group]
    ids = [f"m{i:05d}" for i in range(members)]
    target = assign(ids, assignable_shards(g, state.topology), {})
    people = {
        mid: Member(
            member_id=mid,
            state=MemberState.STABLE,
            member_epoch=1,
            previous_epoch=0,
            assigned={s: 1 for s in target.get(mid, ())},
            lease_deadline_ms=now + LONG.lease_ttl_ms,
            capacity=1,
            joined_at_ms=now,
            last_heartbeat_ms=now,
        )
        for mid in ids
    }
    formed = replace(g, group_epoch=1, assignment_epoch=1, target=target, members=people)
    # What the core would say of it: a bump, and every member new with its lease.
    changes: list[Change] = [GroupBumped(consumer_group=group, targets_moved=frozenset(target))]
    for mid, member in people.items():
        changes.append(MemberChanged(consumer_group=group, member_id=mid))
        changes.append(LeaseSet(consumer_group=group, member_id=mid, deadline_ms=member.lease_deadline_ms))
    outcome = Outcome(state=replace(state, groups={group: formed}), changes=tuple(changes))
    assert store.committer.commit(prefix, loaded, outcome)


def big_join_cost(url: str, members: int, joins: int) -> dict[str, Any]:
    """The joins that bring a group written in one commit (big_group; forming it by joins would take
    minutes) to ``members`` members."""
    roomy = replace(LONG, max_members=members)  # (the largest group allowed: MAX_MEMBERS_LIMIT)

    def in_one_commit(store: MetadataStore, prefix: str, group: str) -> None:
        big_group(store, prefix, group, members - joins, roomy)  # the joins bring it to ``members``

    runs = join_runs(url, f"bigjoin{members}", joins, in_one_commit)
    return {"members": members, "joins": joins, "setup": "one commit", **median_of(runs)}


def tick_cost(url: str, members: int, ticks: int) -> dict[str, Any]:
    setup = MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS)
    t0 = time.perf_counter()
    big_group(setup, "tick", "g", members)
    setup_s = time.perf_counter() - t0
    indexed, full = [], []
    for _rep in range(3):
        store = MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS)
        store.tick()  # the first tick of a process reads everything; then the index decides

        def partial(_i: int, store: MetadataStore = store) -> None:
            store.ticker.full_tick_at["tick"] = time.monotonic()
            [report] = store.tick()  # the only prefix
            assert report.expired == () and report.collected == ()

        indexed.append(measure(store, partial, ticks))

        def cold_full(_i: int, store: MetadataStore = store) -> None:
            # a tick process that has read nothing yet
            fresh = MetadataStore(store.client, dead_letter_keys=BENCH_KEYS)
            [report] = fresh.tick()
            assert report.expired == () and report.collected == ()

        full.append(measure(store, cold_full, 3))
    described = setup.describe_group("tick", "g")
    assert sum(1 for m in described["members"] if m["state"] == "STABLE") == members
    return {
        "members": members,
        "setup_seconds": setup_s,
        "indexed": median_of(indexed),
        "full_cold": median_of(full),
    }


def form_cost(url: str, members: int) -> dict[str, Any]:
    stores = [MetadataStore.from_url(url, dead_letter_keys=BENCH_KEYS) for _ in range(2)]  # two API processes
    prefix, group = f"form{members}", "g"
    stores[0].create_group(
        CreateGroup(stream_prefix=prefix, consumer_group=group, shard_count=64, config=LONG)
    )

    def timed(phase: Any) -> dict[str, Any]:
        c0, w0 = time.process_time(), time.perf_counter()
        changed = phase()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        return {"wall_s": wall, "coordinator_cpu_s": cpu, "changed": changed}

    views: dict[str, dict[str, Any]] = {}

    def joins() -> int:
        for i in range(members):
            hb = Heartbeat(member_id=f"m{i:05d}", member_epoch=0, capacity=1)
            views[hb.member_id] = stores[i % 2].heartbeat(prefix, group, hb)
        return members

    def heartbeat_round() -> int:
        changed = 0
        for i, (member, view) in enumerate(sorted(views.items())):
            owned = frozenset(Shard.parse(s["shard"]) for s in view["shards"])
            hb = Heartbeat(member_id=member, member_epoch=view["member_epoch"], owned=owned)
            new = views[member] = stores[i % 2].heartbeat(prefix, group, hb)
            changed += any(new[k] != view[k] for k in ("member_epoch", "member_state", "shards"))
        return changed

    result: dict[str, Any] = {"members": members, "joins": timed(joins), "rounds": []}
    while len(result["rounds"]) < 10:
        result["rounds"].append(timed(heartbeat_round))
        if result["rounds"][-1]["changed"] == 0:
            break
    result["stable"] = sum(1 for v in views.values() if v["member_state"] == "STABLE")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--join-sizes", default="100,1000")
    parser.add_argument("--joins", type=int, default=50)
    # Groups too large to form by joins here: written in one commit, then 20 joins timed.
    parser.add_argument("--big-join-sizes", default="10000")
    parser.add_argument("--tick-members", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--form-members", default="", help="group sizes to form in process, e.g. 1000,10000")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with RedisServer() as server:
        results["joins"] = [
            join_cost(server.url, int(n), args.joins) for n in args.join_sizes.split(",") if n
        ]
        results["joins"] += [
            big_join_cost(server.url, int(n), 20) for n in args.big_join_sizes.split(",") if n
        ]
        for row in results["joins"]:
            print(f"join at {row['members']} members: {row['coordinator_cpu_ms']:.2f} ms CPU", flush=True)
        if args.tick_members:  # 0: joins only (e.g. to compare an older checkout, which has no index)
            results["tick"] = tick_cost(server.url, args.tick_members, args.ticks)
            print(f"tick: {json.dumps(results['tick'], default=str)[:300]}", flush=True)
        results["forms"] = [form_cost(server.url, int(n)) for n in args.form_members.split(",") if n]
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
