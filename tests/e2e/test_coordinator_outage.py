"""The coordinator goes away while members consume, and comes back.

What the product promises (docs/protocol.md sections 3, 5 and 7; decided and pinned here):

* **Shorter than the lease**: nothing happens. Heartbeats fail and are retried (with backoff capped at
  the heartbeat interval), members keep consuming their shards, and when the API answers again the
  next heartbeat renews the lease: no epoch moves, no member expires, no shard moves.
* **Longer than the lease**: members consume *until their lease ends by Redis's clock* - the fence is
  in the data plane's scripts and does not need the coordinator - then every read and ack is refused
  (MEMBER_FENCED): each member drops its shards and keeps trying to rejoin. While no member holds a
  lease nothing is handled. When the coordinator returns the members rejoin (epoch 0, same member ids)
  and recover the entries they had read and not acked (own-pending re-read or claim): nothing lost,
  per-key order kept; the only duplicates are entries handled by a member that was then fenced before
  it could ack them.

  Why members do not simply keep consuming: the data plane cannot tell "the coordinator is down" from
  "this member is cut off and its shards were given to someone else"; reading past the lease would
  break the single-owner rule in the second case. Availability is traded for safety.

The short outage SIGSTOPs the API (a hung coordinator: connections accepted, heartbeats time out) and
keeps the tick running (an API outage alone must not expire anyone while leases last); SIGCONT ends it
at once, so its length does not depend on how fast gunicorn restarts on a loaded machine. The long one
SIGKILLs the API and the tick, the whole coordinator, so expiry can only come from the lease itself
(the members' own clock and the data plane's scripts), and restarts both.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .conftest import keys_for_every_shard
from .helpers import finish, handled_between, pid_of, unexplained_duplicates
from .stack import HandledLogs, Proc, ProducerLoop, Stack, live, stable_and_balanced, wait_until

SHARDS = 6


def logged_since(proc: Proc, offset: int, text: str) -> bool:
    return text in proc.output()[offset:]


def start_group(
    stack: Stack, producers: Callable[..., ProducerLoop], lease_ttl_ms: int
) -> tuple[ProducerLoop, HandledLogs, list[Proc]]:
    stack.create_group(
        shard_count=SHARDS, lease_ttl_ms=lease_ttl_ms, heartbeat_interval_ms=200, revocation_timeout_ms=5000
    )
    procs = [stack.start_member(f"m{i}") for i in range(3)]
    wait_until(lambda: stable_and_balanced(stack.describe(), 3, SHARDS), what="three members, stable")
    producer = producers(stack.redis.url, keys=keys_for_every_shard(SHARDS), rate_per_s=150, batch=6)
    logs = HandledLogs(stack.handled_dir)
    wait_until(lambda: all(logs.by(p.name.removeprefix("member-")) for p in procs), what="all consume")
    return producer, logs, procs


def test_an_api_outage_shorter_than_the_lease_changes_nothing(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop]
) -> None:
    stack = make_stack()
    lease_ttl_ms, heartbeat_interval_ms = 10_000, 200  # the product's default lease
    producer, logs, procs = start_group(stack, producers, lease_ttl_ms)
    before = stack.describe()
    offsets = [len(p.output()) for p in procs]

    stack.pause_api()
    down_ns = time.monotonic_ns()

    def outage_long_enough() -> bool:
        # At least five heartbeat intervals, every member has seen its heartbeats fail, and every member
        # has handled entries of each of its shards since the API went away.
        rows = handled_between(logs.refresh(), down_ns, time.monotonic_ns())
        consuming = all(
            {r["shard"] for r in rows if r["pid"] == pid_of(m)}
            == {a["shard"] for a in m["current_assignment"]}
            for m in live(before)
        )
        failed = all(logged_since(p, o, "heartbeat failed") for p, o in zip(procs, offsets, strict=True))
        return consuming and failed and time.monotonic_ns() - down_ns >= 5 * heartbeat_interval_ms * 1e6

    try:
        wait_until(outage_long_enough, timeout_s=lease_ttl_ms / 1000 / 2, what="a few failed heartbeats")
        during = stack.describe_from_store()
    finally:
        stack.resume_api()
    assert all(m["lease_remaining_ms"] > 0 for m in live(during))
    wait_until(
        lambda: all(
            logged_since(p, o, "heartbeat answered again") for p, o in zip(procs, offsets, strict=True)
        ),
        what="every member heartbeats again",
    )
    after = stack.describe()
    assert after["group_epoch"] == before["group_epoch"]
    assert after["assignment_epoch"] == before["assignment_epoch"]
    assert {(m["member_id"], m["member_epoch"], m["state"]) for m in after["members"]} == {
        (m["member_id"], m["member_epoch"], "STABLE") for m in before["members"]
    }
    assert [m["current_assignment"] for m in after["members"]] == [
        m["current_assignment"] for m in before["members"]
    ]
    assert all(m["lease_remaining_ms"] > lease_ttl_ms - 1000 for m in after["members"])  # renewed

    report = finish(producer, logs)
    assert (report.lost, report.duplicates, report.out_of_order, report.overlaps) == ([], {}, [], []), (
        report.summary()
    )


def test_a_coordinator_outage_longer_than_the_lease_stops_consumption_until_it_returns(
    make_stack: Callable[..., Stack], producers: Callable[..., ProducerLoop]
) -> None:
    stack = make_stack(member_env={"E2E_HANDLER_SLEEP_MS": "2"})
    producer, logs, procs = start_group(stack, producers, lease_ttl_ms=2000)
    before = stack.describe()
    offsets = [len(p.output()) for p in procs]

    stack.stop_api()
    stack.stop_tick()
    down_ns = time.monotonic_ns()
    # Every member is fenced by the data plane once its lease ends (no tick, no API: Redis's clock alone).
    wait_until(
        lambda: all(logged_since(p, o, "fenced at epoch") for p, o in zip(procs, offsets, strict=True)),
        timeout_s=20,
        what="every member fenced by the data plane",
    )
    fenced_ns = time.monotonic_ns()
    during = stack.describe_from_store()
    assert all(m["lease_remaining_ms"] == 0 for m in live(during)), during["members"]
    assert during["group_epoch"] == before["group_epoch"]  # nobody decided anything: the tick is down
    # They consumed after the coordinator went away, while their leases lasted ...
    rows = handled_between(logs.refresh(), down_ns, fenced_ns)
    assert {r["pid"] for r in rows} == {p.pid for p in procs}
    # ... and nothing at all once fenced, however long the outage lasts: here, while two leases' worth of
    # entries (2 x 2 s at 150 a second) are produced.
    produced_at_fence = producer.count
    wait_until(
        lambda: producer.count - produced_at_fence,
        lambda n: n >= 600,
        what="entries produced while every member is fenced",
    )
    up_ns = time.monotonic_ns()
    assert handled_between(logs.refresh(), fenced_ns, up_ns) == []

    stack.start_tick(wait=False)
    stack.start_api()

    def rejoined() -> bool:
        # Wait for the members' side (each says its join was answered), not for the view alone: until
        # the first join lands (a member may be in a join backoff of up to a second) and the restarted
        # tick first runs, the store still holds the old incarnations, STABLE at their old epochs with
        # ended leases - a stable, balanced view of the same three pids in which nobody has rejoined.
        joined = all(logged_since(p, o, "joined at epoch") for p, o in zip(procs, offsets, strict=True))
        view = stack.describe()
        return (
            joined
            and stable_and_balanced(view, 3, SHARDS)
            and {pid_of(m) for m in live(view)} == {p.pid for p in procs}
        )

    wait_until(rejoined, what="the same three processes rejoined, stable")
    after = stack.describe()
    old = {m["member_id"]: m["member_epoch"] for m in live(before)}
    assert {m["member_id"] for m in live(after)} == set(old)  # same ids, new incarnations
    epochs = {m["member_id"]: (old[m["member_id"]], m["member_epoch"]) for m in live(after)}
    assert all(new > was for was, new in epochs.values()), (epochs, before, after)
    assert after["group_epoch"] > before["group_epoch"]  # each rejoin fenced the old incarnation

    report = finish(producer, logs)
    assert (report.lost, report.out_of_order, report.overlaps) == ([], [], []), report.summary()
    # Duplicates: only entries whose first handler was fenced after handling them (the lease ran out
    # before the ack; or, while the restarted API was slow to answer, a join or renewal answer was lost
    # and the member had to rejoin).
    assert unexplained_duplicates(report, logs.rows, procs) == []
    assert all(not p.output()[o:].count("Traceback") for p, o in zip(procs, offsets, strict=True))
