"""The protocol's data model: immutable values for topology, groups, members and shards.

Everything here is a frozen, slotted, keyword-only dataclass (or an Enum). New values are derived with
``dataclasses.replace``; mappings held by these values are never mutated after construction. Field names
carry their units (``*_ms``). See ``docs/protocol.md`` ("Entities") for the meaning of each field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from math import gcd

from .errors import InvalidConfig, InvalidIdentifier, InvalidRequest
from .limits import GROUP_CONFIG_RANGES

IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MEMBER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_SHARD_COUNT = 1024
MAX_CAPACITY = 1024
# Retention bounds (docs/protocol.md, retention): a year is the longest age or grace period accepted.
MAX_RETENTION_MS = 31_536_000_000
MIN_MAX_AGE_MS = 60_000
MIN_MAX_LEN = 1_000
MAX_MAX_LEN = 1_000_000_000


def validate_identifier(value: object, what: str) -> str:
    """Stream prefixes and consumer groups: 1-64 of ``[A-Za-z0-9._-]``, starting alphanumeric.

    Braces, colons and whitespace are excluded because they would break the key layout
    (``rsc:{prefix}:v2:7``) and its hash tag.
    """
    if not isinstance(value, str) or not IDENTIFIER_RE.fullmatch(value):
        raise InvalidIdentifier(
            f"{what} must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit; got {value!r}",
            field=what,
        )
    return value


def validate_member_id(value: object) -> str:
    return _validate_long_identifier(value, "member_id")


def validate_instance_id(value: object) -> str:
    """A static member's ``instance_id`` (docs/protocol.md section 3, "Static membership"): the
    member id's rule."""
    return _validate_long_identifier(value, "instance_id")


def _validate_long_identifier(value: object, what: str) -> str:
    """1-128 characters of ``[A-Za-z0-9._-]`` starting with a letter or digit (member and instance ids)."""
    if not isinstance(value, str) or not MEMBER_ID_RE.fullmatch(value):
        raise InvalidIdentifier(
            f"{what} must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit; got {value!r}",
            field=what,
        )
    return value


