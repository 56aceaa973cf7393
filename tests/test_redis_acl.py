"""The Redis ACL profiles of rsc_redis/acl.py (docs/redis-acl.md) on a real Redis.

A private Redis is started with an ACL file rendered from rsc_redis/acl.py. The real metadata store,
data plane, member and producer then run connected *as* each user (redis://user:password@...), and the
direct writes each profile must refuse are refused with NOPERM. The admin connection (Redis's
``default`` user, only on this private server) sets up what a test needs and checks the outcome.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from config.embedded_redis import FORBIDDEN_PORT, HOST, RedisServer
from consumers import idempotency
from consumers.dataplane import DataPlane, ShardFetch, library, redis_client
from consumers.dataplane.plane import DeadLetterOutcome, FenceStatus
from consumers.errors import DataPlaneError, FunctionsNotLoaded
from consumers.producer import Producer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import CredentialMemberLimitReached, DeadLetterNotVerified, MetadataCorrupt
from coordinator.protocol.group import LEAVE_EPOCH, Heartbeat
from coordinator.protocol.model import IDENTIFIER_RE, GroupConfig, OrderingMode, RetentionPolicy, Shard
from coordinator.protocol.routing import shard_index
from coordinator.store import JoinLimits, credential_limits
from coordinator.store.redis_store import MetadataStore
from rsc_redis import acl as redis_acl
from rsc_redis.keys import dead_letter_key, meta_key, once_key, once_previous_key, redeliver_key, stream_key
from tests.consumers.harness import Cluster, Recorder, eventually

PREFIX, GROUP = "orders", "billing"
PASSWORDS = {user: f"pw-{user}-0123456789" for user in redis_acl.ACL_RULES}
DOC = Path(__file__).resolve().parents[1] / "docs" / "redis-acl.md"
V1_0, V1_1 = Shard(version=1, index=0), Shard(version=1, index=1)
CONFIG = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private Redis whose users come from an ACL file rendered from rsc_redis/acl.py. Without the gate
    module, as a managed Redis may be: these are the profiles for it (the gated ones:
    tests/test_redis_gate.py)."""
    path = tmp_path_factory.mktemp("redis-acl") / "users.acl"
    path.write_text(redis_acl.aclfile({user: f">{pw}" for user, pw in PASSWORDS.items()}))
    with RedisServer(extra_args=["--aclfile", str(path)], gate_module=False) as server:
        yield server


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    """The private server's ``default`` user, for set-up and checks; the server is emptied first."""
    acl_server.ensure_running()
    assert acl_server.port != FORBIDDEN_PORT
    client = redis.Redis.from_url(acl_server.url, socket_timeout=5)
    client.flushall()
    client.acl_log_reset()
    yield client
    client.close()


def url_for(server: RedisServer, user: str) -> str:
    return f"redis://{user}:{PASSWORDS[user]}@{HOST}:{server.port}/0"


def user_clients(server: str, url: Callable[[RedisServer, str], str]) -> tuple[Any, Any, Any]:
    """The ``store``, ``member_client`` and ``producer`` fixtures, each as its Redis user of the server
    fixture named ``server`` (``url``: that server's URL for a user), after ``admin`` emptied it. Here and
    in tests/test_redis_gate.py (the gated profiles)."""

    @pytest.fixture
    def store(request: pytest.FixtureRequest, admin: redis.Redis) -> Iterator[MetadataStore]:
        """The coordinator's store, which loads the data plane's library as the coordinator's user does
        at its start (FLUSHALL keeps functions: a test that deleted them gets them back here)."""
        s = MetadataStore.from_url(url(request.getfixturevalue(server), redis_acl.COORDINATOR))
        s.functions.ensure()
        yield s
        s.client.close()

    @pytest.fixture
    def member_client(request: pytest.FixtureRequest, admin: redis.Redis) -> Iterator[redis.Redis]:
        c = redis_client(url(request.getfixturevalue(server), redis_acl.MEMBER))
        yield c
        c.close()

    @pytest.fixture
    def producer(request: pytest.FixtureRequest, admin: redis.Redis) -> Iterator[Producer]:
        c = redis_client(url(request.getfixturevalue(server), redis_acl.PRODUCER))
        yield Producer(c)
        c.close()

    return store, member_client, producer


store, member_client, producer = user_clients("acl_server", url_for)


def create_group(store: MetadataStore, shard_count: int = 2) -> None:
    command = CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=shard_count, config=CONFIG)
    store.create_group(command, start_from="earliest")


