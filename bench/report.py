"""Render docs/benchmarks.md from the JSON files `make bench` just wrote. Nothing here is typed in by hand:
every figure comes from those files, and the page says which command and commit produced them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
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


# Why the product runs what it runs; the table above it is measured on every `make bench`.
SERVER_DECISION = [
    "**Decision: granian** (`python -m config.serve`, config/serve.py: granian's WSGI interface, 2 worker "
    "processes x 2 threads), in production (compose.yaml, docs/production.env), in `make run` (with "
    "`--reload`) and in the end-to-end tests. The criteria, in order: heartbeats per second and server "
    "CPU per heartbeat at the same number of worker processes, then operability.",
    "",
    "* **Why the HTTP server matters now.** With the heartbeat door (coordinator/api/door.py) a steady "
    "heartbeat no longer goes through Django's handler (compare `granian` with `granian-no-door`), and "
    "what is left is the door's own work, one script call and the server: each `-floor` row is the "
    "server alone answering `{}`. gunicorn's floor is a large part of a heartbeat's CPU; granian's HTTP "
    "layer is Rust and costs a fraction of it.",
    "* **Threads per worker: 2.** The three thread counts are close, and which one is ahead moves from run "
    "to run (this run's `granian@1` and `granian@4` ratio lines). Over five runs of this table on one day "
    '(docs/operations.md, "Sizing a group"), 4 threads cost more server CPU per heartbeat than 2 in '
    "four without serving more: a steady heartbeat is CPU under Python's GIL around one Redis round "
    "trip, and more threads in one process mostly take the GIL from each other. 1 thread cost about as "
    "much as 2, and its worker serves nothing else while one request waits (a join's decision takes "
    "milliseconds at 10,000 members). For more cores, more worker processes (`--workers`), not "
    "threads. Revisit when repeated `make bench` runs show another count ahead on both figures in "
    "every repetition.",
    "* **gunicorn's gthread worker**, the previous choice, loses on the first criterion (its ratio line "
    "above). What kept it last time was that `/metrics` in multiprocess mode needs the "
    "server to report dead workers; that does not hold for the API: its only per-process metric is a "
    "histogram, whose dead workers' counts rightly stay in the sums, and it has no live gauges. "
    "config/serve.py empties the directory at start, as gunicorn's hook did. Its other tools have granian "
    "equivalents: graceful stop (`--workers-kill-timeout`), respawning failed workers, recycling "
    "(`--workers-lifetime`, `--workers-max-rss`). Its worker timeout watches only gthread's event loop, not "
    "the request threads, so it never caught a hung request either; and members renew their own leases "
    "in Redis while the API does not answer (docs/protocol.md section 5).",
    "* **gunicorn's gevent worker** comes close to granian on heartbeats per second, behind it in some "
    "`make bench` runs and ahead in others (its ratio line above is this run's), at about granian's "
    "server CPU per heartbeat or more: a heartbeat is CPU, not waiting, so green threads have little to "
    "overlap. With no steady lead on either figure, operability decides: gevent would add "
    "monkey-patching under redis-py, psycopg and Django's thread-local connections (a database "
    "connection per greenlet).",
    "* **uvicorn serving `config.asgi`** is out on the first criterion: the API's views are synchronous "
    "(DRF), so under ASGI Django runs each one through `sync_to_async` on one thread per process, and "
    "heartbeats queue behind each other (its row). An async rewrite of the API would be needed first.",
    "",
    "Revisit when repeated `make bench` runs show another server ahead of granian in every repetition on "
    "both figures: heartbeats per second and server CPU per heartbeat.",
]


def heartbeat_section(data: dict[str, Any]) -> list[str]:
    threads = data.get("threads") or data.get("servers", {}).get("threads", "?")
    lines = [
        "## Coordinator heartbeats (`bench/heartbeat_bench.py`)",
        "",
        f"`python -m config.serve` (granian, the heartbeat door on), {data['workers']} worker processes x "
        f"{threads} threads; {data['clients']} client processes with keep-alive connections, "
        f"{data['seconds']:.0f} s per row, on the same machine.",
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
        if "cas_conflicts" in conv:
            refused = ", ".join(f"{n} {code}" for code, n in sorted(conv["refusals"].items())) or "none"
            lines += [
                "",
                f"On the way: **{conv['cas_conflicts']}** compare-and-set conflicts (decided again; "
                f"{conv['cas_conflicts'] / 100:.2f} per member), refusals: {refused} "
                f"(**{conv['refusals'].get('CONCURRENT_UPDATE', 0)}** `CONCURRENT_UPDATE` give-ups).",
            ]
    for large in data.get("large_groups", []):
        lines += ["", *_large_group_lines(large)]
    servers = data.get("servers")
    if servers:
        lines += [
            "",
            "### The HTTP server",
            "",
            f"The same steady heartbeats of {servers['members']} members through each candidate server, "
            f"{servers['workers']} worker processes x {servers['threads']} threads each, 3 runs of "
            f"{data['seconds']:.0f} s, medians; server CPU is every process of the server's process group "
            "(from /proc) divided by the requests served.",
            "",
            "| server | requests/s | p50 ms | p99 ms | server CPU µs / request "
            "| load generator CPU µs / request |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        rows = servers["rows"]
        for kind, row in rows.items():
            if "skipped" in row:
                lines.append(f"| {kind} | {row['skipped']} | | | | |")
                continue
            lines.append(
                f"| {kind} | {_fmt(row['per_second'])} | {_fmt(row['p50_ms'], 2)} | "
                f"{_fmt(row['p99_ms'], 2)} | {_fmt(row['server_cpu_us_per_request'], 0)} | "
                f"{_fmt(row.get('client_cpu_us_per_request', float('nan')), 0)} |"
            )
        lines += [
            "",
            "`-no-door`: the same server and application with the heartbeat door off (`RSC_HEARTBEAT_DOOR="
            "false`, every heartbeat through Django's handler); `-floor`: the server serving "
            "`bench/floor_app.py`, which answers `{}` and does nothing else: the server's own cost per "
            f"request; `@N`: N threads per worker process instead of {servers['threads']}.",
        ]
        base_kind = servers["base"]  # the product's server (heartbeat_bench.PRODUCT_SERVER)
        base = rows.get(base_kind, {})
        for kind, other in rows.items():
            if kind == base_kind or "per_second" not in base or "per_second" not in other:
                continue
            pairs = zip(other["runs"], base["runs"], strict=True)
            rate = ", ".join(f"{o['per_second'] / b['per_second']:.2f}" for o, b in pairs)
            cpu = other["server_cpu_us_per_request"] / base["server_cpu_us_per_request"]
            what = "requests" if kind.endswith("-floor") else "heartbeats"
            lines += [
                "",
                f"In this run {kind} served **{other['per_second'] / base['per_second']:.2f}x** "
                f"{base_kind}'s {what} per second (repetitions: {rate}) "
                f"at **{cpu:.2f}x** its server CPU per request.",
            ]
        lines += ["", *SERVER_DECISION]
    return lines


def _large_group_lines(large: dict[str, Any]) -> list[str]:
    timing = f"heartbeat interval {large['heartbeat_interval_ms']} ms, lease {large['lease_ttl_ms']} ms"
    kafka = (large["heartbeat_interval_ms"], large["lease_ttl_ms"]) == (5_000, 45_000)
    intro = (
        f"A large group: **{large['members']:,} members** on {large['shards']} shards, {timing} "
        f"({'Kafka' if kafka else 'not Kafka'}'s consumer-group defaults: KIP-848's heartbeat interval 5 s "
        f"and session timeout 45 s), {large['clients']} client processes joining every member and "
        "heartbeating each at the interval from then on, as the runtime does (a due heartbeat before the "
        "next join). "
    )
    conflicts = ""
    if "form_cas_conflicts" in large:
        conflicts = f", {large['form_cas_conflicts']:,} compare-and-set conflicts on the way"
    if not large["formed"]:
        return [
            intro + f"It did **not** form within the bench's limit of {large['form_limit_s']:.0f} s: by then "
            f"{large['joined']:,} members had joined and {large['settled']:,} of them were last answered "
            f"STABLE; the server spent {large['form_server_cpu_s']:.1f} s of CPU on it "
            f"({large['form_server_cpu_s'] / large['form_seconds']:.2f} cores on average{conflicts})."
        ]
    stayed = (
        "still STABLE at the same assignment epoch at the end"
        if large["stayed_stable"]
        else "**not** STABLE at the end"
    )
    return [
        intro + f"It formed (every member joined and answered STABLE, owning its target, at assignment "
        f"epoch {large['group_epoch']}) in "
        f"**{large['form_seconds']:.1f} s** ({large['form_server_cpu_s']:.1f} s of server CPU{conflicts}), "
        "then stayed "
        f"for {large['seconds']:.0f} s: {_fmt(large['per_second'])} heartbeats/s (offered "
        f"{_fmt(large['offered_per_second'])}), p50 {_fmt(large['p50_ms'], 2)} ms, p99 "
        f"{_fmt(large['p99_ms'], 2)} ms, {_fmt(large['server_cpu_us_per_request'], 0)} µs of server CPU per "
        f"heartbeat ({_fmt(large['client_cpu_us_per_request'], 0)} µs of the load generator's), a due "
        f"heartbeat sent at most {_fmt(large['max_behind_ms'], 0)} ms late; **{large['not_steady']}** "
        f"answers not steady, **{large['fences']}** fences, {large['retried']} retried 429 / 503; {stayed}."
    ]


E2E_INTRO = (
    "Each side consumes the same backlog of envelope entries (produced by `Producer.send_batch` while "
    "every consumer process was stopped), one side at a time, with its own consumer group: `e2e` is "
    "`run_member` with a no-op handler (fenced fetch of all shards, folded ack), `raw` a per-shard "
    "XREADGROUP + XACK loop in its own process, `faststream` FastStream's stream group subscriber. CPU per "
    "message: the consumer processes' user + system time, and the Redis server's (which for `e2e` "
    "includes heartbeats and the tick). Medians of {reps} repetitions; ratios per repetition, then their "
    "median."
)


def e2e_section(data: dict[str, Any]) -> list[str]:
    rows = data.get("throughput", [])
    lines = ["## Data plane end to end (`bench/e2e_bench.py`)", "", E2E_INTRO.format(reps=_reps(data)), ""]
    sides = [s for s in ("e2e", "raw", "faststream") if any(s in r for r in rows)]
    ratios = [f"e2e / {s}" for s in sides if s != "e2e"]
    head = ["shards", "members"]
    for side in sides:
        head += [f"{side} msgs/s", f"{side} client µs/msg", f"{side} Redis µs/msg"]
    lines += ["| " + " | ".join(head + ratios) + " |", "|" + "---:|" * (len(head) + len(ratios))]
    for row in rows:
        cells = [str(row["shards"]), str(row["members"])]
        for side in sides:
            figures = row.get(side, {})
            cells += [
                _fmt(figures.get("msgs_per_s", "-"), 0),
                _fmt(figures.get("client_cpu_us_per_msg", "-")),
                _fmt(figures.get("redis_cpu_us_per_msg", "-")),
            ]
        cells += [f"**{row[f'e2e_over_{s}']:.2f}x**" for s in sides if s != "e2e"]
        lines.append("| " + " | ".join(cells) + " |")
    if data.get("faststream", "measured") != "measured":
        lines += ["", f"FastStream: {data['faststream']}."]
    lines += _idle_lines(data.get("idle")) + _latency_lines(data.get("latency"))
    raw_json = ["<details><summary>Raw JSON</summary>", "", "```json", json.dumps(data, indent=2), "```"]
    return [*lines, "", *raw_json, "", "</details>"]


def _idle_lines(idle: dict[str, Any] | None) -> list[str]:
    if not idle:
        return []
    return [
        "",
        f"Idle: one member holding {idle['shards']} empty shards used "
        f"**{idle['share_of_one_core_pct']:.2f}% of one core** ({idle['cpu_s']:.2f} s of CPU over "
        f"{idle['seconds']:.1f} s; idle backoff up to {idle.get('idle_backoff_max_ms', '?')} ms, a heartbeat "
        f"every {idle.get('heartbeat_interval_ms', '?')} ms).",
    ]


def _latency_lines(latency: dict[str, Any] | None) -> list[str]:
    if not latency:
        return []
    return [
        "",
        f"Produce -> handle latency, {latency['members']} members on {latency['shards']} shards, at "
        f"{_fmt(latency['achieved_rate_per_s'], 0)} msgs/s (half the measured maximum): p50 "
        f"**{latency['p50_ms']:.1f} ms**, p99 **{latency['p99_ms']:.1f} ms** "
        f"(max {latency['max_ms']:.1f} ms).{_saturated(latency)}",
    ]


def _saturated(latency: dict[str, Any]) -> str:
    """Said when the producer, on the same 2 cores, fell short of the rate asked for: the machine was
    saturated, and the figure is a queue's, not the members' latency."""
    target, achieved = latency.get("target_rate_per_s"), latency["achieved_rate_per_s"]
    if not target or achieved >= 0.97 * target:
        return ""
    return (
        f" The producer, on the same cores, reached only {_fmt(achieved, 0)} of the "
        f"{_fmt(target, 0)} msgs/s asked for: the machine was saturated (half a no-op drain's maximum is "
        "more than a producer and the members can sustain together on 2 cores), so this is a queue's "
        "wait. Issue 28's latency figures are in \"Latency and idle cost\" below: steady load at 10% and "
        "50% of the members' maximum, beside a raw blocking consumer."
    )


def _reps(data: dict[str, Any]) -> int:
    rows = data.get("throughput", [])
    return int(rows[0]["repetitions"]) if rows else 0


def producer_section(path: Path) -> list[str]:
    """bench/producer_bench.py's results, and bench/producer_instructions.py's beside them when there,
    rendered by bench/report_producer.py."""
    if not path.exists():
        return []
    import report_producer  # type: ignore[import-not-found]  # beside this script, on sys.path

    instructions = path.parent / "producer_instructions.json"
    counted = json.loads(instructions.read_text()) if instructions.exists() else None
    return [report_producer.render(json.loads(path.read_text()), counted).rstrip("\n")]


def store_section(path: Path) -> list[str]:
    """bench/store_bench.py: the metadata store's own cost per join and per tick, no HTTP."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    lines = [
        "## The metadata store (`bench/store_bench.py`)",
        "",
        "The store driven in the benchmark's process, no HTTP: coordinator CPU is that process's CPU "
        "time, Redis CPU the server's (`INFO cpu`), per operation, medians of 3 repetitions.",
        "",
        "| operation | wall ms | coordinator CPU ms | Redis CPU ms |",
        "|---|---:|---:|---:|",
    ]
    for row in data["joins"]:
        setup = ", the group written in one commit" if row.get("setup") == "one commit" else ""
        lines.append(
            f"| a join at {row['members']:,} members (median over {row['joins']} joins{setup}) | "
            f"{row['wall_ms']:.2f} | {row['coordinator_cpu_ms']:.2f} | {row['redis_cpu_ms']:.2f} |"
        )
    tick = data.get("tick")
    if tick:
        for key, what in (
            ("indexed", "every interval (the tick index)"),
            ("full_cold", "once a minute (full, cold)"),
        ):
            row = tick[key]
            lines.append(
                f"| a tick at {tick['members']:,} members, nothing due, {what} | {row['wall_ms']:.2f} | "
                f"{row['coordinator_cpu_ms']:.2f} | {row['redis_cpu_ms']:.2f} |"
            )
        lines += [
            "",
            f"The {tick['members']:,}-member group is written in one commit ({tick['setup_seconds']:.1f} s, "
            "not measured), and so is the one the 10,000-member joins run on, so that 3 repetitions stay "
            "short (forming a group by joins is measured below, once per size): a join still costs time "
            "in proportion to the group. A join reads from Redis only the member records written since "
            "the store last read the group (delta loads), its own lease and the group's header (which "
            "lists only the targets that hold shards), and writes the header and the records that "
            "changed; the decision (the assignor, the shard owners) and the commit's bookkeeping still "
            "walk every member once or twice (mostly copies and comparisons in C; a heartbeat that gains no "
            "shard no longer builds the table of shard owners).",
        ]
    for form in data.get("forms", []):
        joins, rounds = form["joins"], form["rounds"]
        total = joins["wall_s"] + sum(r["wall_s"] for r in rounds)
        lines += [
            "",
            f"Forming a {form['members']:,}-member group in process (one run; two stores taking turns, as "
            f"two API processes would; 64 shards): {form['members']:,} joins in {joins['wall_s']:.1f} s "
            f"({joins['coordinator_cpu_s']:.1f} s coordinator CPU), then {len(rounds)} rounds of every "
            "member heartbeating until a round changes nothing: "
            + ", ".join(f"{r['wall_s']:.1f} s" for r in rounds)
            + f"; {total:.1f} s in all, {form['stable']:,} members STABLE. The last round is every member "
            "steady, answered by the fast path, as the group stays.",
        ]
    return lines


