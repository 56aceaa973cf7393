"""Members against a real, private Redis: the real store (via StoreCoordinatorClient), the real data plane
and the real producer. Nothing is mocked; time is real, so tests wait for conditions with bounded polls
(:func:`eventually`) and never assert on a sleep."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from consumers.client import StoreCoordinatorClient
from consumers.dataplane import DataPlane
from consumers.listener import Listener
from consumers.member.member import Member
from consumers.producer import Producer
from consumers.runtime import Runtime
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.model import GroupConfig, Shard
from coordinator.protocol.routing import shard_index
from coordinator.store.redis_store import MetadataStore
from rsc_redis.keys import stream_key

PREFIX = "orders"
GROUP = "billing"
SHARDS = 4
FAST = Runtime(max_concurrency=4, batch_size=4, idle_backoff_min_ms=2, idle_backoff_max_ms=20)


def eventually(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> Any:
    """Poll ``condition`` until it is truthy; fail after ``timeout_s`` (a bound, not an expectation)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.01)


def make_client(url: str, **kwargs: Any) -> redis.Redis:
    options: dict[str, Any] = {"socket_timeout": 2, "socket_connect_timeout": 1}
    options.update(kwargs)
    return redis.Redis.from_url(url, **options)


@dataclass(frozen=True, slots=True)
class Call:
    """One handler invocation."""

    member: str  # the member's label, e.g. "bill[1]" (from the worker thread's name)
    shard: str
    key: str
    n: int
    entry_id: str
    started: float
    ended: float


class Recorder:
    """Wraps a handler and records every call (thread-safe)."""

    def __init__(self, inner: Callable[[Any], Any] | None = None) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def __call__(self, entry: Any) -> None:
        started = time.monotonic()
        try:
            if self.inner is not None:
                self.inner(entry)
        finally:
            ended = time.monotonic()
            member = threading.current_thread().name.rsplit("-worker-", 1)[0]
            payload = entry.payload if isinstance(entry.payload, dict) else {}
            call = Call(member, str(entry.shard), entry.partition_key, payload.get("n", -1), entry.entry_id,
                        started, ended)  # fmt: skip
            with self._lock:
                self.calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def count(self) -> int:
        with self._lock:
            return len(self.calls)

    def handled_ns(self) -> set[int]:
        return {c.n for c in self.snapshot()}

    def by_member(self) -> dict[str, set[str]]:
        shards: dict[str, set[str]] = {}
        for c in self.snapshot():
            shards.setdefault(c.member, set()).add(c.shard)
        return shards


