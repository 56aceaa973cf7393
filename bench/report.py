"""Render docs/benchmarks.md from the JSON files `make bench` just wrote. Nothing here is typed in by hand:
every figure comes from those files, and the page says which command and commit produced them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
        ).stdout
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "unknown"


def _fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def heartbeat_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "## Coordinator heartbeats (`bench/heartbeat_bench.py`)",
        "",
        f"gunicorn `config.wsgi`, {data['workers']} workers x 4 threads (gthread); {data['clients']} client "
        f"processes with keep-alive connections, {data['seconds']:.0f} s per row, on the same machine.",
        "",
        "| load | requests/s | p50 ms | p99 ms | setup s |",
        "|---|---:|---:|---:|---:|",
    ]
    raw = data["raw_redis_ping"]
    lines.append(
        f"| raw Redis PING (redis-py) | {_fmt(raw['per_second'])} | {_fmt(raw['p50_ms'], 2)} | "
        f"{_fmt(raw['p99_ms'], 2)} | |"
    )
    for key in sorted((k for k in data if k.startswith("heartbeat_")), key=lambda k: int(k.split("_")[1])):
        row, members = data[key], key.split("_")[1]
        lines.append(
            f"| steady heartbeats, {members} members | {_fmt(row['per_second'])} | "
            f"{_fmt(row['p50_ms'], 2)} | {_fmt(row['p99_ms'], 2)} | {_fmt(row['setup_seconds'])} |"
        )
    conv = data.get("convergence_100")
    if conv:
        lines += [
            "",
            f"Convergence: 100 members joining at once (heartbeat interval 100 ms) reach a STABLE, balanced "
            f"group in **{conv['seconds']:.2f} s** (group epoch {conv['group_epoch']}, {conv['heartbeats']} "
            "heartbeats after the joins).",
        ]
    return lines


def e2e_section(data: dict[str, Any]) -> list[str]:
    lines = [
        "## Data plane end to end (`bench/e2e_bench.py`)",
        "",
        "```json",
        json.dumps(data, indent=2),
        "```",
    ]
    return lines


def main() -> None:
    heartbeat_file, e2e_file, out = (Path(a) for a in sys.argv[1:4])
    redis_version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# Benchmarks",
        "",
        "Produced by `make bench` (rerun it to check; figures vary with the machine and its load).",
        "",
        f"- run: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, commit {_git_commit()}",
        f"- machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        f"- Redis: {redis_version or 'embedded valkey-server'}",
        "",
    ]
    if heartbeat_file.exists():
        lines += [*heartbeat_section(json.loads(heartbeat_file.read_text())), ""]
    if e2e_file.exists():
        lines += [*e2e_section(json.loads(e2e_file.read_text())), ""]
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
