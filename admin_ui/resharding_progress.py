"""Migration progress per group, the reason it is not done, and an ETA from the drain rate. Pure: no I/O
(the rate samples are kept by admin_ui/drain_samples.py and passed in).

Theory of operation
-------------------
A shard-count change completes when every group of the stream prefix has drained every shard of the old
version. The prefix's description (``MetadataStore.describe_prefix``) already says, per group, which old
shards are drained (``migration.drained``) and, for every one that is not, what holds it back
(``migration.blocking``: owner, live members, lag, pending, oldest pending age). This module only
arranges those rows per group; it computes no figure of its own beyond sums and the rate below.

**How the ETA is estimated.** A group's *remaining* work is the sum of ``lag + pending`` over its
blocking rows: every entry of the old shards it has not yet acknowledged. The old version is sealed
(producers write to the new one), so that number only goes down as the group consumes. Each time an
operator page shows the migration, it records ``(now_ms, remaining)`` for the group, ``now_ms`` being
Redis's clock from the same description. The drain rate is

    (remaining at the oldest sample of the last RATE_WINDOW_MS - remaining now) / (time between them)

and the ETA is ``remaining / rate``. So:

* one sample, or samples less than MIN_SPAN_MS apart: "no estimate yet" (nothing is invented: the page
  refreshes every 5 s, so an estimate appears after the next refresh);
* no progress over at least STALLED_MS: "not draining", with the time since the oldest sample (over a
  shorter span, no progress is "no estimate yet": a handler may simply be busy with one entry);
* a group without a live member: "never, unless a member starts or the group is released";
* a Redis lag it cannot tell (``lag`` null): no estimate, and says why;
* nothing left but not yet marked drained: "on the next tick" (the tick marks shards drained).

The ETA of the whole migration is the slowest group's, and only when every group has one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .formatting import duration

# Samples older than this are dropped: the rate is the recent one, not the average since the start.
RATE_WINDOW_MS = 10 * 60_000
# Two samples closer than this give no rate (a double-click, two tabs): "no estimate yet".
MIN_SPAN_MS = 2_000
# No progress over at least this long is "not draining" (shorter: "no estimate yet").
STALLED_MS = 60_000
# At most this many samples are kept per group (a page refreshing every 5 s fills 10 min with 120).
MAX_SAMPLES = 120

Sample = tuple[int, int]  # (Redis time in ms, remaining entries)


def remaining_entries(blocking: Sequence[Mapping[str, Any]]) -> int | None:
    """``lag + pending`` over a group's blocking rows; None when Redis cannot tell a lag."""
    if any(row["lag"] is None for row in blocking):
        return None
    return sum(int(row["lag"]) + int(row["pending"]) for row in blocking)


def add_sample(samples: Sequence[Sample], now_ms: int, remaining: int) -> list[Sample]:
    """``samples`` plus ``(now_ms, remaining)``, without those older than the window (the newest is always
    kept) nor any from a clock that went back; at most MAX_SAMPLES."""
    kept = [(t, r) for t, r in samples if now_ms - RATE_WINDOW_MS <= t <= now_ms and t != now_ms]
    return [*kept, (now_ms, remaining)][-MAX_SAMPLES:]


def drain_estimate(
    samples: Sequence[Sample], now_ms: int, remaining: int | None, *, live_members: int
) -> dict[str, Any]:
    """``{kind, text, eta_ms, rate_per_s}``; ``kind`` is one of ``eta``, ``none_yet``, ``stalled``,
    ``never``, ``unknown``, ``next_tick``."""

    def result(kind: str, text: str, eta_ms: int | None = None, rate: float | None = None) -> dict[str, Any]:
        return {"kind": kind, "text": text, "eta_ms": eta_ms, "rate_per_s": rate}

    if live_members == 0:
        return result("never", "never: no live member (start one, or release the group from the drain)")
    if remaining is None:
        return result("unknown", "no estimate: Redis cannot tell how many entries are left")
    if remaining == 0:
        return result("next_tick", "on the next tick (nothing left to consume)", 0)
    window = [(t, r) for t, r in samples if now_ms - RATE_WINDOW_MS <= t < now_ms]
    if not window or now_ms - window[0][0] < MIN_SPAN_MS:
        return result("none_yet", "no estimate yet (no drain rate measured so far)")
    first_ms, first_remaining = window[0]
    span_ms = now_ms - first_ms
    drained = first_remaining - remaining
    if drained <= 0 and span_ms < STALLED_MS:
        return result("none_yet", f"no estimate yet (no progress in the last {duration(span_ms)})")
    if drained <= 0:
        return result("stalled", f"not draining: no progress in the last {duration(span_ms)}", rate=0.0)
    rate_per_ms = drained / span_ms
    eta_ms = round(remaining / rate_per_ms)
    rate_per_s = rate_per_ms * 1000
    return result("eta", f"about {duration(eta_ms)} at {_rate_text(rate_per_s)}", eta_ms, rate_per_s)


