"""A load generator for the overload tests: synthetic members that churn through a coordinator API.

    python -m tests.e2e.overload --port P --token T --prefix load --group load-workers \\
        --churners 200 --interval-ms 200 --seconds 60 [--hold 10] [--no-pause] [--warmup 2]

Each churner is a thread playing a member that does no data-plane work: it joins (a fresh member id,
``join_seq`` 1), heartbeats ``--hold`` times every ``--interval-ms`` (reporting the shards it was given as
owned, so revocations and assignments progress), leaves, and starts again with a new id. It behaves like
the product's members under load: a 429 or 503 is retried after its ``Retry-After`` (capped at one
second) plus jitter, a timeout or a refused connection after a short jittered pause, and a refusal of the
member (fenced, expired) starts it over with a new join. With ``--no-pause`` it heartbeats back to back:
that is how the tests measure what the API can answer (its capacity) before offering twice as much,
as ``answered_steady_per_s``: answers after ``--warmup`` seconds, when the start's burst of joins (most
of them shed, their churners sitting out a Retry-After of a second or more) is over.

Prints one JSON object: requests sent and answered, answers per status, timeouts, joins, leaves, and the
answered rate per second.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import secrets
import threading
import time
from collections import Counter
from typing import Any

TIMEOUT_S = 2.0


class Churner(threading.Thread):
    def __init__(
        self, args: argparse.Namespace, index: int, steady_at: float, stop_at: float, stats: Counter[str]
    ) -> None:
        super().__init__(daemon=True)
        self.args, self.index, self.stats = args, index, stats
        self.steady_at, self.stop_at = steady_at, stop_at
        self.local: Counter[str] = Counter()
        self.conn: http.client.HTTPConnection | None = None
        self.path = f"/api/v1/groups/{args.prefix}/{args.group}/heartbeat"
        self.headers = {"Authorization": f"Bearer {args.token}", "Content-Type": "application/json"}

    def call(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        """(status, payload, retry-after seconds); status 0 for a timeout or a connection error."""
        self.local["sent"] += 1
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.args.port, timeout=TIMEOUT_S)
            self.conn.request("POST", self.path, body=json.dumps(body).encode(), headers=self.headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.local["timeouts" if isinstance(exc, TimeoutError) else "errors"] += 1
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return 0, {}, 0.1
        self.local["answered"] += 1
        if time.monotonic() >= self.steady_at:
            self.local["answered_steady"] += 1
        self.local[f"status_{response.status}"] += 1
        retry_after = float(response.getheader("Retry-After") or 0)
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {}
        return response.status, payload, retry_after

    def pause(self, seconds: float) -> None:
        time.sleep(min(max(0.0, seconds), max(0.0, self.stop_at - time.monotonic())))

    def run(self) -> None:
        try:
            while time.monotonic() < self.stop_at:
                self.cycle()
        finally:
            with _LOCK:
                self.stats.update(self.local)

    def cycle(self) -> None:
        member = f"churn-{self.index}-{secrets.token_hex(4)}"
        body: dict[str, Any] = {"member_id": member, "member_epoch": 0, "capacity": 1, "join_seq": 1}
        view: dict[str, Any] | None = None
        while view is None:
            if time.monotonic() >= self.stop_at:
                return
            status, payload, retry_after = self.call(body)
            if status == 200:
                view = payload
                self.local["joins"] += 1
            else:
                self.pause(min(retry_after or 0.1, 1.0) * random.uniform(1.0, 1.5))
        for _ in range(self.args.hold):
            if time.monotonic() >= self.stop_at:
                return
            if not self.args.no_pause:
                self.pause(self.args.interval_ms / 1000 * random.uniform(0.9, 1.1))
            owned = [s["shard"] for s in view.get("shards", [])]
            status, payload, retry_after = self.call(
                {"member_id": member, "member_epoch": view["member_epoch"], "owned_shards": owned}
            )
            if status == 200:
                view = payload
            elif status in (0, 429, 503):
                self.pause(min(retry_after, 1.0) * random.uniform(1.0, 1.5))
            else:  # fenced, expired, unknown: this member is over; a new one joins
                return
        status, _, _ = self.call({"member_id": member, "member_epoch": -1})
        if status == 200:
            self.local["leaves"] += 1


_LOCK = threading.Lock()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--churners", type=int, required=True)
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--hold", type=int, default=10, help="heartbeats between a join and its leave")
    parser.add_argument("--no-pause", action="store_true", help="heartbeat back to back (capacity)")
    parser.add_argument(
        "--warmup", type=float, default=0.0, help="seconds not in answered_steady_per_s (the start)"
    )
    args = parser.parse_args(argv)
    stats: Counter[str] = Counter()
    started = time.monotonic()
    steady_at, stop_at = started + args.warmup, started + args.seconds
    threads = [Churner(args, i, steady_at, stop_at, stats) for i in range(args.churners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.seconds + 3 * TIMEOUT_S)
    elapsed = time.monotonic() - started
    steady_s = max(elapsed - args.warmup, 1e-9)
    result = {
        **stats, "seconds": round(elapsed, 3), "answered_per_s": round(stats["answered"] / elapsed, 1),
        "answered_steady_per_s": round(stats["answered_steady"] / steady_s, 1),
    }  # fmt: skip
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
