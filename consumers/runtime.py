"""The per-process runtime component (the "bean"): configured once, shared by every member.

``Runtime.max_concurrency`` is the *runtime max concurrency* of docs/protocol.md: how many handler
batches ONE member can run at once (its workers: the units' threads, bounded by
consumers/member/pool.py). It is reported as ``capacity`` when a member joins and caps the member's
worker count (a member runs exactly ``min(max_concurrency, the response's max_concurrency)`` workers).
It is nothing else: not a number of shards, not a number of members (that is a listener's
``concurrency``), and never an assignment weight.

The other fields tune the fetch loops; their defaults suit most deployments.

Configured with Django's ``RSC_RUNTIME``: a dict of these fields (``{"max_concurrency": 4}``), or the
dotted path of a factory (a callable taking no arguments) that returns a :class:`Runtime`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from consumers.errors import InvalidRequest

MAX_RUNTIME_CONCURRENCY = 1024  # the coordinator's limit on a reported capacity


class RuntimeConfigError(InvalidRequest):
    """``RSC_RUNTIME`` (or a ``Runtime(...)``) is not a valid runtime configuration."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    max_concurrency: int = 1  # handler batches one member runs at once (reported as capacity)
    batch_size: int = 16  # entries read per shard per fetch, handled as one batch
    # An idle member waits for new entries (one blocking XREAD: consumers/dataplane/wait.py) and reads
    # its idle shards again when one has some, or after idle_wait_ms at the latest (the safety net)
    wake_on_append: bool = True
    idle_wait_ms: int = 1_000
    # Without the wake-up (off, or Redis refuses the wait): an empty shard is polled again after
    # idle_backoff_min_ms, doubling up to idle_backoff_max_ms
    idle_backoff_min_ms: int = 5
    idle_backoff_max_ms: int = 100
    retry_backoff_max_ms: int = 5_000  # Redis / coordinator unreachable: back off up to this
    heartbeat_timeout_s: float = 5.0  # HTTP timeout of one heartbeat
    # ConsumerProcess.serve (run_member) freezes the heap once its members started (gc.freeze): what is
    # alive then (Django, the listeners' modules, the members) is left out of the cyclic collector's
    # passes, so a full pass scans what came after, not the whole heap (consumers/process.py says why)
    freeze_heap: bool = True

    def __post_init__(self) -> None:
        _int_in(self.max_concurrency, "max_concurrency", 1, MAX_RUNTIME_CONCURRENCY)
        _int_in(self.batch_size, "batch_size", 1, 10_000)
        for name in ("wake_on_append", "freeze_heap"):
            if not isinstance(getattr(self, name), bool):
                raise RuntimeConfigError(f"{name} must be True or False; got {getattr(self, name)!r}")
        _int_in(self.idle_wait_ms, "idle_wait_ms", 10, 60_000)
        _int_in(self.idle_backoff_min_ms, "idle_backoff_min_ms", 1, 60_000)
        _int_in(self.idle_backoff_max_ms, "idle_backoff_max_ms", self.idle_backoff_min_ms, 60_000)
        _int_in(self.retry_backoff_max_ms, "retry_backoff_max_ms", 100, 600_000)
        if isinstance(self.heartbeat_timeout_s, bool) or not (
            isinstance(self.heartbeat_timeout_s, int | float) and 0 < self.heartbeat_timeout_s <= 600
        ):
            raise RuntimeConfigError(
                f"heartbeat_timeout_s must be in (0, 600]; got {self.heartbeat_timeout_s!r}"
            )


def _int_in(value: object, what: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RuntimeConfigError(f"runtime {what} must be an integer in [{low}, {high}]; got {value!r}")


def load_runtime(setting: Runtime | Mapping[str, Any] | str | None) -> Runtime:
    """A :class:`Runtime` from the ``RSC_RUNTIME`` setting (None: the defaults)."""
    if setting is None:
        return Runtime()
    if isinstance(setting, Runtime):
        return setting
    if isinstance(setting, Mapping):
        known = {f.name for f in fields(Runtime)}
        unknown = sorted(set(setting) - known)
        if unknown:
            raise RuntimeConfigError(f"RSC_RUNTIME has unknown keys {unknown}; known: {sorted(known)}")
        return Runtime(**setting)
    if isinstance(setting, str):
        factory = _import_string(setting)
        runtime = factory() if callable(factory) else factory
        if not isinstance(runtime, Runtime):
            raise RuntimeConfigError(f"RSC_RUNTIME {setting!r} returned {runtime!r}, not a consumers.Runtime")
        return runtime
    raise RuntimeConfigError(
        f"RSC_RUNTIME must be a dict of Runtime fields or a dotted path to a factory; got {setting!r}"
    )


def _import_string(path: str) -> Any:
    module_path, _, name = path.rpartition(".")
    if not module_path:
        raise RuntimeConfigError(f"RSC_RUNTIME {path!r} is not a dotted path (module.factory)")
    try:
        return getattr(importlib.import_module(module_path), name)
    except (ImportError, AttributeError) as e:
        raise RuntimeConfigError(f"RSC_RUNTIME {path!r} cannot be imported: {e}") from e
