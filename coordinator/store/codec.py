"""How the protocol state is laid out in the metadata hash ``rsc:{P}:meta`` (see docs/store.md): the
values of its fields. The keys and the field families are named in rsc_redis/keys.py (``META_FIELDS``).

Documents (the source of truth), each with a revision used for compare-and-set:

* ``t`` / ``t#``: the topology (versions, migration, retention policy) plus the list of group names;
* ``g:<group>`` / ``g#:<group>``: one group's header (config, epochs, target, drained shards; format 2)
  or, in format 1 (read, never written), the whole group with its members;
* ``d:<group>:<member>`` / ``d#:<group>:<member>``: one member's record (without its lease) and its
  revision; ``gm#:<group>`` counts the commits that wrote member records only (see
  ``Committer.commit``: a group-wide commit checks it);
* ``l:<group>:<member>``: a member's lease deadline (ms, Redis clock). Kept apart from the group document
  so that a steady-state heartbeat renews it without rewriting the group.

Derived fields, recomputed from the documents and written in the same atomic commit, for the Lua
scripts that must decide in O(1) (the heartbeat fast path, data-plane fencing, producer routing):

* ``route``: ``"<active_version> <shard_count> <draining versions, comma separated or ->"``;
* ``ml:<group>``: the ids of the group's members, space separated (for loading their leases);
* ``lt:<group>``: the group's lease TTL in ms (a member's own renewal, ``renew_lease.lua``, renews for
  this long; rewritten on every group-wide change, so metadata from before it gets it at the group's
  next epoch bump, and until then the renewal falls back to the TTL in the ``f:`` field of the version
  before ``s:``);
* ``m:<group>:<member>``: a *live* member's epoch;
* ``o:<group>:<shard>``: ``"<member> <shard assignment epoch> <R|B|V>"``: the owner of a shard; ``R``
  readable, ``B`` held back by strict ordering, ``V`` being revoked (ack only);
* ``ts:<group>``: the group's tick schedule (:func:`tick_schedule_field`): with the lease index
  ``rsc:{P}:lz`` (``rsc_redis.keys.lease_index_key``) and the schedule index ``rsc:{P}:sz``
  (``rsc_redis.keys.schedule_index_key``), what lets the tick skip a group with nothing due;
* ``rv:<group>:<member>``: a live member's revocation deadline (ms), while it has one: a member's own
  lease renewal (``renew_lease.lua``) never reaches past it;
* ``ae:<group>``, ``ge:<group>``: the group's assignment and group epochs, which the fast path writes
  into the stored response it answers with;
* ``s:<group>:<member>``: written when the member is *settled*, STABLE and owning exactly its target
  (whatever its epoch: a bump that leaves its target alone leaves it settled), and deleted or rewritten
  by every commit that changes the member or its target:
  ``"<epoch>|<capacity>|<lease ttl ms>|<client digest>|<owner digest>|<owned shards, comma separated>"``,
  the fast path's signature (the owner digest is :func:`identity_digest` of the credential that joined
  the member, "" if none was recorded). The version before wrote ``f:`` (valid only while its epoch
  equaled ``ae:``); a commit deletes a member's ``f:`` with the fields it recomputes;
* ``r:<group>:<member>``: the JSON heartbeat response for that steady state, keys sorted, so that it
  starts with the two epochs the fast path replaces by the group's current ones.

Outside the hash (rsc_redis/keys.py): ``rsc:{P}:hbr:<group>:<member>``, a live member's
heartbeat-floor state, written by ``fast_heartbeat.lua`` with an expiry (never part of the metadata);
``rsc:{P}:lr``, the leases members renewed themselves, written only by
``rsc_redis/dataplane/renew_lease.lua``, read by every lease check, and pruned by the commit that ends
a member.
"""

from __future__ import annotations

import functools
import hashlib
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import orjson

