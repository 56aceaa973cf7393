"""What the gate module costs Redis: the same calls through ``FCALL`` and through the gate
(rsc_redis/module/rsc_gate.c; docs/redis-acl.md, "The gate module"), Redis CPU per call.

    python bench/gate_cost.py [--calls N] [--repetitions R] [--out FILE]

One private Redis with the gate module (config/embedded_redis.py, a free port, never 6379), the data
plane's library loaded, one stream prefix with 8 shards created by the real store. Two clients built the
same way (``consumers.dataplane.redis_client``), one told to call ``FCALL`` (its gate answer set to
no), the other finding the gate as every client does. Two cases:

* **produce**: ``Producer.send`` (its hot call: ``FCALL`` against ``RSC.FCALL_PRODUCER`` of
  ``produce``; a write, one ``XADD`` inside);
* **version**: the version function with nothing inside (``FCALL_RO`` against ``RSC.FCALL_RO``): the
  gate's own cost, nothing else.

Redis CPU per call: the ``INFO cpu`` used_cpu_sys + used_cpu_user delta over the calls (everything the
server spent, sockets included), in alternating chunks of 1,000 calls (the side that goes first
alternates), ``--calls`` per side and repetition; the medians of the repetitions and their ratio are
printed (and written as JSON with ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from config.embedded_redis import FORBIDDEN_PORT, RedisServer  # noqa: E402
from consumers.dataplane import redis_client  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from coordinator.protocol.commands import CreateGroup  # noqa: E402
from coordinator.protocol.model import GroupConfig  # noqa: E402
from coordinator.store.redis_store import MetadataStore  # noqa: E402
from rsc_redis import clients  # noqa: E402
from rsc_redis.dead_letter_mac import MacKeys  # noqa: E402

PREFIX, GROUP, SHARDS, CHUNK = "gatecost", "gatecost-g", 8, 1_000


def redis_cpu_s(admin: redis.Redis) -> float:
    cpu = admin.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def measure(
    admin: redis.Redis, sides: dict[str, Callable[[int], None]], calls: int, rep: int
) -> dict[str, float]:
    """Redis CPU µs per call of each side, in alternating chunks."""
    spent = dict.fromkeys(sides, 0.0)
    names = list(sides)
    for chunk in range(calls // CHUNK):
        for name in names if (chunk + rep) % 2 == 0 else reversed(names):
            before = redis_cpu_s(admin)
            sides[name](CHUNK)
            spent[name] += redis_cpu_s(admin) - before
    return {name: spent[name] / (calls // CHUNK * CHUNK) * 1e6 for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out")
    options = parser.parse_args()
    with RedisServer() as server:
        assert server.port != FORBIDDEN_PORT
        admin = redis.Redis.from_url(server.url)
        store = MetadataStore(admin, dead_letter_keys=[MacKeys.derive("gate_cost")])
        store.functions.ensure()
        config = GroupConfig(lease_ttl_ms=3_600_000, heartbeat_interval_ms=1_000)
        store.create_group(
            CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=SHARDS, config=config),
            start_from="latest",
        )
        direct, gated = redis_client(server.url), redis_client(server.url)
        direct.rsc_gated = False  # type: ignore[union-attr]  # as on a Redis without the module
        assert clients.gated(gated) and not clients.gated(direct)
        producers = {"fcall": Producer(direct), "gate": Producer(gated)}
        version = store.functions.library.version_function

        def send(producer: Producer) -> Callable[[int], None]:
            def run(n: int) -> None:
                for i in range(n):
                    producer.send(PREFIX, f"k{i}", {"n": i})

            return run

        def read_version(client: Any, command: str) -> Callable[[int], None]:
            def run(n: int) -> None:
                for _ in range(n):
                    client.execute_command(command, version, 0)

            return run

        cases = {
            "produce": {name: send(p) for name, p in producers.items()},
            "version": {
                "fcall": read_version(direct, "FCALL_RO"),
                "gate": read_version(gated, "RSC.FCALL_RO"),
            },
        }
        for sides in cases.values():  # warm-up: connections, the route cache
            measure(admin, sides, CHUNK, 0)
        runs: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
        for rep in range(options.repetitions):
            for case, sides in cases.items():
                runs[case].append(measure(admin, sides, options.calls, rep))
        direct.close()
        gated.close()
    report: dict[str, Any] = {"calls": options.calls, "repetitions": options.repetitions, "cases": {}}
    for case, reps in runs.items():
        fcall = statistics.median(r["fcall"] for r in reps)
        gate = statistics.median(r["gate"] for r in reps)
        report["cases"][case] = {"runs": reps, "fcall_us": fcall, "gate_us": gate, "ratio": gate / fcall}
        print(
            f"{case}: Redis CPU per call FCALL {fcall:.2f} µs, gate {gate:.2f} µs, "
            f"gate / FCALL {gate / fcall:.2f} (+{gate - fcall:.2f} µs); repetitions: "
            + ", ".join(f"{r['fcall']:.2f}/{r['gate']:.2f}" for r in reps)
        )
    if options.out:
        Path(options.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
