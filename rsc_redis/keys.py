"""The Redis key layout: every key the product uses, and the field families of the metadata hash.

One module, pure (no Redis, no Django): the coordinator's store, the data plane and the producer
(``consumers``), the ACL profiles (rsc_redis/acl.py) and the docs all take the layout from here.
docs/protocol.md section 9 shows :data:`FAMILIES` and docs/store.md ("One hash per stream prefix")
:data:`META_FIELDS`; tests/test_keys.py checks both tables against this module, and that every key
function builds the template its family states.

Every key of a stream prefix ``P`` lives under the hash tag ``{P}`` (``rsc:{P}:...``), so they share
one Redis Cluster slot and one script or ``MULTI`` may touch them together (docs/cluster.md). The keys
of one API credential (its join rate and its live members) share the hash tag of the credential's
identity digest (``rsc:credential:{<credential>}:...``) in the same way, and are never used with a
prefix's keys in one command. The few global keys are single keys, each in its own slot, never used
together with a prefix's keys in one command. Identifiers (stream prefixes, groups, members) never
contain ``:``, ``{`` or ``}`` (``coordinator.protocol.model.validate_identifier``), so a key names
exactly one family.

The Lua scripts receive their keys from the caller (``KEYS``, built by the functions below). A script
that must check that a key it was given belongs to the prefix of its metadata key builds the expected
key with the one Lua helper of this layout, ``rsc_redis/keys.lua`` (``prefix_key``), never by slicing
strings of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

NAMESPACE = "rsc"


class ShardLike(Protocol):
    """A shard (``coordinator.protocol.model.Shard``): a routing version and an index in it."""

    @property
    def version(self) -> int: ...

    @property
    def index(self) -> int: ...


# ------------------------------------------------------------------------------------ keys of a prefix


def meta_key(stream_prefix: str) -> str:
    """Hash: the metadata of the prefix (topology and every group), the single source of truth; its
    fields are :data:`META_FIELDS`."""
    return f"rsc:{{{stream_prefix}}}:meta"


def stream_key(stream_prefix: str, shard: ShardLike) -> str:
    """Stream: one shard ``v<version>:<index>``; one Redis consumer group per coordinator group."""
    return f"rsc:{{{stream_prefix}}}:v{shard.version}:{shard.index}"


def dead_letter_key(stream_prefix: str, consumer_group: str) -> str:
    """Stream: the group's dead letters (opt-in ``dead_letter=True`` listeners; docs/protocol.md section
    14)."""
    return f"rsc:{{{stream_prefix}}}:dlq:{consumer_group}"


def redeliver_key(stream_prefix: str, consumer_group: str) -> str:
    """Hash ``<shard> -> counter``: an operator's "redeliver" request bumps a shard's counter; the owner's
    next fenced read returns it and the owner re-reads its own pending entries (section 14)."""
    return f"rsc:{{{stream_prefix}}}:rd:{consumer_group}"


def lease_records_key(stream_prefix: str) -> str:
    """Hash ``<group>:<member> -> "<member epoch> <lease deadline ms>"``: leases members renewed themselves,
    in Redis, while the coordinator's API could not (``rsc_redis/dataplane/renew_lease.lua``;
    docs/protocol.md section 5). A record counts only at the member's live epoch (``m:``)."""
    return f"rsc:{{{stream_prefix}}}:lr"


def lease_index_key(stream_prefix: str) -> str:
    """Sorted set ``<group>:<member>`` scored by the member's ``l:`` lease deadline, for every *live*
    member of the prefix: the tick reads only the groups with a lease due (docs/store.md, "The tick
    index"). Kept by ``commit.lua`` and ``fast_heartbeat.lua``; a member's own renewal (``rsc:{P}:lr``)
    is not in it until the tick's ``tick_due.lua`` finds the entry due and moves it."""
    return f"rsc:{{{stream_prefix}}}:lz"


def schedule_index_key(stream_prefix: str) -> str:
    """Sorted set ``<group>:<member>`` scored by when the tick must next look at that live member for its
    revocation (:func:`coordinator.protocol.group.revocation_schedule_ms`: 0 when its revocation clock
    must start or stop, else its revocation deadline; absent when neither). Per member, so that commits
    of different members keep it without reading each other (docs/store.md, "The tick index")."""
    return f"rsc:{{{stream_prefix}}}:sz"


def turn_key(stream_prefix: str) -> str:
    """String with expiry: the token of the coordinator process whose decision on the prefix has the
    turn while processes contend (coordinator/store/turns.py). Not metadata: it expires by itself."""
    return f"rsc:{{{stream_prefix}}}:turn"


def heartbeat_rate_key(stream_prefix: str, consumer_group: str, member_id: str) -> str:
    """String with expiry: a live member's heartbeat-floor state (a GCRA arrival time, ms), written by
    ``fast_heartbeat.lua``. Not metadata: it expires by itself."""
    return f"rsc:{{{stream_prefix}}}:hbr:{consumer_group}:{member_id}"


