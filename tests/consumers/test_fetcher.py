"""The member's fetcher (consumers/member/fetcher.py) on a real Redis: who makes which call.

A ticket handed in while no call is in flight is sent at once by its own unit's thread. Tickets handed
in while one is wait for the next call: made by the only waiting ticket's own unit (handed the lead),
or, when several wait, by the fetcher's thread with all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from consumers.dataplane import DataPlane
from consumers.member.fetcher import Fetcher, Ticket, Wake
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard
from tests.consumers.harness import eventually
from tests.consumers.test_resync import Host
from tests.dataplane.harness import GROUP, PREFIX, Harness, make_client

SHARDS = [Shard(1, i) for i in range(3)]


class GatedPlane(DataPlane):
    """The real data plane; each fetch records the thread that made it and the shards it carried, and
    the first one waits for ``gate`` (so that other tickets come in while it is in flight)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, PREFIX, GROUP)
        self.calls: list[tuple[str, list[str]]] = []
        self.in_flight = threading.Event()
        self.gate = threading.Event()

    def fetch(self, *call: Any) -> Any:  # (member, [ShardFetch], count)
        self.calls.append((threading.current_thread().name, [str(s.shard) for s in call[1]]))
        if len(self.calls) == 1:
            self.in_flight.set()
            assert self.gate.wait(10)
        return super().fetch(*call)


@pytest.fixture
def env(redis_url: str) -> Iterator[tuple[GatedPlane, Fetcher]]:
    client = make_client(redis_url)
    h = Harness(client)
    h.create(shard_count=3, lease_ttl_ms=60_000)
    m1 = h.join("m1")
    for shard in SHARDS:
        h.produce(shard, 3, 2)
    plane = GatedPlane(client)
    host = Host("m1", m1.epoch)
    fetcher = Fetcher(host=host, dataplane=plane, runtime=Runtime(batch_size=10))
    fetcher.start()
    yield plane, fetcher
    plane.gate.set()
    fetcher.close()
    client.close()


def _unit(
    fetcher: Fetcher, shard: Shard, name: str, out: dict[str, Ticket], ticket: Ticket | None = None
) -> threading.Thread:
    def run() -> None:
        out[name] = fetcher.fetch(ticket or Ticket(shard, 1, [], None, threading.Event()))

    return threading.Thread(target=run, name=name)


def _a_in_flight(plane: GatedPlane, fetcher: Fetcher, done: dict[str, Ticket]) -> threading.Thread:
    """Unit A's call, held at the gate."""
    a = _unit(fetcher, SHARDS[0], "unit-a", done)
    a.start()
    assert plane.in_flight.wait(10)
    return a


def _b_waiting_behind_a(
    plane: GatedPlane, fetcher: Fetcher, done: dict[str, Ticket], ticket_b: Ticket | None = None
) -> tuple[threading.Thread, threading.Thread]:
    """Unit A's call held at the gate, and unit B's ticket waiting for the next call."""
    a = _a_in_flight(plane, fetcher, done)
    b = _unit(fetcher, SHARDS[1], "unit-b", done, ticket_b)
    b.start()
    eventually(lambda: len(fetcher._tickets) == 1, what="B waiting")
    return a, b


def test_the_only_ticket_waiting_for_a_call_in_flight_is_sent_next_by_its_own_unit(env: Any) -> None:
    plane, fetcher = env
    done: dict[str, Ticket] = {}
    a, b = _b_waiting_behind_a(plane, fetcher, done)
    assert len(plane.calls) == 1  # B waits: no second call while one is in flight
    plane.gate.set()
    _joined(a, b)
    assert plane.calls == [("unit-a", ["v1:0"]), ("unit-b", ["v1:1"])]  # B's own thread, not the fetcher's
    _assert_read_their_entries(done, "unit-a", "unit-b")
    assert not fetcher._sending  # the lead was given back


def test_several_tickets_waiting_for_a_call_in_flight_go_together_in_the_fetchers_next_call(env: Any) -> None:
    plane, fetcher = env
    done: dict[str, Ticket] = {}
    a = _a_in_flight(plane, fetcher, done)
    b, c = _unit(fetcher, SHARDS[1], "unit-b", done), _unit(fetcher, SHARDS[2], "unit-c", done)
    b.start()
    c.start()
    eventually(lambda: len(fetcher._tickets) == 2, what="B and C waiting")
    plane.gate.set()
    _joined(a, b, c)
    assert plane.calls[0] == ("unit-a", ["v1:0"])
    assert plane.calls[1:] == [("unit-fetcher", ["v1:1", "v1:2"])]
    _assert_read_their_entries(done, "unit-a", "unit-b", "unit-c")
    assert not fetcher._sending


def _joined(*threads: threading.Thread) -> None:
    for t in threads:
        t.join(10)
        assert not t.is_alive()


def _assert_read_their_entries(done: dict[str, Ticket], *names: str) -> None:
    for name in names:
        ticket, shard = done[name], SHARDS["abc".index(name[-1])]
        assert ticket.wake is Wake.RESULT and ticket.result is not None
        assert [e.shard for e in ticket.result.entries] == [shard, shard]


class HeldLead(threading.Event):
    """A ticket's ``done`` that, once the ticket is handed the lead, lets its unit act on it only after
    ``hold`` is set (so the test can close the fetcher in between)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.ticket: Ticket | None = None

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout)
        if self.ticket is not None and self.ticket.wake is Wake.LEAD:
            assert self.hold.wait(10)
        return woke


def test_a_lead_handed_to_a_unit_of_a_fetcher_closed_meanwhile_comes_back_stopped(env: Any) -> None:
    plane, fetcher = env
    done: dict[str, Ticket] = {}
    held = HeldLead()
    ticket_b = Ticket(SHARDS[1], 1, [], None, threading.Event(), done=held)
    held.ticket = ticket_b
    a, b = _b_waiting_behind_a(plane, fetcher, done, ticket_b)
    plane.gate.set()  # A's call returns and hands B the lead ...
    eventually(lambda: ticket_b.wake is Wake.LEAD, what="B handed the lead")
    fetcher.close()  # ... and the fetcher closes before B acts on it
    held.hold.set()
    _joined(a, b)
    assert done["unit-b"].wake is Wake.STOPPED and done["unit-b"].result is None
    assert [name for name, _ in plane.calls] == ["unit-a"]  # B sent nothing
    assert not fetcher._sending
