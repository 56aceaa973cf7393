"""Reading a stream prefix: ``load.lua`` and the decoding of what it returns (docs/store.md).

:class:`Reader` owns the decoded-group cache: the group documents this process last read or wrote,
decoded, so that a document that has not changed since (byte for byte) is not parsed again, only its
leases applied (codec.DecodedGroup), and a load asks only for what changed since the position it knows
a group at ("Delta loads"). The commit path hands back what it wrote with :meth:`Reader.remember`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.errors import MetadataCorrupt
from coordinator.protocol.model import Group, PrefixState, validate_identifier
from rsc_redis import keys as rkeys

from . import codec
from .replies import text, translate_redis_errors

# Decoded group documents a store keeps (Reader.decoded): enough for the groups one API process
# serves at once; a 1,000-member group takes a few MB decoded.
DECODED_GROUPS_KEPT = 64


@dataclass(frozen=True, slots=True)
class Loaded:
    """What one ``load.lua`` call read: the state and the revisions a commit compares against."""

    now_ms: int
    state: PrefixState | None
    topology_rev: str
    group_revs: dict[str, str]  # every group requested, "" when absent
    group_names: list[str]  # the topology's list (all groups, loaded or not)
    raw_topology: bytes = b""
    decoded: dict[str, codec.DecodedGroup] = field(default_factory=dict)  # what each group was read from
    members_revs: dict[str, str] = field(default_factory=dict)  # gm#:<group>, "" when absent
    record_revs: dict[str, Mapping[str, bytes]] = field(default_factory=dict)  # d#:<group>:<member>
    position: tuple[int, bytes] | None = None  # the change log's (seq, token) this read is at


class Reader:
    """Loads and decodes a prefix's documents. Thread-safe: the cache's entries are immutable and a
    racing thread's eviction is tolerated."""

    def __init__(self, client: redis.Redis | RedisCluster, load_script: Any) -> None:
        self.client = client
        self.load_script = load_script  # load.lua, with the lease-record and change-log rules in front
        # (prefix, group) -> decoded document, in the order of use; the oldest go beyond the bound.
        self.decoded: dict[tuple[str, str], codec.DecodedGroup] = {}

    def read(self, stream_prefix: str, groups: list[str] | None) -> tuple[int, PrefixState | None]:
        """Redis's clock and the state of ``groups`` (None: every group); None if the prefix is absent."""
        validate_identifier(stream_prefix, "stream_prefix")
        loaded = self.load(stream_prefix, groups)
        return loaded.now_ms, loaded.state

    def load(
        self, stream_prefix: str, groups: list[str] | None, lease_of: str | Collection[str] | None = None
    ) -> Loaded:
        """Read the topology and ``groups`` (None: every group), each group a delta of what this store
        knows of it when it can (docs/store.md, "Delta loads"). ``lease_of``: read only the lease of
        that member (or those members), and those of the members whose records changed: the others keep
        the leases this store last saw, which only heartbeats of those members may decide on; None:
        every member's lease."""
        known = {
            name: decoded
            for (prefix, name), decoded in list(self.decoded.items())
            if prefix == stream_prefix
            and (groups is None or name in groups)
            and decoded.format == codec.GROUP_FORMAT
            and decoded.position is not None
        }
        whose = "*" if lease_of is None else lease_of if isinstance(lease_of, str) else " ".join(lease_of)
        args: list[str | bytes | int] = [whose, len(known)]
        for name, decoded in known.items():
            assert decoded.position is not None
            args += [name, decoded.position[0], decoded.position[1]]
        args += ["*"] if groups is None else groups
        with translate_redis_errors():
            keys = [rkeys.meta_key(stream_prefix), rkeys.lease_records_key(stream_prefix)]
            now_ms, topo, trev, position, rows = self.load_script(keys=keys, args=args)
        if not topo:
            return Loaded(int(now_ms), None, "", {}, [])
        at = None if not position else (int(position[0]), bytes(position[1]))
        try:
            return self._decode(stream_prefix, int(now_ms), topo, trev, at, rows, known)
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataCorrupt(
                f"the metadata of stream prefix {stream_prefix!r} is unreadable: {e!r}"
            ) from e

    def remember(self, stream_prefix: str, name: str, decoded: codec.DecodedGroup) -> None:
        key = (stream_prefix, name)
        self.decoded.pop(key, None)  # re-inserted last: the dict's order is the order of use
        self.decoded[key] = decoded
        while len(self.decoded) > DECODED_GROUPS_KEPT:
            with contextlib.suppress(KeyError, StopIteration, RuntimeError):  # another thread's pop
                self.decoded.pop(next(iter(self.decoded)))

    def _decode(
        self,
        stream_prefix: str,
        now_ms: int,
        topo: bytes,
        trev: Any,
        position: tuple[int, bytes] | None,
        rows: list[Any],
        known: Mapping[str, codec.DecodedGroup],
    ) -> Loaded:
        topology, names = codec.decode_topology(topo)
        loaded: dict[str, Group] = {}
        revs: dict[str, str] = {}
        decoded_groups: dict[str, codec.DecodedGroup] = {}
        members_revs: dict[str, str] = {}
        record_revs: dict[str, Mapping[str, bytes]] = {}
        for name, doc, rev, members_rev, whole, ids, docs, doc_revs, lease_ids, leases in rows:
            name = text(name)
            revs[name] = text(rev)
            members_revs[name] = text(members_rev)
            if not doc:
                continue
            members = [text(m) for m in ids]
            lease_map = dict(zip(map(text, lease_ids), map(int, leases), strict=True))
            records: Mapping[str, bytes]
            if int(whole):
                kept = self.decoded.get((stream_prefix, name))
                records = {m: r for m, r in zip(members, docs, strict=True) if r is not None}
                member_revs: Mapping[str, bytes] = dict(zip(members, doc_revs, strict=True))  # as stored
                decoded = codec.decode_group_cached(doc, records, lease_map, kept)
            else:
                # Only what changed since the position this store knew the group at: the rest is as
                # it knows it (the very one whose position it sent, whatever another thread kept since).
                kept = known[name]
                records = codec.patched(kept.records, dict(zip(members, docs, strict=True)))
                gone_or_rev = zip(members, docs, doc_revs, strict=True)
                revs_changed = {m: None if d is None else r for m, d, r in gone_or_rev}
                member_revs = codec.patched(kept.revs, revs_changed)
                # Every member's lease read (a description): every member compared; else only these.
                changed = None if len(lease_map) >= len(records) else {*members, *lease_map}
                decoded = codec.decode_group_cached(
                    doc, records, lease_map, kept, leases_complete=False, changed=changed
                )
            same_revs = decoded.revs is member_revs or decoded.revs == member_revs
            if not same_revs or decoded.position != position:
                decoded = replace(decoded, revs=member_revs, position=position)
            if decoded is not kept:
                self.remember(stream_prefix, name, decoded)
            loaded[name] = decoded.group
            decoded_groups[name] = decoded
            record_revs[name] = member_revs
        return Loaded(
            int(now_ms),
            PrefixState(topology=topology, groups=loaded),
            text(trev),
            revs,
            names,
            topo,
            decoded_groups,
            members_revs,
            record_revs,
            position,
        )