def once_key(stream_prefix: str) -> str:
    """Hash ``<idempotency key> -> "<routing version> <shard index> <entry id> <event id>"``: the current
    generation of the prefix's idempotency keys, field ``""`` ``"<ms it was opened at> <records
    written>"`` (the producer's ``idempotent_produce``, docs/producer.md "Enqueue once"). Not metadata:
    it expires by itself."""
    return f"rsc:{{{stream_prefix}}}:once"


def once_previous_key(stream_prefix: str) -> str:
    """Hash: the previous generation of :func:`once_key` (renamed from it when a new one opens). Not
    metadata: it expires by itself."""
    return f"rsc:{{{stream_prefix}}}:once:prev"


def parked_reports_key(stream_prefix: str) -> str:
    """Hash ``<group>\n<member> -> JSON``: the last report of the keys parked on each live member's shards
    (``ordering="key"``/``"none"`` with ``on_error="redeliver"``), as the member sent it with a heartbeat
    (coordinator/store/parked_reports.py; docs/protocol.md section 3). Written by the coordinator only;
    not metadata (the group's state does not depend on it)."""
    return f"rsc:{{{stream_prefix}}}:parked"


# ------------------------------------------------------------------------------- keys of a credential
# ``credential``: the digest of an API credential's identity (coordinator.store.codec.identity_digest
# of "database:<pk>", "environment:<digest>", "session:<user pk>"): 16 hex digits, never a token.


def credential_members_key(credential: str) -> str:
    """Sorted set ``<P>:<G>:<member>`` scored by when each was last known live (ms, Redis clock): the
    members the credential joined that may still be live, for its cap on live members
    (``RSC_CREDENTIAL_MAX_MEMBERS``; coordinator/store/credential_limits.py, docs/protocol.md section
    13). Not metadata: an index of counts, checked against the metadata when the cap is reached."""
    return f"rsc:credential:{{{credential}}}:members"


def credential_joins_key(credential: str) -> str:
    """String with expiry: the credential's join rate (a GCRA arrival time, ms), across every API
    process (``RSC_CREDENTIAL_JOIN_FLOOR_MS``). Not metadata: it expires by itself."""
    return f"rsc:credential:{{{credential}}}:joins"


# ---------------------------------------------------------------------------------------- global keys

# Set: the stream prefixes that exist. An index for the tick and for listings, not a source of truth.
PREFIXES_KEY = "rsc:prefixes"
# String "<prefix> <shard>": where the last retention pass stopped (coordinator/store/retention.py).
RETENTION_CURSOR_KEY = "rsc:retention:cursor"
# Hash: cluster-wide counters (tick runs and time, expired members, CAS conflicts;
# coordinator/store/instruments.py).
METRICS_KEY = "rsc:metrics"
# String: bumped by every committed API-credential change (coordinator/credentials.py): cached credentials
# are used only while it holds the value they were read under.
CREDENTIALS_GENERATION_KEY = "rsc:credentials:generation"


# --------------------------------------------------------------------------------------- the families


@dataclass(frozen=True, slots=True)
class KeyFamily:
    """One family of keys: ``template`` as docs/protocol.md section 9 writes it (``P`` the stream
    prefix, ``<G>`` a consumer group, ``<member>`` a member id, ``<version>:<index>`` a shard,
    ``<credential>`` a credential's identity digest), its Redis type, and what builds it (a function of
    this module, or the key itself for a global key)."""

    template: str
    redis_type: str
    key: Callable[..., str] | str

    def pattern(self, stream_prefix: str = "*") -> str:
        """The ACL key pattern (``~<pattern>``) of the family: every key of it under ``stream_prefix``
        (``*``: every prefix). A shard's ``<version>:<index>`` becomes ``[0-9]*``, any other name ``*``.
        A global key is its own pattern."""
        pattern = self.template.replace("{P}", "{" + stream_prefix + "}")
        pattern = pattern.replace("<version>:<index>", "[0-9]*")
        for name in ("<G>", "<member>", "<credential>"):
            pattern = pattern.replace(name, "*")
        return pattern