def cluster_section(path: Path) -> list[str]:
    """bench/cluster_bench.py: one coordinator over a local 3-primary Redis Cluster."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    hb, tick = data["heartbeats"], data["tick"]

    def per_primary(usage: dict[str, dict[str, float]]) -> str:
        return ", ".join(
            f"{u['cpu_percent']}% ({u['commands_per_second']:,.0f} cmd/s)" for u in usage.values()
        )

    scale = f"{data['groups']:,} groups x {data['members_per_group']} members ({data['members']:,} members)"
    where = f"{data['prefixes']} stream prefixes on a local cluster of {data['primaries']} primaries"
    load = f"{data['clients']} client processes, {data['seconds']:.0f} s of steady heartbeats"
    latency = f"p50 {hb['p50_ms']:.2f} ms, p99 {hb['p99_ms']:.2f} ms"
    return [
        "## Redis Cluster (`bench/cluster_bench.py`)",
        "",
        f"{scale} over {where}, one coordinator (`config.serve`, {data['workers']} workers), {load}; setup "
        f"{data['setup_seconds']} s (not measured).",
        "",
        "| measure | value | Redis CPU per primary |",
        "|---|---:|---|",
        f"| steady heartbeats/s | {hb['per_second']:,.1f} ({latency}) "
        f"| {per_primary(hb['redis_per_primary'])} |",
        f"| tick over every group (mean / max of {tick['runs']}) | {tick['mean_seconds']} s / "
        f"{tick['max_seconds']} s | {per_primary(tick['redis_per_primary'])} |",
    ]


JOBS_INTRO = (
    "Issue 27's figures. Slow jobs: a handler that sleeps {ms_list}, {shards} shards, {members} member "
    "processes (`run_member`) with {wpm} worker threads each (`RSC_RUNTIME` max_concurrency, the group's "
    "max_concurrency {wpm}: {workers} workers), {keys} partition keys, one consumer group per `ordering`,"
    " against a Celery {celery_version} worker (`--pool threads -c {workers}`, {acks}, prefetch "
    "multiplier {prefetch}) consuming the same sleeping task through its own Redis broker. Each "
    "repetition produces one backlog while every consumer process is stopped (SIGSTOP, after its group "
    "was STABLE and had handled a warm-up entry of every key), then lets one side at a time drain it "
    "(SIGCONT to every job acked; Celery: every job's handler returned). `shard` drains only the newest "
    "{fraction:.0%} of each backlog (it is capped at shards / job time). **x ideal**: jobs/s over workers"
    " / job time; **x bound**: the window the run's own split of the jobs allows over the window measured"
    " (a member runs only its shards' jobs: ceil(its jobs / its workers) job times; under `shard` a "
    "shard's jobs, under `key` a key's, run one at a time), so what is below 1 there is the consumer's "
    "own overhead, and what is below 1 in x ideal but not in x bound is the placement of keys on shards "
    "and shards on members. That placement is the fence's (a shard runs on its owner's workers only: "
    "docs/consumers.md, \"What 'none' is not\"), so a drain is judged by x bound, and issue 27's "
    "throughput targets by the sustained load below, where every member has a backlog. "
    "**busy workers**: handler time summed over the window; reorders: the delivery"
    " checker's per-key reorders (tests/e2e/checker.py) over every handling. CPU per job: the side's "
    "processes (user + system, /proc), and its Redis server (`INFO cpu`: for ours also heartbeats and the"
    " tick). Medians of {reps} repetitions; ratios per repetition, then their median."
)


LATENCY_INTRO = """\
Issue 28's figures. An idle member waits for new entries on one blocking `XREAD` over its idle shards'
streams, from the group's last-delivered id that its empty fenced read returned, and then makes the
fenced read (docs/consumers.md, "Waiting for new entries"). **Maximum**: the members drain a backlog
(SIGSTOP, produce, SIGCONT until every entry is acked), median of {reps}. Then {seconds:g} s windows of
steady production at 10% and 50% of that (`send_batch` every 5 ms, 256 keys, each payload stamped with
the producer's wall clock just before the send), and per entry the time from that stamp to the start of
its handler. A one-worker member (the default runtime, as here) runs a batch on the thread that read it,
its waiter's or its fetcher's, round after round (docs/consumers.md, "Per-shard order"). **raw**: in the
same run, on the same streams (its own Redis consumer group), as many processes as members, each a
blocking `XREADGROUP ... BLOCK` over its shards that decodes the envelope and writes the same log line
per entry: the limit, a consumer with no fence, no coordinator and no per-key order. The two sides take
turns, window by window, each running alone while the other is stopped (on 2 cores, two consumers of
every entry at once would measure each other's CPU). The bench process does not collect garbage during a
window: its full collections of the records it keeps stopped the producer for 70-210 ms, then a burst.
Medians over {reps} windows per side."""


def latency_section(path: Path) -> list[str]:
    """bench/latency_bench.py: produce -> handle latency beside a raw blocking consumer, idle cost."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    args = data.get("args", {})
    lines = [
        "## Latency and idle cost (`bench/latency_bench.py`)",
        "",
        LATENCY_INTRO.format(reps=args.get("reps", "?"), seconds=args.get("seconds", 0)),
        "",
        "| shards | members | maximum/s | load | rate/s | p50 ms | p90 ms | p99 ms | max ms "
        "| raw p50 ms | raw p90 ms | raw p99 ms | raw max ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    met: list[bool] = []
    raw_met: list[bool] = []  # the same targets for the raw consumer: what this machine allows
    for row in data.get("latency", []):
        for load in ("at_10pct", "at_50pct"):
            at = row.get(load)
            if not at:
                continue
            ours, raw = at["e2e"], at["raw_block"]
            for side, into in ((ours, met), (raw, raw_met)):
                if load == "at_10pct":
                    into.append(side["p50_ms"] <= 2 and side["p99_ms"] <= 10)
                else:
                    into.append(side["p99_ms"] <= 25)
            lines.append(
                f"| {row['shards']} | {row['members']} | {_fmt(row['maximum_per_s'], 0)} | "
                f"{load[3:5]}% | {_fmt(at['rate_per_s'], 0)} | **{ours['p50_ms']:.1f}** | "
                f"{ours['p90_ms']:.1f} | **{ours['p99_ms']:.1f}** | {ours['max_ms']:.1f} | "
                f"{raw['p50_ms']:.1f} | {raw['p90_ms']:.1f} | {raw['p99_ms']:.1f} | {raw['max_ms']:.1f} |"
            )
    if met:
        lines += [
            "",
            f"Issue 28's target (p50 <= 2 ms and p99 <= 10 ms at 10%, p99 <= 25 ms at 50%): met in "
            f"**{sum(met)} of {len(met)}** rows; the raw blocking consumer meets it in {sum(raw_met)} of "
            f"{len(raw_met)} on the same machine in the same run.",
        ]
    idle = data.get("idle") or []
    if idle:
        lines += [
            "",
            f"Idle: {idle[0]['members']} members holding {idle[0]['shards']} empty shards for "
            f"{idle[0]['seconds']:.0f} s, with the wake-up and with polling (the runtime's backoff) side by "
            "side. Redis commands: every command the server ran (the coordinator's heartbeats and ticks, "
            "Celery's broker polling and the other groups of the run too), and the data plane's alone.",
            "",
            "| mode | CPU per member process (% of a core) | FCALL/s | XREAD/s | CLIENT/s | all commands/s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in idle:
            mode = (
                f"wake-up (safety net {row['idle_wait_ms']} ms)"
                if row["wake_on_append"]
                else f"polling ({row['idle_backoff_ms'][0]} -> {row['idle_backoff_ms'][1]} ms)"
            )
            lines.append(
                f"| {mode} | **{row['member_cpu_pct_median']:.2f}** "
                f"({', '.join(f'{c:.2f}' for c in row['member_cpu_pct_of_a_core'])}) | "
                f"{row['fcall_per_s']:.1f} | {row['xread_per_s']:.1f} | {row['client_per_s']:.1f} | "
                f"{row['redis_commands_per_s']:.0f} |"
            )
    signal_cost = data.get("signal_cost")
    if signal_cost:
        lines += [
            "",
            WHY_XREAD.format(
                xadd=signal_cost["xadd_redis_us_per_append"],
                publish=signal_cost["xadd_and_publish_redis_us_per_append"],
            ),
        ]
    raw_json = ["<details><summary>Raw JSON</summary>", "", "```json", json.dumps(data, indent=2), "```"]
    return [*lines, "", *raw_json, "", "</details>"]


WHY_XREAD = """\
Why a blocking `XREAD` and not a signal from the producer. The issue offered two others: sharded
Pub/Sub (`SPUBLISH` from the produce function, members subscribed) and a blocking read on a per-prefix
signal stream (one more `XADD` per produce call). Both add work to every append, whoever listens,
and Pub/Sub delivers every message to every subscribed member even while it is busy (a Python member
would parse thousands of messages a second it does not need). Measured in this run, pipelined, 100
at a time: a plain `XADD` costs Redis **{xadd:.1f} µs**, `XADD` + `PUBLISH` to a channel 4 members
subscribe to **{publish:.1f} µs** per append. The `XREAD` wake-up adds nothing to an append: Redis
already serves clients blocked on a stream when `XADD` writes to it, and a member that is busy is not
blocked, so it is sent nothing. Its costs are on the member's side: one `XINFO GROUPS` in the fenced
read of a shard that found nothing, and per change of the set of idle shards one `CLIENT UNBLOCK` and
one new `XREAD`. It works on Redis Cluster (every key of a prefix is in its slot), under the member
ACL profile (docs/redis-acl.md), and it is only a hint: the fenced read decides, so a lost reply, a
failover or a take-over cannot make it deliver anything."""


def jobs_section(path: Path) -> list[str]:
    """bench/jobs_bench.py: orderings against Celery on slow jobs, a failing key, fast handlers."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    lines = ["## Slow jobs (`bench/jobs_bench.py`)", ""]
    if "code" in data:
        changed = f", and **{data['code_at_end']}** at its end" if "code_at_end" in data else ""
        lines += [f"Code measured: {data['code']} at the start of the run{changed}.", ""]
    missing = data.get("listener_options_missing") or {}
    if missing:
        lines += [f"Not measured in this run: {'; '.join(missing.values())}.", ""]
    for key, what in (
        ("slow_jobs", "Slow jobs"),
        ("failing_key", "A failing key"),
        ("fast_handlers", "Fast handlers"),
        ("sustained", "Sustained load"),
    ):
        if "error" in (data.get(key) or {}):
            lines += [f"{what}: **not measured**, the section failed: `{data[key]['error']}`.", ""]
    slow = data.get("slow_jobs")
    if slow and "error" not in slow:
        celery = slow["celery"]
        ms_list = " and ".join(f"{row['job_ms']:,} ms" for row in slow["rows"])
        lines += [
            JOBS_INTRO.format(
                ms_list=ms_list, shards=slow["shards"], members=slow["members"],
                wpm=slow["workers_per_member"], workers=slow["workers"], keys=slow["keys"],
                celery_version=data.get("celery_version", "?"), acks=celery["acks"],
                prefetch=celery["prefetch_multiplier"], fraction=slow["shard_fraction"],
                reps=slow["repetitions"],
            ),
            "",
            "| job | backlog | side | jobs/s | x ideal | x bound | x Celery | client CPU µs/job "
            "| Redis CPU µs/job | busy workers | reorders | lost |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]  # fmt: skip
        for row in slow["rows"]:
            for name, side in row["sides"].items():
                job = f"{row['job_ms']:,} ms"
                if "jobs_per_s" not in side:
                    lines.append(f"| {job} | | {name} | {side.get('skipped', 'not run')} | | | | | | | | |")
                    continue
                late = "" if side.get("all_finished", True) else " (a window ran out of time)"
                over = side.get("over_celery")
                lines.append(
                    f"| {job} | {side['jobs']:,} | {name}{late} | {_fmt(side['jobs_per_s'])} | "
                    f"{side['of_ideal']:.2f} | {side['of_bound']:.2f} | "
                    f"{f'**{over:.2f}x**' if over is not None else ''} | "
                    f"{_fmt(side['client_cpu_us_per_job'], 0)} | {_fmt(side['redis_cpu_us_per_job'], 0)} | "
                    f"{_fmt(side['mean_busy_workers'])} | {side['reorders']} | {side['lost']} |"
                )
        lines += [
            "",
            "Ideal: " + ", ".join(f"{_fmt(r['ideal_jobs_per_s'], 0)} jobs/s for {r['job_ms']:,} ms jobs"
                                  for r in slow["rows"]) + f" ({slow['workers']} workers / job time).",
        ]  # fmt: skip
    lines += _failing_key_lines(data.get("failing_key"))
    lines += _fast_handler_lines(data.get("fast_handlers"))
    lines += _sustained_lines(data.get("sustained"))
    goals = data.get("targets", [])
    if goals:
        lines += [
            "",
            "Issue 27's targets in this run (throughput: on the sustained load; the drains: the "
            "consumer's share of the window its placement allows):",
            "",
        ]
        for goal in goals:
            state = {True: "met", False: "**not met**", None: "not measured"}[goal["met"]]
            lines.append(f"- {goal['target']}: {goal['measured']} ({state})")
    raw_json = ["<details><summary>Raw JSON</summary>", "", "```json", json.dumps(data, indent=2), "```"]
    return [*lines, "", *raw_json, "", "</details>"]


def _failing_key_lines(failing: dict[str, Any] | None) -> list[str]:
    if not failing or "error" in failing:
        return []
    if "skipped" in failing:
        return ["", f"A failing key: not measured ({failing['skipped']})."]
    base, bad = failing["base"], failing["failing"]
    nan = float("nan")
    lines = [
        "",
        f"A failing key: `ordering=\"key\"`, `on_error=\"redeliver\"` (backoff from "
        f"{failing['redeliver_backoff_ms']} ms, max_deliveries {failing['max_deliveries']}, max_in_flight "
        f"{failing['max_in_flight']}), the {failing['job_ms']} ms handler, a backlog of "
        f"{failing['backlog']:,} jobs; every delivery of `{failing['failing_key']}` (on "
        f"{failing['failing_key_shard']}) raises, in a group of its own; a second group reads the same "
        "backlog without the failing key, and each repetition uses two fresh groups. The other keys: "
        f"**{_fmt(bad.get('jobs_per_s', nan))} jobs/s** against {_fmt(base.get('jobs_per_s', nan))} "
        f"without, a cost of **{failing.get('cost', nan):.1%}** (failed deliveries of the key per "
        f"repetition: {', '.join(str(n) for n in failing['failing_key_attempts_per_rep'])}).",
    ]  # fmt: skip
    if not bad.get("all_finished", True):
        lines.append("")
        lines.append("Windows that ran out of time: " + "; ".join(bad.get("unfinished", [])) + ".")
    persisting = failing.get("persisting")
    if persisting:
        state = ""
        if not persisting["all_finished"]:
            left = "; ".join(
                ", ".join(f"{n} on {shard}" for shard, n in by_shard.items())
                for by_shard in persisting.get("not_done_by_shard", [])
            )
            state = ", and did **not** finish: " + "; ".join(persisting.get("unfinished", []))
            state += f" (the jobs left: {left})" if left else ""
        lines += [
            "",
            f"A second backlog on the same failing group (the key's entries of both backlogs, "
            f"{persisting['failing_key_entries_in_window']}, are read and wait behind its failing head): "
            f"the other keys did {_fmt(persisting['jobs_per_s'])} jobs/s, "
            f"**{persisting['over_base']:.2f}x** the group without a failing key{state}.",
        ]
    return lines


def _fast_handler_lines(fast: dict[str, Any] | None) -> list[str]:
    if not fast or "error" in fast:
        return []
    lines = [
        "",
        f"Fast handlers: a no-op handler, {fast['shards']} shards, {fast['members']} members, a backlog of "
        f"{fast['messages']:,} entries per repetition (one worker per member is the shape of the "
        "end-to-end bench above), medians of "
        f"{fast['repetitions']}:",
        "",
        "| workers per member | ordering | msgs/s | client CPU µs/msg | Redis CPU µs/msg | x shard |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in fast["rows"]:
        for name, side in row["sides"].items():
            if "skipped" in side:
                lines.append(f"| {row['workers_per_member']} | {name} | {side['skipped']} | | | |")
                continue
            over = side.get("over_shard")
            lines.append(
                f"| {row['workers_per_member']} | {name} | {_fmt(side['msgs_per_s'], 0)} | "
                f"{_fmt(side['client_cpu_us_per_msg'])} | {_fmt(side['redis_cpu_us_per_msg'])} | "
                f"{f'**{over:.2f}x**' if over is not None else ''} |"
            )
    return lines


def _sustained_lines(sustained: dict[str, Any] | None) -> list[str]:
    if not sustained or "error" in sustained:
        return []
    lines = [
        "",
        f"Sustained load (the issue's own way of measuring: jobs offered at a steady rate above what the "
        f"pool can do): the same slow jobs, {sustained['workers']} workers over {sustained['members']} "
        f"members, offered at {sustained['offer']}x the ideal to one side at a time (the others stopped; a "
        "group starts from the streams' end). The rate is the handlers' busy time in the window after the "
        "warm-up, over the job time: jobs completed per second while the side runs saturated, without the "
        "drain's tail (the placement that **x bound** shows above) and without counting whole 1 s jobs at "
        "the window's edges. The product's producer sends in the window (`send_batch` every 20 ms); "
        "Celery's messages are encoded before the window (kombu spends about 0.5 ms of CPU on a "
        "`send_task`, which on 2 cores would be taken from the worker) and pushed as kombu does (`LPUSH`), "
        f"every 20 ms. Medians of {sustained['repetitions']}; ratios per repetition.",
        "",
        "| job | offered/s | offered for | side | jobs/s | x ideal | x Celery | busy workers "
        "| client CPU µs/job | reorders | lost |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sustained["rows"]:
        for name, side in row["sides"].items():
            over = side.get("over_celery")
            lines.append(
                f"| {row['job_ms']:,} ms | {_fmt(row['offered_per_s'], 0)} | {_fmt(row['seconds'], 0)} s "
                f"(warm-up {_fmt(row['warm_s'], 0)} s) | {name} | {_fmt(side['jobs_per_s'])} | "
                f"{side['of_ideal']:.3f} | {f'**{over:.3f}x**' if over is not None else ''} | "
                f"{_fmt(side['busy_workers'])} | {_fmt(side['client_cpu_us_per_job'], 0)} | "
                f"{side['reorders']} | {side['lost']} |"
            )
    return lines


def gate_section(path: Path) -> list[str]:
    """bench/gate_cost.py: Redis CPU per call through the gate module against plain FCALL."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    lines = [
        "## The gate module (`bench/gate_cost.py`)",
        "",
        "Issue 29's cost figure: the same calls through `FCALL` and through the gate module's commands "
        "(rsc_redis/module/rsc_gate.c; docs/redis-acl.md, \"The gate module\"), Redis CPU per call "
        f"(`INFO cpu`, everything the server spent), {data['calls']:,} calls per side and repetition in "
        f"alternating chunks, medians of {data['repetitions']}.",
        "",
        "| call | FCALL µs | gate µs | gate / FCALL | runs (FCALL/gate) |",
        "|---|---:|---:|---:|---|",
    ]
    for case, row in data["cases"].items():
        runs = ", ".join(f"{r['fcall']:.1f}/{r['gate']:.1f}" for r in row["runs"])
        lines.append(
            f"| {case} | {row['fcall_us']:.2f} | {row['gate_us']:.2f} | **{row['ratio']:.2f}x** | {runs} |"
        )
    return lines


def replace_section(page: str, heading: str, section: list[str]) -> str:
    """``page`` with its section that starts with the line ``heading...`` (up to the next ``## ``
    heading) replaced by ``section``; appended at the end when the page has none."""
    lines = page.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
    if start is None:
        return page.rstrip("\n") + "\n\n" + "\n".join(section) + "\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join([*lines[:start], *section, "", *lines[end:]])


def _e2e_only(path: Path) -> list[str]:
    return e2e_section(json.loads(path.read_text())) if path.exists() else []


# `python bench/report.py --<name>-only bench/results/<name>.json docs/benchmarks.md`: one section alone,
# rewritten from its results, every other section of the page left as it was. Per mode: the section's
# heading, what renders it, and the make target named in its stamp (with the commit measured; None: no
# stamp, the results name their commit or the section states its own run).
SECTION_ONLY: dict[str, tuple[str, Callable[[Path], list[str]], str | None, bool]] = {
    "--producer-only": ("## Producer (", producer_section, None, False),
    "--latency-only": ("## Latency and idle cost (", latency_section, "make bench-latency", True),
    "--gate-only": ("## The gate module (", gate_section, "make bench-gate", True),
    "--jobs-only": ("## Slow jobs (", jobs_section, "make bench-jobs", False),
    "--e2e-only": ("## Data plane end to end (", _e2e_only, "make bench-e2e", True),
}


def main() -> None:
    if sys.argv[1] in SECTION_ONLY:
        heading, render, target, commit = SECTION_ONLY[sys.argv[1]]
        results, out = Path(sys.argv[2]), Path(sys.argv[3])
        section = render(results)
        if target is not None:
            when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            at = f", commit {_git_commit()}." if commit else "."
            stamp = f"Run separately by `{target}`: {when}{at}"
            section = [*section[:2], stamp, "", *section[2:]]
        out.write_text(replace_section(out.read_text(), heading, section))
        print(f"wrote the {heading.strip('# (')} section of {out}")
        return
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
    lines += [*latency_section(e2e_file.parent / "latency.json"), ""]
    lines += [*producer_section(e2e_file.parent / "producer.json"), ""]
    lines += [*store_section(e2e_file.parent / "store.json"), ""]
    lines += [*cluster_section(e2e_file.parent / "cluster.json"), ""]
    lines += [*jobs_section(e2e_file.parent / "jobs.json"), ""]
    lines += [*gate_section(e2e_file.parent / "gate.json"), ""]
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
