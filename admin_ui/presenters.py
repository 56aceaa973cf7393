"""Turn the store's operator views (``describe_group``, ``describe_prefix``, ``list_groups``) into rows
that templates print as they are. No I/O here; every relative time is computed against the ``now_ms``
that came with the view (Redis's clock), never the web server's.

Whether a shard is readable is decided by the protocol core's own rule
(:meth:`coordinator.protocol.model.Topology.blocked_by`, the same one ``group.readable`` uses), applied
to a topology rebuilt from the view, so the page cannot disagree with what members are told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from math import gcd
from typing import Any

from coordinator.protocol.describe import topology_from_views
from coordinator.protocol.model import (
    MemberState,
    Migration,
    OrderingMode,
    RoutingVersion,
    Shard,
    Topology,
    VersionState,
)
from coordinator.store.codec import stream_key

View = Mapping[str, Any]


# ------------------------------------------------------------------------------------------ formatting


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as ``2026-11-29 12:03:04 UTC``; an em dash for ``None``."""
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds(ms: int | None) -> str:
    """A duration in milliseconds as seconds with one decimal, e.g. ``8.5 s``."""
    if ms is None:
        return "—"
    return f"{ms / 1000:.1f} s"


def until(deadline_ms: int | None, now_ms: int) -> str:
    """``in 12.0 s`` or ``overdue by 3.0 s``."""
    if deadline_ms is None:
        return "—"
    left = deadline_ms - now_ms
    return f"in {seconds(left)}" if left >= 0 else f"overdue by {seconds(-left)}"


def ago(ms: int | None, now_ms: int) -> str:
    return "—" if ms is None else f"{seconds(max(0, now_ms - ms))} ago"


def sort_shards(shards: Any) -> list[str]:
    return sorted(shards, key=Shard.parse)


# ------------------------------------------------------------------------------------------ groups list


def migration_badge(prefix_view: View | None, consumer_group: str) -> dict[str, Any] | None:
    """``{active, text}`` for a group's row, or None when its prefix was never resharded."""
    if prefix_view is None or not prefix_view.get("migration"):
        return None
    m = prefix_view["migration"]
    arrow = f"v{m['from_version']} → v{m['to_version']} ({m['ordering']})"
    if not m["active"]:
        return {"active": False, "text": f"{arrow} completed {utc(m['completed_at_ms'])}"}
    versions = {v["version"]: v for v in prefix_view["topology"]["versions"]}
    total = versions[m["from_version"]]["shard_count"]
    drained = len(m["drained"].get(consumer_group, ()))
    return {"active": True, "text": f"migrating {arrow}: {drained}/{total} drained"}


def group_rows(groups: list[dict[str, Any]], prefixes: Mapping[str, View | None]) -> list[dict[str, Any]]:
    return [
        {**row, "migration": migration_badge(prefixes.get(row["stream_prefix"]), row["consumer_group"])}
        for row in groups
    ]


# ------------------------------------------------------------------------------------------ group detail


def topology_of(view: View) -> Topology:
    """The core's Topology rebuilt from a description (for the core's readability rule)."""
    t = view["topology"]
    return topology_from_views(t["stream_prefix"], t["versions"], view["migration"])


@dataclass(slots=True)
class ShardRow:
    shard: str
    stream_key: str
    version_state: str
    owner: str = ""
    owner_assignment_epoch: int | None = None
    target: str = ""
    status: str = "unassigned"  # readable / held / revoking / awaiting pickup / drained / unassigned
    css: str = "muted"
    notes: list[str] = field(default_factory=list)


def _owners(view: View) -> dict[str, tuple[str, int | None, bool]]:
    """shard -> (member, its assignment epoch or None, being revoked) for live members."""
    owners: dict[str, tuple[str, int | None, bool]] = {}
    for m in view["members"]:
        for a in m["current_assignment"]:
            owners[a["shard"]] = (m["member_id"], a["assignment_epoch"], False)
        for s in m["revoking"]:
            owners[s] = (m["member_id"], None, True)
    return owners