from coordinator.protocol.describe import (
    HeartbeatResponse,
    heartbeat_response,
    migration_fields,
    retention_view,
    topology_from_views,
    version_view,
)
from coordinator.protocol.group import TickSchedule, ended_schedule, readable
from coordinator.protocol.model import (
    ClientInfo,
    EndReason,
    Group,
    GroupConfig,
    Member,
    MemberState,
    PrefixState,
    Shard,
    Topology,
)
from coordinator.protocol.reconciliation import settled
from rsc_redis import keys as rkeys

TOPOLOGY_FORMAT = 1

# Decoding a group of a thousand members parses the same few shard names and states thousands of times.
_shard = functools.lru_cache(maxsize=65_536)(Shard.parse)
_MEMBER_STATES = {s.value: s for s in MemberState}


def _shard_order(shard: Shard) -> tuple[int, int]:
    return shard.version, shard.index  # Shard's own order, without its generated __lt__ per comparison


def _owned_text(shards: Iterable[Shard]) -> str:
    return ",".join(str(s) for s in sorted(shards, key=_shard_order))


@functools.lru_cache(maxsize=512)
def owned_argument(shards: frozenset[Shard]) -> str:
    """A heartbeat's owned shards as the fast path compares them with the ``f:`` field: sorted, comma
    separated. Cached: a steady member's fast path hands the same (parsed once) set every time."""
    return _owned_text(shards)


@functools.cache
def change_log_lua() -> str:
    """``change_log.lua``: the change log's layout, for the script that writes it (``commit.lua``) and the
    one that reads it (``load.lua``); docs/store.md, "Delta loads"."""
    return (Path(__file__).with_name("change_log.lua")).read_text()


def commit_keys(stream_prefix: str) -> list[str]:
    """The keys ``commit.lua`` takes: the metadata hash, the members' own renewals, both indexes."""
    return [
        rkeys.meta_key(stream_prefix),
        rkeys.lease_records_key(stream_prefix),
        rkeys.lease_index_key(stream_prefix),
        rkeys.schedule_index_key(stream_prefix),
    ]


def _dumps(value: object) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


# ---------------------------------------------------------------------------------------------- topology


def encode_topology(topology: Topology, group_names: list[str]) -> str:
    m = topology.migration
    return _dumps(
        {
            "format": TOPOLOGY_FORMAT,
            "stream_prefix": topology.stream_prefix,
            "versions": [version_view(v) for v in topology.versions],
            "migration": None if m is None else migration_fields(m),
            "retention": retention_view(topology.retention),
            "groups": sorted(group_names),
        }
    )


def decode_topology(text: str | bytes) -> tuple[Topology, list[str]]:
    """A document written before retention existed has no ``retention``: the default policy."""
    d = orjson.loads(text)
    topology = topology_from_views(d["stream_prefix"], d["versions"], d["migration"], d.get("retention"))
    return topology, list(d["groups"])


# ---------------------------------------------------------------------------------------------- groups

# Format 1 kept every member inside the group document; format 2 (this version writes only it) keeps the
# group's header there and one record per member in ``d:<group>:<member>`` (docs/store.md). A group
# read in format 1 is written in format 2 by its next commit.
GROUP_FORMAT = 2


def _encode_member(m: Member) -> dict[str, Any]:
    return {
        "state": m.state.value,
        "member_epoch": m.member_epoch,
        "previous_epoch": m.previous_epoch,
        "assigned": {str(s): e for s, e in sorted(m.assigned.items())},
        "revoking": sorted(str(s) for s in m.revoking),
        "revocation_deadline_ms": m.revocation_deadline_ms,
        "capacity": m.capacity,
        "client": {
            "host": m.client.host,
            "pid": m.client.pid,
            "listener": m.client.listener,
            "version": m.client.version,
        },
        "joined_at_ms": m.joined_at_ms,
        "last_heartbeat_ms": m.last_heartbeat_ms,
        "ended_at_ms": m.ended_at_ms,
        "end_reason": m.end_reason.value if m.end_reason else None,
        "owner": m.owner,
        "join_seq": m.join_seq,
        **_static_fields(m),
    }


