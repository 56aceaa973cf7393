"""The producer section of docs/benchmarks.md, rendered from ``bench/producer_bench.py --out FILE``.

    from bench.report_producer import render
    section = render(json.loads(Path(FILE).read_text()))

Every figure comes from the JSON; nothing is typed in here.
"""

from __future__ import annotations

from typing import Any

_ROWS = (
    # (label, key in "medians")
    ("`Producer.send`", "single_producer"),
    ("raw `XADD` of the same envelope", "single_raw_xadd"),
    ("`Producer.send_batch` of {size}", "batch_{size}_producer"),
    ("pipelined raw `XADD` of the same {size} entries", "batch_{size}_raw_pipelined_xadd"),
)


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def _ratio_line(name: str, ratio: dict[str, Any], target: float | None) -> str:
    runs = ", ".join(f"{r:.2f}" for r in ratio["runs"])
    goal = (
        ""
        if target is None
        else f" (target >= {target:.1f}x: {'met' if ratio['median'] >= target else 'NOT met'})"
    )
    return f"- {name}: **{ratio['median']:.2f}x** median, runs {runs}{goal}"


def _code_lines(results: dict[str, Any]) -> list[str]:
    if "code" not in results:
        return []
    return [f"Code measured: {results['code']}, run {results.get('run_at', '')}.", ""]