def require_int_in_range(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{what} must be an integer in [{low}, {high}]; got {value!r}", field=what)
    return value


# Redis stream entry ids, as operators and the Admin API give them (docs/protocol.md section 14).
ENTRY_ID_RE = re.compile(r"\d+-\d+", re.ASCII)  # not other scripts' digits: Redis takes ASCII only
MAX_ENTRY_IDS = 1000  # per skip, replay or purge request
MAX_ENTRY_ID_PART = 2**64 - 1  # both parts of an id are unsigned 64-bit integers in Redis


def entry_id_key(entry_id: str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` as a pair of integers, which sorts like Redis sorts ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def is_entry_id(value: object) -> bool:
    """``<ms>-<seq>`` in ASCII digits, each part at most :data:`MAX_ENTRY_ID_PART`: an id Redis accepts
    (any other fails a command, or a script midway, after the writes before it)."""
    return (
        isinstance(value, str)
        and ENTRY_ID_RE.fullmatch(value) is not None
        and max(entry_id_key(value)) <= MAX_ENTRY_ID_PART
    )


def validate_entry_ids(ids: object, field: str) -> list[str]:
    """1..1000 stream ids (:func:`is_entry_id`), in canonical form (Redis reads
    ``05-0`` as ``5-0``: written once, an id cannot be listed twice or reported back differently);
    duplicates dropped, order kept. ``InvalidRequest`` naming ``field`` otherwise."""
    if not isinstance(ids, list | tuple) or not 1 <= len(ids) <= MAX_ENTRY_IDS:
        raise InvalidRequest(f"{field} must be a list of 1 to {MAX_ENTRY_IDS} entry ids", field=field)
    canonical: list[str] = []
    for value in ids:
        if not is_entry_id(value):
            raise InvalidRequest(
                f"{field}: an entry id is written '<ms>-<seq>', like '1718000000000-0'; got {value!r}",
                field=field,
            )
        ms, seq = entry_id_key(value)
        canonical.append(f"{ms}-{seq}")
    return list(dict.fromkeys(canonical))


@dataclass(frozen=True, slots=True, order=True)
class Shard:
    """One Redis stream: shard ``index`` of routing version ``version``."""

    version: int
    index: int

    def __str__(self) -> str:
        return f"v{self.version}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Parse the wire form ``v<version>:<index>`` (the stream key suffix)."""
        match = (
            re.fullmatch(r"v([1-9][0-9]{0,8}):(0|[1-9][0-9]{0,4})", text) if isinstance(text, str) else None
        )
        if match is None:
            raise InvalidRequest(f"a shard is written 'v<version>:<index>', like 'v1:0'; got {text!r}")
        return cls(version=int(match.group(1)), index=int(match.group(2)))


class VersionState(StrEnum):
    ACTIVE = "ACTIVE"  # producers write here; exactly one version is ACTIVE
    DRAINING = "DRAINING"  # sealed against producer writes; still consumed until drained by every group
    RETIRED = "RETIRED"  # drained by every group; no longer assigned


class OrderingMode(StrEnum):
    STRICT = "strict"
    RELAXED = "relaxed"


class MemberState(StrEnum):
    STABLE = "STABLE"
    UNREVOKED_SHARDS = "UNREVOKED_SHARDS"
    UNRELEASED_SHARDS = "UNRELEASED_SHARDS"
    EXPIRED = "EXPIRED"
    LEFT = "LEFT"

    @property
    def is_live(self) -> bool:
        # Identity tests, not a set lookup (an enum member hashes in Python): is_live runs for every
        # member, several times, on every decision that reads the whole group (a join).
        return self is not _EXPIRED and self is not _LEFT


# The terminal member states.
_EXPIRED, _LEFT = MemberState.EXPIRED, MemberState.LEFT


class EndReason(StrEnum):
    LEFT = "LEFT"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    REVOCATION_TIMEOUT = "REVOCATION_TIMEOUT"
    REJOINED = "REJOINED"


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingVersion:
    version: int
    shard_count: int
    state: VersionState
    created_at_ms: int
    sealed_at_ms: int | None = None
    retired_at_ms: int | None = None

    def shards(self) -> tuple[Shard, ...]:
        return tuple(Shard(version=self.version, index=i) for i in range(self.shard_count))


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """A shard-count change: routing version ``from_version`` drains into ``to_version``."""

    from_version: int
    to_version: int
    ordering: OrderingMode
    started_at_ms: int
    completed_at_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.completed_at_ms is None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """What the retention pass may remove from a stream prefix's streams.

    The base mode is always ``acked``: an entry is trimmed only once every consumer group of its stream
    has read and acknowledged it. ``max_age_ms`` (entries older than this, by Redis's clock) and
    ``max_len`` (entries per shard stream) are opt-in caps that trim *regardless of consumption*: they
    may drop entries no group has handled (documented data loss). ``retired_grace_ms`` delays deleting a
    retired version's stream keys after it retired (they are deleted only once fully acked anyway).
    """

    max_age_ms: int | None = None
    max_len: int | None = None
    retired_grace_ms: int = 0

    def validated(self) -> RetentionPolicy:
        if self.max_age_ms is not None:
            require_int_in_range(self.max_age_ms, "max_age_ms", MIN_MAX_AGE_MS, MAX_RETENTION_MS)
        if self.max_len is not None:
            require_int_in_range(self.max_len, "max_len", MIN_MAX_LEN, MAX_MAX_LEN)
        require_int_in_range(self.retired_grace_ms, "retired_grace_ms", 0, MAX_RETENTION_MS)
        return self

    @property
    def may_drop_unconsumed(self) -> bool:
        """True when a cap is set: the retention pass may then trim entries some group never handled."""
        return self.max_age_ms is not None or self.max_len is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    stream_prefix: str
    versions: tuple[RoutingVersion, ...]
    migration: Migration | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)

    @property
    def active_version(self) -> RoutingVersion:
        return next(v for v in self.versions if v.state is VersionState.ACTIVE)

    @property
    def draining_versions(self) -> tuple[RoutingVersion, ...]:
        return tuple(v for v in self.versions if v.state is VersionState.DRAINING)

    def version(self, number: int) -> RoutingVersion | None:
        return next((v for v in self.versions if v.version == number), None)

    def live_shards(self) -> frozenset[Shard]:
        """Every shard of every non-retired version."""
        return frozenset(s for v in self.versions if v.state is not VersionState.RETIRED for s in v.shards())

    def blocked_by(self, shard: Shard) -> frozenset[Shard]:
        """Old-version shards that may hold keys routed to ``shard`` under strict ordering.

        With ``h mod n_old`` and ``h mod n_new`` routing, old shard ``i`` and new shard ``j`` can both
        receive a key iff ``i == j (mod gcd(n_old, n_new))`` (Chinese remainder theorem). Only a
        strict, active migration into ``shard.version`` blocks anything.
        """
        m = self.migration
        if (
            m is None
            or not m.active
            or m.ordering is not OrderingMode.STRICT
            or shard.version != m.to_version
        ):
            return frozenset()
        old = self.version(m.from_version)
        assert old is not None
        g = gcd(old.shard_count, self.active_version.shard_count)
        return frozenset(s for s in old.shards() if s.index % g == shard.index % g)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    max_concurrency: int = 1
    lease_ttl_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    revocation_timeout_ms: int = 30_000
    max_members: int = 1_000

    def validated(self) -> GroupConfig:
        for name, (low, high) in GROUP_CONFIG_RANGES.items():
            require_int_in_range(getattr(self, name), name, low, high)
        if self.heartbeat_interval_ms >= self.lease_ttl_ms:
            raise InvalidConfig(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below lease_ttl_ms "
                f"({self.lease_ttl_ms}), or every member would expire between two heartbeats",
                field="heartbeat_interval_ms",
            )
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientInfo:
    host: str = ""
    pid: int = 0
    listener: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    member_id: str
    state: MemberState
    member_epoch: int
    previous_epoch: int
    # shard -> the member epoch at which this member was granted it (the shard's assignment epoch).
    assigned: Mapping[Shard, int]
    # shards the member must stop reading and acknowledge; they still count as owned by it.
    revoking: frozenset[Shard] = frozenset()
    revocation_deadline_ms: int | None = None
    lease_deadline_ms: int
    capacity: int
    client: ClientInfo = field(default_factory=ClientInfo)
    joined_at_ms: int
    last_heartbeat_ms: int
    ended_at_ms: int | None = None
    end_reason: EndReason | None = None
    # The credential identity that joined this member id ("" = not recorded: members joined before
    # ownership existed, and callers that do not authenticate). Only it may heartbeat, leave or rejoin.
    owner: str = ""
    # The join_seq of the join that made this incarnation (None: not sent). docs/protocol.md section 3.
    join_seq: int | None = None
    # Static membership (docs/protocol.md section 3): the instance id it joined with (None: dynamic).
    instance_id: str | None = None
    # An ended static member whose target is held for its instance id until this time (Redis clock):
    # the assignor keeps its target, nobody else is given those shards, and a join with the same
    # instance id takes them over. None: not held (every live member, most ended ones).
    held_until_ms: int | None = None

    @property
    def owned(self) -> frozenset[Shard]:
        """What this member may still hold: assigned plus pending revocation (the single-owner rule)."""
        return frozenset(self.assigned) | self.revoking


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    stream_prefix: str
    consumer_group: str
    config: GroupConfig
    created_at_ms: int
    group_epoch: int = 0
    assignment_epoch: int = 0
    # member id -> its target: the live members whose target holds shards (never an empty entry);
    # every other live member's target is empty. Use target.get(member_id, frozenset()).
    target: Mapping[str, frozenset[Shard]] = field(default_factory=dict)
    members: Mapping[str, Member] = field(default_factory=dict)
    drained: frozenset[Shard] = frozenset()

    def live_members(self) -> Iterable[Member]:
        return (m for m in self.members.values() if m.state.is_live)

    def held_members(self) -> Iterable[Member]:
        """Ended static members whose target is held for their instance id (``Member.held_until_ms``)."""
        return (m for m in self.members.values() if m.held_until_ms is not None)

    def instance_holder(self, instance_id: str) -> Member | None:
        """The live or held member with this instance id (at most one: docs/protocol.md section 11)."""
        return next(
            (
                m
                for m in self.members.values()
                if m.instance_id == instance_id and (m.held_until_ms is not None or m.state.is_live)
            ),
            None,
        )

    def owners(self) -> dict[Shard, str]:
        """shard -> the live member that owns it (assigned or still revoking)."""
        index: dict[Shard, str] = {}
        for member in self.members.values():
            # member.owned, without building the union per member; most members of a large group own
            # nothing, so that is looked at before the state.
            if (member.assigned or member.revoking) and member.state.is_live:
                owner = member.member_id
                for shard in member.assigned:
                    index[shard] = owner
                for shard in member.revoking:
                    index[shard] = owner
        return index

    def effective_concurrency(self, member: Member) -> int:
        return min(member.capacity, self.config.max_concurrency)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixState:
    """Everything the metadata key of one stream prefix holds: its topology and all its groups."""

    topology: Topology
    groups: Mapping[str, Group] = field(default_factory=dict)

    def group(self, consumer_group: str) -> Group | None:
        return self.groups.get(consumer_group)
