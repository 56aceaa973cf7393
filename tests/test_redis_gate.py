"""The gate module (rsc_redis/module/rsc_gate.c; docs/redis-acl.md, "The gate module") on a real Redis.

A private Redis loads the module, and its users come from an ACL file rendered from rsc_redis/acl.py's
*gated* profiles. The real store, data plane, member and producer run as those users through the gate;
every raw write a member or a producer could make before is refused and changes nothing (DUMP of every
key before and after); the gate calls only the library's functions of the caller's role, on keys of the
caller's patterns; its writes reach a replica. The profiles without the gate (a Redis without modules)
are tests/test_redis_acl.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from config.embedded_redis import FORBIDDEN_PORT, HOST, RedisServer
from consumers.dataplane import DataPlane, ShardFetch, library, redis_client
from consumers.dataplane.plane import DeadLetterOutcome, FenceStatus
from consumers.errors import DataPlaneError
from consumers.producer import Producer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.store.redis_store import MetadataStore
from rsc_redis import acl as redis_acl
from rsc_redis import clients, functions, module
from rsc_redis.keys import dead_letter_key, meta_key, stream_key
from tests.consumers.harness import Cluster, Recorder, eventually
from tests.test_redis_acl import (
    CONFIG,
    GROUP,
    PREFIX,
    V1_0,
    V1_1,
    acl_denials,
    assert_noperm,
    join,
    send_to,
    user_clients,
)

PASSWORDS = {user: f"pw-gated-{user}-0123456789" for user in redis_acl.KINDS}
DOC = Path(__file__).resolve().parents[1] / "docs" / "redis-acl.md"
ALL_OPERATIONS = (*module.MEMBER, *module.PRODUCER, *module.READ_ONLY)
UNLOADED = "rsc_000000000000"  # a library name of the gate's shape that no test loads


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private Redis with the gate module, whose users have the gated profiles of rsc_redis/acl.py."""
    path = tmp_path_factory.mktemp("redis-gate") / "users.acl"
    passwords = {user: f">{pw}" for user, pw in PASSWORDS.items()}
    path.write_text(redis_acl.aclfile(passwords, rules=redis_acl.GATED_ACL_RULES))
    with RedisServer(extra_args=["--aclfile", str(path)]) as server:
        yield server


@pytest.fixture
def admin(gated_server: RedisServer) -> Iterator[redis.Redis]:
    gated_server.ensure_running()
    assert gated_server.port != FORBIDDEN_PORT
    client = redis.Redis.from_url(gated_server.url, socket_timeout=5)
    client.flushall()
    client.acl_log_reset()
    client.config_resetstat()
    yield client
    client.close()


def url_for(server: RedisServer, user: str, password: str | None = None) -> str:
    return f"redis://{user}:{password or PASSWORDS[user]}@{HOST}:{server.port}/0"


store, member_client, producer = user_clients("gated_server", url_for)


def create_group(store: MetadataStore, prefix: str = PREFIX, shard_count: int = 2) -> None:
    command = CreateGroup(stream_prefix=prefix, consumer_group=GROUP, shard_count=shard_count, config=CONFIG)
    store.create_group(command, start_from="earliest")


def calls_of(admin: redis.Redis, command: str) -> int:
    """How many times Redis ran ``command`` since the test began (INFO commandstats)."""
    stats = admin.info("commandstats").get(f"cmdstat_{command.lower()}")
    return int(stats["calls"]) if stats else 0


def dump_all(admin: redis.Redis) -> dict[bytes, bytes | None]:
    return {key: admin.dump(key) for key in sorted(admin.keys("*"))}


# ---------------------------------------------------------------------------------- the gate itself


def _c_list(source: str, name: str) -> tuple[str, ...]:
    body = re.search(rf"static const char \*const {name}\[\] = \{{(.*?)\}};", source, re.S)
    assert body, name
    return tuple(re.findall(r'"([a-z_]+)"', body.group(1)))