def _static_fields(m: Member) -> dict[str, Any]:
    """A static member's instance id and hold (docs/protocol.md section 3, "Static membership"): written
    only when set, so that the records of dynamic members stay as they were."""
    fields: dict[str, Any] = {}
    if m.instance_id is not None:
        fields["instance_id"] = m.instance_id
    if m.held_until_ms is not None:
        fields["held_until_ms"] = m.held_until_ms
    return fields


def encode_member(member: Member) -> bytes:
    """A member's record (``d:<group>:<member>``)."""
    return orjson.dumps(_encode_member(member), option=orjson.OPT_SORT_KEYS)


def _last_heartbeat_ms(recorded_ms: int, lease_deadline_ms: int, lease_ttl_ms: int) -> int:
    # The fast path renews only the lease field; the last heartbeat is when that lease was granted.
    return int(max(recorded_ms, lease_deadline_ms - lease_ttl_ms))


def _decode_member(member_id: str, d: Mapping[str, Any], lease_deadline_ms: int, lease_ttl_ms: int) -> Member:
    last_heartbeat_ms = _last_heartbeat_ms(d["last_heartbeat_ms"], lease_deadline_ms, lease_ttl_ms)
    return Member(
        member_id=member_id,
        state=_MEMBER_STATES[d["state"]],
        member_epoch=d["member_epoch"],
        previous_epoch=d["previous_epoch"],
        assigned={_shard(s): e for s, e in d["assigned"].items()},
        revoking=frozenset(_shard(s) for s in d["revoking"]) if d["revoking"] else frozenset(),
        revocation_deadline_ms=d["revocation_deadline_ms"],
        lease_deadline_ms=lease_deadline_ms,
        capacity=d["capacity"],
        client=ClientInfo(**d["client"]),
        joined_at_ms=d["joined_at_ms"],
        last_heartbeat_ms=last_heartbeat_ms,
        ended_at_ms=d["ended_at_ms"],
        end_reason=EndReason(d["end_reason"]) if d["end_reason"] else None,
        owner=d.get("owner", ""),  # absent in documents written before ownership was recorded
        join_seq=d.get("join_seq"),  # likewise before join_seq
        instance_id=d.get("instance_id"),  # written only for static members
        held_until_ms=d.get("held_until_ms"),
    )


# A header lists only the members whose target holds shards, as the core's target does (model.Group):
# each other live member's target is empty. A 10,000-member group on 64 shards stores 64 entries, not
# 10,000. "target_rest": "live" says so to the version that wrote every live member's entry (it
# completes the target with the live members); a header that version wrote whole reads the same, its
# empty entries dropped.
TARGET_REST_LIVE = "live"
_NO_SHARDS: frozenset[Shard] = frozenset()


def encode_group_header(group: Group) -> bytes:
    """The group document of format 2: everything but the members (config, epochs, target, drained)."""
    c = group.config
    target = {m: sorted(map(str, t)) for m, t in group.target.items() if t}
    return orjson.dumps(
        {
            "format": GROUP_FORMAT,
            "stream_prefix": group.stream_prefix,
            "consumer_group": group.consumer_group,
            "config": {
                "max_concurrency": c.max_concurrency,
                "lease_ttl_ms": c.lease_ttl_ms,
                "heartbeat_interval_ms": c.heartbeat_interval_ms,
                "revocation_timeout_ms": c.revocation_timeout_ms,
                "max_members": c.max_members,
            },
            "created_at_ms": group.created_at_ms,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "target": target,
            "target_rest": TARGET_REST_LIVE,
            "drained": sorted(str(s) for s in group.drained),
        },
        option=orjson.OPT_SORT_KEYS,
    )


