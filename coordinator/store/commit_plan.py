"""What a commit writes: a decision's records turned into ``commit.lua``'s arguments. Pure: no Redis.

Theory of operation
-------------------
The core returns what it changed as records (coordinator/protocol/changes.py) beside the new state. A
commit writes exactly what those records name, in this store's layout (docs/store.md):

* ``TopologyChanged``, ``GroupCreated``, ``GroupDeleted``: the topology document (its list of groups
  too) and ``route``; every loaded group is then written group-wide (readability, routing).
* per group, the members named by ``MemberChanged`` / ``MemberRemoved`` (*touched*): their records
  (``d:``, ``d#:``), schedule entries and derived fields; ``LeaseSet``: their ``l:`` fields;
  ``LeaseExpired``: an expiry check (the lease must still have ended when the commit runs);
* ``GroupBumped``, ``GroupConfigChanged``, ``DrainedChanged``: the group's header; a bump also the
  fields of the members whose target it moved (``targets_moved``); a change of the config or of the
  drained shards, which every member's fields show, every member's fields.

Records name candidates: one command may change a thing and change it back (a batch of heartbeats), so
where the final value can equal the loaded one (a target, a lease, an expiry) the candidate is checked
against the two states, and only a real difference is written. Nothing else of the two states is
compared: the work is in proportion to what the command changed, not to the group.

Which revisions the commit checks (docs/store.md, "Paths"): a *member-only* commit (only members'
records change: the header's bytes, the member set and the topology stay) checks ``t#``, ``g#`` and the
``d#`` of each record it writes, so commits of different members do not conflict; anything else is
*group-wide*: it checks ``gm#`` (counted up by every member-only commit) and moves ``g#`` on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.protocol.changes import (
    Change,
    DrainedChanged,
    GroupBumped,
    GroupConfigChanged,
    GroupCreated,
    GroupDeleted,
    LeaseExpired,
    LeaseSet,
    MemberChanged,
    MemberRemoved,
    TopologyChanged,
)
from coordinator.protocol.commands import Outcome
from coordinator.protocol.group import revocation_schedule_ms
from coordinator.protocol.model import EndReason, Group, MemberState, PrefixState

from . import codec


class LoadedState(Protocol):
    """What the commit needs of the load its decision was made on (reading.py's ``Loaded``)."""

    @property
    def state(self) -> PrefixState | None: ...
    @property
    def topology_rev(self) -> str: ...
    @property
    def group_revs(self) -> Mapping[str, str]: ...  # every group requested, "" when absent
    @property
    def group_names(self) -> list[str]: ...  # the topology's list (all groups, loaded or not)
    @property
    def raw_topology(self) -> bytes: ...
    @property
    def decoded(self) -> Mapping[str, codec.DecodedGroup]: ...  # what each group was read from
    @property
    def members_revs(self) -> Mapping[str, str]: ...  # gm#:<group>, "" when absent
    @property
    def record_revs(self) -> Mapping[str, Mapping[str, bytes]]: ...  # d#:<group>:<member>


@dataclass(slots=True)
class CommitPlan:
    """``commit.lua``'s seven sections (its header documents them), and ``written``: each group written,
    as it is stored once the commit succeeds (the store keeps it decoded)."""

    checks: list[str | bytes]
    sets: dict[str, str | bytes] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    lease_sets: list[str] = field(default_factory=list)
    expiry_checks: list[str] = field(default_factory=list)
    increments: list[str] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    written: dict[str, codec.DecodedGroup] = field(default_factory=dict)

    def sections(self) -> list[list[str | bytes]]:
        sets: list[str | bytes] = [x for kv in self.sets.items() for x in kv]
        return [
            self.checks,
            sets,
            [*self.deletes],
            [*self.lease_sets],
            [*self.expiry_checks],
            [*self.increments],
            [*self.schedule],
        ]

    def arguments(self) -> list[str | bytes]:
        """The sections as ``commit.lua`` reads them after its token and ``now_ms``: each a count, then
        its items."""
        args: list[str | bytes] = []
        for section in self.sections():
            args += [str(len(section)), *section]
        return args


@dataclass(slots=True)
class GroupChanges:
    """The records of one group, gathered."""

    touched: set[str] = field(default_factory=set)  # MemberChanged, MemberRemoved
    targets_moved: set[str] = field(default_factory=set)  # GroupBumped (the candidates)
    leases: set[str] = field(default_factory=set)  # LeaseSet
    expired: set[str] = field(default_factory=set)  # LeaseExpired
    bumped: bool = False
    group_wide: bool = False  # GroupConfigChanged, DrainedChanged: every member's fields show them
    created: bool = False

    @property
    def header(self) -> bool:
        """The group's header (config, epochs, target, drained) changed."""
        return self.bumped or self.group_wide or self.created


def gather(changes: Iterable[Change]) -> tuple[bool, dict[str, GroupChanges]]:
    """Whether the topology document changed (its list of groups included), and each group's records."""
    topology = False
    groups: dict[str, GroupChanges] = {}
    for change in changes:
        if isinstance(change, TopologyChanged):
            topology = True
            continue
        g = groups.get(change.consumer_group)
        if g is None:
            g = groups[change.consumer_group] = GroupChanges()
        if isinstance(change, MemberChanged | MemberRemoved):
            g.touched.add(change.member_id)
        elif isinstance(change, LeaseSet):
            g.leases.add(change.member_id)
        elif isinstance(change, LeaseExpired):
            g.expired.add(change.member_id)
        elif isinstance(change, GroupBumped):
            g.bumped = True
            g.targets_moved |= change.targets_moved
        elif isinstance(change, GroupConfigChanged | DrainedChanged):
            g.group_wide = True
        elif isinstance(change, GroupCreated):
            g.created = topology = True
        elif isinstance(change, GroupDeleted):  # the group's state is None: all of it goes
            topology = True
    return topology, groups


def plan(loaded: LoadedState, outcome: Outcome) -> CommitPlan:
    """The commit of ``outcome`` (decided on ``loaded``, its state not None): ``commit.lua``'s sections."""
    new = outcome.state
    assert new is not None
    old = loaded.state
    topology_changed, by_group = gather(outcome.changes)
    p = CommitPlan(checks=["t#", loaded.topology_rev])
    if topology_changed:
        topology_changed = _plan_topology(p, loaded, new)
    old_groups: Mapping[str, Group] = old.groups if old else {}
    for name in sorted(set(loaded.group_revs) | set(new.groups)):
        rev = loaded.group_revs.get(name, "")
        p.checks += [f"g#:{name}", rev]
        changes = by_group.get(name)
        if changes is None and not topology_changed:
            continue
        one = _GroupCommit.of(
            name,
            loaded,
            old_groups.get(name),
            new.groups.get(name),
            changes or GroupChanges(),
            topology_changed,
        )
        one.plan(p, loaded, old, new)
    return p


def _plan_topology(p: CommitPlan, loaded: LoadedState, new: PrefixState) -> bool:
    """Write the topology document (and ``route``) if its bytes change: the document lists the groups,
    those of the topology's list that were not loaded included."""
    old = loaded.state
    names = set(loaded.group_names) - (set(loaded.group_revs) - set(new.groups)) | set(new.groups)
    document = codec.encode_topology(new.topology, sorted(names))
    if document.encode() == loaded.raw_topology:
        return False
    p.sets["t"] = document
    p.sets["t#"] = str(int(loaded.topology_rev or 0) + 1)
    route = codec.route_field(new.topology)
    if old is None or codec.route_field(old.topology) != route:
        p.sets["route"] = route
    return True


@dataclass(slots=True, kw_only=True)
class _GroupCommit:
    """One group's part of a commit: the group as loaded (``before``), as decided (``after``; None when
    deleted), what it was read from (``kept``) and what the records say changed."""

    name: str
    before: Group | None
    after: Group | None
    kept: codec.DecodedGroup | None
    changes: GroupChanges
    topology_changed: bool
    touched: set[str]  # the members the command added, changed or removed
    moved: set[str]  # the members whose target entry differs
    header: bytes  # the group document of ``after`` (b"" when it is deleted)
    member_only: bool

    @classmethod
    def of(
        cls,
        name: str,
        loaded: LoadedState,
        before: Group | None,
        after: Group | None,
        changes: GroupChanges,
        topology_changed: bool,
    ) -> _GroupCommit:
        kept = loaded.decoded.get(name)
        if before is None or after is None:  # created or deleted: all of it
            touched = {*(before.members if before else ()), *(after.members if after else ())}
            moved: set[str] = set()
        else:
            touched = changes.touched
            # Candidates of the bumps; a target a later bump of the same command moved back is not moved.
            had, has = before.target, after.target
            moved = {m for m in changes.targets_moved if had.get(m) != has.get(m)}
        header = b""  # the group document of ``after``: the stored one unless the header changed
        if after is not None:
            if (
                kept is not None
                and before is not None
                and kept.format == codec.GROUP_FORMAT
                and not changes.header
            ):
                header = kept.raw
            else:
                header = codec.encode_group_header(after)
        # Only members' records change (a heartbeat reconciling, a revocation clock): the commit checks
        # the header and the records it replaces, so commits of different members do not conflict.
        member_only = (
            not topology_changed
            and before is not None
            and after is not None
            and kept is not None
            and kept.format == codec.GROUP_FORMAT
            and kept.raw == header
            and not _member_set_changed(before, after, touched)
        )
        return cls(
            name=name,
            before=before,
            after=after,
            kept=kept,
            changes=changes,
            topology_changed=topology_changed,
            touched=touched,
            moved=moved,
            header=header,
            member_only=member_only,
        )

    def plan(self, p: CommitPlan, loaded: LoadedState, old: PrefixState | None, new: PrefixState) -> None:
        name, after, kept = self.name, self.after, self.kept
        rev = loaded.group_revs.get(name, "")
        if not self.member_only:
            p.checks += [f"gm#:{name}", loaded.members_revs.get(name, "")]
        if after is not None:
            if kept is None or kept.raw != self.header:
                p.sets[f"g:{name}"] = self.header
            if not self.member_only:
                p.sets[f"g#:{name}"] = str(int(rev or 0) + 1)
            record_revs = loaded.record_revs.get(name, {})
            decoded, rewritten = self._records(record_revs)
            for mid in rewritten:
                p.sets[f"d:{name}:{mid}"] = decoded.records[mid]
                p.sets[f"d#:{name}:{mid}"] = decoded.revs[mid]
                if self.member_only:
                    p.checks += [f"d#:{name}:{mid}", record_revs.get(mid, b"")]
                    if f"gm#:{name}" not in p.increments:
                        p.increments.append(f"gm#:{name}")
            p.written[name] = decoded
            self._leases(p)
        gone = sorted(m for m in self.touched if after is None or m not in after.members)
        p.deletes += [f"{k}:{name}:{m}" for m in gone for k in ("d", "d#")]
        if after is None:
            p.deletes += [f"g:{name}", f"g#:{name}", f"gm#:{name}", *(f"l:{name}:{m}" for m in gone)]
        p.schedule += self._schedule()
        self._derived(p, old, new)

    def _records(self, record_revs: Mapping[str, bytes]) -> tuple[codec.DecodedGroup, list[str]]:
        """``after`` as stored once committed, and the members whose records the commit must write: each
        member's record is the stored one unless the command touched the member and its record differs
        (then it is encoded afresh, at the next revision); every member's is encoded when the group was
        read in format 1 (its members were in the document) or is new."""
        kept, before, after = self.kept, self.before, self.after
        assert after is not None
        stored = kept if kept is not None and kept.format == codec.GROUP_FORMAT else None
        group = codec.in_document_order(after, before if stored is not None else None, self.touched)
        rewritten: list[str] = []
        records: Mapping[str, bytes]
        revs: Mapping[str, bytes]
        heartbeats: Mapping[str, int]
        if stored is None:
            records, revs, heartbeats = {}, {}, {}
            for mid, member in group.members.items():
                records[mid], heartbeats[mid] = codec.encode_member(member), member.last_heartbeat_ms
                revs[mid] = str(int(record_revs.get(mid) or 0) + 1).encode()
                rewritten.append(mid)
        else:
            new_records: dict[str, bytes | None] = {}
            new_revs: dict[str, bytes | None] = {}
            new_heartbeats: dict[str, int | None] = {}
            for mid in sorted(self.touched):
                now = group.members.get(mid)
                if now is None:  # gone
                    new_records[mid] = new_revs[mid] = new_heartbeats[mid] = None
                    continue
                record = codec.encode_member(now)
                if stored.records.get(mid) == record:
                    continue  # the same bytes: not written again
                new_records[mid], new_heartbeats[mid] = record, now.last_heartbeat_ms
                new_revs[mid] = str(int(record_revs.get(mid) or 0) + 1).encode()
                rewritten.append(mid)
            records = codec.patched(stored.records, new_records)
            revs = codec.patched(record_revs, new_revs)
            heartbeats = codec.patched(stored.heartbeats, new_heartbeats)
        decoded = codec.DecodedGroup(
            raw=self.header,
            format=codec.GROUP_FORMAT,
            group=group,
            heartbeats=heartbeats,
            records=records,
            revs=revs,
        )
        return decoded, rewritten

    def _leases(self, p: CommitPlan) -> None:
        """The leases the command set (the other members keep theirs), the expiry checks of those it
        ended on their lease as read, and the leases of the members it removed."""
        name, after = self.name, self.after
        assert after is not None
        previous = self.before.members if self.before else {}
        if self.before is None:  # created: every member's lease is new
            leases: Iterable[str] = sorted(after.members)
        else:
            leases = sorted(self.changes.leases)
        for mid in leases:
            member, was = after.members.get(mid), previous.get(mid)
            if member is not None and (was is None or member.lease_deadline_ms != was.lease_deadline_ms):
                p.lease_sets += [f"l:{name}:{mid}", str(member.lease_deadline_ms)]
        for mid in sorted(self.changes.expired):
            member, was = after.members.get(mid), previous.get(mid)
            if (
                member is not None
                and member.state is MemberState.EXPIRED
                and member.end_reason is EndReason.LEASE_EXPIRED
                and was is not None
                and was.state.is_live
            ):
                # Decided on a lease read at load time: still ended at commit time, or it was renewed.
                p.expiry_checks.append(f"l:{name}:{mid}")
        gone = sorted(mid for mid in self.touched if mid in previous and mid not in after.members)
        p.deletes += [f"l:{name}:{mid}" for mid in gone]

    def _schedule(self) -> list[str]:
        """The schedule index entries (tag, score or "") of the group that change. An entry depends on
        the member and its target only, so only the members the command touched or whose target it
        moved are recomputed (every member of a group read in format 1, which has no entries yet)."""
        kept, before, after = self.kept, self.before, self.after
        indexed = before if kept is not None and kept.format == codec.GROUP_FORMAT else None
        if indexed is None or after is None:
            ids = set(after.members if after is not None else ()) | set(indexed.members if indexed else ())
        else:
            ids = self.touched | self.moved
        changes: list[str] = []
        for mid in sorted(ids):
            old_at = new_at = None
            if indexed is not None and (member := indexed.members.get(mid)) is not None:
                old_at = revocation_schedule_ms(indexed, member)
            if after is not None and (member := after.members.get(mid)) is not None:
                new_at = revocation_schedule_ms(after, member)
            if old_at != new_at:
                changes += [f"{self.name}:{mid}", "" if new_at is None else str(new_at)]
        return changes

    def _derived(self, p: CommitPlan, old: PrefixState | None, new: PrefixState) -> None:
        """Write the derived fields of the group that change; only the members the command touched or
        whose target it moved are recomputed unless something group-wide that every member's fields
        show (config, drained shards, topology) changed. An epoch bump alone is not such a change: it
        rewrites ``ae:`` and ``ge:``, which the fast path writes into the response it answers, so the s:
        and r: of a member the bump left settled stay valid (docs/store.md)."""
        before, after = self.before, self.after
        group_wide = self.topology_changed or before is None or after is None or self.changes.group_wide
        if not group_wide:
            ids = self.touched | self.moved
        else:
            ids = set(before.members if before else ()) | set(after.members if after else ())
        # The group's own derived fields (ml:, lt:, ae:, ts:) follow the member set, the header and the
        # ended members: a member-only change that ends nobody leaves them as they are.
        same_group_fields = self.member_only and self._ends_nobody()
        old_fields: dict[str, str] = {}
        new_fields: dict[str, str] = {}
        if not same_group_fields:
            # ml: lists the member ids: written when the member set changed (the old value is needed
            # only to delete it with the group).
            ids_changed = before is None or after is None or _member_set_changed(before, after, self.touched)
            if before is not None:
                old_fields = codec.group_fields(before, with_schedule=False, with_members=after is None)
            new_fields = codec.group_fields(after, with_members=ids_changed) if after else {}
        for mid in ids:
            if before is not None and old is not None and mid in before.members:
                old_fields.update(
                    codec.member_fields(before, old.topology, before.members[mid], with_response=False)
                )
            if after is not None and mid in after.members:
                new_fields.update(
                    codec.member_fields(after, new.topology, after.members[mid], with_response=True)
                )
        # s: and r: are always rewritten (r:'s key marks "computed"; a group stored by the version before
        # s: has f: instead, so a recomputed member gets its s: whatever its fields were), and ts: (a
        # group whose ts: is new has its members indexed by commit.lua); lt: on every group-wide change
        # and epoch bump, so that metadata written before it existed gets it at the group's next bump.
        epochs_moved = before is None or after is None or self.changes.bumped
        p.sets.update(
            {
                k: v
                for k, v in new_fields.items()
                if k.startswith(("s:", "r:", "ts:"))
                or ((group_wide or epochs_moved) and k.startswith("lt:"))
                or old_fields.get(k) != v
            }
        )
        p.deletes += [k for k in old_fields if k not in new_fields]
        # The fast path answers a settled member with the group's epochs (ae:, ge:): written whenever the
        # group's fields are and with every signature, so that a group stored by a version without ge:
        # has both once it has a signature; lt: too (a member's own renewal reads its TTL there, and
        # only metadata from before lt: falls back to the f: signature, which goes with this commit).
        if after is not None and (not same_group_fields or any(k.startswith("s:") for k in new_fields)):
            name = after.consumer_group
            p.sets[f"ae:{name}"], p.sets[f"ge:{name}"] = str(after.assignment_epoch), str(after.group_epoch)
            p.sets[f"lt:{name}"] = str(after.config.lease_ttl_ms)
        # A recomputed member without a signature now may still have one that a coordinator of another
        # version left (also when the group goes: nothing of it may stay behind); and the f: signature
        # of the version before s: goes with the first recomputation of its member.
        group = after or before
        if group is not None:
            name = group.consumer_group
            for mid in ids:
                if f"s:{name}:{mid}" not in new_fields and f"s:{name}:{mid}" not in old_fields:
                    p.deletes += [f"s:{name}:{mid}", f"r:{name}:{mid}"]
                p.deletes.append(f"f:{name}:{mid}")

    def _ends_nobody(self) -> bool:
        """No member the command touched ended (or came back): the ended members a group's ts: field
        counts are as they were."""
        if self.before is None or self.after is None:
            return False
        was, now = self.before.members, self.after.members
        return all(m in was and m in now and was[m].ended_at_ms == now[m].ended_at_ms for m in self.touched)


def _member_set_changed(before: Group, after: Group, touched: Iterable[str]) -> bool:
    """A member joined or was removed: only the members the command touched can have."""
    was, now = before.members, after.members
    return any((m in was) != (m in now) for m in touched)