def test_the_module_is_compiled_from_its_source_where_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(module.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = module.path()
    assert built == tmp_path / "cache" / "rsc-redis" / f"rsc_gate-{module.digest()}.so" and built.is_file()
    assert module.server_args() == ["--loadmodule", str(built)]
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # nothing partial left behind
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(module.ModuleBuildError, match="no C compiler"):
        module.path()
    monkeypatch.setenv(module.ENV_VAR, str(built))
    assert module.path() == built


def test_the_gates_lists_are_the_librarys_functions_split_by_role() -> None:
    source = module.SOURCES[0].read_text()
    assert _c_list(source, "MEMBER") == module.MEMBER
    assert _c_list(source, "PRODUCER") == module.PRODUCER
    assert _c_list(source, "READ_ONLY") == module.READ_ONLY == (functions.VERSION,)
    assert sorted((*module.MEMBER, *module.PRODUCER)) == sorted(library.FUNCTIONS)
    assert not set(module.MEMBER) & set(module.PRODUCER)


@pytest.mark.parametrize("command", list(module.COMMANDS))
def test_each_gate_command_calls_only_its_roles_functions(admin: redis.Redis, command: str) -> None:
    """Redis's ``default`` user may run anything: what refuses here is the gate. A name it lets through
    reaches FCALL, which answers "Function not found" (no such library is loaded)."""
    for operation in ALL_OPERATIONS:
        name = f"{UNLOADED}_{operation}"
        if operation in module.COMMANDS[command]:
            with pytest.raises(redis.ResponseError, match=r"^Function not found"):
                admin.execute_command(command, name, 0)
        else:
            with pytest.raises(redis.ResponseError, match=f"^{re.escape(command)} calls only"):
                admin.execute_command(command, name, 0)
    operation = module.COMMANDS[command][0]
    for name in (
        operation,
        f"rsc_00000000000_{operation}",  # 11 digits
        f"rsc_0000000000000_{operation}",  # 13
        f"rsc_00000000000A_{operation}",  # upper case
        f"rsc_00000000000g_{operation}",
        f"rsc_000000000000{operation}",
        f"RSC_000000000000_{operation}",
        f"{UNLOADED}_{operation}x",
        f"{UNLOADED}_",
        f"{UNLOADED}_{operation}\x00",
    ):
        with pytest.raises(redis.ResponseError, match=f"^{re.escape(command)} calls only"):
            admin.execute_command(command, name, 0)
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        admin.execute_command(command, f"{UNLOADED}_{operation}")


def test_a_function_of_another_library_is_refused_at_the_gate_and_changes_nothing(
    store: MetadataStore, member_client: redis.Redis, admin: redis.Redis
) -> None:
    create_group(store)
    admin.function_load(
        "#!lua name=other\nredis.register_function('other_fetch', "
        "function(keys) return redis.call('XTRIM', keys[1], 'MAXLEN', 0) end)"
    )
    try:
        admin.xadd(stream_key(PREFIX, V1_0), {"envelope": "x"})
        before = dump_all(admin)
        for command in module.COMMANDS:
            with pytest.raises(redis.ResponseError):
                member_client.execute_command(command, "other_fetch", 1, stream_key(PREFIX, V1_0))
        assert dump_all(admin) == before
    finally:
        admin.function_delete("other")


def test_the_gate_answers_in_the_callers_protocol(store: MetadataStore, gated_server: RedisServer) -> None:
    name = store.functions.library.function(functions.VERSION)
    for protocol in (2, 3):
        client = redis.Redis.from_url(gated_server.url, protocol=protocol)
        try:
            expected = client.fcall_ro(name, 0)
            assert client.execute_command(module.FCALL_RO, name, 0) == expected
        finally:
            client.close()


def test_the_gates_writes_reach_a_replica() -> None:
    """RedisModule_Call with "!": a function's writes through the gate are replicated (without it they
    would stay on the primary). WAIT counts the replica's acknowledgement of this connection's writes."""
    from tests.conftest import load_functions

    with (
        RedisServer(after_start=load_functions) as primary,
        RedisServer(extra_args=["--replicaof", HOST, str(primary.port)]) as replica,
    ):
        admin = redis.Redis.from_url(primary.url, socket_timeout=5)
        seen = redis.Redis.from_url(replica.url, socket_timeout=5)
        try:
            eventually(lambda: seen.info("replication")["master_link_status"] == "up", what="replica linked")
            store = MetadataStore.from_url(primary.url)
            create_group(store)
            store.client.close()
            client = redis_client(primary.url)
            send_to(Producer(client), V1_0, 3)
            assert clients.gated(client)
            assert calls_of(admin, module.FCALL_PRODUCER) == 3
            client.close()
            assert admin.wait(1, 5000) == 1
            assert seen.xrange(stream_key(PREFIX, V1_0)) == admin.xrange(stream_key(PREFIX, V1_0))
            assert seen.xlen(stream_key(PREFIX, V1_0)) == 3
        finally:
            admin.close()
            seen.close()


# ------------------------------------------------------------------------------------------ clients


def test_a_client_finds_the_gate_once_and_each_call_is_one_command(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    create_group(store)
    epoch = join(store, "m-1")["member_epoch"]
    send_to(producer, V1_0, 5)
    plane = DataPlane(member_client, PREFIX, GROUP)
    commands = (module.FCALL_RO, module.FCALL_MEMBER, "FCALL")
    before = [calls_of(admin, c) for c in commands]
    for _ in range(5):
        assert plane.read("m-1", epoch, V1_0, 1).ok
    after = [calls_of(admin, c) for c in commands]
    # The member's client: one probe (RSC.FCALL_RO), then one command per call, no round trip more;
    # each gate call runs one FCALL inside Redis.
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 5, 5]
    assert clients.gated(member_client) and clients.gated(producer.client)
    assert acl_denials(admin) == []


def test_without_the_module_or_its_permission_a_client_calls_fcall(gated_server: RedisServer) -> None:
    """A Redis without modules (a managed one) answers the probe "unknown command"; a user whose profile
    is the one without the gate answers NOPERM: both call FCALL as before."""
    from tests.conftest import load_functions

    with RedisServer(after_start=load_functions, gate_module=False) as plain:
        client = redis_client(plain.url)
        try:
            assert not clients.gated(client)
            library.require_loaded(client)
        finally:
            client.close()
    admin = redis.Redis.from_url(gated_server.url, socket_timeout=5)
    name, password = "ungated-member", "pw-ungated-member-0123456789"
    rules = redis_acl.rules_for(redis_acl.MEMBER)
    admin.execute_command("ACL", "SETUSER", name, *redis_acl.setuser_args(name, f">{password}", rules))
    client = redis_client(url_for(gated_server, name, password))
    try:
        MetadataStore.from_url(gated_server.url).functions.ensure()
        assert not clients.gated(client)
        library.require_loaded(client)
    finally:
        client.close()
        admin.acl_deluser(name)
        admin.close()


def test_a_client_asks_again_when_its_users_rules_change(
    store: MetadataStore, gated_server: RedisServer, admin: redis.Redis
) -> None:
    """The upgrade (docs/redis-acl.md, "Loading it in production"): a running producer whose user moves
    from the profile without the gate to the gated one is refused (NOPERM for FCALL: nothing ran), asks
    again and sends the call once more, through the gate; and back. Its caller sees no refusal."""
    create_group(store)
    name, password = "moving-producer", "pw-moving-producer-0123456789"

    def rules(gated: bool) -> None:
        profile = redis_acl.rules_for(redis_acl.PRODUCER, gated=gated)
        admin.execute_command("ACL", "SETUSER", name, *redis_acl.setuser_args(name, f">{password}", profile))

    rules(gated=False)
    client = redis_client(url_for(gated_server, name, password))
    try:
        producer = Producer(client)
        producer.send(PREFIX, "k", {"n": 0})
        assert not clients.gated(client)
        sent = 1
        # Refused once, then asked again (the probe of a user without the gate is refused too).
        for gated, refused in ((True, ["fcall"]), (False, ["rsc.fcall_producer", "rsc.fcall_ro"])):
            rules(gated)
            admin.acl_log_reset()
            producer.send(PREFIX, "k", {"n": sent})  # the single send's hot call
            producer.send_batch(PREFIX, [("k", {"n": sent + 1})])  # a pipelined batch
            assert producer.send(PREFIX, "j", {"n": sent + 2}, idempotency_key=f"once-{gated}")
            sent += 3
            assert clients.gated(client) is gated
            rows = [r for r in admin.acl_log(count=100) if r["object"] != "client|setinfo"]
            assert sorted(r["object"] for r in rows) == refused
            assert all(int(r["count"]) == 1 for r in rows)
        assert admin.xlen(stream_key(PREFIX, V1_0)) + admin.xlen(stream_key(PREFIX, V1_1)) == sent
    finally:
        client.close()
        admin.acl_deluser(name)


# -------------------------------------------------------------------------- gated users at work


def test_the_gated_member_user_runs_every_data_plane_operation(
    store: MetadataStore, producer: Producer, member_client: redis.Redis, admin: redis.Redis
) -> None:
    create_group(store)
    epoch = join(store, "m-1")["member_epoch"]
    orphans = send_to(producer, V1_0, 2)
    admin.xreadgroup(GROUP, "ghost", {stream_key(PREFIX, V1_0): ">"}, count=2)
    fresh = send_to(producer, V1_0, 2)
    plane = DataPlane(member_client, PREFIX, GROUP)
    plane.require_functions()

    claimed, cursor = plane.claim_orphans("m-1", epoch, V1_0, 10)
    assert claimed.ok and [e.entry_id for e in claimed.entries] == orphans and cursor == "0-0"
    assert plane.delete_ghost_consumers("m-1", epoch, V1_0) == 1
    read = plane.read("m-1", epoch, V1_0, 10)
    assert read.ok and [e.entry_id for e in read.entries] == fresh
    again = plane.read_own_pending("m-1", epoch, V1_0, 10)
    assert [e.entry_id for e in again.entries] == orphans + fresh
    assert plane.ack("m-1", epoch, V1_0, orphans) is FenceStatus.OK
    dead = plane.dead_letter("m-1", epoch, V1_0, fresh[0], "ValueError: bad")
    assert dead.outcome is DeadLetterOutcome.DEAD_LETTERED
    assert plane.read("intruder", 1, V1_0, 10).status is FenceStatus.MEMBER_FENCED  # the fence, as before
    [idle] = plane.fetch("m-1", [ShardFetch(V1_1, epoch, token="0", wait=True)], 10)
    assert idle.ok and idle.entries == [] and idle.last_id == "0-0"
    wait = plane.entry_wait()
    wait.probe()
    wait.arm()
    assert wait.wait({plane.stream_key(V1_1): idle.last_id}, 10) == []
    wait.close()
    assert plane.renew_lease("m-1", epoch).renewed
    assert store.dead_letter(PREFIX, GROUP, dead.dead_letter_id)["verdict"] == "SIGNED"
    assert acl_denials(admin) == []
    assert calls_of(admin, "FCALL") == calls_of(admin, module.FCALL_MEMBER) + calls_of(
        admin, module.FCALL_PRODUCER
    )  # every FCALL Redis ran came through the gate


def test_a_real_member_and_producer_work_through_the_gate(
    gated_server: RedisServer, admin: redis.Redis
) -> None:
    cluster = Cluster(url_for(gated_server, redis_acl.COORDINATOR), shard_count=2)
    member_client = redis_client(url_for(gated_server, redis_acl.MEMBER))
    producer_client = redis_client(url_for(gated_server, redis_acl.PRODUCER))
    cluster.producer = Producer(producer_client)
    try:
        recorder = Recorder()
        m = cluster.member(recorder, client=member_client)
        sent = cluster.send_many([f"k{i}" for i in range(6)], per_key=3)
        eventually(lambda: recorder.handled_ns() == set(range(sent)), what="every event handled")
        eventually(lambda: not any(cluster.all_pending().values()), what="everything acked")
        assert m.stats.failed == 0
        assert acl_denials(admin) == []
        assert calls_of(admin, module.FCALL_MEMBER) > 0 and calls_of(admin, module.FCALL_PRODUCER) > 0
    finally:
        cluster.close()
        member_client.close()
        producer_client.close()


# -------------------------------------------------------------------- what gated users cannot do

MAX_ID = "18446744073709551615-18446744073709551615"
ROGUE_LIBRARY = "#!lua name=rogue\nredis.register_function('rogue', function(keys) return 1 end)"


def raw_writes(store: MetadataStore, entry_id: str) -> dict[str, list[Any]]:
    """Every raw action a member's or a producer's user could make without the gate (docs/redis-acl.md,
    "What Redis 7 alone cannot close"), as commands."""
    meta, shard, dlq = meta_key(PREFIX), stream_key(PREFIX, V1_0), dead_letter_key(PREFIX, GROUP)
    records = f"rsc:{{{PREFIX}}}:lr"
    produce = library.function_name("produce")
    return {
        "XADD MAXLEN (trim what nobody consumed)": ["XADD", shard, "MAXLEN", 1, "*", "x", 1],
        "XADD the maximal id (the shard can never be written again)": ["XADD", shard, MAX_ID, "x", 1],
        "XTRIM": ["XTRIM", shard, "MAXLEN", 0],
        "XCLAIM another consumer's entry": ["XCLAIM", shard, GROUP, "m-1", 0, entry_id],
        "XCLAIM LASTID (move the group past entries)": [
            "XCLAIM", shard, GROUP, "m-1", 0, entry_id, "LASTID", "99999999999999-0",
        ],
        "XGROUP DELCONSUMER": ["XGROUP", "DELCONSUMER", shard, GROUP, "ghost"],
        "XGROUP SETID": ["XGROUP", "SETID", shard, GROUP, "$"],
        "XGROUP DESTROY": ["XGROUP", "DESTROY", shard, GROUP],
        "XREADGROUP NOACK": ["XREADGROUP", "GROUP", GROUP, "m-1", "NOACK", "STREAMS", shard, ">"],
        "XACK outside the fence": ["XACK", shard, GROUP, entry_id],
        "XADD a forged dead letter": ["XADD", dlq, "*", "envelope", "x", "dlq_source_shard", "v1:0"],
        "HSET of the lease records": ["HSET", records, f"{GROUP}:m-1", "1 99999999999999"],
        "HSET of the metadata": ["HSET", meta, "route", "1 2 -"],
        "FCALL directly": ["FCALL", produce, 2, meta, shard, "1", "2", "0", "1", "x"],
        "FCALL_RO directly": ["FCALL_RO", store.functions.library.version_function, 0],
        "FUNCTION LOAD": ["FUNCTION", "LOAD", ROGUE_LIBRARY],
        "EVAL": ["EVAL", "return redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)", 1, shard],
    }  # fmt: skip


@pytest.mark.parametrize("user", [redis_acl.MEMBER, redis_acl.PRODUCER])
def test_gated_users_are_refused_every_raw_write_and_nothing_changes(
    store: MetadataStore, producer: Producer, gated_server: RedisServer, admin: redis.Redis, user: str
) -> None:
    create_group(store)
    join(store, "m-1")
    (entry_id,) = send_to(producer, V1_0, 1)
    admin.xreadgroup(GROUP, "ghost", {stream_key(PREFIX, V1_0): ">"})
    admin.xadd(dead_letter_key(PREFIX, GROUP), {"envelope": "seed"})
    admin.hset(f"rsc:{{{PREFIX}}}:lr", "seed", "1 1")
    client = redis_client(url_for(gated_server, user))
    before = dump_all(admin)
    admin.acl_log_reset()
    try:
        actions = raw_writes(store, entry_id)
        other_role = module.FCALL_PRODUCER if user == redis_acl.MEMBER else module.FCALL_MEMBER
        actions["the other role's gate"] = [other_role, library.function_name("produce"), 0]
        for what, command in actions.items():
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
                pytest.fail(f"{user} could run {what}")
        assert dump_all(admin) == before
        assert {row[0] for row in acl_denials(admin)} == {user}
        refusals = [r for r in admin.acl_log(count=100) if r["object"] != "client|setinfo"]
        assert sum(int(r["count"]) for r in refusals) == len(actions)  # Redis counts repeats in one row
    finally:
        client.close()


def test_a_member_cannot_produce_through_its_gate(
    store: MetadataStore, member_client: redis.Redis, admin: redis.Redis
) -> None:
    """A member's gate calls a member's functions only: the producer's append is refused by the gate
    (the member's user holds the shard streams' keys, which the append declares)."""
    create_group(store)
    before = dump_all(admin)
    meta, shard = meta_key(PREFIX), stream_key(PREFIX, V1_0)
    for operation in module.PRODUCER:
        with pytest.raises(redis.ResponseError, match="calls only a member's functions"):
            member_client.execute_command(
                module.FCALL_MEMBER, library.function_name(operation), 2, meta, shard, "1", "2", "0", "1", "x"
            )
    assert dump_all(admin) == before


# ------------------------------------------------------------------------------ key scope via the gate


def test_a_gated_user_scoped_to_one_prefix_cannot_touch_another_through_the_gate(
    store: MetadataStore, gated_server: RedisServer, admin: redis.Redis
) -> None:
    create_group(store)
    other = "payments"
    create_group(store, other, shard_count=1)
    admin.xadd(stream_key(other, V1_0), {"envelope": "1 1 x"})
    users = {
        "orders-member": redis_acl.rules_for(redis_acl.MEMBER, [PREFIX], gated=True),
        "orders-producer": redis_acl.rules_for(redis_acl.PRODUCER, [PREFIX], gated=True),
    }
    for name, rules in users.items():
        admin.execute_command("ACL", "SETUSER", name, *redis_acl.setuser_args(name, f">pw-{name}", rules))
    member = redis_client(url_for(gated_server, "orders-member", "pw-orders-member"))
    producer_client = redis_client(url_for(gated_server, "orders-producer", "pw-orders-producer"))
    try:
        epoch = join(store, "m-1")["member_epoch"]
        producer = Producer(producer_client)
        send_to(producer, V1_0, 1)
        assert DataPlane(member, PREFIX, GROUP).read("m-1", epoch, V1_0, 10).ok
        # The other prefix's member is live with that epoch: only the keys refuse.
        other_epoch = store.heartbeat(other, GROUP, Heartbeat(member_id="m-1", member_epoch=0, capacity=1))
        before = {k: admin.dump(k) for k in admin.keys(f"rsc:{{{other}}}:*")}
        with pytest.raises(DataPlaneError, match="no permissions to access one of the keys"):
            DataPlane(member, other, GROUP).read("m-1", other_epoch["member_epoch"], V1_0, 10)
        with pytest.raises(DataPlaneError, match="no permissions to access one of the keys"):
            producer.send(other, "k", {"n": 1})
        meta, shard = meta_key(other), stream_key(other, V1_0)
        refused: list[Callable[[], Any]] = [
            lambda: member.execute_command(
                module.FCALL_MEMBER, library.function_name("read_new"), 3, meta, shard, f"rsc:{{{other}}}:lr",
                GROUP, "m-1", "1", "v1:0", "10",
            ),
            lambda: producer_client.execute_command(
                module.FCALL_PRODUCER, library.function_name("produce"), 2, meta, shard,
                "1", "1", "0", "1", "x",
            ),
            lambda: member.xread({shard: "0"}),
            lambda: producer_client.hget(meta, "route"),
        ]  # fmt: skip
        for call in refused:
            assert_noperm(call)
        assert {k: admin.dump(k) for k in admin.keys(f"rsc:{{{other}}}:*")} == before
    finally:
        member.close()
        producer_client.close()
        for name in users:
            admin.acl_deluser(name)


# -------------------------------------------------------------------------------- rendering


def test_manage_py_redis_acl_gated_prints_users_this_redis_loads(admin: redis.Redis) -> None:
    import io

    from django.core.management import call_command

    digest = "ab" * 32
    out = io.StringIO()
    hashes = ["--password-sha256", f"t-m={digest}", "--password-sha256", f"t-p={digest}"]
    call_command("redis_acl", "t-m:member:orders", "t-p:producer:orders", "--gated", *hashes, stdout=out)
    lines = out.getvalue().splitlines()
    kinds = {"t-m": redis_acl.MEMBER, "t-p": redis_acl.PRODUCER}
    assert lines == [
        redis_acl.aclfile_line(n, f"#{digest}", redis_acl.rules_for(kind, ["orders"], gated=True))
        for n, kind in kinds.items()
    ]
    for line in lines:
        name = line.split()[1]
        admin.execute_command("ACL", "SETUSER", name, *line.split()[2:])  # Redis takes it as it is
        try:
            rules = " ".join(admin.acl_getuser(name)["commands"]).split()
            assert "+rsc.fcall_ro" in rules and not set(rules) & RAW_RULES
        finally:
            admin.acl_deluser(name)


RAW_RULES = {
    "+xadd", "+xtrim", "+xclaim", "+xack", "+xgroup", "+xreadgroup", "+hset", "+fcall", "+fcall_ro", "+eval",
    "+evalsha", "+script", "+function", "+xdel", "+del", "+unlink", "+rename",
}  # fmt: skip


def test_gated_rules_name_no_raw_write_and_need_the_module() -> None:
    for kind in (redis_acl.MEMBER, redis_acl.PRODUCER):
        rules = " ".join(redis_acl.rules_for(kind, gated=True)).replace("(", " ").replace(")", " ").split()
        assert not {r.split("|")[0] for r in rules} & RAW_RULES, kind
    assert "+rsc.fcall_member" in redis_acl.GATED_ACL_RULES[redis_acl.MEMBER]
    assert "+rsc.fcall_producer" not in redis_acl.GATED_ACL_RULES[redis_acl.MEMBER]
    assert "+rsc.fcall_producer" in redis_acl.GATED_ACL_RULES[redis_acl.PRODUCER]
    assert "+rsc.fcall_member" not in redis_acl.GATED_ACL_RULES[redis_acl.PRODUCER]
