"""The e2e handler: one JSON line per handled entry, appended to ``$E2E_HANDLED_LOG``.

Environment (set per member process by tests/e2e/stack.py):

* ``E2E_STREAM_PREFIX`` / ``E2E_CONSUMER_GROUP``: the group (default ``e2e`` / ``e2e-workers``);
* ``E2E_HANDLED_LOG``: the process's own log file; unset means a no-op handler (the benchmark's
  throughput runs);
* ``E2E_MEMBER_NAME``: the name the test gave this process, the ``member_id`` of its lines (with the
  member's label, so a process running several members keeps them apart);
* ``E2E_HANDLER_SLEEP_MS``: simulated work per entry, so that a member holds read-but-unacked entries
  when a test kills or freezes it;
* ``E2E_ORDERING``: the listeners' ``ordering`` (``shard``, the default, ``key`` or ``none``;
  ``E2E_MAX_IN_FLIGHT`` their window under the last two). Under ``key`` and ``none`` the handler runs on
  the member's worker threads (``RSC_RUNTIME_MAX_CONCURRENCY`` of them), many entries of a shard at once;
* ``E2E_CURE_FILE``: a *poison* event (payload ``{"poison": true}``) makes the handler raise until this
  file exists (never, when unset). Every failed attempt is one JSON line in ``<handled log>.attempts``
  (not a ``*.jsonl`` file: the delivery checker sees only successful handlings).

A line is written with one ``write(2)`` on an ``O_APPEND`` descriptor *before the handler returns*, i.e.
before the entry can be acked: every acked entry is in the log, even if the process is SIGKILLed right
after (the kernel owns the bytes once ``write`` returned). Fields are those of tests/e2e/checker.py plus
``entry_id``, ``delivery``, ``pid``, ``produced_at_ms``, ``wall_ns`` (wall clock at the start, to
compare with Redis's ``TIME``) and ``sent_ns`` (the producer's wall clock, if it put one in the
payload). ``start_ns`` / ``end_ns`` are ``CLOCK_MONOTONIC``, which every process of the host shares,
so the checker can compare handlings of different processes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from consumers import listener

STREAM_PREFIX = os.environ.get("E2E_STREAM_PREFIX", "e2e")
CONSUMER_GROUP = os.environ.get("E2E_CONSUMER_GROUP", "e2e-workers")
_NAME = os.environ.get("E2E_MEMBER_NAME", f"pid{os.getpid()}")
_SLEEP_S = float(os.environ.get("E2E_HANDLER_SLEEP_MS", "0")) / 1000
_LOG_PATH = os.environ.get("E2E_HANDLED_LOG", "")
_CURE_FILE = os.environ.get("E2E_CURE_FILE", "")
_ORDERING: dict[str, Any] = {"ordering": os.environ.get("E2E_ORDERING", "shard")}
if os.environ.get("E2E_MAX_IN_FLIGHT"):
    _ORDERING["max_in_flight"] = int(os.environ["E2E_MAX_IN_FLIGHT"])
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT
_fd = os.open(_LOG_PATH, _FLAGS, 0o644) if _LOG_PATH else None
_attempts_fd = os.open(_LOG_PATH + ".attempts", _FLAGS, 0o644) if _LOG_PATH else None


class PoisonError(RuntimeError):
    """The handler's failure on a poison event (tests of stuck entries, redelivery and dead letters)."""


def _fail_if_poison(entry: Any, payload: dict[str, Any]) -> None:
    if not payload.get("poison") or (_CURE_FILE and os.path.exists(_CURE_FILE)):
        return
    if _attempts_fd is not None:
        line = {"event_id": entry.event_id, "entry_id": entry.entry_id, "shard": str(entry.shard)}
        os.write(_attempts_fd, (json.dumps(line) + "\n").encode())
    raise PoisonError(f"poison event {entry.event_id}")


def _member_label() -> str:
    # Handlers run on threads named "<listener>[<index>]-worker-<shard>" (consumers/member/shard.py), or
    # "<listener>[<index>]-worker-<n>" under ordering "key" / "none" (consumers/member/tasks.py).
    return threading.current_thread().name.rsplit("-worker-", 1)[0]


@listener(stream_prefix=STREAM_PREFIX, consumer_group=CONSUMER_GROUP, name="e2e", **_ORDERING)
def handle(entry: Any) -> None:
    start_ns = time.monotonic_ns()
    wall_ns = time.time_ns()
    if _SLEEP_S:
        time.sleep(_SLEEP_S)
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    _fail_if_poison(entry, payload)
    if _fd is None:
        return
    record = {
        "event_id": entry.event_id,
        "partition_key": entry.partition_key,
        "routing_version": entry.routing_version,
        "shard": str(entry.shard),
        "seq": payload.get("seq", -1),
        "member_id": f"{_NAME}/{_member_label()}",
        "start_ns": start_ns,
        "end_ns": time.monotonic_ns(),
        "entry_id": entry.entry_id,
        "delivery": entry.delivery,
        "pid": os.getpid(),
        "produced_at_ms": entry.produced_at_ms,
        "wall_ns": wall_ns,
        "sent_ns": payload.get("sent_ns"),  # the producer's wall clock, when it stamps its events
    }
    os.write(_fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


# The opt-in error policies (docs/protocol.md section 14): a poison event is tried three times, then
# dead-lettered; the same handler otherwise.
handle_with_dead_letters = listener(
    stream_prefix=STREAM_PREFIX,
    consumer_group=CONSUMER_GROUP,
    name="e2e_dlq",
    on_error="redeliver",
    max_deliveries=3,
    dead_letter=True,
    redeliver_backoff_ms=50,
    **_ORDERING,
)(handle.fn)


# The benchmark's no-op handler (bench/e2e_bench.py): it touches nothing, so an entry costs only what
# the member does around it (read, decode, ack), like the raw loop it is compared with.
@listener(stream_prefix=STREAM_PREFIX, consumer_group=CONSUMER_GROUP, name="e2e_noop", **_ORDERING)
def noop(entry: Any) -> None:
    pass
