"""Turn the store's operator views (``describe_group``, ``describe_prefix``, ``list_groups``) into rows
that templates print as they are. No I/O here; every relative time is computed against the ``now_ms``
that came with the view (Redis's clock), never the web server's.

Where a shard stands (readable, held back by strict ordering, being revoked, unassigned, drained) is
the protocol core's verdict, which the store puts in each backlog row (``assignment``, from
``coordinator.protocol.describe.shard_assignment``): the pages cannot disagree with what members are
told. What a held-back shard waits for is the core's rule too (``Topology.blocked_by``), applied to a
topology rebuilt from the view. Figures are the store's (``backlog`` rows, ``unconsumed_totals_of``,
``migration.blocking``); nothing here reads Redis or recomputes them.

Two parts have their own modules, which this one composes: the member-by-shard matrix
(admin_ui/matrix.py) and the migration's progress, reasons and ETA (admin_ui/resharding_progress.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import gcd
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

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
from coordinator.store.redis_store import unconsumed_totals_of

from . import matrix, resharding_progress

# The formatting helpers live in admin_ui/formatting.py (the matrix and migration modules use them too);
# ``presenters.duration`` stays the name the views call.
from .formatting import ago, count, duration, seconds, until, utc

View = Mapping[str, Any]


def sort_shards(shards: Any) -> list[str]:
    return sorted(shards, key=Shard.parse)


# ------------------------------------------------------------------------------------------ groups list


# The groups list names at most this many blocking shards per group (the group page lists them all).
LIST_BLOCKING_SHOWN = 4


def migration_badge(
    prefix_view: View | None, consumer_group: str, samples: Any = ()
) -> dict[str, Any] | None:
    """``{active, text, blocking, eta}`` for a group's row, or None when its prefix was never resharded:
    how far the group is, the old shards that hold it back (a line each) and its ETA."""
    if prefix_view is None or not prefix_view.get("migration"):
        return None
    m = prefix_view["migration"]
    arrow = f"v{m['from_version']} → v{m['to_version']} ({m['ordering']})"
    if not m["active"]:
        return {"active": False, "text": f"{arrow} completed {utc(m['completed_at_ms'])}"}
    progress = resharding_progress.group_progress(prefix_view, consumer_group, samples)
    return {
        "active": True,
        "text": f"migrating {arrow}: {progress['drained']}/{progress['total']} drained",
        "done": progress["done"],
        "blocking": [
            resharding_progress.blocking_text(row) for row in progress["blocking"][:LIST_BLOCKING_SHOWN]
        ],
        "blocking_more": max(0, len(progress["blocking"]) - LIST_BLOCKING_SHOWN),
        "eta": progress["estimate"],
    }


def backlog_totals(rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """A group's lag and pending over its shards (the store's own sum, ``unconsumed_totals_of``: a shard
    whose lag Redis cannot tell counts its whole length, flagged ``lag_unknown``), with its oldest
    pending entry's age; None when the rows could not be read."""
    if rows is None:
        return None
    totals = unconsumed_totals_of(list(rows))
    ages = [r["oldest_pending_age_ms"] for r in rows if r["pending"]]
    oldest_ms = max((a for a in ages if a is not None), default=None)
    return {
        **totals,
        "lag_unknown": any(r["lag"] is None for r in rows),
        "oldest_pending_age": duration(oldest_ms) if oldest_ms is not None else None,
        "old": oldest_ms is not None and oldest_ms >= OLD_PENDING_MS,
        "shards_behind": sum(1 for r in rows if r["lag"] != 0 or r["pending"]),
    }


