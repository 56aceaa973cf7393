"""The member-by-shard matrix of the group page: who holds which shard, in what state, and where the
backlog is. Pure: built from the group's description (``describe_group``) and the shard rows of
admin_ui/presenters.py, which take each shard's state from the store's backlog rows (``assignment``:
the core's ``shard_assignment``), so the matrix cannot disagree with the tables or with members.

One row per live member (ended members own nothing; the members table lists them, folded), then a
"nobody" row for the shards no member holds, then the shards' lag and pending. One column per shard of
the ACTIVE and DRAINING versions, grouped by version. A cell is a letter (the state in words is in the
legend and the cell's title: never colour alone):

====  =================================================================  ==========
R     owned and readable                                                  ok
H     owned, held back by strict ordering until old shards drain          held
X     owned, being revoked (the member stops reading it and acknowledges)  warn
``+`` in the member's target, not (yet) owned: released by another, or    incoming
      granted on its next heartbeat
D     drained for this group (an old version's shard it has finished)     muted
U     (nobody row) no member holds it                                     error
====  =================================================================  ==========

An owned cell whose target is another member carries an arrow (``R→``): current and target differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.protocol.model import MemberState

from .formatting import compact

CODES = {
    "READABLE": ("R", "ok", "owned, readable"),
    "HELD_BACK": ("H", "held", "owned, held back by strict ordering"),
    "REVOKING": ("X", "warn", "owned, being revoked"),
    "DRAINED": ("D", "muted", "drained for this group"),
}
LEGEND = [
    {"code": "R", "css": "ok", "text": "owned, readable"},
    {"code": "H", "css": "held", "text": "owned, held back by strict ordering"},
    {"code": "X", "css": "warn", "text": "being revoked"},
    {"code": "+", "css": "incoming", "text": "target, not owned yet"},
    {"code": "U", "css": "error", "text": "unassigned"},
    {"code": "D", "css": "muted", "text": "drained"},
    {"code": "→", "css": "", "text": "moves to another member"},
]
EMPTY = {"code": "", "css": "", "title": ""}


def _cell(code: str, css: str, title: str) -> dict[str, str]:
    return {"code": code, "css": css, "title": title}


def _member_cell(row: Any, member_id: str) -> dict[str, str]:
    detail = "; ".join(row.notes)
    if row.owner == member_id:
        code, css, words = CODES.get(row.assignment, ("?", "", row.status))
        moving = bool(row.target) and row.target != member_id and row.assignment != "DRAINED"
        title = f"{row.shard}: {member_id}: {words}" + (f"; {detail}" if detail else "")
        return _cell(code + ("→" if moving else ""), css, title)
    if row.target == member_id:
        held_by = f"released by {row.owner}" if row.owner else "granted on its next heartbeat"
        return _cell("+", "incoming", f"{row.shard}: target of {member_id}, not owned yet ({held_by})")
    return EMPTY


def _nobody_cell(row: Any) -> dict[str, str]:
    if row.assignment == "UNASSIGNED":
        title = f"{row.shard}: unassigned; " + (
            f"granted to {row.target} on its next heartbeat" if row.target else "no member's target"
        )
        return _cell("U", "error", title)
    if row.assignment == "DRAINED" and not row.owner:
        return _cell("D", "muted", f"{row.shard}: drained for this group")
    return EMPTY


def _figure_cell(shard: str, value: int | None, what: str, warn: bool) -> dict[str, str]:
    css = "warn" if warn else ("muted" if value == 0 else "")
    exact = "unknown" if value is None else str(value)
    return _cell(compact(value), css, f"{shard}: {what} {exact}")


def _with_class(cell: Mapping[str, str], column: Mapping[str, Any]) -> dict[str, str]:
    """The cell with its HTML classes: its state's colour, a version's first column, a drained column."""
    classes = [f"rsc-cell-{cell['css']}" if cell["css"] else ""]
    classes.append("rsc-vstart" if column["first_of_version"] else "")
    classes.append("rsc-drained" if column["drained"] and not cell["css"] else "")
    return {**cell, "cls": " ".join(c for c in classes if c)}


def _versions(shard_rows: Sequence[Any]) -> list[dict[str, Any]]:
    versions: list[dict[str, Any]] = []
    for row in shard_rows:
        label = row.shard.split(":")[0]
        if not versions or versions[-1]["label"] != label:
            versions.append({"label": label, "state": row.version_state, "colspan": 0})
        versions[-1]["colspan"] += 1
    return versions


def member_shard_matrix(
    view: Mapping[str, Any], shard_rows: Sequence[Any], backlog: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The matrix as the template prints it (see the module's docstring)."""
    figures = {b["shard"]: b for b in backlog}
    live = [m["member_id"] for m in view["members"] if MemberState(m["state"]).is_live]
    columns = []
    previous = ""
    for row in shard_rows:
        version, index = row.shard.split(":")
        columns.append(
            {
                "shard": row.shard,
                "index": index,
                "first_of_version": version != previous,
                "drained": row.assignment == "DRAINED",
            }
        )
        previous = version
    rows = []
    for member_id in live:
        cells = [_member_cell(row, member_id) for row in shard_rows]
        owned = sum(1 for row in shard_rows if row.owner == member_id)
        target = sum(1 for row in shard_rows if row.target == member_id)
        rows.append({"member_id": member_id, "cells": cells, "owned": owned, "target": target})
    nobody = [_nobody_cell(row) for row in shard_rows]
    lag, pending = [], []
    for row in shard_rows:
        b = figures.get(row.shard, {})
        lag.append(_figure_cell(row.shard, b.get("lag"), "lag (not yet delivered)", False))
        pending.append(_figure_cell(row.shard, b.get("pending", 0), "pending", bool(b.get("warnings"))))
    for cells in [*(r["cells"] for r in rows), nobody, lag, pending]:
        cells[:] = [_with_class(cell, column) for cell, column in zip(cells, columns, strict=True)]
    return {
        "versions": _versions(shard_rows),
        "columns": columns,
        "rows": rows,
        "nobody": nobody if any(c["code"] for c in nobody) else None,
        "lag": lag,
        "pending": pending,
        "legend": LEGEND,
        "ended": len(view["members"]) - len(live),
    }
