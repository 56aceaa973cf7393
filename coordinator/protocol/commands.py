"""Commands in, new state and a result out: the single entry point the store drives.

``apply(state, command, now_ms)`` takes the stream prefix's current :class:`PrefixState` (``None`` when
its metadata key does not exist), validates the command, and returns an :class:`Outcome`: the new state,
a command-specific result and the records of what it changed (changes.py), which the store writes. It
raises a :class:`CoordinatorError` without any effect when the command is rejected. ``now_ms`` is
Redis's clock, read by the caller. An outcome whose state is ``None`` for an existing prefix (only
:class:`DeletePrefix`) means "the prefix is gone": the store deletes its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .changes import Change, GroupConfigChanged, GroupCreated, GroupDeleted, TopologyChanged
from .describe import HeartbeatResponse, heartbeat_response
from .errors import (
    CoordinatorError,
    GroupAlreadyExists,
    GroupNotFound,
    InvalidRequest,
    ShardCountConflict,
    StreamPrefixNotEmpty,
    StreamPrefixNotFound,
)
from .group import Heartbeat, bump, collect_garbage, expire_members, heartbeat
from .limits import GROUP_CONFIG_RANGES, WEEK_MS
from .model import (
    Group,
    GroupConfig,
    OrderingMode,
    PrefixState,
    RetentionPolicy,
    Shard,
    Topology,
    VersionState,
    require_int_in_range,
    validate_identifier,
)
from .resharding import (
    change_shard_count,
    complete_migration_if_drained,
    mark_drained,
    new_topology,
    release_drain,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateGroup:
    stream_prefix: str
    consumer_group: str
    # Required when the stream prefix is new; when given for an existing prefix it must match.
    shard_count: int | None = None
    config: GroupConfig = field(default_factory=GroupConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroup:
    stream_prefix: str
    consumer_group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetMaxConcurrency:
    stream_prefix: str
    consumer_group: str
    max_concurrency: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeShardCount:
    stream_prefix: str
    shard_count: int
    ordering: OrderingMode = OrderingMode.STRICT


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberHeartbeat:
    stream_prefix: str
    consumer_group: str
    heartbeat: Heartbeat


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberHeartbeats:
    """Several heartbeats of one group, decided one after the other as one change: the store decides
    together the heartbeats that queued while another decision on the stream prefix ran (one load, one
    commit: docs/store.md, "Heartbeats decided together"). Each is decided exactly as a
    :class:`MemberHeartbeat` on the group the ones before it left; one that is refused changes nothing
    and does not stop the others. The result is one :class:`HeartbeatResponse` or error per heartbeat,
    in order, each as of right after its own step."""

    stream_prefix: str
    consumer_group: str
    heartbeats: tuple[Heartbeat, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportDrained:
    stream_prefix: str
    consumer_group: str
    shards: frozenset[Shard]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseDrain:
    """Operator: stop waiting for ``consumer_group`` in the active migration (it has no live members).

    Every shard of every draining version that the group has not drained is marked drained for it;
    its unconsumed entries there are abandoned (the store shows their count before it commits this).
    ``shards``, when given, are the shards that count covered: the release is refused
    (``CONFIRMATION_MISMATCH``) if the group has any other undrained shard by the time it commits (the
    migration completed and another started in between), so nothing is abandoned unseen.
    """

    stream_prefix: str
    consumer_group: str
    shards: frozenset[Shard] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SetRetention:
    """Admin: the stream prefix's retention policy (what the retention pass may trim)."""

    stream_prefix: str
    policy: RetentionPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletePrefix:
    """Admin: forget the stream prefix. Refused while it has groups unless ``force``. The outcome's
    state is ``None``: the store deletes the metadata key (and then the streams)."""

    stream_prefix: str
    force: bool = False


MAX_ENDED_MEMBERS_LIMIT = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    stream_prefix: str
    # How long ended (EXPIRED / LEFT) members stay visible to operators before they are forgotten.
    retention_ms: int = 600_000
    # At most this many ended members are kept per group (the most recently ended ones), whatever
    # their age: join / leave churn must not grow the group document without bound.
    max_ended_members: int = 100


