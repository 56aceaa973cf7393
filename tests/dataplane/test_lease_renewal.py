"""A member renews its own lease in Redis while the coordinator's API cannot (docs/protocol.md section 5,
"Renewing without the coordinator"): ``renew_lease.lua`` and every reader of a lease (the fence, the
store's load, the fast path, the tick's commit), on a real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from consumers.dataplane import FenceStatus, LeaseRenewal, ShardFetch
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, Shard
from coordinator.store import codec
from rsc_redis import keys as rkeys
from tests.dataplane.harness import Harness

V1_0 = Shard(1, 0)
TAG = "billing:m1"


def now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def records(h: Harness) -> dict[str, str]:
    raw = h.client.hgetall(rkeys.lease_records_key(h.prefix))
    return {k.decode(): v.decode() for k, v in raw.items()}


def metadata(h: Harness) -> dict[bytes, bytes]:
    return h.client.hgetall(rkeys.meta_key(h.prefix))


def end_coordinator_lease(h: Harness, member: str = "m1") -> None:
    """What no heartbeat through the API for a lease TTL leaves behind: the coordinator's lease
    deadline (``l:``) in the past."""
    h.client.hset(rkeys.meta_key(h.prefix), f"l:{h.group}:{member}", now_ms(h.client) - 1)


def fetch_status(h: Harness, epoch: int) -> FenceStatus:
    (result,) = h.plane.fetch("m1", [ShardFetch(V1_0, epoch)], 10)
    return result.status


def test_a_renewal_keeps_the_member_reading_and_live_after_the_coordinators_lease_ended(
    harness: Harness,
) -> None:
    h = harness
    h.create(shard_count=1, lease_ttl_ms=1_000)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 3)
    before = metadata(h)

    renewal = h.plane.renew_lease("m1", m1.epoch)

    assert (renewal.outcome, renewal.ttl_ms) == (LeaseRenewal.RENEWED, 1_000)
    assert metadata(h) == before  # renew only: the metadata is the coordinator's
    epoch, deadline = records(h)[TAG].split()
    assert int(epoch) == m1.epoch and 0 < int(deadline) - now_ms(h.client) <= 1_000
    end_coordinator_lease(h)
    (result,) = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch)], 10)
    assert result.ok and [e.entry_id for e in result.entries] == ids
    h.store.tick()
    member = h.store.describe_group(h.prefix, h.group)["members"][0]
    assert (member["member_id"], member["state"]) == ("m1", "STABLE")

    # Renewing for longer than a TTL, with no heartbeat at all: still live, still reading.
    for _ in range(6):
        time.sleep(0.3)
        assert h.plane.renew_lease("m1", m1.epoch).renewed
        h.store.tick()
    assert fetch_status(h, m1.epoch) is FenceStatus.OK
    assert int(metadata(h)[f"l:{TAG}".encode()]) < now_ms(h.client)  # the coordinator renewed nothing

    # Once the member stops renewing, its lease ends like any other: fenced, then expired, and the
    # record is gone with it.
    time.sleep(1.1)
    assert fetch_status(h, m1.epoch) is FenceStatus.MEMBER_FENCED
    assert h.plane.renew_lease("m1", m1.epoch).outcome is LeaseRenewal.MEMBER_FENCED  # no coming back
    h.store.tick()
    member = h.store.describe_group(h.prefix, h.group)["members"][0]
    assert (member["state"], member["end_reason"]) == ("EXPIRED", "LEASE_EXPIRED")
    assert records(h) == {}


def test_a_renewal_needs_the_live_member_at_its_epoch_and_writes_nothing_otherwise(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")

    assert h.plane.renew_lease("m1", m1.epoch + 1).outcome is LeaseRenewal.STALE_EPOCH
    assert h.plane.renew_lease("stranger", 1).outcome is LeaseRenewal.MEMBER_FENCED
    h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id="m1", member_epoch=-1))  # leaves
    assert h.plane.renew_lease("m1", m1.epoch).outcome is LeaseRenewal.MEMBER_FENCED
    assert records(h) == {}


def test_only_a_record_at_the_live_epoch_extends_a_lease(harness: Harness) -> None:
    """Every reader takes the later of the coordinator's deadline and the member's record, and only a
    record written at the epoch the member is live at: the fence, the fast path and the full path."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    key = rkeys.lease_records_key(h.prefix)
    end_coordinator_lease(h)
    h.client.hset(key, TAG, f"{m1.epoch - 1} {now_ms(h.client) + 5_000}")  # an earlier incarnation's
    assert fetch_status(h, m1.epoch) is FenceStatus.MEMBER_FENCED
    h.client.hset(key, TAG, f"{m1.epoch} {now_ms(h.client) - 1}")  # at the epoch, but ended
    assert fetch_status(h, m1.epoch) is FenceStatus.MEMBER_FENCED
    h.client.hset(key, TAG, f"{m1.epoch} {now_ms(h.client) + 5_000}")
    assert fetch_status(h, m1.epoch) is FenceStatus.OK

    # The coordinator comes back: the member's heartbeat is answered (the fast path renews l: again).
    again = h.heartbeat("m1")
    assert again.epoch == m1.epoch
    assert int(metadata(h)[f"l:{TAG}".encode()]) > now_ms(h.client)


