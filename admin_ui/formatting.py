"""How the operator pages write times, durations and figures. Pure; every relative time is computed
against a ``now_ms`` that came from Redis with the data, never this host's clock."""

from __future__ import annotations

from datetime import UTC, datetime

EM_DASH = "—"


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as ``2026-11-29 12:03:04 UTC``; an em dash for ``None``."""
    if ms is None:
        return EM_DASH
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds(ms: int | None) -> str:
    """A duration in milliseconds as seconds with one decimal, e.g. ``8.5 s``."""
    if ms is None:
        return EM_DASH
    return f"{ms / 1000:.1f} s"


def until(deadline_ms: int | None, now_ms: int) -> str:
    """``in 12.0 s`` or ``overdue by 3.0 s``."""
    if deadline_ms is None:
        return EM_DASH
    left = deadline_ms - now_ms
    return f"in {seconds(left)}" if left >= 0 else f"overdue by {seconds(-left)}"


def ago(ms: int | None, now_ms: int) -> str:
    return EM_DASH if ms is None else f"{seconds(max(0, now_ms - ms))} ago"


_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def duration(ms: int | None) -> str:
    """A human-readable duration, its two largest units: ``45 s``, ``12 min 5 s``, ``3 h 12 min``,
    ``2 d 4 h``; ``850 ms`` under a second; an em dash for ``None``."""
    if ms is None:
        return EM_DASH
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


def compact(value: int | None) -> str:
    """A figure in at most four characters, for a matrix cell: ``7``, ``950``, ``1.2k``, ``38k``,
    ``4.1M``; ``?`` when unknown. The exact figure goes in the cell's title."""
    if value is None:
        return "?"
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            scaled = value / size
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{scaled:.0f}{suffix}"
    return str(value)