@dataclass(frozen=True, slots=True, eq=False)
class DecodedGroup:
    """A group as decoded (``group``), with what it was decoded from: the group document's bytes
    (``raw``: in format 1 the members are inside it), each member's record and revision as stored
    (``records``, ``revs``: format 2) and the last heartbeat each member's record states
    (``heartbeats``: the member's own is the later of it and what its lease implies). Nothing else of a
    record is kept beside the members: a large group is many objects for the garbage collector.
    :func:`decode_group_cached` reuses what is byte for byte the same, applying only the leases, which
    live outside the documents. ``position``: the change log's ``(seq, token)`` at which ``records`` and
    ``revs`` were exactly what Redis held (None: unknown), from where a later load reads only the records
    written since (docs/store.md, "Delta loads"). Never mutated once made."""

    raw: bytes
    format: int
    group: Group
    heartbeats: Mapping[str, int]
    records: Mapping[str, bytes]
    revs: Mapping[str, bytes] = field(default_factory=dict)
    position: tuple[int, bytes] | None = None


def decode_group_cached(
    text: str | bytes,
    records: Mapping[str, bytes],
    leases: Mapping[str, int],
    known: DecodedGroup | None,
    *,
    leases_complete: bool = True,
    changed: Collection[str] | None = None,
) -> DecodedGroup:
    """Decode a group from its document and its members' records (format 2; a format-1 document holds
    its members, and ``records`` is empty). What ``known`` holds byte for byte the same is reused: the
    document, and each member whose record did not change, even under a new header (an epoch bump
    rewrites only the header). Such a member is rebuilt only when its lease differs from ``leases`` (its
    lease and the last heartbeat the lease implies), exactly as a fresh decode would make it.

    ``leases_complete`` False: ``leases`` has only some members' leases (a heartbeat reads its own and
    those of the members whose records changed); every other member keeps the lease ``known`` has for it
    (0 when it has none). Such a group is right in everything but those members' leases, which no
    heartbeat decision reads (only the tick's expiry and the descriptions do, and they read them all).

    ``changed``: the only members whose record or lease may differ from ``known``'s (a delta load's);
    the others are taken from ``known`` without looking at them. None: every member is compared."""
    raw = text if isinstance(text, bytes) else text.encode()
    same_document = known is not None and known.raw == raw
    if same_document:
        assert known is not None
        header, form = known.group, known.format
    else:
        d = orjson.loads(raw)
        form = 1 if "members" in d else GROUP_FORMAT
        if form == 1:
            if records:
                raise ValueError(f"a format-1 group document with {len(records)} member records beside it")
            ttl = d["config"]["lease_ttl_ms"]
            encoded = d["members"]
            decoded = {mid: _decode_member(mid, md, leases.get(mid, 0), ttl) for mid, md in encoded.items()}
            recorded = {mid: md["last_heartbeat_ms"] for mid, md in encoded.items()}
            return DecodedGroup(raw, 1, _decode_group_document(d, decoded), recorded, {})
        header = _decode_group_document(d, {})
    ttl = header.config.lease_ttl_ms
    if form == 1:  # the same format-1 document: every member as kept
        assert known is not None
        texts: Mapping[str, Any] = known.group.members
    else:
        texts = records
    kept_members = known.group.members if known is not None else {}
    kept_records = known.records if known is not None else {}
    kept_heartbeats = known.heartbeats if known is not None else {}
    same_ttl = known is not None and known.group.config.lease_ttl_ms == ttl
    scan: Iterable[str] = texts
    added = False
    every = True  # every member is compared (scan is texts), not only the changed ones
    if changed is not None and form == GROUP_FORMAT and same_ttl:  # (same_ttl: known is not None)
        # Only these members may differ from ``known`` (a delta load): every other one is known's.
        members, recorded = dict(kept_members), dict(kept_heartbeats)
        unchanged, every = same_document, False
        scan = [m for m in changed if m in texts]
        for mid in changed:
            if mid not in texts and members.pop(mid, None) is not None:
                del recorded[mid]
                unchanged = False
        added = any(m not in members for m in scan)
        ordered = len(members)  # the kept ones, in document order; the added ones are appended below
    else:
        members, recorded = {}, {}
        unchanged = same_document and len(texts) == len(kept_members)
    # Whether the members come in id order: a whole read's records do, but a delta load's are the kept
    # ones with the records written since appended (patched); a load that read every lease (a
    # description, a tick) compares every member: they are put in order below, as a fresh decode lists
    # them (the changed ones alone are put in order with ``added``).
    in_order, previous = True, ""
    for mid in scan:
        if mid < previous:
            in_order = False
        previous = mid
        record = texts[mid]
        member = kept_members.get(mid)
        if leases_complete:
            lease = leases.get(mid, 0)
        else:
            lease = leases.get(mid, member.lease_deadline_ms if member is not None else 0)
        if member is not None and (form == 1 or kept_records.get(mid) == record):
            at = recorded[mid] = kept_heartbeats[mid]
            if member.lease_deadline_ms != lease or not same_ttl:  # else the same last heartbeat too
                last = _last_heartbeat_ms(at, lease, ttl)
                if member.lease_deadline_ms != lease or member.last_heartbeat_ms != last:
                    member = replace(member, lease_deadline_ms=lease, last_heartbeat_ms=last)
                    unchanged = False
        else:
            unchanged = False
            md = orjson.loads(record)
            recorded[mid] = md["last_heartbeat_ms"]
            member = _decode_member(mid, md, lease, ttl)
        members[mid] = member
    if added:  # in the order of the records (a whole read's: sorted member ids)
        members = in_key_order(members, ordered)
    elif every and not in_order:
        members = {mid: members[mid] for mid in sorted(members)}
    if unchanged:
        assert known is not None
        return known  # nothing moved: the very same state
    return DecodedGroup(raw, form, replace(header, members=members), recorded, dict(records))