def test_the_ticks_expiry_commit_refuses_a_member_that_renewed_itself_since_the_load(
    harness: Harness,
) -> None:
    """The tick decides expiries on leases it loaded; the commit checks again, inside Redis, that each
    lease still ended, the member's own record included."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    end_coordinator_lease(h)
    now = now_ms(h.client)
    args = ["token-expire", str(now), "0", "0", "0", "0", "1", f"l:{TAG}", "0", "0"]  # only an expiry check
    keys = codec.commit_keys(h.prefix)
    h.client.hset(keys[1], TAG, f"{m1.epoch} {now + 5_000}")
    assert h.store.committer.commit_script(keys=keys, args=args) == [0]  # renewed since: not expired
    h.client.hset(keys[1], TAG, f"{m1.epoch - 1} {now + 5_000}")
    assert h.store.committer.commit_script(keys=keys, args=args)[0] == 1  # another epoch's record: it did end


def test_records_go_when_their_members_groups_and_prefixes_go(harness: Harness) -> None:
    h = harness
    h.create(shard_count=2)
    m1, m2 = h.join("m1"), h.join("m2")
    assert h.plane.renew_lease("m1", m1.epoch).renewed and h.plane.renew_lease("m2", m2.epoch).renewed
    assert set(records(h)) == {"billing:m1", "billing:m2"}
    h.store.heartbeat(h.prefix, h.group, Heartbeat(member_id="m1", member_epoch=-1))
    assert set(records(h)) == {"billing:m2"}
    h.store.delete_group(h.prefix, h.group)
    assert records(h) == {}
    h.create(shard_count=2)
    m3 = h.join("m3")
    assert h.plane.renew_lease("m3", m3.epoch).renewed
    h.store.delete_group(h.prefix, h.group)
    h.store.delete_prefix(h.prefix, force=True)
    assert not h.client.exists(rkeys.lease_records_key(h.prefix))


def test_the_ttl_comes_from_the_group_or_the_members_steady_signature(harness: Harness) -> None:
    """``lt:<group>`` holds the group's lease TTL; metadata written before it existed has the TTL in a
    steady member's ``f:`` field (this version writes lt: with every ``s:``); with neither, the renewal
    writes nothing and says so."""
    h = harness
    h.create(shard_count=1, lease_ttl_ms=4_000)
    m1 = h.join("m1")
    meta = rkeys.meta_key(h.prefix)
    assert h.client.hget(meta, "lt:billing") == b"4000"
    # As a version from before lt: left it: the signature in f: (the later s: has the same form).
    signature = h.client.hget(meta, f"s:{TAG}")
    h.client.hdel(meta, "lt:billing", f"s:{TAG}")
    h.client.hset(meta, f"f:{TAG}", signature)
    assert h.plane.renew_lease("m1", m1.epoch).ttl_ms == 4_000  # from f:billing:m1
    h.client.hdel(rkeys.lease_records_key(h.prefix), TAG)
    h.client.hdel(meta, f"f:{TAG}")
    assert h.plane.renew_lease("m1", m1.epoch).outcome is LeaseRenewal.NO_LEASE_TTL
    assert records(h) == {}
    h.join("m2")  # a group-wide change writes lt: again
    assert h.client.hget(meta, "lt:billing") == b"4000"


def test_a_renewal_never_outlasts_the_members_revocation_deadline(harness: Harness) -> None:
    """The tick starts the revocation clock of a member whose shards the target moved, heard of or not;
    the member's own renewals stop there, so the lease it knows ends when the tick may expire it."""
    h = harness
    config = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000, revocation_timeout_ms=1_000)
    h.store.create_group(
        CreateGroup(stream_prefix=h.prefix, consumer_group=h.group, shard_count=2, config=config)
    )
    m1 = h.join("m1")
    h.heartbeat("m1")
    h.join("m2")  # the target moves a shard of m1's to m2; m1 does not heartbeat
    h.store.tick()
    deadline = int(h.client.hget(rkeys.meta_key(h.prefix), f"rv:{TAG}") or 0)
    assert 0 < deadline - now_ms(h.client) <= 1_000
    renewal = h.plane.renew_lease("m1", m1.epoch)
    assert renewal.renewed and 0 < renewal.ttl_ms <= 1_000
    assert records(h)[TAG] == f"{m1.epoch} {deadline}"
    time.sleep((deadline - now_ms(h.client) + 5) / 1000)
    assert h.plane.renew_lease("m1", m1.epoch).outcome is LeaseRenewal.MEMBER_FENCED
    h.store.tick()
    ended = {m["member_id"]: m for m in h.store.describe_group(h.prefix, h.group)["members"]}["m1"]
    assert (ended["state"], ended["end_reason"]) == ("EXPIRED", "REVOCATION_TIMEOUT")
    assert records(h) == {}