class Cluster:
    """One consumer group on a private Redis, and the members a test starts on it."""

    def __init__(self, url: str, *, shard_count: int = SHARDS, **config: int) -> None:
        self.client = make_client(url)
        self.store = MetadataStore(self.client)
        self.producer = Producer(self.client)
        defaults = {
            "lease_ttl_ms": 2_000,
            "heartbeat_interval_ms": 100,
            "revocation_timeout_ms": 10_000,
            "max_concurrency": 4,
        }
        self.config = GroupConfig(**{**defaults, **config})
        self.shard_count = shard_count
        self.recreate_group()
        self.members: list[Member] = []
        self._next = 0
        self._sent = 0

    def recreate_group(self) -> None:
        """What an operator does after Redis lost everything: create the group again."""
        command = CreateGroup(
            stream_prefix=PREFIX, consumer_group=GROUP, shard_count=self.shard_count, config=self.config
        )
        self.store.create_group(command, start_from="earliest")

    # -------------------------------------------------------------------------------------- members

    def member(
        self,
        handler: Callable[[Any], Any],
        *,
        runtime: Runtime = FAST,
        coordinator: Any = None,
        client: redis.Redis | None = None,
        dataplane: DataPlane | None = None,
        start: bool = True,
        instance: str | None = None,
        index: int | None = None,
        **listener_options: Any,
    ) -> Member:
        """A member of the group; ``listener_options`` (``on_error=...``, ...) go to its Listener.
        ``instance``: static membership (its instance id is ``<instance>.bill.<index>``); ``index``: the
        member's index in its listener (default: the next one)."""
        if index is None:
            index = self._next
            self._next += 1
        item = Listener(handler, stream_prefix=PREFIX, consumer_group=GROUP, name="bill", **listener_options)
        m = Member(
            listener=item,
            index=index,
            coordinator=coordinator or StoreCoordinatorClient(self.store),
            dataplane=dataplane or DataPlane(client or self.client, PREFIX, GROUP),
            runtime=runtime,
            instance=instance,
        )
        self.members.append(m)
        if start:
            m.start()
        return m

    def close(self) -> None:
        for m in self.members:
            if m._thread.is_alive():
                m.stop(2.0)
        for m in self.members:
            m.wait(10.0)
        self.client.close()

    # -------------------------------------------------------------------------------------- streams

    def key_for(self, index: int, n: int = 0) -> str:
        """The n-th key (k0, k1, ...) that routes to shard ``index``."""
        found = -1
        for i in range(100_000):
            key = f"k{i}"
            if shard_index(key, self.shard_count) == index:
                found += 1
                if found == n:
                    return key
        raise AssertionError(f"no key for shard {index}")

    def send(self, key: str, **payload: Any) -> str:
        """Append one event (``n`` numbers events in send order); returns its entry id."""
        payload.setdefault("n", self._sent)
        self._sent += 1
        return self.producer.send(PREFIX, key, payload).entry_id

    def send_many(self, keys: list[str], per_key: int) -> int:
        """``per_key`` events to each key, interleaved; returns how many were sent."""
        for _ in range(per_key):
            for key in keys:
                self.send(key)
        return per_key * len(keys)

    def pending(self, shard: str) -> list[tuple[str, str]]:
        rows = self.client.xpending_range(stream_key(PREFIX, Shard.parse(shard)), GROUP, "-", "+", 10_000)
        return [(r["message_id"].decode(), r["consumer"].decode()) for r in rows]

    def all_pending(self) -> dict[str, list[tuple[str, str]]]:
        return {f"v1:{i}": self.pending(f"v1:{i}") for i in range(self.shard_count)}

    def describe(self) -> dict[str, Any]:
        return self.store.describe_group(PREFIX, GROUP)

    def member_view(self, member_id: str) -> dict[str, Any]:
        return next(m for m in self.describe()["members"] if m["member_id"] == member_id)

    def stable(self, *members: Member) -> bool:
        """The group is STABLE and every one of ``members`` runs exactly its assignment."""
        if self.describe()["state"] != "STABLE":
            return False
        return all(m.assignment and m.running_shards == m.assignment for m in members)


def assert_no_overlap_per_shard(calls: list[Call]) -> None:
    """No two handler calls of one shard overlapped in time (whichever members made them)."""
    _assert_no_overlap(calls, lambda c: c.shard, "shard")


def assert_no_overlap_per_key(calls: list[Call]) -> None:
    """No two handler calls of one partition key overlapped in time (whichever members made them)."""
    _assert_no_overlap(calls, lambda c: c.key, "key")


def _assert_no_overlap(calls: list[Call], group: Callable[[Call], str], what: str) -> None:
    groups: dict[str, list[Call]] = {}
    for c in calls:
        groups.setdefault(group(c), []).append(c)
    for name, items in groups.items():
        items.sort(key=lambda c: c.started)
        for a, b in itertools.pairwise(items):
            assert a.ended <= b.started, f"{what} {name}: {a} overlaps {b}"


def overlapped(calls: list[Call], group: Callable[[Call], str]) -> bool:
    """Did any two calls of one group (a shard, a key) run at the same time?"""
    groups: dict[str, list[Call]] = {}
    for c in calls:
        groups.setdefault(group(c), []).append(c)
    for items in groups.values():
        items.sort(key=lambda c: c.started)
        if any(a.ended > b.started for a, b in itertools.pairwise(items)):
            return True
    return False


def assert_per_key_order(calls: list[Call]) -> None:
    """Per key, events were first handled in the order they were sent."""
    firsts: dict[str, list[int]] = {}
    seen: set[int] = set()
    for c in sorted(calls, key=lambda c: c.started):
        if c.n not in seen:
            seen.add(c.n)
            firsts.setdefault(c.key, []).append(c.n)
    for key, ns in firsts.items():
        assert ns == sorted(ns), f"key {key}: handled out of order: {ns}"
