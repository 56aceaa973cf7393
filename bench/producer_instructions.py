"""What an entry costs Redis, in instructions: the producer's function against a bare ``XADD``, counted by
callgrind (valgrind), so the figures do not depend on the machine's load (docs/producer.md,
"Performance").

    python bench/producer_instructions.py --out FILE [--batches B] [--sends S]

One ``redis-server`` (config/embedded_redis.py's binary) runs under ``valgrind --tool=callgrind`` on a
free port (never 6379), with the data plane's library loaded as the coordinator loads it and a stream
prefix of 8 shards. Each case runs once for warm-up, then callgrind's counters are zeroed, the case runs,
and they are dumped: the instructions Redis executed in between (in its process: parsing, the command
or function, the reply; the kernel's time in its socket calls is not counted), divided by the entries
appended. The same entries as bench/producer_bench.py:

* ``send_batch(100)`` of (key, payload dict) items, against a pipeline of 100 ``XADD`` of the same
  envelopes encoded before the loop;
* ``send`` one entry, against one ``XADD``.

Needs ``valgrind`` on PATH; without it the script writes ``{"skipped": why}``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import redis  # noqa: E402
from producer_bench import PREFIX, SHARDS, items_for, raw_entries  # noqa: E402

from config.embedded_redis import FORBIDDEN_PORT, find_server_binary, free_port  # noqa: E402
from consumers.dataplane import redis_client  # noqa: E402
from consumers.producer import Producer  # noqa: E402
from coordinator.protocol.commands import CreateGroup  # noqa: E402
from coordinator.protocol.model import GroupConfig  # noqa: E402
from coordinator.store.redis_store import MetadataStore  # noqa: E402
from rsc_redis.dead_letter_mac import MacKeys  # noqa: E402

BATCH = 100


class Callgrind:
    """redis-server under callgrind; :meth:`count` runs a workload and returns Redis's instructions."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="rsc-callgrind-")
        self.port = free_port()
        assert self.port != FORBIDDEN_PORT
        self.process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.dir}/out.%p",
                find_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        admin = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        admin.close()
        self.dumps = 0

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], check=True, capture_output=True)

    def count(self, workload: Callable[[], None]) -> int:
        self._control("--zero")
        workload()
        self.dumps += 1
        self._control("--dump", f"case-{self.dumps}")
        pattern = f"{self.dir}/out.{self.process.pid}.*"
        deadline = time.monotonic() + 30
        while True:  # the dump is written by the server process, a moment after the command returns
            files = [f for f in glob.glob(pattern) if os.path.getsize(f) > 0]
            if len(files) >= self.dumps:
                text = Path(max(files, key=os.path.getmtime)).read_text()
                found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
                if found:
                    return int(found.group(1))
            if time.monotonic() > deadline:
                raise RuntimeError(f"no callgrind dump in {self.dir}")
            time.sleep(0.1)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def run(batches: int, sends: int) -> dict[str, Any]:
    grind = Callgrind()
    try:
        admin = redis.Redis.from_url(grind.url)
        store = MetadataStore(admin, dead_letter_keys=[MacKeys.derive("producer_instructions")])
        store.functions.ensure()
        config = GroupConfig()
        create = CreateGroup(stream_prefix=PREFIX, consumer_group="g", shard_count=SHARDS, config=config)
        store.create_group(create, start_from="latest")
        client = redis_client(grind.url)
        producer = Producer(client)
        items = items_for(0, batches * BATCH)
        entries = raw_entries(batches * BATCH)

        def batch_producer() -> None:
            for b in range(batches):
                producer.send_batch(PREFIX, items[b * BATCH : (b + 1) * BATCH])

        def batch_raw() -> None:
            for b in range(batches):
                pipe = client.pipeline(transaction=False)
                for stream, fields in entries[b * BATCH : (b + 1) * BATCH]:
                    pipe.xadd(stream, fields)
                pipe.execute()

        def single_producer() -> None:
            for key, payload in items[:sends]:
                producer.send(PREFIX, key, payload)

        def single_raw() -> None:
            for stream, fields in entries[:sends]:
                client.xadd(stream, fields)

        cases = {
            "batch_100_producer": (batch_producer, batches * BATCH),
            "batch_100_raw_pipelined_xadd": (batch_raw, batches * BATCH),
            "single_producer": (single_producer, sends),
            "single_raw_xadd": (single_raw, sends),
        }
        for workload, _ in cases.values():  # warm-up: connections, the route cache, the streams
            workload()
        per_entry = {name: round(grind.count(workload) / n) for name, (workload, n) in cases.items()}
        version = admin.info("server")["redis_version"]
        client.close()
        admin.close()
    finally:
        grind.close()
    return {
        "redis": version,
        "batches": batches,
        "batch_size": BATCH,
        "sends": sends,
        "instructions_per_entry": per_entry,
        "ratios": {
            "batch_100": round(
                per_entry["batch_100_producer"] / per_entry["batch_100_raw_pipelined_xadd"], 2
            ),
            "single": round(per_entry["single_producer"] / per_entry["single_raw_xadd"], 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON results here (default: stdout only)")
    parser.add_argument("--batches", type=int, default=20, help="batches of 100 per case")
    parser.add_argument("--sends", type=int, default=500, help="single sends per case")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        results: dict[str, Any] = {"skipped": "valgrind (callgrind) is not installed"}
    else:
        results = run(args.batches, args.sends)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
