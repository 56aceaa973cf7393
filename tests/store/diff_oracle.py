"""A reference for the commit plan: the store's commit path as it was before the core returned its
changes as records. It worked out what a command changed by comparing the loaded and the new state, and
decided which members a command touched by the identity of their Member objects (the core derives new
groups with ``dataclasses.replace``, so a member it did not touch is the very same object): a contract
the product no longer relies on. Kept here verbatim (but for returning a ``CommitPlan``), test code that
nothing of the product imports: ``coordinator.store.commit_plan.plan`` must make exactly its plan on
every commit of the store, tick and API tests and on every transition of the state machine of
tests/store/test_commit_plan.py (docs/store.md, "What a commit writes").

Should the core one day put new Member objects in place of unchanged ones, this reference (not the
records) is what no longer holds: it would then name more members than the records, and the equality
fails with the plans side by side."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from itertools import compress, islice
from operator import is_not
from typing import Any

import pytest

from coordinator.protocol.commands import Outcome
from coordinator.protocol.group import revocation_schedule_ms
from coordinator.protocol.model import EndReason, Group, Member, MemberState, PrefixState, Shard
from coordinator.store import codec, commit_plan
from coordinator.store.commit_plan import CommitPlan, plan


def diff_plan(loaded: Any, new: PrefixState) -> CommitPlan:
    old = loaded.state
    old_groups: dict[str, Group] = dict(old.groups) if old else {}
    checks: list[str | bytes] = ["t#", loaded.topology_rev]
    sets: dict[str, str | bytes] = {}
    deletes: list[str] = []
    lease_sets: list[str] = []
    expiry_checks: list[str] = []
    increments: list[str] = []
    schedule: list[str] = []

    written: dict[str, codec.DecodedGroup] = {}
    names = set(loaded.group_names) - (set(loaded.group_revs) - set(new.groups)) | set(new.groups)
    topo_doc = codec.encode_topology(new.topology, sorted(names))
    topology_changed = topo_doc.encode() != loaded.raw_topology
    if topology_changed:
        sets["t"] = topo_doc
        sets["t#"] = str(int(loaded.topology_rev or 0) + 1)
        route = codec.route_field(new.topology)
        if old is None or codec.route_field(old.topology) != route:
            sets["route"] = route

    for name in sorted(set(loaded.group_revs) | set(new.groups)):
        rev = loaded.group_revs.get(name, "")
        checks += [f"g#:{name}", rev]
        before, after = old_groups.get(name), new.groups.get(name)
        if before is after and not topology_changed:
            continue
        kept = loaded.decoded.get(name)
        touched = _touched(before, after)
        header = _header_of(kept, before, after)
        # Only members' records change (a heartbeat reconciling, a revocation clock): the commit
        # checks the header and the records it replaces, so commits of different members do not
        # conflict. Anything else is group-wide: it checks that no record changed since it loaded
        # (gm#, counted up by every member-only commit) and moves the header's revision on.
        member_only = (
            not topology_changed
            and before is not None
            and after is not None
            and kept is not None
            and kept.format == codec.GROUP_FORMAT
            and kept.raw == header
            and before.members.keys() == after.members.keys()
        )
        if not member_only:
            checks += [f"gm#:{name}", loaded.members_revs.get(name, "")]
        if after is not None:
            if kept is None or kept.raw != header:
                sets[f"g:{name}"] = header
            if not member_only:
                sets[f"g#:{name}"] = str(int(rev or 0) + 1)
            record_revs = loaded.record_revs.get(name, {})
            decoded, rewritten = _record_changes(kept, before, after, header, record_revs, touched)
            for mid in rewritten:
                sets[f"d:{name}:{mid}"] = decoded.records[mid]
                sets[f"d#:{name}:{mid}"] = decoded.revs[mid]
                if member_only:
                    checks += [f"d#:{name}:{mid}", record_revs.get(mid, b"")]
                    if f"gm#:{name}" not in increments:
                        increments.append(f"gm#:{name}")
            written[name] = decoded
            lease_sets += _lease_changes(name, before, after, touched, deletes, expiry_checks)
        gone = sorted(m for m in touched if after is None or m not in after.members)
        deletes += [f"{k}:{name}:{m}" for m in gone for k in ("d", "d#")]
        if after is None:
            deletes += [f"g:{name}", f"g#:{name}", f"gm#:{name}", *(f"l:{name}:{m}" for m in gone)]
        moved = _targets_moved(before, after)
        schedule += _schedule_changes(name, kept, before, after, touched, moved)
        # The group's own derived fields (ml:, lt:, ae:, ts:) follow the member set, the header and
        # the ended members: a member-only change that ends nobody leaves them as they are.
        same_group_fields = member_only and _ends_nobody(before, after, touched)
        _diff_derived(
            old, before, new, after, topology_changed, touched | moved, sets, deletes, same_group_fields
        )
    return CommitPlan(
        checks=checks,
        sets=sets,
        deletes=deletes,
        lease_sets=lease_sets,
        expiry_checks=expiry_checks,
        increments=increments,
        schedule=schedule,
        written=written,
    )


def assert_plans_equal(loaded: Any, outcome: Outcome) -> CommitPlan:
    """The record-driven plan of ``outcome`` is exactly the one the diff makes: every section, item for
    item and in the same order, and every group it leaves decoded (members in the same order). The
    sets and deletes are compared whatever their order: the diff lists a group's derived fields in the
    order of a set of member ids, which varies with the hash seed of the process (commit.lua sets and
    deletes each field on its own; the change log lists the records, d:, in sorted order either way)."""
    assert outcome.state is not None
    got, want = plan(loaded, outcome), diff_plan(loaded, outcome.state)
    ordered = (got.checks, got.lease_sets, got.expiry_checks, got.increments, got.schedule)
    expected = (want.checks, want.lease_sets, want.expiry_checks, want.increments, want.schedule)
    assert ordered == expected, (outcome.changes, ordered, expected)
    assert got.sets == want.sets, (outcome.changes, got.sets, want.sets)
    assert sorted(got.deletes) == sorted(want.deletes), (outcome.changes, got.deletes, want.deletes)
    records = [k for k in got.sets if k.startswith("d:")]
    assert records == [k for k in want.sets if k.startswith("d:")]  # the change log's order
    assert got.written.keys() == want.written.keys()
    for name, decoded in got.written.items():
        other = want.written[name]
        assert (decoded.raw, decoded.format, decoded.group) == (other.raw, other.format, other.group)
        assert list(decoded.group.members) == list(other.group.members)
        assert list(decoded.group.target) == list(other.group.target)
        for mid, member in decoded.group.members.items():
            assert list(member.assigned) == list(other.group.members[mid].assigned)
        assert dict(decoded.records) == dict(other.records) and dict(decoded.revs) == dict(other.revs)
        assert dict(decoded.heartbeats) == dict(other.heartbeats)
    return got


def _record_changes(
    kept: codec.DecodedGroup | None,
    before: Group | None,
    after: Group,
    header: bytes,
    record_revs: Mapping[str, bytes],
    touched: set[str],
) -> tuple[codec.DecodedGroup, list[str]]:
    """``after`` as stored once committed, and the members whose records the commit must write: each
    member's record is the stored one unless the command touched the member and its record differs
    (then it is encoded afresh, at the next revision); every member's is encoded when the group was
    read in format 1 (its members were in the document) or is new."""
    stored = kept if kept is not None and kept.format == codec.GROUP_FORMAT else None
    group = in_document_order(after, before if stored is not None else None, touched)
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
        for mid in sorted(touched):
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
        raw=header,
        format=codec.GROUP_FORMAT,
        group=group,
        heartbeats=heartbeats,
        records=records,
        revs=revs,
    )
    return decoded, rewritten


def _schedule_changes(
    name: str,
    kept: codec.DecodedGroup | None,
    before: Group | None,
    after: Group | None,
    touched: set[str],
    moved: set[str],
) -> list[str]:
    """The schedule index entries (tag, score or "") of one group that change. An entry depends on the
    member and its target only, so only members the command touched or whose target entry changed
    (``moved``) are recomputed (every member of a group read in format 1, which has no entries yet)."""
    indexed = before if kept is not None and kept.format == codec.GROUP_FORMAT else None
    if indexed is None or after is None:
        ids = set(after.members if after is not None else ()) | set(indexed.members if indexed else ())
    else:
        ids = touched | moved
    changes: list[str] = []
    for mid in sorted(ids):
        old_at = new_at = None
        if indexed is not None and (member := indexed.members.get(mid)) is not None:
            old_at = revocation_schedule_ms(indexed, member)
        if after is not None and (member := after.members.get(mid)) is not None:
            new_at = revocation_schedule_ms(after, member)
        if old_at != new_at:
            changes += [f"{name}:{mid}", "" if new_at is None else str(new_at)]
    return changes


def _diff_derived(
    old: PrefixState | None,
    before: Group | None,
    new: PrefixState,
    after: Group | None,
    topology_changed: bool,
    touched: set[str],
    sets: dict[str, str | bytes],
    deletes: list[str],
    same_group_fields: bool = False,
) -> None:
    """Write the derived fields of one group that changed; only the members in ``touched`` (those
    the command changed, and those whose target it moved) are recomputed unless something
    group-wide that every member's fields show (config, drained shards, topology) changed. An epoch
    bump alone is not such a change: it rewrites ``ae:`` and ``ge:``, which the fast path writes
    into the response it answers, so the s: and r: of a member the bump left settled stay valid
    (docs/store.md).
    ``same_group_fields``: the group's own fields cannot have changed (a member-only commit of a
    group read in format 2, which has every one of them, ending nobody): they are not recomputed."""
    group_wide = (
        topology_changed
        or before is None
        or after is None
        or (before.config, before.drained) != (after.config, after.drained)
    )
    if not group_wide:
        ids = touched
    else:
        ids = set(before.members if before else ()) | set(after.members if after else ())
    old_fields: dict[str, str] = {}
    new_fields: dict[str, str] = {}
    if not same_group_fields:
        # ml: lists the member ids: written when the member set changed (the old value is needed
        # only to delete it with the group).
        ids_changed = before is None or after is None or before.members.keys() != after.members.keys()
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
    # s: has f: instead, so a recomputed member gets its s: whatever the diff says), and ts: (a group
    # whose ts: is new has its members indexed by commit.lua); lt: on every group-wide change and
    # epoch bump, so that metadata written before it existed gets it at the group's next bump.
    epochs_moved = (
        before is None
        or after is None
        or (before.group_epoch, before.assignment_epoch) != (after.group_epoch, after.assignment_epoch)
    )
    sets.update(
        {
            k: v
            for k, v in new_fields.items()
            if k.startswith(("s:", "r:", "ts:"))
            or ((group_wide or epochs_moved) and k.startswith("lt:"))
            or old_fields.get(k) != v
        }
    )
    deletes += [k for k in old_fields if k not in new_fields]
    # The fast path answers a settled member with the group's epochs (ae:, ge:): written whenever the
    # group's fields are and with every signature, so that a group stored by a version without ge:
    # has both once it has a signature; lt: too (a member's own renewal reads its TTL there, and
    # only metadata from before lt: falls back to the f: signature, which goes with this commit).
    if after is not None and (not same_group_fields or any(k.startswith("s:") for k in new_fields)):
        name = after.consumer_group
        sets[f"ae:{name}"], sets[f"ge:{name}"] = str(after.assignment_epoch), str(after.group_epoch)
        sets[f"lt:{name}"] = str(after.config.lease_ttl_ms)
    # A recomputed member without a signature now may still have one that a coordinator of another
    # version left (also when the group goes: nothing of it may stay behind); and the f: signature
    # of the version before s: goes with the first recomputation of its member.
    group = after or before
    if group is not None:
        name = group.consumer_group
        for mid in ids:
            if f"s:{name}:{mid}" not in new_fields and f"s:{name}:{mid}" not in old_fields:
                deletes += [f"s:{name}:{mid}", f"r:{name}:{mid}"]
            deletes.append(f"f:{name}:{mid}")


def _lease_changes(
    name: str,
    before: Group | None,
    after: Group,
    touched: set[str],
    deletes: list[str],
    expiry_checks: list[str],
) -> list[str]:
    """The leases of the members the command touched (the others keep theirs: the same lease)."""
    lease_sets: list[str] = []
    previous = before.members if before else {}
    for mid in sorted(touched):
        member = after.members.get(mid)
        if member is None:
            continue
        was = previous.get(mid)
        if was is None or member.lease_deadline_ms != was.lease_deadline_ms:
            lease_sets += [f"l:{name}:{mid}", str(member.lease_deadline_ms)]
        if (
            member.state is MemberState.EXPIRED
            and member.end_reason is EndReason.LEASE_EXPIRED
            and was is not None
            and was.state.is_live
        ):
            # Decided on a lease read at load time: still ended at commit time, or it was renewed.
            expiry_checks.append(f"l:{name}:{mid}")
    gone = sorted(mid for mid in touched if mid in previous and mid not in after.members)
    deletes += [f"l:{name}:{mid}" for mid in gone]
    return lease_sets


_TOUCHED_EXACT_ABOVE = 64


def _touched(before: Group | None, after: Group | None) -> set[str]:
    """The members a command added, changed (another Member object) or removed; the core derives a new
    group with ``dataclasses.replace``, so every member it did not touch is the very same object."""
    if before is None or after is None:
        return {*(before.members if before else ()), *(after.members if after else ())}
    was, now = before.members, after.members
    if was.keys() == now.keys():
        # The same members (the usual case: a heartbeat, a bump): compared pairwise in C. Both in the
        # same order (the core replaces values in place), a pair is the same member; in another order
        # a pair of different members only reads as touched (never the reverse: a Member object is one
        # member's), so a result that large is computed again exactly.
        ids = set(compress(now, map(is_not, now.values(), was.values())))
        if len(ids) <= _TOUCHED_EXACT_ABOVE:
            return ids
    elif len(now) > len(was) and list(islice(now, len(was))) == list(was):
        # Members joined: the core appends them after the others, in the same order (checked), so the
        # others compare pairwise in C, exactly.
        ids = set(compress(now, map(is_not, now.values(), was.values())))
        return ids | set(islice(now, len(was), None))
    get = was.get
    ids = {m for m, member in now.items() if get(m) is not member}
    return ids | (was.keys() - now.keys())


def _targets_moved(before: Group | None, after: Group | None) -> set[str]:
    """The members whose target entry differs between the two groups: a bump may move the targets of
    members the command did not touch, and their derived fields and schedule follow their target. A
    target lists only the members with shards (model.Group.target): this is in proportion to the
    shards, not to the members."""
    if before is None or after is None or before.target is after.target:
        return set()
    had, has = before.target, after.target
    return {m for m in had.keys() | has.keys() if had.get(m) != has.get(m)}


def _ends_nobody(before: Group | None, after: Group | None, touched: set[str]) -> bool:
    """No member the command touched ended (or came back): the ended members a group's ts: field counts
    are as they were."""
    if before is None or after is None:
        return False
    was, now = before.members, after.members
    return all(m in was and m in now and was[m].ended_at_ms == now[m].ended_at_ms for m in touched)


def _header_of(kept: codec.DecodedGroup | None, before: Group | None, after: Group | None) -> bytes:
    """The group document (header) of ``after``: the stored one when nothing it holds changed (most
    heartbeats change members' records only), else encoded afresh."""
    if after is None:
        return b""
    if (
        kept is not None
        and before is not None
        and kept.format == codec.GROUP_FORMAT
        and after.target is before.target
        and (after.config, after.group_epoch, after.assignment_epoch, after.drained, after.created_at_ms)
        == (before.config, before.group_epoch, before.assignment_epoch, before.drained, before.created_at_ms)
    ):
        return kept.raw
    return codec.encode_group_header(after)


COMPARED = [0]  # commits compared in this process (tests report it when asked)


@pytest.fixture(autouse=True)
def every_commit_checked_against_the_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit a test makes through a store is planned both ways; they must be equal, and the
    store sends the plan made from the records."""

    def checked(loaded: Any, outcome: Outcome) -> CommitPlan:
        got = assert_plans_equal(loaded, outcome)
        COMPARED[0] += 1
        return got

    monkeypatch.setattr(commit_plan, "plan", checked)


def in_document_order(group: Group, read: Group | None, touched: Collection[str]) -> Group:
    """``group`` with its members, target and each member's assigned shards in the order a decode of
    its documents yields (sorted keys), so that a group kept from a commit iterates as one read back
    would. ``read``: the group as decoded, that ``group`` was decided from; its members (and target)
    are in that order already, so only what differs from it (``touched``: the members that are not
    ``read``'s very objects) is put in order."""
    if read is None:
        members = {m: _assigned_in_document_order(group.members[m]) for m in sorted(group.members)}
        return replace(group, members=members, target=_target_in_order(group, None))
    kept = len(read.members)
    if read.members.keys() == group.members.keys():
        members = dict(group.members)
    elif len(group.members) > kept and list(islice(group.members, kept)) == list(read.members):
        members = codec.in_key_order(group.members, kept)  # members joined: appended after read's, in order
    else:
        members = {m: group.members[m] for m in sorted(group.members)}
    for m in touched:
        if m in members:
            members[m] = _assigned_in_document_order(members[m])
    return replace(group, members=members, target=_target_in_order(group, read))


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