def join(store: MetadataStore, member_id: str) -> dict[str, Any]:
    """Join and heartbeat until stable; returns the last response."""
    r = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id=member_id, member_epoch=0, capacity=1))
    for _ in range(5):
        owned = frozenset(Shard.parse(s["shard"]) for s in r["shards"])
        hb = Heartbeat(member_id=member_id, member_epoch=r["member_epoch"], owned=owned)
        r = store.heartbeat(PREFIX, GROUP, hb)
    return r


def send_to(producer: Producer, shard: Shard, n: int) -> list[str]:
    """``n`` events whose key routes to ``shard`` (of 2 shards); returns their entry ids."""
    key = next(f"k{i}" for i in range(1000) if shard_index(f"k{i}", 2) == shard.index)
    results = [producer.send(PREFIX, key, {"n": i}) for i in range(n)]
    assert {r.shard for r in results} == {shard}
    return [r.entry_id for r in results]


def acl_denials(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """(user, reason, object) of every refusal in Redis's ACL LOG since the test began. A refusal inside
    a script that the script swallows (``redis.pcall``) shows up here and nowhere else. CLIENT SETINFO is
    left out: redis-py sends it on connect and ignores a refusal (the profiles do not grant it)."""
    rows = [(r["username"], r["reason"], r["object"]) for r in admin.acl_log()]
    return [row for row in rows if row[2] != "client|setinfo"]


def assert_noperm(call: Any) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        call()


# ---------------------------------------------------------------------------------------- coordinator


def test_the_coordinator_user_runs_the_metadata_store_end_to_end(
    store: MetadataStore, producer: Producer, admin: redis.Redis
) -> None:
    create_group(store)
    assert store.stream_prefixes() == [PREFIX]
    r = join(store, "m-1")
    assert {s["shard"] for s in r["shards"]} == {"v1:0", "v1:1"}
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m-1", member_epoch=r["member_epoch"]))  # fast path
    send_to(producer, V1_0, 3)
    store.tick()
    assert store.describe_group(PREFIX, GROUP)
    assert len(store.list_groups()) == 1
    assert sum(row["lag"] or 0 for row in store.backlog(PREFIX, GROUP)) == 3
    assert store.pending_entries(PREFIX, GROUP, "v1:0")["entries"] == []
    assert store.redeliver(PREFIX, GROUP, "v1:0")["redeliver_token"] == 1
    store.set_max_concurrency(PREFIX, GROUP, 2)
    store.set_retention(PREFIX, RetentionPolicy(max_len=1000))
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m-1", member_epoch=LEAVE_EPOCH))

    store.change_shard_count(PREFIX, 4, OrderingMode.STRICT)
    store.tick()  # observes the draining shards (XINFO STREAM / GROUPS)
    assert store.unconsumed_for_release(PREFIX, GROUP) == 3
    store.release_drain(PREFIX, GROUP, confirm_unconsumed=3)
    store.tick()
    versions = {v["version"]: v["state"] for v in store.describe_prefix(PREFIX)["topology"]["versions"]}
    assert versions == {1: "RETIRED", 2: "ACTIVE"}
    reports = store.retention_pass()
    assert [rep.error for rep in reports] == [None]
    assert admin.get("rsc:retention:cursor") is not None
    assert store.prefix_usage(PREFIX)["groups"] == [GROUP]

    store.delete_group(PREFIX, GROUP)
    assert store.list_groups() == []
    store.delete_prefix(PREFIX, force=True)
    assert admin.keys("rsc:{orders}:*") == [] and admin.smembers("rsc:prefixes") == set()
    assert acl_denials(admin) == []


def test_the_coordinator_user_keeps_each_credentials_join_limits(
    store: MetadataStore, admin: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The join rate and the cap on live members (coordinator/store/credential_limits.py), the check at
    the cap included (its members checked at once here)."""
    monkeypatch.setattr(credential_limits, "TRUST_MS", 0)
    create_group(store)
    limits = JoinLimits(max_members=1, period_ms=1, burst=5)
    owner = "database:1"
    store.credential_limits.admit(owner, PREFIX, GROUP, "m-1", limits)
    hb = Heartbeat(member_id="m-1", member_epoch=0, capacity=1, owner=owner)
    epoch = store.heartbeat(PREFIX, GROUP, hb)["member_epoch"]
    with pytest.raises(CredentialMemberLimitReached):
        store.credential_limits.admit(owner, PREFIX, GROUP, "m-2", limits)  # m-1 checked: live
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m-1", member_epoch=LEAVE_EPOCH, owner=owner))
    assert store.credential_limits.admit(owner, PREFIX, GROUP, "m-2", limits).counted  # m-1 checked: gone
    store.credential_limits.forget(owner, PREFIX, GROUP, "m-2")
    assert epoch > 0 and acl_denials(admin) == []


# ---------------------------------------------------------------------------------------- member


def test_the_member_user_runs_every_data_plane_operation(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    create_group(store)
    epoch = join(store, "m-1")["member_epoch"]
    orphans = send_to(producer, V1_0, 2)
    # A previous owner's leftovers: entries pending for another consumer (set up as admin).
    admin.xreadgroup(GROUP, "ghost", {stream_key(PREFIX, V1_0): ">"}, count=2)
    fresh = send_to(producer, V1_0, 2)
    plane = DataPlane(member_client, PREFIX, GROUP)

    claimed, cursor = plane.claim_orphans("m-1", epoch, V1_0, 10)
    assert claimed.ok and [e.entry_id for e in claimed.entries] == orphans and cursor == "0-0"
    assert plane.delete_ghost_consumers("m-1", epoch, V1_0) == 1
    read = plane.read("m-1", epoch, V1_0, 10)
    assert read.ok and [e.entry_id for e in read.entries] == fresh and read.redeliver_token == "0"
    again = plane.read_own_pending("m-1", epoch, V1_0, 10)
    assert [e.entry_id for e in again.entries] == orphans + fresh
    assert plane.ack("m-1", epoch, V1_0, orphans) is FenceStatus.OK
    dead = plane.dead_letter("m-1", epoch, V1_0, fresh[0], "ValueError: bad")
    assert dead.outcome is DeadLetterOutcome.DEAD_LETTERED
    assert plane.read("m-1", epoch, V1_1, 10).ok
    assert plane.read("intruder", 1, V1_0, 10).status is FenceStatus.MEMBER_FENCED  # the fence, as before
    # The wake-up: an empty fetch reports the group's last-delivered id (XINFO GROUPS inside the
    # function), and the member waits from it (XREAD, CLIENT ID, CLIENT UNBLOCK).
    [idle] = plane.fetch("m-1", [ShardFetch(V1_1, epoch, token="0", wait=True)], 10)
    assert idle.ok and idle.entries == [] and idle.last_id == "0-0"
    wait = plane.entry_wait()
    wait.probe()
    wait.arm()
    assert wait.wait({plane.stream_key(V1_1): idle.last_id}, 10) == []
    wait.close()
    # The member's own lease renewal: its one write outside streams, to rsc:{P}:lr only.
    renewal = plane.renew_lease("m-1", epoch)
    assert renewal.renewed and renewal.ttl_ms == 10_000
    assert admin.hget(f"rsc:{{{PREFIX}}}:lr", f"{GROUP}:m-1") is not None
    # (HSET on the metadata stays refused: test_the_member_user_cannot_write_metadata_or_streams_directly)

    assert admin.xlen(dead_letter_key(PREFIX, GROUP)) == 1
    pending = admin.xpending_range(stream_key(PREFIX, V1_0), GROUP, "-", "+", 9)
    assert [p["message_id"].decode() for p in pending] == [fresh[1]]
    # The coordinator's operator actions on what the member left behind.
    assert store.dead_letters(PREFIX, GROUP)["length"] == 1
    assert store.dead_letter(PREFIX, GROUP, dead.dead_letter_id)
    store.replay_dead_letters(PREFIX, GROUP, [dead.dead_letter_id])
    store.purge_dead_letters(PREFIX, GROUP, None)
    assert acl_denials(admin) == []
    assert store.skip_entries(PREFIX, GROUP, "v1:0", entry_ids=[fresh[1]])["skipped"]


def test_a_real_member_consumes_as_the_member_user(acl_server: RedisServer, admin: redis.Redis) -> None:
    cluster = Cluster(url_for(acl_server, redis_acl.COORDINATOR), shard_count=2)
    member_client = redis_client(url_for(acl_server, redis_acl.MEMBER))
    producer_client = redis_client(url_for(acl_server, redis_acl.PRODUCER))
    cluster.producer = Producer(producer_client)
    try:
        recorder = Recorder()
        m = cluster.member(recorder, client=member_client)
        sent = cluster.send_many([f"k{i}" for i in range(6)], per_key=3)
        eventually(lambda: recorder.handled_ns() == set(range(sent)), what="every event handled")
        eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")
        assert m.stats.failed == 0
        assert acl_denials(admin) == []
    finally:
        cluster.close()
        member_client.close()
        producer_client.close()


def test_the_member_user_cannot_write_metadata_or_streams_directly(
    store: MetadataStore, member_client: redis.Redis, admin: redis.Redis
) -> None:
    create_group(store)
    join(store, "m-1")
    meta, shard = meta_key(PREFIX), stream_key(PREFIX, V1_0)
    before = admin.hgetall(meta)
    assert_noperm(lambda: member_client.hset(meta, "m:billing:m-1", "999"))
    assert_noperm(lambda: member_client.hdel(meta, "o:billing:v1:0"))
    assert_noperm(lambda: member_client.xadd(meta, {"a": "b"}))  # XADD only on dead-letter keys
    assert_noperm(lambda: member_client.xadd(shard, {"a": "b"}))  # appending is the producer's job
    assert_noperm(lambda: member_client.unlink(meta, shard))
    assert_noperm(lambda: member_client.xgroup_destroy(shard, GROUP))
    assert_noperm(lambda: member_client.xgroup_create(shard, "other", id="0"))
    assert_noperm(lambda: member_client.smembers("rsc:prefixes"))
    assert_noperm(lambda: member_client.xtrim(shard, maxlen=0))
    assert_noperm(lambda: member_client.hincrby(redeliver_key(PREFIX, GROUP), "v1:0", 1))
    assert_noperm(lambda: member_client.get("rsc:retention:cursor"))
    assert_noperm(lambda: member_client.set("elsewhere", "x"))
    assert_noperm(lambda: member_client.flushall())
    assert admin.hgetall(meta) == before


def test_what_the_member_acl_cannot_enforce_a_direct_xack_is_allowed(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """Pinned on purpose (docs/redis-acl.md, "What the ACLs do not enforce"): without the gate module
    (this server, as a managed Redis may be), the ACL allows XACK on shard streams, and cannot tell the
    fenced function's XACK from a direct one. Only the fence checks the member's epoch, ownership and
    lease. The gated profile refuses it (tests/test_redis_gate.py)."""
    create_group(store)
    ids = send_to(producer, V1_0, 1)
    admin.xreadgroup(GROUP, "someone-else", {stream_key(PREFIX, V1_0): ">"})
    assert member_client.xack(stream_key(PREFIX, V1_0), GROUP, *ids) == 1


# ------------------------------------------------------------------------------- no code from clients

ROGUE = "redis.call('XADD', KEYS[1], '*', 'a', 'b') while true do end"  # one write, then never returns
ROGUE_LIBRARY = "#!lua name=rogue\nredis.register_function('rogue', function(keys) return 1 end)"


def code_on_the_server(admin: redis.Redis) -> tuple[Any, ...]:
    """What a client could have added: the loaded libraries (with their code), and whether the rogue
    script is in the script cache."""
    rogue_sha = hashlib.sha1(ROGUE.encode()).hexdigest()
    return (admin.function_list(withcode=True), admin.script_exists(rogue_sha))


@pytest.mark.parametrize("user", [redis_acl.MEMBER, redis_acl.PRODUCER])
def test_members_and_producers_cannot_send_or_read_code(
    store: MetadataStore, acl_server: RedisServer, admin: redis.Redis, user: str
) -> None:
    """No Lua from members or producers (a script that writes once and loops forever makes Redis
    unkillable: SCRIPT KILL answers UNKILLABLE): they call the coordinator's library, nothing else. Nor
    may they read its code (it holds the dead-letter MAC keys), delete it or kill a call."""
    client = redis_client(url_for(acl_server, user))
    before = code_on_the_server(admin)
    key = stream_key(PREFIX, V1_0)
    refused = [
        lambda: client.eval(ROGUE, 1, key),
        lambda: client.script_load(ROGUE),
        lambda: client.evalsha(hashlib.sha1(ROGUE.encode()).hexdigest(), 1, key),
        lambda: client.execute_command("EVAL_RO", "return 1", 0),
        lambda: client.script_exists("0" * 40),
        lambda: client.script_flush(),
        lambda: client.script_kill(),
        lambda: client.function_load(ROGUE_LIBRARY),
        lambda: client.function_load(ROGUE_LIBRARY, replace=True),
        lambda: client.function_list(),
        lambda: client.function_list(library=store.functions.library.name, withcode=True),
        lambda: client.function_dump(),
        lambda: client.function_delete(store.functions.library.name),
        lambda: client.function_flush(),
        lambda: client.function_kill(),
        lambda: client.function_restore(b"x"),
    ]
    for call in refused:
        assert_noperm(call)
    assert code_on_the_server(admin) == before
    assert {row[0] for row in acl_denials(admin)} == {user}
    # What it may do: FCALL_RO of the version function (its start-up check).
    library.require_loaded(client)
    client.close()


def test_functions_do_not_elevate_a_users_rights(
    store: MetadataStore, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """Redis 7 checks the commands a function runs against the *calling* user's ACL: a member calling the
    producer's function is refused the XADD inside it (docs/redis-acl.md says what this leaves open, and
    how the gate module closes it: tests/test_redis_gate.py)."""
    create_group(store)
    before = admin.xlen(stream_key(PREFIX, V1_0))
    with pytest.raises(redis.exceptions.ResponseError, match="The user executing the script can't"):
        member_client.fcall(
            library.function_name("produce"), 2, meta_key(PREFIX), stream_key(PREFIX, V1_0),
            "1", "2", "0", "1", "x",
        )  # fmt: skip
    assert admin.xlen(stream_key(PREFIX, V1_0)) == before


def test_a_missing_library_is_a_clear_error_and_the_tick_loads_it_again(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """A flushed or new Redis: members and producers refuse with the command to run (at start, and on
    every call: nothing runs); the coordinator's next tick, as its own Redis user, loads it again."""
    create_group(store)
    epoch = join(store, "m-1")["member_epoch"]
    plane = DataPlane(member_client, PREFIX, GROUP)
    admin.function_delete(store.functions.library.name)
    for check in (plane.require_functions, producer.require_functions):
        with pytest.raises(FunctionsNotLoaded, match=r"manage\.py redis_functions load"):
            check()
    with pytest.raises(FunctionsNotLoaded, match=store.functions.library.name):
        plane.read("m-1", epoch, V1_0, 10)
    with pytest.raises(FunctionsNotLoaded):
        producer.send(PREFIX, "k", {"n": 1})
    assert admin.xlen(stream_key(PREFIX, V1_0)) + admin.xlen(stream_key(PREFIX, V1_1)) == 0

    store.tick()  # as rsc-coordinator
    plane.require_functions()
    producer.require_functions()
    assert producer.send(PREFIX, "k", {"n": 1}).routing_version == 1
    assert plane.read("m-1", epoch, producer.route(PREFIX).shard_for(b"k"), 10).ok
    assert acl_denials(admin) == []


def test_a_dead_letter_forged_by_the_member_user_is_refused_and_a_real_one_replays(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """The member's user must hold XADD on the dead-letter streams (its dead_letter function runs as it),
    so it can append anything there; only the function's copies carry a MAC that verifies."""
    create_group(store)
    epoch = join(store, "m-1")["member_epoch"]
    (entry_id,) = send_to(producer, V1_0, 1)
    plane = DataPlane(member_client, PREFIX, GROUP)
    plane.read("m-1", epoch, V1_0, 10)
    real = plane.dead_letter("m-1", epoch, V1_0, entry_id, "ValueError: bad").dead_letter_id
    dlq = dead_letter_key(PREFIX, GROUP)
    ((_, copied),) = admin.xrange(dlq)
    envelope_field = copied[b"envelope"]
    forged = [
        member_client.xadd(dlq, {"envelope": envelope_field, "dlq_source_shard": "v1:0"}).decode(),
        member_client.xadd(dlq, {**copied, b"dlq_error": b"changed"}).decode(),  # a real MAC, edited
    ]
    assert [store.dead_letter(PREFIX, GROUP, i)["verdict"] for i in forged] == ["UNSIGNED", "FORGED"]
    assert store.dead_letter(PREFIX, GROUP, real)["verdict"] == "SIGNED"
    def state() -> tuple[Any, ...]:
        return admin.xrange(dlq), admin.xlen(stream_key(PREFIX, V1_0)), admin.xlen(stream_key(PREFIX, V1_1))

    before = state()
    for ids in ([forged[1]], [real, forged[1]], [forged[0]]):
        with pytest.raises(DeadLetterNotVerified):
            store.replay_dead_letters(PREFIX, GROUP, ids)
    with pytest.raises(DeadLetterNotVerified):
        store.replay_dead_letters(PREFIX, GROUP, [forged[1]], accept_unsigned=True)  # FORGED: never
    assert state() == before
    (replayed,) = store.replay_dead_letters(PREFIX, GROUP, [real])["replayed"]
    assert replayed["id"] == real
    assert acl_denials(admin) == []


def test_what_functions_cannot_close_raw_stream_commands_of_the_users_own_selectors(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """Pinned on purpose (docs/redis-acl.md, "Without the gate module"): on a Redis without the gate
    module (this server), the commands a user's functions run must be in its own ACL, so the user may
    also send them directly. A producer may XADD with MAXLEN (trimming) or an explicit id; a member may
    read a shard's stream with XRANGE, outside the fence. With the module and the gated profiles, every
    one of these is refused and changes nothing: tests/test_redis_gate.py,
    test_gated_users_are_refused_every_raw_write_and_nothing_changes."""
    create_group(store)
    send_to(producer, V1_0, 3)
    client, shard = producer.client, stream_key(PREFIX, V1_0)
    assert client.xadd(shard, {"raw": "1"}, maxlen=1, approximate=False)
    assert admin.xlen(shard) == 1
    assert client.xadd(shard, {"raw": "2"}, id="99999999999999-0") == b"99999999999999-0"
    assert len(member_client.xrange(shard)) == 2


# ---------------------------------------------------------------------------------------- scoped users


def test_a_member_user_scoped_to_one_prefix_cannot_read_anothers_streams(
    store: MetadataStore, acl_server: RedisServer, admin: redis.Redis
) -> None:
    """rules_for(MEMBER, ["orders"]): the data plane runs on orders; payments' streams are out of reach
    (XRANGE refused, nothing changed), and so are its functions' keys."""
    create_group(store)
    other = "payments"
    store.create_group(
        CreateGroup(stream_prefix=other, consumer_group=GROUP, shard_count=1, config=CONFIG),
        start_from="earliest",
    )
    admin.xadd(stream_key(other, V1_0), {"envelope": "1 1 x"})
    name, password = "orders-member", "pw-orders-member-0123456789"
    rules = redis_acl.rules_for(redis_acl.MEMBER, [PREFIX])
    admin.execute_command("ACL", "SETUSER", name, *redis_acl.setuser_args(name, f">{password}", rules))
    client = redis_client(f"redis://{name}:{password}@{HOST}:{acl_server.port}/0")
    try:
        epoch = join(store, "m-1")["member_epoch"]
        plane = DataPlane(client, PREFIX, GROUP)
        plane.require_functions()
        assert plane.read("m-1", epoch, V1_0, 10).ok
        assert plane.renew_lease("m-1", epoch).renewed
        before = {k: admin.dump(k) for k in admin.keys(f"rsc:{{{other}}}:*")}
        assert_noperm(lambda: client.xrange(stream_key(other, V1_0)))
        assert_noperm(lambda: client.hget(meta_key(other), "route"))
        assert_noperm(lambda: client.xreadgroup(GROUP, "m-1", {stream_key(other, V1_0): ">"}))
        with pytest.raises(DataPlaneError, match="no permissions to access one of the keys"):
            DataPlane(client, other, GROUP).read("m-1", 1, V1_0, 10)
        assert {k: admin.dump(k) for k in admin.keys(f"rsc:{{{other}}}:*")} == before
    finally:
        client.close()
        admin.acl_deluser(name)


def test_scoped_rules_name_each_prefix_in_every_family() -> None:
    rules = redis_acl.rules_for(redis_acl.PRODUCER, ["orders", "payments"])
    assert "~rsc:{orders}:meta" in rules and "~rsc:{payments}:v[0-9]*" in rules
    assert "(%R~rsc:{orders}:meta %R~rsc:{payments}:meta +hget)" in rules
    assert not any("{*}" in r for r in rules)
    assert redis_acl.rules_for(redis_acl.MEMBER) == redis_acl.ACL_RULES[redis_acl.MEMBER]
    for bad in ([], ["*"], ["a}b"], ["or:ders"], "orders"):
        with pytest.raises(ValueError):
            redis_acl.rules_for(redis_acl.MEMBER, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        redis_acl.rules_for(redis_acl.COORDINATOR, ["orders"])
    assert IDENTIFIER_RE.pattern == f"^{redis_acl.PREFIX_RE.pattern}$"


# ---------------------------------------------------------------------------------------- producer


def test_the_producer_user_sends_and_cannot_write_metadata(
    store: MetadataStore, producer: Producer, admin: redis.Redis
) -> None:
    create_group(store)
    one = producer.send(PREFIX, "k1", {"n": 1})
    batch = producer.send_batch(PREFIX, [(f"k{i}", {"n": i}) for i in range(20)])
    assert admin.xlen(stream_key(PREFIX, V1_0)) + admin.xlen(stream_key(PREFIX, V1_1)) == 21
    assert {r.routing_version for r in [one, *batch]} == {1}
    store.change_shard_count(PREFIX, 4, OrderingMode.RELAXED)  # a stale cached route is re-routed
    assert producer.send(PREFIX, "k1", {"n": 2}).routing_version == 2

    client, meta, shard = producer.client, meta_key(PREFIX), stream_key(PREFIX, V1_0)
    before = admin.hgetall(meta)
    assert_noperm(lambda: client.hset(meta, "route", "1 2 -"))  # un-seal a version: refused
    assert_noperm(lambda: client.xadd(meta, {"a": "b"}))
    assert_noperm(lambda: client.xreadgroup(GROUP, "p", {shard: ">"}))
    assert_noperm(lambda: client.xack(shard, GROUP, "1-0"))
    assert_noperm(lambda: client.xrange(shard))
    assert_noperm(lambda: client.xadd(dead_letter_key(PREFIX, GROUP), {"a": "b"}))
    assert_noperm(lambda: client.unlink(shard))
    assert admin.hgetall(meta) == before


def test_the_producer_user_enqueues_once_and_can_touch_the_idempotency_keys_no_further(
    store: MetadataStore, acl_server: RedisServer, admin: redis.Redis
) -> None:
    """idempotent_produce as the producer's user (docs/producer.md, "Enqueue once"): look-ups, records,
    a generation closed by age (RENAME, PEXPIRE) and by the cap; then the direct commands its profile
    must still refuse on those keys, and the coordinator's deletion of the prefix removes them."""
    create_group(store)
    client = redis_client(url_for(acl_server, redis_acl.PRODUCER))
    producer = Producer(client, idempotency_window_ms=idempotency.MIN_WINDOW_MS, idempotency_max_keys=1000)
    try:
        first = producer.send(PREFIX, "k1", {"n": 1}, idempotency_key="job-1")
        assert producer.send(PREFIX, "k1", {"n": 1}, idempotency_key="job-1").entry_id == first.entry_id
        items: list[Any] = [("k2", 2), ("k3", 3), ("k2", 2)]
        batch = producer.send_batch(PREFIX, items, idempotency_keys=["a", "b", "a"])
        assert [r.duplicate for r in batch] == [False, False, True]
        time.sleep(idempotency.MIN_WINDOW_MS / 1000 + 0.05)
        producer.send(PREFIX, "k1", {"n": 1}, idempotency_key="job-2")  # closes the generation by age
        for start in range(0, 1200, 300):  # and by the cap
            producer.send_batch(
                PREFIX, [("k", i) for i in range(300)], idempotency_keys=[f"c{start + i}" for i in range(300)]
            )
        assert admin.exists(once_key(PREFIX), once_previous_key(PREFIX)) == 2
        assert acl_denials(admin) == []

        current, previous = once_key(PREFIX), once_previous_key(PREFIX)
        shard, lease_records = stream_key(PREFIX, V1_0), f"rsc:{{{PREFIX}}}:lr"
        for refused in (
            lambda: client.hgetall(current),
            lambda: client.hlen(current),
            lambda: client.hget(current, "job-1"),
            lambda: client.hdel(current, "job-1"),
            lambda: client.delete(previous),
            lambda: client.unlink(current),
            lambda: client.get(current),
            lambda: client.set(current, "x"),
            lambda: client.rename(shard, current),  # a stream over the records: both keys in one selector
            lambda: client.rename(current, shard),
            lambda: client.hset(lease_records, "billing:m-1", "1 99999999999999"),
            lambda: client.hset(meta_key(PREFIX), "route", "1 2 -"),
            lambda: client.hset("rsc:{payments}:oncex", "a", "b"),
        ):
            assert_noperm(refused)
    finally:
        client.close()
    store.delete_prefix(PREFIX, force=True)
    assert admin.keys("rsc:{orders}:*") == []


def test_a_producer_user_of_the_profile_before_idempotency_sends_plainly_and_refuses_keyed_sends_whole(
    store: MetadataStore, acl_server: RedisServer, admin: redis.Redis
) -> None:
    """Upgrade order (docs/redis-acl.md): a producer whose user lacks the idempotency keys' rules keeps
    sending without keys; a keyed send is refused (NOPERM on the declared keys) and appends nothing."""
    create_group(store)
    name, password = "old-producer", "pw-old-producer-0123456789"
    rules = [r for r in redis_acl.rules_for(redis_acl.PRODUCER) if ":once" not in r]
    admin.execute_command("ACL", "SETUSER", name, *redis_acl.setuser_args(name, f">{password}", rules))
    client = redis_client(f"redis://{name}:{password}@{HOST}:{acl_server.port}/0")
    try:
        producer = Producer(client)
        producer.send(PREFIX, "k1", {"n": 1})
        with pytest.raises(DataPlaneError, match=r"(?i)no permissions"):
            producer.send(PREFIX, "k1", {"n": 2}, idempotency_key="job-1")
        assert admin.xlen(stream_key(PREFIX, V1_0)) + admin.xlen(stream_key(PREFIX, V1_1)) == 1
        assert admin.exists(once_key(PREFIX)) == 0
    finally:
        client.close()
        admin.acl_deluser(name)


# ---------------------------------------------------------------------------------------- the rules


def test_acl_setuser_gives_the_same_users_as_the_acl_file(admin: redis.Redis) -> None:
    for user in redis_acl.ACL_RULES:
        admin.execute_command("ACL", "SETUSER", f"{user}-copy", *redis_acl.setuser_args(user, ">pw"))
        try:
            from_file = admin.acl_getuser(user)
            from_setuser = admin.acl_getuser(f"{user}-copy")
            for field in ("flags", "commands", "keys", "channels", "selectors"):
                assert from_setuser[field] == from_file[field], (user, field)
        finally:
            admin.acl_deluser(f"{user}-copy")


def test_the_doc_shows_exactly_the_rules_of_rsc_redis_acl() -> None:
    """The profiles without the gate module, then the gated ones (docs/redis-acl.md, "The gate module")."""
    text = DOC.read_text()
    setusers = [line.strip() for line in text.splitlines() if line.strip().startswith("ACL SETUSER ")]
    expected = [
        redis_acl.setuser_command(u, f">${{{_env(u)}}}", rules[u])
        for rules in (redis_acl.ACL_RULES, redis_acl.GATED_ACL_RULES)
        for u in rules
    ]
    assert setusers == expected
    users = [line.strip() for line in text.splitlines() if re.match(r"\s*user rsc-", line)]
    assert users == [
        redis_acl.aclfile_line(u, f"#<sha256 of {_env(u)}>", rules[u])
        for rules in (redis_acl.ACL_RULES, redis_acl.GATED_ACL_RULES)
        for u in rules
    ]


def _env(user: str) -> str:
    return user.upper().replace("-", "_") + "_PASSWORD"


def test_extra_args_keep_the_defaults_and_cannot_move_the_server(admin: redis.Redis) -> None:
    assert admin.config_get("save") == {"save": ""}
    assert admin.config_get("appendonly") == {"appendonly": "no"}
    assert admin.config_get("aclfile")["aclfile"].endswith("users.acl")
    for option in ("--port", "--bind", "--dir", "--daemonize"):
        with pytest.raises(ValueError, match=option):
            RedisServer(extra_args=[option, "6379"])
    with pytest.raises(TypeError):
        RedisServer(extra_args="--aclfile x")


def test_under_a_coordinator_acl_from_before_the_lease_index_a_commit_writes_nothing(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    """Upgrade order (docs/redis-acl.md): the ACL first. A coordinator user without the lease index's
    commands fails every commit and fast heartbeat before its first write, never half-way."""
    old = "rsc-coordinator-old"
    rules = [
        r for r in redis_acl.ACL_RULES[redis_acl.COORDINATOR] if r not in ("+zadd", "+zrem", "+zrangebyscore")
    ]
    admin.execute_command(
        "ACL", "SETUSER", old, "reset", "on", f">{PASSWORDS[redis_acl.COORDINATOR]}", *rules
    )
    try:
        new = MetadataStore.from_url(url_for(acl_server, redis_acl.COORDINATOR))
        new.create_group(
            CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=2, config=CONFIG)
        )
        joined = new.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=1))
        steady = Heartbeat(member_id="m1", member_epoch=joined["member_epoch"], owned=frozenset({V1_0, V1_1}))
        new.heartbeat(PREFIX, GROUP, steady)
        url = f"redis://{old}:{PASSWORDS[redis_acl.COORDINATOR]}@{HOST}:{acl_server.port}/0"
        stale = MetadataStore.from_url(url)
        before = admin.hgetall(meta_key(PREFIX))
        with pytest.raises(MetadataCorrupt, match="run this command"):
            stale.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m2", member_epoch=0, capacity=1))
        with pytest.raises(MetadataCorrupt, match="run this command"):
            stale.heartbeat(PREFIX, GROUP, steady)
        assert admin.hgetall(meta_key(PREFIX)) == before
        new.client.close()
        stale.client.close()
    finally:
        admin.execute_command("ACL", "DELUSER", old)