def shard_rows(view: View) -> list[ShardRow]:
    """One row per shard of every non-retired version: owner, readability, revocation, target."""
    topology = topology_of(view)
    migration = view["migration"]
    drained = {
        Shard.parse(s) for s in (migration["drained"].get(view["consumer_group"], ()) if migration else ())
    }
    owners = _owners(view)
    target_of = {s: member for member, shards in view["target_assignment"].items() for s in shards}
    deadlines = {p["shard"]: p["deadline_ms"] for p in view["pending_revocations"]}
    rows = []
    for version in topology.versions:
        if version.state is VersionState.RETIRED:
            continue
        for shard in version.shards():
            rows.append(
                _shard_row(shard, version, owners, target_of, drained, topology, deadlines, view["now_ms"])
            )
    return rows


def _shard_row(
    shard: Shard,
    version: RoutingVersion,
    owners: Mapping[str, tuple[str, int | None, bool]],
    target_of: Mapping[str, str],
    drained: set[Shard],
    topology: Topology,
    deadlines: Mapping[str, int | None],
    now_ms: int,
) -> ShardRow:
    name = str(shard)
    row = ShardRow(
        shard=name,
        stream_key=stream_key(topology.stream_prefix, shard),
        version_state=version.state.value,
        target=target_of.get(name, ""),
    )
    waiting_for = sorted(topology.blocked_by(shard) - drained)
    if waiting_for:
        row.notes.append("strict ordering: waits for " + ", ".join(map(str, waiting_for)) + " to drain")
    owner = owners.get(name)
    if owner is not None:
        row.owner, row.owner_assignment_epoch, revoking = owner
        if revoking:
            row.status, row.css = "being revoked", "warn"
            row.notes.append(f"release deadline {until(deadlines.get(name), now_ms)}")
        elif waiting_for:
            row.status, row.css = "held by strict ordering", "warn"
        else:
            row.status, row.css = "readable", "ok"
        if row.target and row.target != row.owner:
            row.notes.append(f"moves to {row.target} once released")
        elif shard in drained:
            row.notes.append("drained for this group: the owner gives it up on its next heartbeat")
    elif row.target:
        row.status, row.css = "awaiting pickup", "info"
        row.notes.append(f"granted to {row.target} on its next heartbeat")
    elif shard in drained:
        row.status, row.css = "drained", "muted"
    return row


def is_live(member: View) -> bool:
    return MemberState(member["state"]).is_live


def member_rows(view: View) -> list[dict[str, Any]]:
    now_ms = view["now_ms"]
    rows = []
    for m in view["members"]:
        client = m["client"]
        rows.append(
            {
                **m,
                "live": is_live(m),
                "lease_remaining": seconds(m["lease_remaining_ms"]),
                # Still live although its lease ran out: the tick has not run since (is beat running?).
                "lease_expired": is_live(m) and m["lease_remaining_ms"] == 0,
                "client_text": f"{client['host'] or '?'} pid {client['pid'] or '?'}",
                "revocation_deadline": until(m["revocation_deadline_ms"], now_ms),
                "last_heartbeat": ago(m["last_heartbeat_ms"], now_ms),
                "ended": ""
                if m["ended_at_ms"] is None
                else f"{m['end_reason']} {ago(m['ended_at_ms'], now_ms)}",
            }
        )
    return rows


def revocation_rows(view: View) -> dict[str, list[dict[str, Any]]]:
    now_ms = view["now_ms"]
    return {
        "pending": [
            {
                **p,
                "deadline": until(p["deadline_ms"], now_ms),
                "overdue": (p["deadline_ms"] or now_ms) < now_ms,
            }
            for p in view["pending_revocations"]
        ],
        "unreleased": list(view["unreleased_shards"]),
        "awaiting_pickup": list(view["awaiting_pickup"]),
    }


def migration_progress(view: View) -> dict[str, Any] | None:
    m = view["migration"]
    if m is None:
        return None
    total = m["shards_to_drain"]
    groups = [
        {
            "consumer_group": name,
            "drained": len(shards),
            "total": total,
            "percent": 100 if total == 0 else round(100 * len(shards) / total),
            "remaining": [
                f"v{m['from_version']}:{i}" for i in range(total) if f"v{m['from_version']}:{i}" not in shards
            ],
            "is_this_group": name == view["consumer_group"],
        }
        for name, shards in sorted(m["drained"].items())
    ]
    end_ms = m["completed_at_ms"] if m["completed_at_ms"] is not None else view["now_ms"]
    return {
        **m,
        "groups": groups,
        "started": utc(m["started_at_ms"]),
        "completed": utc(m["completed_at_ms"]),
        "duration": seconds(end_ms - m["started_at_ms"]),
    }


