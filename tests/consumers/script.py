"""A scripted driver for the member state machine: time is a number the test moves, the coordinator's
answers are dicts built here, and every decision is collected so a test can assert the whole picture."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from consumers.member.state import (
    Decisions,
    HeartbeatRequest,
    MemberConfig,
    MemberStateMachine,
    ShardStart,
)
from coordinator.protocol.model import Shard

MEMBER_ID = "10.0.0.7-42-bill-0-abcd1234"
CLIENT = {"host": "10.0.0.7", "pid": 42, "listener": "bill", "version": "0.1.0"}
INTERVAL_MS = 1_000


def s(*names: str) -> frozenset[Shard]:
    return frozenset(Shard.parse(n) for n in names)


def names(shards: Iterable[Shard]) -> list[str]:
    return [str(x) for x in sorted(shards)]


def response(
    epoch: int,
    shards: Mapping[str, int] | Iterable[str] = (),
    *,
    revoking: Iterable[str] = (),
    max_concurrency: int = 2,
    interval_ms: int = INTERVAL_MS,
    state: str = "STABLE",
    readable: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A heartbeat response as docs/protocol.md section 13 has it (``shards``: name -> grant epoch)."""
    grants = dict(shards) if isinstance(shards, Mapping) else {n: epoch for n in shards}
    held_back = set() if readable is None else set(grants) - set(readable)
    return {
        "member_id": MEMBER_ID,
        "member_epoch": epoch,
        "member_state": state,
        "group_epoch": epoch,
        "assignment_epoch": epoch,
        "heartbeat_interval_ms": interval_ms,
        "lease_ttl_ms": 10 * interval_ms,
        "shards": [
            {
                "shard": n,
                "stream_key": f"rsc:{{orders}}:{n}",
                "assignment_epoch": e,
                "readable": n not in held_back,
            }
            for n, e in sorted(grants.items())
        ],
        "revoking": sorted(revoking),
        "max_concurrency": max_concurrency,
        "routing": {"active_version": 1, "shard_count": 4},
    }


LEAVE_RESPONSE = {**response(-1), "member_state": "LEFT", "max_concurrency": 0}


class Script:
    def __init__(self, capacity: int = 4, **config: Any) -> None:
        self.now = 0
        self.sm = MemberStateMachine(
            MemberConfig(member_id=MEMBER_ID, capacity=capacity, client=CLIENT, **config), self.now
        )
        self.log: list[Decisions] = []
        # The units the loop would be running: shard -> the ShardStart it got.
        self.units: dict[Shard, ShardStart] = {}

    # -------------------------------------------------------------------------------------- time

    def advance(self, ms: int) -> Decisions:
        self.now += ms
        return self._record(self.sm.on_timer(self.now))

    # -------------------------------------------------------------------------------------- heartbeats

    def heartbeat(self) -> HeartbeatRequest:
        request = self.sm.poll_heartbeat(self.now)
        assert request is not None, f"no heartbeat due at {self.now} (due at {self.sm.next_wakeup_ms()})"
        return request

    def no_heartbeat_due(self) -> bool:
        return self.sm.poll_heartbeat(self.now) is None

    def answer(self, request: HeartbeatRequest, body: Mapping[str, Any]) -> Decisions:
        return self._record(self.sm.on_heartbeat_response(request, body, self.now))

    def fail(self, request: HeartbeatRequest, code: str, **kwargs: Any) -> Decisions:
        return self._record(self.sm.on_heartbeat_error(request, code, self.now, **kwargs))

    def exchange(self, body: Mapping[str, Any]) -> tuple[HeartbeatRequest, Decisions]:
        request = self.heartbeat()
        return request, self.answer(request, body)

    def join(self, body: Mapping[str, Any]) -> Decisions:
        request = self.heartbeat()
        assert request.member_epoch == 0
        return self.answer(request, body)

    # -------------------------------------------------------------------------------------- units

    def stopped(self, name: str, *, failed: bool = False) -> Decisions:
        shard = Shard.parse(name)
        self.units.pop(shard, None)
        return self._record(self.sm.on_unit_stopped(shard, self.now, failed=failed))

    def _record(self, decisions: Decisions) -> Decisions:
        self.log.append(decisions)
        for start in decisions.start:
            assert start.shard not in self.units, f"{start.shard} started twice"
            self.units[start.shard] = start
        return decisions

    @property
    def incarnation(self) -> int:
        return self.sm.incarnation


def started(decisions: Decisions) -> list[str]:
    return [str(x.shard) for x in decisions.start]


def stopped(decisions: Decisions, *, abandon: bool | None = None) -> list[str]:
    return [str(x.shard) for x in decisions.stop if abandon is None or x.abandon is abandon]