_V = TypeVar("_V")


def patched(kept: Mapping[str, _V], changes: Mapping[str, _V | None]) -> Mapping[str, _V]:
    """What a kept group maps its members to (records, revisions, last heartbeats), with ``changes``
    applied (None: the member is gone): ``kept`` itself when nothing changed. These maps are looked up
    and compared, never iterated for their order (the members' order comes from the documents:
    in_document_order, decode_group_cached), so an added member is simply added: keeping them in key
    order cost a sort of every member at every join."""
    if not changes:
        return kept
    out = dict(kept)
    for mid, value in changes.items():
        if value is None:
            out.pop(mid, None)
        else:
            out[mid] = value
    return out


# More keys appended than this: sorted whole instead (bisecting each one would cost more).
_MERGED_AT_MOST = 64


def in_key_order(mapping: Mapping[str, _V], ordered: int) -> dict[str, _V]:
    """``mapping`` as a dict in key order, given that its first ``ordered`` keys are in key order
    already and the rest were appended (a group that members joined): each appended key is put where a
    sort would put it. At 10,000 members a sort of the keys and a dict built key by key cost about a
    millisecond, and pairs of (key, value) made per member wake the garbage collector over every
    object of the group; this bisects for each appended key and builds the dict in C from the keys."""
    keys = list(mapping)
    appended = sorted(keys[ordered:])
    if len(appended) > _MERGED_AT_MOST:
        keys.sort()
    else:
        keys = keys[:ordered]
        at = 0
        for key in appended:
            at = bisect_left(keys, key, at)
            keys.insert(at, key)
            at += 1
    return dict(zip(keys, map(mapping.__getitem__, keys), strict=True))


