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
from rsc_redis.dataplane.library import function_name

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


def _renew_as_the_member(store: MetadataStore, member: str) -> bytes:
    """The member renews its own lease in Redis with the data plane's own function (renew_lease.lua), at
    its live epoch: the record says Redis's TIME + the lease TTL, so every later read counts it as
    written. (A record further ahead, as no script writes one, counts only up to the reader's TIME + TTL:
    two reads a millisecond apart would read two leases, whatever they kept.) Its outcome (MEMBER_FENCED
    for a member that ended or whose lease has ended)."""
    epoch = store.client.hget(META, f"m:{GROUP}:{member}")
    if epoch is None:
        return b"MEMBER_FENCED"
    keys = (META, rkeys.lease_records_key(PREFIX))
    reply = store.client.fcall(function_name("renew_lease"), len(keys), *keys, GROUP, member, epoch)
    assert reply[0] in (b"OK", b"MEMBER_FENCED"), reply
    return bytes(reply[0])


def _after_the_redis_clock_moved(client: Any) -> None:
    """Return once Redis's TIME (ms, what a load reads) is later than when called."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    while True:
        seconds, micros = client.time()
        if seconds * 1000 + micros // 1000 > now_ms:
            return


def test_a_lease_the_member_renewed_itself_reads_the_same_at_any_later_moment(store: MetadataStore) -> None:
    """A renewal as the members write it (_renew_as_the_member, which the test below drives) reads the same
    whenever it is read, so that comparing a kept decode with a fresh one read a moment later compares
    decodes, not moments. The member's lease here was granted 4.5 s before (TTL 10 s): the record that
    test wrote before, its lease + 5 s, is past TIME + TTL, where the lease rule (rsc_redis/
    lease_record.lua) counts it only up to each read's own TIME + TTL: two reads 1 ms apart differed (the
    test failed whenever a run lasted over 4 s, as under load)."""
    create(store, shard_count=2, lease_ttl_ms=10_000)
    _heartbeat(store, "m0", None)
    seconds, micros = store.client.time()
    granted_ms = seconds * 1000 + micros // 1000 + 5_500
    store.client.hset(META, f"l:{GROUP}:m0", granted_ms)
    kept = store._load(PREFIX, None).state  # the store keeps this decode
    assert kept is not None and kept.groups[GROUP].members["m0"].lease_deadline_ms == granted_ms
    assert _renew_as_the_member(store, "m0") == b"OK"
    first = _fresh(store.client)
    assert first is not None and first.groups[GROUP].members["m0"].lease_deadline_ms > granted_ms
    _after_the_redis_clock_moved(store.client)
    assert store._load(PREFIX, None).state == first == _fresh(store.client)


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
            elif op < 0.88:  # a member renews its own lease in Redis
                _renew_as_the_member(store, rng.choice(sorted(views)))
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
            whole = reader._load(PREFIX, None).state
            assert whole == fresh
            assert whole is not None and fresh is not None
            assert list(whole.groups[GROUP].members) == list(fresh.groups[GROUP].members)  # (== ignores it)
            if views:  # a heartbeat's read: the same but for the other members' leases (test_delta_load)
                member = rng.choice(sorted(views))
                partial = reader._load(PREFIX, [GROUP], lease_of=member).state
                assert partial is not None
                assert partial.groups[GROUP].members[member] == fresh.groups[GROUP].members[member]
                assert without_leases(partial.groups[GROUP]) == without_leases(fresh.groups[GROUP])
                assert list(partial.groups[GROUP].members) == list(fresh.groups[GROUP].members)
        assert_derived_fields_consistent(store)
    # The comparison above ran on kept decodes most of the time, not only on fresh ones, and most reads
    # were deltas of what the store knew.
    assert hits > 200, hits
    deltas = [whole for spy in spies for _, whole, _, _ in spy.rows]
    assert deltas.count(0) > len(deltas) / 2, (deltas.count(0), len(deltas))


def test_a_kept_decode_lists_its_members_in_a_fresh_ones_order_after_another_process_added_one(
    store: MetadataStore,
) -> None:
    """A fresh decode lists a group's members in the order of their ids (its documents' order, which
    codec.in_document_order keeps for the groups a store commits); a load that reads only what changed
    since the decode it kept, every lease with it (a description, a tick), lists them the same."""
    other = MetadataStore(store.client)  # another API process
    spy = Spy(other)
    create(store, shard_count=2, max_members=200)
    for i in range(10):
        _heartbeat(store, f"m{i}", None)
    other._load(PREFIX, None)  # it keeps the group of ten
    _heartbeat(store, "m10", None)  # "m10" comes between "m1" and "m2"
    kept = other._load(PREFIX, None).state
    assert spy.last()[1:3] == (0, ["m10"])  # a delta: the new member's record only
    fresh = _fresh(store.client)
    assert kept is not None and fresh is not None and kept == fresh
    assert list(kept.groups[GROUP].members) == list(fresh.groups[GROUP].members)
    assert list(fresh.groups[GROUP].members) == sorted(fresh.groups[GROUP].members)


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
            whole = reader._load(PREFIX, None).state
            assert whole == fresh
            assert whole is not None
            for g in groups:  # (== ignores the order)
                assert list(whole.groups[g].members) == list(fresh.groups[g].members)
            for g in groups:
                live = sorted(fresh.groups[g].members)
                if live:
                    member = rng.choice(live)
                    partial = reader._load(PREFIX, [g], lease_of=member).state
                    assert partial is not None
                    assert partial.groups[g].members[member] == fresh.groups[g].members[member]
                    assert without_leases(partial.groups[g]) == without_leases(fresh.groups[g])
                    assert list(partial.groups[g].members) == list(fresh.groups[g].members)
    assert rollbacks > 5, rollbacks
