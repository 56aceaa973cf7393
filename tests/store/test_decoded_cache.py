"""A store keeps the groups it last read or wrote decoded (codec.DecodedGroup): while the stored group
document (the header) and a member's record are byte for byte the same it applies only the leases,
which live outside them. That must read exactly as a fresh decode would, whoever wrote last (this
process, another one, or the members themselves renewing their leases in Redis), and what is stored
beside the documents (derived fields, the schedule index) must be what they imply."""

from __future__ import annotations

import random
from typing import Any

from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .conftest import GROUP, PREFIX, create
from .test_delta_load import Spy, without_leases
from .test_store import assert_derived_fields_consistent

META = rkeys.meta_key(PREFIX)


def _fresh(client: Any) -> Any:
    """What a process that never read this prefix before reads (a store with nothing kept)."""
    return MetadataStore(client)._load(PREFIX, None).state


def _heartbeat(store: MetadataStore, member: str, view: dict[str, Any] | None) -> dict[str, Any]:
    if view is None:
        hb = Heartbeat(member_id=member, member_epoch=0, capacity=1)
    else:
        owned = frozenset(Shard.parse(s["shard"]) for s in view["shards"])
        hb = Heartbeat(member_id=member, member_epoch=view["member_epoch"], owned=owned)
    return store.heartbeat(PREFIX, GROUP, hb)


def test_a_kept_decode_reads_exactly_as_a_fresh_one_whoever_wrote_last(store: MetadataStore) -> None:
    other = MetadataStore(store.client)  # another API process: its own kept decodes
    spies = [Spy(store), Spy(other)]
    create(store, shard_count=6, lease_ttl_ms=10_000)
    rng = random.Random(20261201)
    views: dict[str, dict[str, Any]] = {}
    hits = 0
    next_id = 0
    for _step in range(400):
        actor = rng.choice([store, store, other])
        op = rng.random()
        try:
            if op < 0.2 or not views:
                member = f"m{next_id}"
                next_id += 1
                views[member] = _heartbeat(actor, member, None)
            elif op < 0.65:
                member = rng.choice(sorted(views))
                views[member] = _heartbeat(actor, member, views[member])
            elif op < 0.72:
                member = rng.choice(sorted(views))
                actor.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member, member_epoch=-1))
                del views[member]
            elif op < 0.8:  # a lease ends behind the store's back (as time passing does), then a tick
                member = rng.choice(sorted(views))
                store.client.hset(META, f"l:{GROUP}:{member}", 1)
                actor.tick()
            elif op < 0.88:  # a member renews its own lease in Redis (renew_lease.lua's record)
                member = rng.choice(sorted(views))
                epoch = store.client.hget(META, f"m:{GROUP}:{member}")
                if epoch is not None:
                    far = int(store.client.hget(META, f"l:{GROUP}:{member}") or 0) + 5_000
                    store.client.hset(
                        rkeys.lease_records_key(PREFIX), f"{GROUP}:{member}", f"{epoch.decode()} {far}"
                    )
            elif op < 0.95:
                actor.set_max_concurrency(PREFIX, GROUP, rng.randint(1, 4))
            else:
                current = actor.describe_group(PREFIX, GROUP)["topology"]["shard_count"]
                actor.change_shard_count(PREFIX, current + 1, OrderingMode.RELAXED)
        except CoordinatorError:
            pass  # a refusal (fenced, migration in progress, ...) writes nothing
        kept = store.reader.decoded.get((PREFIX, GROUP))
        hits += kept is not None and kept.raw == store.client.hget(META, f"g:{GROUP}")
        fresh = _fresh(store.client)
        for reader in (store, other):
            assert reader._load(PREFIX, None).state == fresh
            if views:  # a heartbeat's read: the same but for the other members' leases (test_delta_load)
                member = rng.choice(sorted(views))
                partial = reader._load(PREFIX, [GROUP], lease_of=member).state
                assert partial is not None and fresh is not None
                assert partial.groups[GROUP].members[member] == fresh.groups[GROUP].members[member]
                assert without_leases(partial.groups[GROUP]) == without_leases(fresh.groups[GROUP])
        assert_derived_fields_consistent(store)
    # The comparison above ran on kept decodes most of the time, not only on fresh ones, and most reads
    # were deltas of what the store knew.
    assert hits > 200, hits
    deltas = [whole for spy in spies for _, whole, _, _ in spy.rows]
    assert deltas.count(0) > len(deltas) / 2, (deltas.count(0), len(deltas))


def test_delta_loads_read_as_fresh_ones_across_groups_and_rollbacks(store: MetadataStore) -> None:
    """Two groups in one prefix, two stores, and now and then Redis going back to an earlier snapshot of
    the prefix's keys (a restored backup, a replica promoted before it caught up): after every step,
    every store's read (whole, and a heartbeat's) is a fresh one's (docs/store.md, "Delta loads")."""
    other = MetadataStore(store.client)
    groups = (GROUP, "second")
    for name in groups:
        create(store, shard_count=3, group=name, lease_ttl_ms=10_000)
    pattern = f"rsc:{{{PREFIX}}}:*"

    def snapshot() -> dict[bytes, bytes]:
        return {key: store.client.dump(key) for key in store.client.scan_iter(pattern)}

    snapshots = [snapshot()]
    rng = random.Random(20261202)
    views: dict[tuple[str, str], dict[str, Any]] = {}
    rollbacks = 0
    for step in range(300):
        actor = rng.choice([store, other])
        name = rng.choice(groups)
        mine = sorted(m for g, m in views if g == name)
        op = rng.random()
        try:
            if op < 0.25 or not mine:
                member = f"m{step}"
                views[(name, member)] = actor.heartbeat(
                    PREFIX, name, Heartbeat(member_id=member, member_epoch=0, capacity=1)
                )
            elif op < 0.8:
                member = rng.choice(mine)
                view = views[(name, member)]
                owned = frozenset(Shard.parse(s["shard"]) for s in view["shards"])
                hb = Heartbeat(member_id=member, member_epoch=view["member_epoch"], owned=owned)
                views[(name, member)] = actor.heartbeat(PREFIX, name, hb)
            elif op < 0.88:
                member = rng.choice(mine)
                actor.heartbeat(PREFIX, name, Heartbeat(member_id=member, member_epoch=-1))
                del views[(name, member)]
            elif op < 0.94:
                snapshots.append(snapshot())
            else:  # back to an earlier snapshot of every key of the prefix
                back = rng.choice(snapshots)
                store.client.delete(*store.client.scan_iter(pattern))
                for key, dumped in back.items():
                    store.client.restore(key, 0, dumped, replace=True)
                views.clear()  # the members start over (their epochs may be fenced now)
                rollbacks += 1
        except CoordinatorError:
            views.pop((name, member), None)  # fenced, unknown: it joins again later
        fresh = _fresh(store.client)
        assert fresh is not None
        for reader in (store, other):
            assert reader._load(PREFIX, None).state == fresh
            for g in groups:
                live = sorted(fresh.groups[g].members)
                if live:
                    member = rng.choice(live)
                    partial = reader._load(PREFIX, [g], lease_of=member).state
                    assert partial is not None
                    assert partial.groups[g].members[member] == fresh.groups[g].members[member]
                    assert without_leases(partial.groups[g]) == without_leases(fresh.groups[g])
    assert rollbacks > 5, rollbacks