def _rate_text(per_s: float) -> str:
    if per_s >= 10:
        return f"{per_s:.0f} entries/s"
    if per_s >= 1:
        return f"{per_s:.1f} entries/s"
    return f"{per_s * 60:.1f} entries/min"


def blocking_by_group(prefix_view: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The prefix's ``migration.blocking`` rows per group (every group of the prefix, [] when drained)."""
    m = prefix_view.get("migration") or {}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in prefix_view.get("groups", ())}
    for row in m.get("blocking", ()):
        rows.setdefault(row["consumer_group"], []).append(dict(row))
    return rows


def shards_to_drain(prefix_view: Mapping[str, Any]) -> int:
    m = prefix_view["migration"]
    return next(
        v["shard_count"] for v in prefix_view["topology"]["versions"] if v["version"] == m["from_version"]
    )


def group_progress(
    prefix_view: Mapping[str, Any], consumer_group: str, samples: Sequence[Sample]
) -> dict[str, Any]:
    """One group's progress in the prefix's migration: drained/total, its blocking rows (each with what
    holds it back, in words), the entries it has left and the ETA."""
    m = prefix_view["migration"]
    total = shards_to_drain(prefix_view)
    # A completed migration retired the old version and forgot the per-group drained sets: every group
    # drained (or was released from) all of its shards.
    drained = len(m["drained"].get(consumer_group, ())) if m["active"] else total
    blocking = blocking_by_group(prefix_view).get(consumer_group, [])
    remaining = remaining_entries(blocking) if m["active"] else 0
    live = blocking[0]["live_members"] if blocking else 1
    estimate = (
        drain_estimate(samples, prefix_view["now_ms"], remaining, live_members=live)
        if m["active"] and blocking
        else None
    )
    return {
        "consumer_group": consumer_group,
        "drained": drained,
        "total": total,
        "percent": 100 if total == 0 else round(100 * drained / total),
        "done": not blocking,
        "remaining_entries": remaining,
        "blocking": [
            {
                **row,
                "owner_text": owner_text(row),
                "oldest_pending_age": duration(row["oldest_pending_age_ms"]),
                "why": why_undrained(row),
            }
            for row in blocking
        ],
        "estimate": estimate,
    }


def owner_text(row: Mapping[str, Any]) -> str:
    """Who reads an undrained shard (a ``blocking`` or ``undrained`` row)."""
    if row["owner"]:
        return str(row["owner"])
    return "no live member" if not row["live_members"] else "nobody (being reassigned)"


def why_undrained(row: Mapping[str, Any]) -> list[str]:
    """What holds an old shard back for its group, and what an operator can do (docs/operations.md)."""
    why = []
    if not row["live_members"]:
        why.append(
            "the group has no live member, so nobody reads this shard: start a member, or release "
            "the group from the drain"
        )
    elif not row["owner"]:
        why.append("no member owns it right now: it is granted on the target member's next heartbeat")
    if row["lag"] is None:
        why.append("entries not yet delivered: unknown")
    elif row["lag"]:
        why.append(f"{row['lag']} entr{'y' if row['lag'] == 1 else 'ies'} not yet delivered")
    if row["pending"]:
        why.append(
            f"{row['pending']} delivered but not acknowledged, the oldest "
            f"{duration(row['oldest_pending_age_ms'])} old: redeliver, or skip what cannot be handled"
        )
    if not why:
        why.append("caught up: the next tick marks it drained")
    return why


def blocking_text(row: Mapping[str, Any]) -> str:
    """One blocking shard in a line: ``v1:3 (owner a; lag 0, pending 2, oldest 12 min)``."""
    lag = "?" if row["lag"] is None else row["lag"]
    text = f"{row['shard']} ({owner_text(row)}; lag {lag}, pending {row['pending']}"
    if row["pending"] and row["oldest_pending_age_ms"] is not None:
        text += f", oldest {duration(row['oldest_pending_age_ms'])}"
    return text + ")"


def overall_estimate(groups: Sequence[Mapping[str, Any]]) -> str:
    """The migration's ETA: the slowest group's, or which group has none and why."""
    waiting = [g for g in groups if not g["done"]]
    if not waiting:
        return "on the next tick"
    for kind in ("never", "stalled", "unknown", "none_yet"):
        named = [g for g in waiting if g["estimate"]["kind"] == kind]
        if named:
            groups = ", ".join(g["consumer_group"] for g in named)
            return f"{named[0]['estimate']['text']}: group{'s' if len(named) > 1 else ''} {groups}"
    slowest = max(waiting, key=lambda g: g["estimate"]["eta_ms"])
    return f"about {duration(slowest['estimate']['eta_ms'])} (slowest group: {slowest['consumer_group']})"
