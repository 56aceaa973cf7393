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

from .changes import Change, DrainedChanged, TopologyChanged
from .errors import (
    ConfirmationMismatch,
    GroupHasLiveMembers,
    MigrationInProgress,
    MigrationNotActive,
    ShardCountUnchanged,
    UnknownShard,
)
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
    state: PrefixState, shard_count: int, ordering: OrderingMode, now_ms: int, *, changes: list[Change]
) -> PrefixState:
    require_int_in_range(shard_count, "shard_count", 1, MAX_SHARD_COUNT)
    raise_if_migration_active(state)
    topology = state.topology
    current = topology.active_version
    if shard_count == current.shard_count:
        raise ShardCountUnchanged(
            f"version {current.version} already has {shard_count} shards", shard_count=shard_count
        )
    sealed = replace(current, state=VersionState.DRAINING, sealed_at_ms=now_ms)
    nxt = RoutingVersion(
        version=current.version + 1, shard_count=shard_count, state=VersionState.ACTIVE, created_at_ms=now_ms
    )
    topology = replace(
        topology,
        versions=(*(sealed if v is current else v for v in topology.versions), nxt),
        migration=Migration(
            from_version=current.version, to_version=nxt.version, ordering=ordering, started_at_ms=now_ms
        ),
    )
    changes.append(TopologyChanged())
    groups = {name: bump(g, topology, changes=changes) for name, g in state.groups.items()}
    return complete_migration_if_drained(
        PrefixState(topology=topology, groups=groups), now_ms, changes=changes
    )


def raise_if_migration_active(state: PrefixState) -> None:
    """Refuse a second migration, naming what holds the active one back (group by group).

    The message is what an operator acts on: a group with live members is still working (wait, or look
    at its backlog for a stuck entry); a group without live members never drains on its own (release it
    from the drain, or delete it).
    """
    m = state.topology.migration
    if m is None or not m.active:
        return
    blocking = {name: undrained_shards(state, name) for name in sorted(state.groups)}
    blocking = {name: shards for name, shards in blocking.items() if shards}
    idle = [name for name in blocking if not any(True for _ in state.groups[name].live_members())]
    parts = [
        f"group {name} ({'no live members; ' if name in idle else ''}{shard_ranges(shards)})"
        for name, shards in list(blocking.items())[:_MAX_GROUPS_NAMED]
    ]
    if len(blocking) > _MAX_GROUPS_NAMED:
        parts.append(f"and {len(blocking) - _MAX_GROUPS_NAMED} more groups")
    waiting = ", ".join(parts) if parts else "nothing (it completes on the next tick)"
    hint = (
        "; a group without live members never drains on its own: release it from the drain or delete it"
        if idle
        else ""
    )
    raise MigrationInProgress(
        f"stream prefix {state.topology.stream_prefix!r} is still draining version {m.from_version} into "
        f"version {m.to_version}, and only one migration may be active at a time; still draining: "
        f"{waiting}{hint}",
        from_version=m.from_version,
        to_version=m.to_version,
        blocking={name: [str(s) for s in shards] for name, shards in blocking.items()},
        groups_without_live_members=idle,
    )


_MAX_GROUPS_NAMED = 10


def shard_ranges(shards: Iterable[Shard]) -> str:
    """``v1:0, v1:1, v1:2, v1:5`` written as ``v1:0..v1:2, v1:5`` (shards sorted first)."""
    runs: list[list[Shard]] = []
    for shard in sorted(shards):
        last = runs[-1][-1] if runs else None
        if last is not None and last.version == shard.version and last.index + 1 == shard.index:
            runs[-1].append(shard)
        else:
            runs.append([shard])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)


