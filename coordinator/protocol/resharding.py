"""Shard-count changes as the next resharding: a new routing version, never keys rewritten in place.

Theory of operation
-------------------
A stream prefix has routing versions ``v1, v2, ...``; exactly one is ACTIVE (producers write there).
An admin shard-count change ``n`` creates version ``v+1`` with ``n`` shards (new stream keys) and seals
``v`` (DRAINING): the producer script refuses to append to it from that moment, atomically, so ``v``
only shrinks. Every group's assignable shards become ``v+1``'s plus those of ``v`` it has not drained,
and every group's epoch is bumped: unaffected members keep their shards (the assignor is sticky) and the
new shards are spread over the group.

A shard of ``v`` is *drained* for a group once the group has read every entry of it and acked them all;
the store observes this in Redis and reports it here (:func:`mark_drained`). The shard then leaves the
group's assignment through the ordinary revocation path. When every group has drained every shard of
``v``, ``v`` is RETIRED and the migration completes. Only then may another shard-count change start.

Ordering: under ``strict`` (the default) a group may not read a new shard while an old shard that can
hold the same keys is undrained for it (see ``Topology.blocked_by``), so per-key order holds across the
change for that group. ``relaxed`` reads new shards at once: faster hand-over, per-key order may break
for keys written around the switch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from .errors import MigrationInProgress, ShardCountUnchanged, UnknownShard
from .group import bump
from .model import (
    MAX_SHARD_COUNT,
    Group,
    Migration,
    OrderingMode,
    PrefixState,
    RoutingVersion,
    Shard,
    Topology,
    VersionState,
    require_int_in_range,
)


def new_topology(stream_prefix: str, shard_count: int, now_ms: int) -> Topology:
    require_int_in_range(shard_count, "shard_count", 1, MAX_SHARD_COUNT)
    first = RoutingVersion(
        version=1, shard_count=shard_count, state=VersionState.ACTIVE, created_at_ms=now_ms
    )
    return Topology(stream_prefix=stream_prefix, versions=(first,))


def change_shard_count(
    state: PrefixState, shard_count: int, ordering: OrderingMode, now_ms: int
) -> PrefixState:
    require_int_in_range(shard_count, "shard_count", 1, MAX_SHARD_COUNT)
    topology = state.topology
    if topology.migration is not None and topology.migration.active:
        m = topology.migration
        raise MigrationInProgress(
            f"stream prefix {topology.stream_prefix!r} is still draining version {m.from_version} into "
            f"version {m.to_version}; only one migration may be active at a time",
            from_version=m.from_version,
            to_version=m.to_version,
        )
    current = topology.active_version
    if shard_count == current.shard_count:
        raise ShardCountUnchanged(
            f"version {current.version} already has {shard_count} shards", shard_count=shard_count
        )
    sealed = replace(current, state=VersionState.DRAINING, sealed_at_ms=now_ms)
    nxt = RoutingVersion(
        version=current.version + 1, shard_count=shard_count, state=VersionState.ACTIVE, created_at_ms=now_ms
    )
    topology = Topology(
        stream_prefix=topology.stream_prefix,
        versions=(*(sealed if v is current else v for v in topology.versions), nxt),
        migration=Migration(
            from_version=current.version, to_version=nxt.version, ordering=ordering, started_at_ms=now_ms
        ),
    )
    groups = {name: bump(g, topology) for name, g in state.groups.items()}
    return complete_migration_if_drained(PrefixState(topology=topology, groups=groups), now_ms)


def mark_drained(
    state: PrefixState, consumer_group: str, shards: Iterable[Shard], now_ms: int
) -> PrefixState:
    """Record that ``consumer_group`` has consumed and acked everything in these draining shards."""
    group = state.groups[consumer_group]
    draining = {s for v in state.topology.draining_versions for s in v.shards()}
    reported = frozenset(shards)
    unknown = reported - draining
    if unknown:
        raise UnknownShard(
            f"only shards of a draining version can be drained; not draining: {sorted(map(str, unknown))}"
        )
    if reported <= group.drained:
        return state  # already known: idempotent
    group = bump(replace(group, drained=group.drained | reported), state.topology)
    return complete_migration_if_drained(
        replace(state, groups={**state.groups, consumer_group: group}), now_ms
    )


def complete_migration_if_drained(state: PrefixState, now_ms: int) -> PrefixState:
    """Retire draining versions that every group has drained; complete the migration with them."""
    topology = state.topology
    done = [v for v in topology.draining_versions if _drained_by_all(v, state.groups)]
    if not done:
        return state
    retired = {v.version for v in done}
    versions = tuple(
        replace(v, state=VersionState.RETIRED, retired_at_ms=now_ms) if v.version in retired else v
        for v in topology.versions
    )
    migration = topology.migration
    if migration is not None and migration.active and migration.from_version in retired:
        migration = replace(migration, completed_at_ms=now_ms)
    topology = replace(topology, versions=versions, migration=migration)
    # Every group had drained the retired shards, so neither targets nor readability change: no bump.
    groups = {
        name: replace(g, drained=frozenset(s for s in g.drained if s.version not in retired))
        for name, g in state.groups.items()
    }
    return PrefixState(topology=topology, groups=groups)


def _drained_by_all(version: RoutingVersion, groups: Mapping[str, Group]) -> bool:
    shards = frozenset(version.shards())
    return all(shards <= g.drained for g in groups.values())