META = KeyFamily("rsc:{P}:meta", "hash", meta_key)
SHARD_STREAMS = KeyFamily("rsc:{P}:v<version>:<index>", "stream", stream_key)
DEAD_LETTERS = KeyFamily("rsc:{P}:dlq:<G>", "stream", dead_letter_key)
REDELIVER = KeyFamily("rsc:{P}:rd:<G>", "hash", redeliver_key)
LEASE_RECORDS = KeyFamily("rsc:{P}:lr", "hash", lease_records_key)
LEASE_INDEX = KeyFamily("rsc:{P}:lz", "sorted set", lease_index_key)
SCHEDULE_INDEX = KeyFamily("rsc:{P}:sz", "sorted set", schedule_index_key)
TURN = KeyFamily("rsc:{P}:turn", "string with expiry", turn_key)
HEARTBEAT_RATE = KeyFamily("rsc:{P}:hbr:<G>:<member>", "string with expiry", heartbeat_rate_key)
ONCE = KeyFamily("rsc:{P}:once", "hash with expiry", once_key)
ONCE_PREVIOUS = KeyFamily("rsc:{P}:once:prev", "hash with expiry", once_previous_key)
CREDENTIAL_MEMBERS = KeyFamily("rsc:credential:{<credential>}:members", "sorted set", credential_members_key)
CREDENTIAL_JOINS = KeyFamily(
    "rsc:credential:{<credential>}:joins", "string with expiry", credential_joins_key
)
PREFIXES = KeyFamily(PREFIXES_KEY, "set", PREFIXES_KEY)
RETENTION_CURSOR = KeyFamily(RETENTION_CURSOR_KEY, "string", RETENTION_CURSOR_KEY)
METRICS = KeyFamily(METRICS_KEY, "hash", METRICS_KEY)
CREDENTIALS_GENERATION = KeyFamily(CREDENTIALS_GENERATION_KEY, "string", CREDENTIALS_GENERATION_KEY)

FAMILIES: tuple[KeyFamily, ...] = (
    META,
    SHARD_STREAMS,
    DEAD_LETTERS,
    REDELIVER,
    LEASE_RECORDS,
    LEASE_INDEX,
    SCHEDULE_INDEX,
    TURN,
    HEARTBEAT_RATE,
    ONCE,
    ONCE_PREVIOUS,
    CREDENTIAL_MEMBERS,
    CREDENTIAL_JOINS,
    PREFIXES,
    RETENTION_CURSOR,
    METRICS,
    CREDENTIALS_GENERATION,
)

# Every key of the product: the ACL pattern of the coordinator, which may touch them all.
ALL_KEYS_PATTERN = f"{NAMESPACE}:*"


# ------------------------------------------------------------------------- fields of the metadata hash


@dataclass(frozen=True, slots=True)
class FieldFamily:
    """One family of fields of ``rsc:{P}:meta`` (:func:`meta_key`): ``template`` as docs/store.md writes
    it (``<G>`` a consumer group, ``<member>`` a member id, ``<shard>`` a shard ``v<version>:<index>``,
    ``<slot>`` a change-log slot) and what it holds."""

    template: str
    summary: str


# docs/store.md, "One hash per stream prefix", describes each family in full. Documents are the source of
# truth, each with a revision for compare-and-set; derived fields are recomputed from them in the same
# atomic commit, for the Lua scripts that must decide in O(1) (the heartbeat fast path, data-plane
# fencing, producer routing).
META_FIELDS: tuple[FieldFamily, ...] = (
    FieldFamily("t", "topology document (versions, migration, retention policy, group names)"),
    FieldFamily("t#", "the topology document's revision"),
    FieldFamily("g:<G>", "group header document (config, epochs, target, drained shards; format 2)"),
    FieldFamily("g#:<G>", "the group header's revision, moved on by every group-wide commit"),
    FieldFamily("d:<G>:<member>", "a member's record (without its lease)"),
    FieldFamily("d#:<G>:<member>", "the member record's revision"),
    FieldFamily("gm#:<G>", "counts the member-only commits (a group-wide commit checks it)"),
    FieldFamily("l:<G>:<member>", "a member's lease deadline as the coordinator renewed it (ms)"),
    FieldFamily("route", '"<active_version> <shard_count> <draining versions, comma separated or ->"'),
    FieldFamily("ml:<G>", "the ids of the group's members, space separated"),
    FieldFamily("lt:<G>", "the group's lease TTL in ms (a member's own renewal renews for this long)"),
    FieldFamily("m:<G>:<member>", "a live member's epoch"),
    FieldFamily("o:<G>:<shard>", '"<member> <shard assignment epoch> <R|B|V>": the owner of a shard'),
    FieldFamily("ts:<G>", "the group's tick schedule"),
    FieldFamily("rv:<G>:<member>", "a live member's revocation deadline (ms), while it has one"),
    FieldFamily("ae:<G>", "the group's assignment epoch (for the fast path's stored response)"),
    FieldFamily("ge:<G>", "the group's group epoch (for the fast path's stored response)"),
    FieldFamily("s:<G>:<member>", "a settled member's steady signature, the fast path's"),
    FieldFamily("f:<G>:<member>", "the signature of the version before s: (deleted by commits)"),
    FieldFamily("r:<G>:<member>", "the JSON heartbeat response of a settled member's steady state"),
    FieldFamily("txn", "token of the last commit (detects a retried commit whose reply was lost)"),
    FieldFamily("ds", "the prefix's commit sequence (coordinator/store/change_log.lua)"),
    FieldFamily("dl:<slot>", "the change log of member records, one entry per commit (change_log.lua)"),
)