def version_rows(view: View) -> list[dict[str, Any]]:
    return [
        {
            **v,
            "created": utc(v["created_at_ms"]),
            "sealed": utc(v["sealed_at_ms"]),
            "retired": utc(v["retired_at_ms"]),
        }
        for v in view["topology"]["versions"]
    ]


def group_detail(view: View, prefix_view: View | None = None) -> dict[str, Any]:
    """Everything the group detail page shows (``prefix_view``: the prefix's retention policy)."""
    members = member_rows(view)
    backlog = backlog_rows(view)
    return {
        "view": view,
        "members": [m for m in members if m["live"]],
        "ended_members": [m for m in members if not m["live"]],
        "shards": shard_rows(view),
        # Shards with something to show first; the idle ones (nothing undelivered or pending) folded.
        "backlog": [b for b in backlog if not b["idle"]],
        "backlog_idle": [b for b in backlog if b["idle"]],
        "dead_letters": view.get("dead_letters"),
        "revocations": revocation_rows(view),
        "migration": migration_progress(view),
        "undrained": undrained_rows(view),
        "release_drain_allowed": release_drain_allowed(view),
        "retention": retention_view(prefix_view),
        "versions": version_rows(view),
        "now": utc(view["now_ms"]),
        "live_members": sum(1 for m in members if m["live"]),
    }


# ------------------------------------------------------------------------------------------ confirmation

# Up to this many new shards, the confirmation page lists what each one waits for under strict ordering.
MAX_DEPENDENCY_ROWS = 64


def strict_dependencies(topology_view: View, new_shard_count: int) -> dict[str, Any]:
    """What strict ordering would make each new shard wait for (docs/protocol.md section 8), by the
    core's own rule applied to the topology the change would create."""
    old, old_count = topology_view["active_version"], topology_view["shard_count"]
    new = old + 1
    after = Topology(
        stream_prefix=topology_view["stream_prefix"],
        versions=(
            RoutingVersion(version=old, shard_count=old_count, state=VersionState.DRAINING, created_at_ms=0),
            RoutingVersion(
                version=new, shard_count=new_shard_count, state=VersionState.ACTIVE, created_at_ms=0
            ),
        ),
        migration=Migration(from_version=old, to_version=new, ordering=OrderingMode.STRICT, started_at_ms=0),
    )
    rows = [
        {
            "new": f"v{new}:{j}",
            "waits_for": [str(s) for s in sorted(after.blocked_by(Shard(version=new, index=j)))],
        }
        for j in range(min(new_shard_count, MAX_DEPENDENCY_ROWS))
    ]
    return {
        "gcd": gcd(old_count, new_shard_count),
        "rows": rows,
        "truncated": new_shard_count > MAX_DEPENDENCY_ROWS,
    }


# ------------------------------------------------------------------------------------------ entry lifecycle