def mark_drained(
    state: PrefixState, consumer_group: str, shards: Iterable[Shard], now_ms: int, *, changes: list[Change]
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
    changes.append(DrainedChanged(consumer_group=consumer_group))
    group = bump(replace(group, drained=group.drained | reported), state.topology, changes=changes)
    return complete_migration_if_drained(
        replace(state, groups={**state.groups, consumer_group: group}), now_ms, changes=changes
    )


def undrained_shards(state: PrefixState, consumer_group: str) -> tuple[Shard, ...]:
    """The draining versions' shards that ``consumer_group`` has not drained yet, in shard order."""
    group = state.groups[consumer_group]
    return tuple(
        sorted(s for v in state.topology.draining_versions for s in v.shards() if s not in group.drained)
    )


def release_drain(
    state: PrefixState,
    consumer_group: str,
    now_ms: int,
    expected: frozenset[Shard] | None = None,
    *,
    changes: list[Change] | None = None,
) -> PrefixState:
    """An operator gives up on ``consumer_group`` draining the old version (it has no live members).

    Checked in this order, each refusal changing nothing: the group has live members
    (``GroupHasLiveMembers``); no migration is active, or the group has drained everything already
    (``MigrationNotActive``); ``expected`` (the shards whose unconsumed entries the operator was shown)
    does not cover every undrained shard (``ConfirmationMismatch``: the migration the operator looked
    at completed and another one started since). Otherwise every undrained shard is marked drained for
    the group (one bump), which completes the migration if no other group holds it back.

    Why only without live members: a live member may be reading those shards right now; releasing them
    under it would drop entries it is about to handle. With nobody reading, the drain can never finish
    on its own and would block every later shard-count change of the prefix.

    ``changes``: where the changes are recorded; None for a caller that wants only the refusal, if
    any (the store, before it counts what a release would abandon).
    """
    group = state.groups[consumer_group]
    live = sorted(m.member_id for m in group.live_members())
    if live:
        raise GroupHasLiveMembers(
            f"group {consumer_group!r} still has {len(live)} live member(s) ({', '.join(live[:5])}"
            f"{', ...' if len(live) > 5 else ''}): they drain the old shards themselves; stop them (or "
            "wait for their leases to expire) before releasing the group from the drain",
            consumer_group=consumer_group,
            live_members=live,
        )
    migration = state.topology.migration
    if migration is None or not migration.active:
        raise MigrationNotActive(
            f"stream prefix {state.topology.stream_prefix!r} has no active migration: nothing to release",
            stream_prefix=state.topology.stream_prefix,
            consumer_group=consumer_group,
        )
    undrained = undrained_shards(state, consumer_group)
    if not undrained:
        raise MigrationNotActive(
            f"group {consumer_group!r} has nothing left to drain in the migration from version "
            f"{migration.from_version} to {migration.to_version}",
            stream_prefix=state.topology.stream_prefix,
            consumer_group=consumer_group,
        )
    unseen = sorted(set(undrained) - expected) if expected is not None else []
    if unseen:
        raise ConfirmationMismatch(
            f"group {consumer_group!r} now also has {shard_ranges(unseen)} to drain, whose entries were "
            "not counted in the confirmation (the migration changed): look again and confirm the current "
            "figure",
            stream_prefix=state.topology.stream_prefix,
            consumer_group=consumer_group,
            shards=[str(s) for s in unseen],
        )
    return mark_drained(state, consumer_group, undrained, now_ms, changes=[] if changes is None else changes)


def complete_migration_if_drained(state: PrefixState, now_ms: int, *, changes: list[Change]) -> PrefixState:
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
    changes.append(TopologyChanged())
    # Every group had drained the retired shards, so neither targets nor readability change: no bump.
    groups = {
        name: replace(g, drained=frozenset(s for s in g.drained if s.version not in retired))
        for name, g in state.groups.items()
    }
    changes.extend(
        DrainedChanged(consumer_group=name)
        for name, g in groups.items()
        if g.drained != state.groups[name].drained
    )
    return PrefixState(topology=topology, groups=groups)


def _drained_by_all(version: RoutingVersion, groups: Mapping[str, Group]) -> bool:
    shards = frozenset(version.shards())
    return all(shards <= g.drained for g in groups.values())