def commit_epoch_move(h: Harness, token: str, new_epoch: int) -> int:
    """Run commit.lua as a command that moves m1's epoch to ``new_epoch`` (at the current topology
    revision, nothing else written); returns its reply."""
    keys = codec.commit_keys(h.prefix)
    rev = h.client.hget(keys[0], "t#").decode()
    sections = [["t#", rev], [f"m:{TAG}", str(new_epoch)], [], [], [], [], []]
    args = [token, str(now_ms(h.client))] + [x for part in sections for x in (str(len(part)), *part)]
    return int(h.store.committer.commit_script(keys=keys, args=args)[0])


def test_an_epoch_move_folds_the_members_own_renewal_into_its_lease(harness: Harness) -> None:
    """A commit that moves a member's epoch (whose answer the member may never get) keeps the lease the
    member counts on: a record at the old epoch becomes the l: deadline when it is the later one."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    meta, records_key = rkeys.meta_key(h.prefix), rkeys.lease_records_key(h.prefix)
    end_coordinator_lease(h)
    later = now_ms(h.client) + 5_000  # within the lease TTL (10 s), as renew_lease.lua writes
    h.client.hset(records_key, TAG, f"{m1.epoch} {later}")
    assert commit_epoch_move(h, "token-move", m1.epoch + 1) == 1
    assert int(h.client.hget(meta, f"l:{TAG}")) == later and records(h) == {}
    # An earlier record does not move l: back; it goes all the same.
    h.client.hset(records_key, TAG, f"{m1.epoch + 1} {now_ms(h.client) + 1}")
    assert commit_epoch_move(h, "token-move-2", m1.epoch + 2) == 1
    assert int(h.client.hget(meta, f"l:{TAG}")) == later and records(h) == {}


# What a client holding the members' Redis user may write into rsc:{P}:lr (docs/redis-acl.md): none of it
# may extend a lease, make a member outlive its TTL, or stop the tick. "{epoch}" is the member's live one.
FORGED_RECORDS = [
    "{epoch} 99999999999999",  # 14 digits: a member that never ends (just below Lua's exponent form)
    "{epoch} 100000000000000",  # 1e14: came back from load.lua as "1e+14" and failed every tick
    "{epoch} 99999999999999999999",  # more digits than a Lua number holds exactly
    "{epoch} {far}",  # a plausible deadline, but further ahead than any renewal writes (TTL + slack)
    "{epoch} -5",
    "{epoch} 1.5e12",
    "{epoch}",
    "",
    "x" * 10_000,
]


@pytest.mark.parametrize("forged", FORGED_RECORDS)
def test_a_forged_record_extends_no_lease_and_the_tick_survives_and_removes_it(
    harness: Harness, forged: str
) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    end_coordinator_lease(h)
    far = now_ms(h.client) + 10_000 + 5_000
    h.client.hset(rkeys.lease_records_key(h.prefix), TAG, forged.format(epoch=m1.epoch, far=far))

    assert fetch_status(h, m1.epoch) is FenceStatus.MEMBER_FENCED
    assert h.plane.renew_lease("m1", m1.epoch).outcome is LeaseRenewal.MEMBER_FENCED
    [report] = h.store.tick()
    assert report.error is None
    member = h.store.describe_group(h.prefix, h.group)["members"][0]
    assert (member["state"], member["end_reason"]) == ("EXPIRED", "LEASE_EXPIRED")
    assert records(h) == {}


def test_fields_of_no_live_member_are_swept_a_batch_per_tick_and_logged(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Junk fields (no live member, another epoch, no group:member shape) go, a batch per full tick, while a
    live member's valid record stays and still counts; a partial tick does not sweep."""
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    key = rkeys.lease_records_key(h.prefix)
    junk = {f"billing:ghost-{i}": f"1 {now_ms(h.client) + 5_000}" for i in range(500)}
    junk |= {"no-colon": "1 1", "a:b:c": "1 1", f"{TAG}-old": "1 1"}
    h.client.hset(key, mapping=junk)
    assert h.plane.renew_lease("m1", m1.epoch).renewed
    end_coordinator_lease(h)
    h.store.tick()  # the store's first tick is full: one batch swept
    left = len(records(h))
    assert left < len(junk) + 1
    h.store.tick()  # within the minute: partial, no sweep
    assert len(records(h)) == left

    with caplog.at_level("WARNING", logger="coordinator.store.ticking"):
        for _ in range(10):
            h.store.ticker.full_tick_at.clear()  # as if a minute had passed: the sweep runs on full ticks
            [report] = h.store.tick()
            assert report.error is None and report.expired == ()
            if set(records(h)) == {TAG}:
                break
    assert set(records(h)) == {TAG}
    assert fetch_status(h, m1.epoch) is FenceStatus.OK  # the real renewal still counts
    assert "no script wrote" in caplog.text