Command = (
    CreateGroup
    | DeleteGroup
    | SetMaxConcurrency
    | ChangeShardCount
    | MemberHeartbeat
    | MemberHeartbeats
    | ReportDrained
    | ReleaseDrain
    | SetRetention
    | DeletePrefix
    | Tick
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TickReport:
    expired: tuple[tuple[str, str], ...] = ()  # (consumer_group, member_id)
    collected: tuple[tuple[str, str], ...] = ()
    retired_versions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixDeleted:
    """The result of :class:`DeletePrefix`: what the store deletes with the metadata key (every
    version's streams, and the dead letters and redeliver counters of these groups)."""

    topology: Topology
    consumer_groups: tuple[str, ...]
    deleted_keys: int = 0  # set by the store once it has deleted them


# MemberHeartbeats: one response or error per heartbeat, in order.
Decided = tuple[HeartbeatResponse | CoordinatorError, ...]
Result = HeartbeatResponse | Decided | TickReport | PrefixDeleted | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    state: PrefixState | None
    result: Result = None
    # What the command changed, in the order it changed it (changes.py): the store writes what these
    # name. Empty when it changed nothing, and for DeletePrefix (the whole prefix goes).
    changes: tuple[Change, ...] = ()


def apply(state: PrefixState | None, command: Command, now_ms: int) -> Outcome:
    changes: list[Change] = []
    outcome = _apply(state, command, now_ms, changes)
    return replace(outcome, changes=tuple(changes)) if changes else outcome


def _apply(state: PrefixState | None, command: Command, now_ms: int, changes: list[Change]) -> Outcome:
    validate_identifier(command.stream_prefix, "stream_prefix")
    if isinstance(command, CreateGroup):
        return Outcome(state=_create_group(state, command, now_ms, changes))
    if isinstance(command, ChangeShardCount):
        if not isinstance(command.ordering, OrderingMode):
            raise InvalidRequest("ordering must be 'strict' or 'relaxed'", field="ordering")
        prefix = _require_prefix(state, command.stream_prefix)
        new = change_shard_count(prefix, command.shard_count, command.ordering, now_ms, changes=changes)
        return Outcome(state=new)
    if isinstance(command, Tick):
        return _tick(state, command, now_ms, changes)
    if isinstance(command, SetRetention):
        prefix = _require_prefix(state, command.stream_prefix)
        return Outcome(state=_set_retention(prefix, command.policy, changes))
    if isinstance(command, DeletePrefix):
        prefix = _require_prefix(state, command.stream_prefix)
        _delete_prefix(prefix, command.force)
        deleted = PrefixDeleted(topology=prefix.topology, consumer_groups=tuple(sorted(prefix.groups)))
        return Outcome(state=None, result=deleted)
    prefix, group = _require_group(state, command.stream_prefix, command.consumer_group)
    if isinstance(command, DeleteGroup):
        groups = {k: v for k, v in prefix.groups.items() if k != command.consumer_group}
        changes.append(GroupDeleted(consumer_group=command.consumer_group))
        return Outcome(
            state=complete_migration_if_drained(replace(prefix, groups=groups), now_ms, changes=changes)
        )
    if isinstance(command, SetMaxConcurrency):
        low, high = GROUP_CONFIG_RANGES["max_concurrency"]
        require_int_in_range(command.max_concurrency, "max_concurrency", low, high)
        if command.max_concurrency == group.config.max_concurrency:
            return Outcome(state=prefix)
        group = replace(group, config=replace(group.config, max_concurrency=command.max_concurrency))
        changes.append(GroupConfigChanged(consumer_group=group.consumer_group))
        return Outcome(state=_with_group(prefix, bump(group, prefix.topology, changes=changes)))
    if isinstance(command, MemberHeartbeat):
        group = heartbeat(group, prefix.topology, command.heartbeat, now_ms, changes=changes)
        new = _with_group(prefix, group)
        return Outcome(
            state=new, result=heartbeat_response(group, prefix.topology, command.heartbeat.member_id)
        )
    if isinstance(command, MemberHeartbeats):
        return _heartbeats(prefix, group, command.heartbeats, now_ms, changes)
    if isinstance(command, ReportDrained):
        new = mark_drained(prefix, command.consumer_group, command.shards, now_ms, changes=changes)
        return Outcome(state=new)
    if isinstance(command, ReleaseDrain):
        new = release_drain(prefix, command.consumer_group, now_ms, command.shards, changes=changes)
        return Outcome(state=new)
    raise InvalidRequest(f"unknown command {type(command).__name__}")


def _heartbeats(
    prefix: PrefixState, group: Group, heartbeats: tuple[Heartbeat, ...], now_ms: int, changes: list[Change]
) -> Outcome:
    results: list[HeartbeatResponse | CoordinatorError] = []
    for hb in heartbeats:
        step: list[Change] = []  # kept only if the heartbeat is
        try:
            group = heartbeat(group, prefix.topology, hb, now_ms, changes=step)
        except CoordinatorError as refused:  # changed nothing: the next one is decided on the same group
            results.append(refused)
            continue
        changes += step
        results.append(heartbeat_response(group, prefix.topology, hb.member_id))
    return Outcome(state=_with_group(prefix, group), result=tuple(results))


def _create_group(
    state: PrefixState | None, command: CreateGroup, now_ms: int, changes: list[Change]
) -> PrefixState:
    validate_identifier(command.consumer_group, "consumer_group")
    config = command.config.validated()
    if state is None:
        if command.shard_count is None:
            raise InvalidRequest(
                f"stream prefix {command.stream_prefix!r} does not exist yet: give its shard_count",
                field="shard_count",
            )
        state = PrefixState(topology=new_topology(command.stream_prefix, command.shard_count, now_ms))
        changes.append(TopologyChanged())
    elif command.shard_count is not None and command.shard_count != state.topology.active_version.shard_count:
        active = state.topology.active_version
        raise ShardCountConflict(
            f"stream prefix {command.stream_prefix!r} has {active.shard_count} shards (version "
            f"{active.version}); change it with a shard-count change, not by creating a group",
            shard_count=active.shard_count,
        )
    if command.consumer_group in state.groups:
        raise GroupAlreadyExists(
            f"group {command.consumer_group!r} already exists on stream prefix {command.stream_prefix!r}"
        )
    group = Group(
        stream_prefix=command.stream_prefix,
        consumer_group=command.consumer_group,
        config=config,
        created_at_ms=now_ms,
    )
    changes.append(GroupCreated(consumer_group=group.consumer_group))
    return _with_group(state, group)


def _tick(state: PrefixState | None, command: Tick, now_ms: int, changes: list[Change]) -> Outcome:
    if state is None:
        return Outcome(state=None, result=TickReport())
    require_int_in_range(command.retention_ms, "retention_ms", 0, WEEK_MS)
    require_int_in_range(command.max_ended_members, "max_ended_members", 0, MAX_ENDED_MEMBERS_LIMIT)
    expired: list[tuple[str, str]] = []
    collected: list[tuple[str, str]] = []
    groups = dict(state.groups)
    for name, group in state.groups.items():
        group, fenced = expire_members(group, state.topology, now_ms, changes=changes)
        group, gone = collect_garbage(
            group, now_ms, command.retention_ms, command.max_ended_members, changes=changes
        )
        expired.extend((name, m) for m in fenced)
        collected.extend((name, m) for m in gone)
        groups[name] = group
    before = {v.version for v in state.topology.versions if v.state is VersionState.RETIRED}
    new = complete_migration_if_drained(replace(state, groups=groups), now_ms, changes=changes)
    retired = tuple(
        v.version
        for v in new.topology.versions
        if v.state is VersionState.RETIRED and v.version not in before
    )
    report = TickReport(expired=tuple(expired), collected=tuple(collected), retired_versions=retired)
    return Outcome(state=new, result=report)


def _set_retention(state: PrefixState, policy: RetentionPolicy, changes: list[Change]) -> PrefixState:
    if not isinstance(policy, RetentionPolicy):
        raise InvalidRequest("policy must be a RetentionPolicy", field="retention")
    policy = policy.validated()
    if policy == state.topology.retention:
        return state
    changes.append(TopologyChanged())
    return replace(state, topology=replace(state.topology, retention=policy))


def _delete_prefix(state: PrefixState, force: bool) -> None:
    """Raise unless the prefix may be forgotten. Groups are the core's concern; unconsumed entries are
    counted in Redis by the store before it runs this command."""
    if not isinstance(force, bool):
        raise InvalidRequest("force must be true or false", field="force")
    if state.groups and not force:
        names = sorted(state.groups)
        raise StreamPrefixNotEmpty(
            f"stream prefix {state.topology.stream_prefix!r} still has consumer groups "
            f"({', '.join(names)}): delete them first, or force the deletion (their offsets, pending "
            "entries and dead letters are deleted with it)",
            stream_prefix=state.topology.stream_prefix,
            consumer_groups=names,
        )


def _require_prefix(state: PrefixState | None, stream_prefix: str) -> PrefixState:
    if state is None:
        raise StreamPrefixNotFound(
            f"stream prefix {stream_prefix!r} does not exist", stream_prefix=stream_prefix
        )
    return state


def _require_group(
    state: PrefixState | None, stream_prefix: str, consumer_group: str
) -> tuple[PrefixState, Group]:
    validate_identifier(consumer_group, "consumer_group")
    group = state.group(consumer_group) if state is not None else None
    if state is None or group is None:
        raise GroupNotFound(
            f"group {consumer_group!r} does not exist on stream prefix {stream_prefix!r}; "
            "only the Admin API creates groups",
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
        )
    return state, group


def _with_group(state: PrefixState, group: Group) -> PrefixState:
    return replace(state, groups={**state.groups, group.consumer_group: group})