def in_document_order(group: Group, read: Group | None, touched: Collection[str]) -> Group:
    """``group`` with its members, target and each member's assigned shards in the order a decode of
    its documents yields (sorted keys), so that a group kept from a commit iterates as one read back
    would. ``read``: the group as decoded, that ``group`` was decided from; its members (and target)
    are in that order already, so only what differs from it is put in order: ``touched``, the members
    the decision changed (its records name them: coordinator/protocol/changes.py); every other member
    is ``read``'s as it was, so only ``touched`` is looked at when the member set is the same (a
    heartbeat of a 10,000-member group neither compares nor copies the others)."""
    if read is None:
        members = {m: _assigned_in_document_order(group.members[m]) for m in sorted(group.members)}
        return replace(group, members=members, target=_target_in_order(group, None))
    kept, was, now = len(read.members), read.members, group.members
    if len(now) == kept and all((m in was) == (m in now) for m in touched):
        # The same members (only touched ones can have come or gone), in read's order: the core replaces
        # a member in place. Copied only if a touched member's shards are to be put in order.
        ordered = {m: _assigned_in_document_order(now[m]) for m in touched if m in now}
        changed = {m: member for m, member in ordered.items() if member is not now[m]}
        members: Mapping[str, Member] = {**now, **changed} if changed else now
        return replace(group, members=members, target=_target_in_order(group, read))
    if len(now) > kept and list(islice(now, kept)) == list(was):
        ordered_members = in_key_order(now, kept)  # members joined: appended after read's, in order
    else:
        ordered_members = {m: now[m] for m in sorted(now)}
    for m in touched:
        if m in ordered_members:
            ordered_members[m] = _assigned_in_document_order(ordered_members[m])
    return replace(group, members=ordered_members, target=_target_in_order(group, read))


def _target_in_order(group: Group, read: Group | None) -> Mapping[str, frozenset[Shard]]:
    target = group.target
    if read is None or target is not read.target:
        target = {m: target[m] for m in sorted(target)}
    return target


def _assigned_in_document_order(member: Member) -> Member:
    if len(member.assigned) < 2:
        return member
    shards = list(member.assigned)
    ordered = sorted(shards, key=str)  # the document's keys are the shards' names, sorted
    if shards == ordered:
        return member
    return replace(member, assigned={s: member.assigned[s] for s in ordered})


def _decode_group_document(d: Mapping[str, Any], members: dict[str, Member]) -> Group:
    return Group(
        stream_prefix=d["stream_prefix"],
        consumer_group=d["consumer_group"],
        config=GroupConfig(**d["config"]),
        created_at_ms=d["created_at_ms"],
        group_epoch=d["group_epoch"],
        assignment_epoch=d["assignment_epoch"],
        # Only the entries that hold shards (a header written whole by an earlier version lists every
        # live member; "target_rest" says a header lists only these).
        target={m: frozenset(_shard(s) for s in t) for m, t in d["target"].items() if t},
        drained=frozenset(_shard(s) for s in d["drained"]),
        members=members,
    )


# ---------------------------------------------------------------------------------------------- derived


def response_to_json(r: HeartbeatResponse, stream_prefix: str) -> dict[str, Any]:
    return {
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "member_state": r.member_state.value,
        "group_epoch": r.group_epoch,
        "assignment_epoch": r.assignment_epoch,
        "heartbeat_interval_ms": r.heartbeat_interval_ms,
        "lease_ttl_ms": r.lease_ttl_ms,
        "shards": [
            {
                "shard": str(a.shard),
                "stream_key": rkeys.stream_key(stream_prefix, a.shard),
                "assignment_epoch": a.assignment_epoch,
                "readable": a.readable,
            }
            for a in r.shards
        ],
        "revoking": [str(s) for s in r.revoking],
        "max_concurrency": r.max_concurrency,
        "routing": {"active_version": r.active_version, "shard_count": r.shard_count},
    }


def identity_digest(identity: str) -> str:
    """What the fast path compares of a member's owner ("" for none): short, and free of ``|``."""
    if not identity:
        return ""
    return hashlib.sha1(identity.encode(), usedforsecurity=False).hexdigest()[:16]