# A pending entry this old, or delivered more than once, is flagged on the group page: its handler is
# probably failing (or its member stuck) and, on a draining shard, it holds the migration back.
OLD_PENDING_MS = 5 * 60_000
# Field values are cut to this many characters in tables and confirmation lists (never on the inspect page).
PREVIEW_CHARS = 80
PREVIEW_FIELDS = 6

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def duration(ms: int | None) -> str:
    """A human-readable duration, its two largest units: ``45 s``, ``12 min 5 s``, ``3 h 12 min``,
    ``2 d 4 h``; ``850 ms`` under a second; an em dash for ``None``."""
    if ms is None:
        return "—"
    if ms < 1_000:
        return f"{max(ms, 0)} ms"
    for i, (name, size) in enumerate(_UNITS):
        if ms >= size:
            text = f"{ms // size} {name}"
            if i + 1 < len(_UNITS) and (rest := ms % size // _UNITS[i + 1][1]):
                text += f" {rest} {_UNITS[i + 1][0]}"
            return text
    raise AssertionError("unreachable: ms >= 1000")


def count(value: int | None) -> str:
    """A figure the store may not know (lag of a stream whose consumer group cannot tell): ``?``."""
    return "?" if value is None else str(value)


def preview(fields: Mapping[str, str], limit: int = PREVIEW_CHARS) -> str:
    """``k=v, k2=v2…``: the first fields of an entry, each value cut to ``limit`` characters."""
    shown = []
    for name, value in list(fields.items())[:PREVIEW_FIELDS]:
        shown.append(f"{name}={value[:limit]}{'…' if len(value) > limit else ''}")
    more = len(fields) - PREVIEW_FIELDS
    return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def backlog_rows(view: View) -> list[dict[str, Any]]:
    """``describe_group``'s backlog rows with their figures formatted and the worrying ones flagged."""
    rows = []
    for b in view.get("backlog", ()):
        warnings = []
        if b["pending"] and b["max_deliveries"] > 1:
            warnings.append(f"delivered up to {b['max_deliveries']} times: its handler may be failing")
        age = b["oldest_pending_age_ms"]
        if b["pending"] and age is not None and age >= OLD_PENDING_MS:
            warnings.append(f"oldest pending entry is {duration(age)} old")
        rows.append(
            {
                **b,
                "owner_text": b["owner"] or "—",
                "lag_text": count(b["lag"]),
                "oldest_pending_age": duration(age),
                "oldest_pending_idle": duration(b["oldest_pending_idle_ms"]),
                "warnings": warnings,
                "idle": b["lag"] == 0 and b["pending"] == 0,
            }
        )
    return rows


def undrained_rows(view: View) -> list[dict[str, Any]]:
    """The old shards this group has not drained in the active migration, each with why it has not."""
    m = view["migration"]
    if not m or not m.get("active"):
        return []
    return [
        {
            **u,
            "owner_text": _owner_text(u),
            "oldest_pending_age": duration(u["oldest_pending_age_ms"]),
            "why": _why_undrained(u),
        }
        for u in m.get("undrained", ())
    ]


def _owner_text(u: Mapping[str, Any]) -> str:
    if u["owner"]:
        return str(u["owner"])
    return "no live member" if not u["live_members"] else "nobody (being reassigned)"


def _why_undrained(u: Mapping[str, Any]) -> list[str]:
    why = []
    if not u["live_members"]:
        why.append(
            "the group has no live member, so nobody reads this shard: start a member, or release "
            "the group from the drain"
        )
    elif not u["owner"]:
        why.append("no member owns it right now: it is granted on the target member's next heartbeat")
    if u["lag"] is None:
        why.append("entries not yet delivered: unknown")
    elif u["lag"]:
        why.append(f"{u['lag']} entr{'y' if u['lag'] == 1 else 'ies'} not yet delivered")
    if u["pending"]:
        why.append(
            f"{u['pending']} delivered but not acknowledged, the oldest "
            f"{duration(u['oldest_pending_age_ms'])} old: redeliver, or skip what cannot be handled"
        )
    if not why:
        why.append("caught up: the next tick marks it drained")
    return why


def release_drain_allowed(view: View) -> bool:
    """Whether the page offers "release from the drain": an active migration that this group, without
    a live member, still holds back. (The store checks all of it again.)"""
    m = view["migration"]
    return bool(m and m.get("active") and m.get("undrained")) and not any(is_live(x) for x in view["members"])


def retention_view(prefix_view: View | None) -> dict[str, Any] | None:
    """The prefix's retention policy for the page: each cap with its data-loss warning."""
    if prefix_view is None or "retention" not in prefix_view:
        return None
    r = prefix_view["retention"]
    return {
        **r,
        "max_age": None if r["max_age_ms"] is None else duration(r["max_age_ms"]),
        "retired_grace": duration(r["retired_grace_ms"]) if r["retired_grace_ms"] else "none",
        "may_drop_unconsumed": r["max_age_ms"] is not None or r["max_len"] is not None,
    }


def dead_letter_row(dl: Mapping[str, Any]) -> dict[str, Any]:
    error = dl["error"] or ""
    return {
        **dl,
        "at": utc(dl["at_ms"]),
        "error_short": error[:PREVIEW_CHARS] + ("…" if len(error) > PREVIEW_CHARS else ""),
        "preview": preview(dl["fields"]),
    }


def pending_rows(entries: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pending entries (``MetadataStore.pending_entries``) with their age and a preview of their fields."""
    return [
        {
            **e,
            "age": duration(e["age_ms"]),
            "preview": "(no longer in the stream)" if e["fields"] is None else preview(e["fields"]),
        }
        for e in entries
    ]