def group_rows(
    groups: list[dict[str, Any]],
    prefixes: Mapping[str, View | None],
    backlogs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]] | None] | None = None,
    samples: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The groups list: each row of ``list_groups`` with its backlog totals (``backlogs``: the store's
    backlog rows per (prefix, group)) and its migration progress, reason and ETA."""
    rows = []
    for row in groups:
        prefix, name = row["stream_prefix"], row["consumer_group"]
        group_samples = (samples or {}).get(prefix, {}).get(name, ())
        rows.append(
            {
                **row,
                "backlog": backlog_totals((backlogs or {}).get((prefix, name))),
                "migration": migration_badge(prefixes.get(prefix), name, group_samples),
            }
        )
    return rows


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
    assignment: str  # the core's ShardAssignment, as the store's backlog row says
    owner: str = ""
    owner_assignment_epoch: int | None = None
    target: str = ""
    status: str = "unassigned"  # readable / held / revoking / awaiting pickup / drained / unassigned
    css: str = "muted"
    notes: list[str] = field(default_factory=list)


# The core's ShardAssignment (``assignment`` of the store's backlog rows) in words, with a colour.
_STATUS = {
    "READABLE": ("readable", "ok"),
    "HELD_BACK": ("held by strict ordering", "warn"),
    "REVOKING": ("being revoked", "warn"),
    "DRAINED": ("drained", "muted"),
    "UNASSIGNED": ("unassigned", "muted"),
}


def shard_rows(view: View) -> list[ShardRow]:
    """One row per shard of the ACTIVE and DRAINING versions (the store's backlog rows, whose
    ``assignment`` is the core's verdict): owner, state, target, and notes on what it waits for."""
    topology = topology_of(view)
    migration = view["migration"]
    drained = {
        Shard.parse(s) for s in (migration["drained"].get(view["consumer_group"], ()) if migration else ())
    }
    live = [m for m in view["members"] if is_live(m)]
    epochs = {a["shard"]: a["assignment_epoch"] for m in live for a in m["current_assignment"]}
    target_of = {s: member for member, shards in view["target_assignment"].items() for s in shards}
    deadlines = {p["shard"]: p["deadline_ms"] for p in view["pending_revocations"]}
    held_for = {s: h for h in view.get("held_instances", ()) for s in h["shards"]}
    rows = []
    for b in view["backlog"]:
        row = ShardRow(
            shard=b["shard"],
            stream_key=b["stream_key"],
            version_state=b["version_state"],
            assignment=b["assignment"],
            owner=b["owner"] or "",
            owner_assignment_epoch=epochs.get(b["shard"]),
            target=target_of.get(b["shard"], ""),
        )
        row.status, row.css = _STATUS[row.assignment]
        _add_notes(row, topology, drained, deadlines.get(row.shard), view["now_ms"])
        if not row.owner and (held := held_for.get(row.shard)) is not None:
            # Static membership (docs/protocol.md section 3): kept for the instance's next process.
            row.status, row.css = "held for restart", "info"
            row.notes.append(
                f"held for instance {held['instance_id']} (member {held['member_id']} ended) "
                f"{until(held['held_until_ms'], view['now_ms'])}, then reassigned"
            )
        rows.append(row)
    return rows


def _add_notes(
    row: ShardRow, topology: Topology, drained: set[Shard], deadline_ms: int | None, now_ms: int
) -> None:
    waiting_for = sorted(topology.blocked_by(Shard.parse(row.shard)) - drained)
    if waiting_for and row.assignment != "DRAINED":
        row.notes.append("strict ordering: waits for " + ", ".join(map(str, waiting_for)) + " to drain")
    if row.assignment == "REVOKING":
        row.notes.append(f"release deadline {until(deadline_ms, now_ms)}")
    if row.assignment == "DRAINED" and row.owner:
        row.notes.append("drained for this group: the owner gives it up on its next heartbeat")
    elif row.owner and row.target and row.target != row.owner:
        row.notes.append(f"moves to {row.target} once released")
    elif not row.owner and row.target:
        row.status, row.css = "awaiting pickup", "info"
        row.notes.append(f"granted to {row.target} on its next heartbeat")


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
                "current_text": assignment_text(m["current_assignment"]),
                "ended": ""
                if m["ended_at_ms"] is None
                else f"{m['end_reason']} {ago(m['ended_at_ms'], now_ms)}",
                # Static membership: its target is held for its instance id until then (or None).
                "held_until": None if m.get("held_until_ms") is None else until(m["held_until_ms"], now_ms),
            }
        )
    return rows


def assignment_text(current: list[Mapping[str, Any]]) -> str:
    """A member's current assignment, shards grouped by the assignment epoch they were granted at:
    ``v1:0, v1:1 @ 1; v2:4 @ 4``."""
    by_epoch: dict[int, list[str]] = {}
    for a in current:
        by_epoch.setdefault(a["assignment_epoch"], []).append(a["shard"])
    return "; ".join(f"{', '.join(shards)} @ {epoch}" for epoch, shards in sorted(by_epoch.items()))


def parked_rows(view: View) -> list[dict[str, Any]]:
    """Keys parked on the group's shards, waiting for a retry, per member and shard, as the members last
    reported them (coordinator/store/parked_reports.py): sorted by shard."""
    rows = [
        {"member_id": member_id, "shard": shard, "count": r["count"], "keys": list(r["keys"]),
         "more": r["count"] - len(r["keys"])}
        for member_id, shards in (view.get("parked_keys") or {}).items()
        for shard, r in shards.items()
    ]  # fmt: skip
    return sorted(rows, key=lambda r: (Shard.parse(r["shard"]), r["member_id"]))


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