def client_signature(client: ClientInfo) -> str:
    """A short digest of the client info, so the fast path can tell whether it changed."""
    text = f"{client.host}\x1f{client.pid}\x1f{client.listener}\x1f{client.version}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def route_field(topology: Topology) -> str:
    active = topology.active_version
    draining = ",".join(str(v.version) for v in topology.draining_versions) or "-"
    return f"{active.version} {active.shard_count} {draining}"


def derived_fields(state: PrefixState) -> dict[str, str]:
    """Every derived field of the topology and of every group loaded in ``state``."""
    fields = {"route": route_field(state.topology)}
    for group in state.groups.values():
        fields.update(group_fields(group))
        for member in group.members.values():
            fields.update(member_fields(group, state.topology, member, with_response=True))
    return fields


def group_fields(group: Group, *, with_schedule: bool = True, with_members: bool = True) -> dict[str, str]:
    """The derived fields of a group. Without ``with_schedule`` the ``ts:`` value is left empty (its key
    is present): the commit rewrites ``ts:`` every time, so the value it replaces is never needed.
    Without ``with_members`` there is no ``ml:`` (a commit that keeps the member set keeps it: at
    10,000 members it is a sort and 100 KB to write)."""
    name = group.consumer_group
    members = {f"ml:{name}": " ".join(sorted(group.members))} if with_members else {}
    return {
        **members,
        f"lt:{name}": str(group.config.lease_ttl_ms),
        # The group's epochs, which the fast path writes into the stored response it answers (a bump
        # that leaves a member's target alone leaves its s: and r: as they are: docs/store.md).
        f"ae:{name}": str(group.assignment_epoch),
        f"ge:{name}": str(group.group_epoch),
        # Format 2: the revocation deadlines are per member, in the schedule index (schedule_index_key),
        # so the first item is always "-".
        f"ts:{name}": tick_schedule_field(ended_schedule(group)) if with_schedule else "",
    }


def tick_schedule_field(schedule: TickSchedule) -> str:
    """``"<next deadline ms or -> <ended members> <oldest end ms or ->"``, read by ``tick_due.lua``."""

    def text(value: int | None) -> str:
        return "-" if value is None else str(value)

    return f"{text(schedule.next_deadline_ms)} {schedule.ended} {text(schedule.oldest_ended_ms)}"


def member_fields(group: Group, topology: Topology, member: Member, *, with_response: bool) -> dict[str, str]:
    """The derived fields of one member. Without ``with_response`` the ``r:`` value is left empty
    (its key is present): callers that only need to know which fields exist skip the JSON."""
    if not member.state.is_live:
        return {}
    name, mid = group.consumer_group, member.member_id
    fields = {f"m:{name}:{mid}": str(member.member_epoch)}
    for shard, grant in member.assigned.items():
        mode = "R" if readable(group, topology, shard) else "B"
        fields[f"o:{name}:{shard}"] = f"{mid} {grant} {mode}"
    for shard in member.revoking:
        fields[f"o:{name}:{shard}"] = f"{mid} 0 V"  # ack-only: any epoch up to the member's
    if member.revocation_deadline_ms is not None:
        fields[f"rv:{name}:{mid}"] = str(member.revocation_deadline_ms)  # caps renew_lease.lua
    if settled(member, group.target.get(mid, _NO_SHARDS)):
        owned = _owned_text(member.assigned)
        ttl, client = group.config.lease_ttl_ms, client_signature(member.client)
        owner = identity_digest(member.owner)
        fields[f"s:{name}:{mid}"] = f"{member.member_epoch}|{member.capacity}|{ttl}|{client}|{owner}|{owned}"
        response = ""
        if with_response:
            response = _dumps(
                response_to_json(heartbeat_response(group, topology, mid), topology.stream_prefix)
            )
        fields[f"r:{name}:{mid}"] = response
    return fields
