"""A member renews its own lease in Redis (renew_lease.lua) while a decision that moves its epoch is on
its way: between the decision's load and its commit. The commit folds a record of the old epoch into the
member's ``l:`` deadline and deletes it (docs/protocol.md section 5), so the lease the member counts on
(its renewal's) must not shrink, however late the renewal landed after the load: a slow commit under load
is exactly when a member's heartbeat times out and it renews by itself."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.protocol.commands import MemberHeartbeat, apply
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import MemberState, Shard
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys
from rsc_redis.dataplane.library import function_name

from .conftest import GROUP, PREFIX, create
from .test_store import hb, redis_ms, shards_of

TAG = f"{GROUP}:m1"
TTL_MS = 10_000


def _revoking_member(store: MetadataStore) -> tuple[int, list[str]]:
    """m1 owns both shards; m2's join moves one of them to m2, and m1 has heard of it (UNREVOKED_SHARDS,
    still at its epoch). Its next heartbeat, leaving that shard out, moves it to the target's epoch.
    Returns m1's epoch and the shards it keeps."""
    # A revocation timeout longer than the TTL: a renewal is capped at the revocation deadline, which
    # must not be what bounds it here.
    create(store, shard_count=2, lease_ttl_ms=TTL_MS, revocation_timeout_ms=6 * TTL_MS)
    m1 = hb(store, "m1", 0, [], capacity=1)
    m1 = hb(store, "m1", m1["member_epoch"], shards_of(m1))
    owned = shards_of(m1)
    hb(store, "m2", 0, [], capacity=1)
    m1 = hb(store, "m1", m1["member_epoch"], owned)
    assert m1["member_state"] == MemberState.UNREVOKED_SHARDS.value
    return int(m1["member_epoch"]), shards_of(m1)


def _renew(store: MetadataStore, epoch: int) -> int:
    """m1 renews its lease with the data plane's own function, at ``epoch``; returns the deadline its
    record says (Redis's TIME + the TTL)."""
    keys = (rkeys.meta_key(PREFIX), rkeys.lease_records_key(PREFIX))
    reply = store.client.fcall(function_name("renew_lease"), len(keys), *keys, GROUP, "m1", str(epoch))
    assert reply[0] == b"OK", reply
    record = store.client.hget(keys[1], TAG)
    assert record is not None
    recorded_epoch, deadline = record.decode().split()
    assert int(recorded_epoch) == epoch
    return int(deadline)


def _wait_for_redis_clock(store: MetadataStore, past_ms: int) -> None:
    """Return once Redis's TIME (ms) is later than ``past_ms``."""
    while redis_ms(store) <= past_ms:
        time.sleep(min(0.05, max(0.001, (past_ms - redis_ms(store)) / 1000)))


def _decide_an_epoch_move(store: MetadataStore) -> tuple[int, Any, Any, Any]:
    """m1's acknowledging heartbeat, loaded and decided but not committed: (m1's epoch before, the load,
    the outcome, m1 as decided). The decision moves m1's epoch, so the commit folds its lease record."""
    epoch, kept = _revoking_member(store)
    beat = Heartbeat(member_id="m1", member_epoch=epoch, owned=frozenset(Shard.parse(s) for s in kept))
    command = MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=beat)
    loaded = store._load(PREFIX, [GROUP], "m1")
    outcome = apply(loaded.state, command, loaded.now_ms)
    assert outcome.state is not None
    decided = outcome.state.groups[GROUP].members["m1"]
    assert decided.member_epoch != epoch
    return epoch, loaded, outcome, decided


@pytest.mark.parametrize(
    "late_ms",
    [
        pytest.param(0, id="just-after-the-load"),
        pytest.param(1_200, id="past-the-records-1s-slack"),
    ],
)
def test_a_renewal_between_the_load_and_an_epoch_moving_commit_keeps_its_lease(
    store: MetadataStore, late_ms: int
) -> None:
    epoch, loaded, outcome, decided = _decide_an_epoch_move(store)

    # The commit is slow: Redis's clock moves on past the load, and m1 renews itself meanwhile.
    _wait_for_redis_clock(store, loaded.now_ms + late_ms)
    renewed_until = _renew(store, epoch)
    assert renewed_until > decided.lease_deadline_ms  # the renewal grants more than the decision did

    assert store.committer.commit(PREFIX, loaded, outcome)

    meta: dict[bytes, Any] = store.client.hgetall(rkeys.meta_key(PREFIX))
    assert int(meta[f"m:{TAG}".encode()]) == decided.member_epoch
    # The record was at the old epoch: it went, folded into l:, the later of the two.
    assert store.client.hget(rkeys.lease_records_key(PREFIX), TAG) is None
    assert int(meta[f"l:{TAG}".encode()]) == renewed_until
    assert store.client.zscore(rkeys.lease_index_key(PREFIX), TAG) == renewed_until
    fresh = MetadataStore(store.client)._load(PREFIX, None).state
    assert fresh is not None and fresh.groups[GROUP].members["m1"].lease_deadline_ms == renewed_until


@pytest.mark.parametrize(
    "ahead_ms", [pytest.param(60_000, id="too-far-ahead"), pytest.param(999, id="within-the-slack")]
)
def test_judged_at_the_commits_time_a_forged_record_is_still_not_folded_and_nothing_uncapped(
    store: MetadataStore, ahead_ms: int
) -> None:
    """What the members' Redis user may write by hand (docs/redis-acl.md) gains nothing from the commit's
    later clock: a deadline further ahead than TIME + TTL + 1 s is no record (deleted, not folded), and one
    within that second is folded only up to the commit's TIME + TTL."""
    epoch, loaded, outcome, decided = _decide_an_epoch_move(store)
    records_key = rkeys.lease_records_key(PREFIX)
    before = redis_ms(store)
    store.client.hset(records_key, TAG, f"{epoch} {before + TTL_MS + ahead_ms}")

    assert store.committer.commit(PREFIX, loaded, outcome)

    after = redis_ms(store)
    lease = int(store.client.hget(rkeys.meta_key(PREFIX), f"l:{TAG}") or 0)
    assert store.client.hget(records_key, TAG) is None
    if ahead_ms > 1_000:
        assert lease == decided.lease_deadline_ms  # no record: the lease the decision set
    else:
        assert before + TTL_MS <= lease <= after + TTL_MS  # capped at the commit's TIME + TTL