def render(results: dict[str, Any], instructions: dict[str, Any] | None = None) -> str:
    """A markdown section: the medians of every case in one table, then the two ratios, what an entry
    costs Redis against a bare XADD (CPU, and instructions from bench/producer_instructions.py's
    ``instructions`` when given)."""
    settings = results["settings"]
    size = settings["batch_size"]
    medians = results["medians"]
    targets = results.get("targets", {})
    lines = [
        "## Producer (`bench/producer_bench.py`)",
        "",
        f"One private Redis {results.get('redis', '')}, a stream prefix of {settings['shards']} shards; "
        f"{settings['single_messages']:,} single sends and {settings['batches']:,} batches of {size} per "
        f"side and repetition, {settings['repetitions']} repetitions, medians. The raw side is the limit: "
        "its entries (the same packed envelope, one field) are encoded before the timed loop, which only "
        "sends them; the producer's timed work is `send` / `send_batch` of keys and payload dicts built "
        "before it (encoding, routing, the call, the results). The two sides of a comparison run in "
        "alternating chunks. Client CPU is the benchmark process's CPU "
        "time; Redis CPU is the server's `used_cpu_sys + used_cpu_user`; the command column is "
        "`INFO commandstats` of the top-level command (`FCALL` or `XADD`).",
        "",
        *_code_lines(results),
        "| case | msgs/s | client CPU µs/msg | Redis CPU µs/msg | command µs/msg | command calls |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, key in _ROWS:
        row = medians.get(key.format(size=size))
        if row is None:
            continue
        command = next((k for k in row if k.startswith("redis_") and k != "redis_cpu_us_per_msg"), "")
        calls = next((k for k in row if k.endswith("_calls")), "")
        cells = (
            label.format(size=size),
            _num(row["msgs_per_s"]),
            _num(row["client_cpu_us_per_msg"], 2),
            _num(row["redis_cpu_us_per_msg"], 2),
            _num(row.get(command), 2),
            _num(row.get(calls), 0),
        )
        lines.append("| " + " | ".join(cells) + " |")
    ratios = results["ratios"]
    batch_key = f"batch_{size}_over_pipelined_xadd"
    lines += [
        "",
        "Ratios (producer / raw messages per second, measured in the same run):",
        "",
        _ratio_line(
            "single send / raw XADD", ratios["single_over_raw_xadd"], targets.get("single_over_raw_xadd")
        ),
        _ratio_line(f"batch of {size} / pipelined XADD", ratios[batch_key], targets.get(batch_key)),
    ]
    lines += _redis_cost_lines(medians, size, instructions)
    lines += _linger_lines(results.get("linger"))
    lines += _idempotency_lines(results.get("idempotency"), size)
    lines += _versus_lines(results.get("functions_vs_scripts"))
    lines += _durability_lines(results.get("durability"))
    return "\n".join(lines) + "\n"


def _redis_cost_lines(medians: dict[str, Any], size: int, instructions: dict[str, Any] | None) -> list[str]:
    """What an entry costs Redis against a bare XADD (docs/producer.md, "Performance"): the CPU medians
    above side by side, and callgrind's instruction counts when bench/producer_instructions.py ran."""
    pairs = (
        (f"in `send_batch` of {size}", f"batch_{size}_producer", f"batch_{size}_raw_pipelined_xadd"),
        ("in `send`", "single_producer", "single_raw_xadd"),
    )
    lines = ["", "What an entry costs Redis against a bare `XADD` (producer / raw):", ""]
    for label, ours, raw in pairs:
        a, b = medians.get(ours), medians.get(raw)
        if not a or not b:
            continue
        cpu = a["redis_cpu_us_per_msg"], b["redis_cpu_us_per_msg"]
        line = f"- {label}: {cpu[0]:.2f} against {cpu[1]:.2f} µs of Redis CPU ({cpu[0] / cpu[1]:.2f}x)"
        counted = (instructions or {}).get("instructions_per_entry", {})
        if ours in counted and raw in counted:
            n = counted[ours], counted[raw]
            line += f"; {n[0]:,} against {n[1]:,} instructions ({n[0] / n[1]:.2f}x)"
        lines.append(line)
    if instructions and "instructions_per_entry" in instructions:
        lines += [
            "",
            "Instructions: `bench/producer_instructions.py`, Redis "
            f"{instructions.get('redis', '')} under callgrind (the instructions its process ran: "
            "parsing, the command or function, the reply; not the kernel's time in its socket calls, "
            f"which the CPU figures include), {instructions['batches']} batches and "
            f"{instructions['sends']:,} single sends per case after a warm-up, divided by the entries "
            "appended: independent of the machine's load.",
        ]
    elif instructions and "skipped" in instructions:
        lines += ["", f"Instructions: not counted ({instructions['skipped']})."]
    return lines


_VERSUS = (
    # (label, case key prefix)
    ("single produce (`Producer.send`)", "single_produce"),
    ("pipeline of {n} single-entry produce calls", "pipelined_"),
    ("fenced fetch of {n} idle shards (`DataPlane.fetch`)", "fenced_fetch_"),
)


def _versus_lines(versus: dict[str, Any] | None) -> list[str]:
    """The same Lua as a function of the data plane's library (FCALL) and as a script (EVALSHA):
    docs/redis-acl.md, "No code from clients"."""
    if not versus:
        return []
    lines = [
        "",
        "Functions against scripts: the same Lua, arguments and client call, as a function of the data "
        f"plane's library (`FCALL`, what members and producers run) and as a script (`EVALSHA`, what "
        f"they ran before); {versus['calls']:,} operations per case, side and repetition, "
        f"{versus['repetitions']} repetitions, medians, in alternating chunks. Ratio: FCALL / EVALSHA "
        "(below 1: FCALL costs less).",
        "",
        "| operation | call | ops/s | client CPU µs/op | Redis CPU µs/op | command µs/op |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, prefix in _VERSUS:
        case = next((k for k in versus["cases"] if k.startswith(prefix)), None)
        if case is None:
            continue
        n = "".join(ch for ch in case if ch.isdigit())
        medians = versus["cases"][case]["medians"]
        for side in ("fcall", "evalsha"):
            row = medians[side]
            cells = (
                label.format(n=n),
                side.upper(),
                _num(row["msgs_per_s"]),
                _num(row["client_cpu_us_per_msg"], 2),
                _num(row["redis_cpu_us_per_msg"], 2),
                _num(row.get(f"redis_{side}_us_per_msg"), 2),
            )
            lines.append("| " + " | ".join(cells) + " |")
        ratio = versus["cases"][case]["ratios_fcall_over_evalsha"]
        cells = (
            label.format(n=n),
            "ratio",
            f"{ratio['ops_per_s']:.2f}x",
            f"{ratio['client_cpu_us_per_op']:.2f}x",
            f"{ratio['redis_cpu_us_per_op']:.2f}x",
            f"{ratio['command_us_per_op']:.2f}x",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _durability_lines(durability: dict[str, Any] | None) -> list[str]:
    """Each durability level (docs/producer.md, "Durability"): entries/s and one call's latency."""
    if not durability:
        return []
    levels = durability["levels"]
    batch = next(k for k in next(iter(levels.values())) if k.startswith("batch_"))
    lines = [
        "",
        f"Durability (`Producer(durability=...)`): {durability['setting']}, Redis {durability['redis']}.",
        "",
        f"| level | single entries/s | single p50 ms | single p99 ms | {batch} entries/s | {batch} p50 ms "
        f"| {batch} p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for level, row in levels.items():
        single, many = row["single"], row[batch]
        lines.append(
            f"| {level} | {_num(single['entries_per_s'], 0)} | {single['p50_ms']:.2f} | "
            f"{single['p99_ms']:.2f} | {_num(many['entries_per_s'], 0)} | {many['p50_ms']:.2f} | "
            f"{many['p99_ms']:.2f} |"
        )
    return lines


def _linger_lines(linger: dict[str, Any] | None) -> list[str]:
    """Threads sending through one producer, with and without a 1 ms linger window (no ratio: linger
    trades latency for fewer script calls, docs/producer.md "Linger")."""
    if not linger:
        return []
    lines = [
        "",
        "Linger (`Producer(linger_ms=...)`): threads sending through one shared producer.",
        "",
        "| threads, linger | msgs/s | script calls/msg | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in linger.items():
        threads, _, _, ms = name.split("_")
        label = f"{threads}, {'off' if ms == 'off' else ms + ' ms'}"
        cells = (
            label,
            _num(row["msgs_per_s"]),
            _num(row["script_calls_per_msg"], 3),
            _num(row["p50_ms"], 2),
            _num(row["p99_ms"], 2),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _idempotency_lines(keyed: dict[str, Any] | None, size: int) -> list[str]:
    """Keyed sends against plain ones (docs/producer.md, "Enqueue once"): what an idempotency key costs."""
    if not keyed:
        return []
    medians = keyed["medians"]
    lines = [
        "",
        "Enqueue once (`idempotency_key`): a new key per entry against the same producer without keys, "
        "in alternating chunks.",
        "",
        "| case | msgs/s | client CPU µs/msg | Redis CPU µs/msg | `FCALL` µs/msg |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in (
        ("`send` with a key", "single_keyed"),
        ("`send` without", "single_plain"),
        (f"`send_batch` of {size} with keys", f"batch_{size}_keyed"),
        (f"`send_batch` of {size} without", f"batch_{size}_plain"),
    ):
        row = medians[key]
        cells = (
            label,
            _num(row["msgs_per_s"]),
            _num(row["client_cpu_us_per_msg"], 2),
            _num(row["redis_cpu_us_per_msg"], 2),
            _num(row.get("redis_fcall_us_per_msg"), 2),
        )
        lines.append("| " + " | ".join(cells) + " |")
    ratios = keyed["ratios"]
    lines += [
        "",
        _ratio_line("single send, keyed / plain", ratios["single_keyed_over_plain"], None),
        _ratio_line(f"batch of {size}, keyed / plain", ratios[f"batch_{size}_keyed_over_plain"], None),
    ]
    return lines