def migration_progress(
    view: View, prefix_view: View | None = None, samples: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The prefix's migration as the group page shows it: per group of the prefix, drained/total, the
    old shards that hold it back and why (``describe_prefix``'s ``migration.blocking``), the entries it
    has left and an ETA from the drain rate (admin_ui/resharding_progress.py; ``samples``: the earlier figures
    per group, from admin_ui/drain_samples.py)."""
    m = view["migration"]
    if m is None:
        return None
    pm = prefix_view.get("migration") if prefix_view is not None else None
    same = bool(pm) and pm["started_at_ms"] == m["started_at_ms"]  # not one that started in between
    groups = [
        {
            **resharding_progress.group_progress(prefix_view, name, (samples or {}).get(name, ())),
            "is_this_group": name == view["consumer_group"],
        }
        for name in (sorted(pm["drained"]) if same and prefix_view is not None else ())
    ]
    end_ms = m["completed_at_ms"] if m["completed_at_ms"] is not None else view["now_ms"]
    return {
        **m,
        "groups": groups,
        "eta": resharding_progress.overall_estimate(groups) if m["active"] and groups else None,
        "started": utc(m["started_at_ms"]),
        "completed": utc(m["completed_at_ms"]),
        "duration": duration(end_ms - m["started_at_ms"]),
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


def group_detail(
    view: View, prefix_view: View | None = None, samples: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the group detail page shows (``prefix_view``: the prefix's migration and retention
    policy; ``samples``: the drain-rate samples of its groups)."""
    members = member_rows(view)
    backlog = backlog_rows(view)
    shards = shard_rows(view)
    return {
        "view": view,
        "totals": backlog_totals(view["backlog"]),
        "members": [m for m in members if m["live"]],
        "ended_members": [m for m in members if not m["live"]],
        "held_instances": [
            {**h, "until": until(h["held_until_ms"], view["now_ms"])} for h in view.get("held_instances", ())
        ],
        "shards": shards,
        "matrix": matrix.member_shard_matrix(view, shards, backlog),
        # Shards with something to show first; the idle ones (nothing undelivered or pending) folded.
        "backlog": [b for b in backlog if not b["idle"]],
        "backlog_idle": [b for b in backlog if b["idle"]],
        "dead_letters": view.get("dead_letters"),
        "revocations": revocation_rows(view),
        "parked": parked_rows(view),
        "migration": migration_progress(view, prefix_view, samples),
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
            "owner_text": resharding_progress.owner_text(u),
            "oldest_pending_age": duration(u["oldest_pending_age_ms"]),
            "why": resharding_progress.why_undrained(u),
        }
        for u in m.get("undrained", ())
    ]


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


# A dead letter's verdict (coordinator/store/dead_letters.py): the badge on the operator pages.
VERDICT_BADGES = {
    "SIGNED": ("rsc-ok", "signed"),
    "UNSIGNED": ("rsc-warn", "unsigned"),
    "FORGED": ("rsc-error", "refused: not written by the dead-letter function"),
}


def dead_letter_row(dl: Mapping[str, Any]) -> dict[str, Any]:
    error = dl["error"] or ""
    badge_class, badge = VERDICT_BADGES[dl["verdict"]]
    return {
        **dl,
        "verdict_class": badge_class,
        "verdict_badge": badge,
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


# ------------------------------------------------------------------------------------------ audit trail


def breakable_code(code: str) -> SafeString:
    """An error code that may wrap after its underscores (``MIGRATION_IN_PROGRESS``) in a narrow column."""
    parts = code.split("_")
    return format_html_join(mark_safe("_<wbr>"), "{}", ((part,) for part in parts))


# An audit row's details up to this many characters are shown whole; longer ones fold their JSON.
AUDIT_DETAILS_INLINE = 120


def audit_details_html(details: Any, message: str = "") -> SafeString:
    """The audit changelist's details cell: the JSON on one wrapping line, or, when it is long, its
    beginning with the whole of it (indented) in a ``<details>``; the refusal's message underneath."""
    flat = json.dumps(details, ensure_ascii=False, sort_keys=True)
    if len(flat) <= AUDIT_DETAILS_INLINE:
        body = format_html('<code class="rsc-audit-details">{}</code>', flat)
    else:
        body = format_html(
            '<details class="rsc-audit-details"><summary><code>{}…</code> <span class="rsc-note">({} '
            "characters: show all)</span></summary><pre>{}</pre></details>",
            flat[:AUDIT_DETAILS_INLINE],
            len(flat),
            json.dumps(details, ensure_ascii=False, sort_keys=True, indent=2),
        )
    if message:
        body = format_html('{}<div class="rsc-audit-message">{}</div>', body, message)
    return body
