"""The data plane as a Redis Functions library (rsc_redis/dataplane/library.py; docs/protocol.md section 7,
"Functions"): every operation is an FCALL of this version's library, a missing library is
FunctionsNotLoaded (retriable, nothing ran, the command to run named) on every path, and the store's
tick loads it back. Real private Redis."""

from __future__ import annotations

import pytest
import redis

from consumers.dataplane import library, scripts
from consumers.dataplane.plane import FenceStatus, ShardFetch
from consumers.errors import DataPlaneError, DataPlaneUnavailable, FunctionsNotLoaded
from coordinator.protocol.model import Shard
from tests.dataplane.harness import Harness

V1_0 = Shard(1, 0)


def test_every_operation_is_an_fcall_of_this_versions_library(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    ids = h.produce(V1_0, 1, 2)
    before = h.client.info("commandstats")
    result = h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch)], 10)[0]
    assert [e.entry_id for e in result.entries] == ids
    assert h.plane.ack("m1", m1.epoch, V1_0, ids) is FenceStatus.OK
    after = h.client.info("commandstats")
    assert after["cmdstat_fcall"]["calls"] - before["cmdstat_fcall"]["calls"] == 2
    evalsha = [stats.get("cmdstat_evalsha", {}).get("calls", 0) for stats in (before, after)]
    assert evalsha[0] == evalsha[1]
    ((_, name, _, _, _, functions),) = h.client.function_list(library.library().name)
    assert name.decode() == library.library().name
    flags = {f[1].decode(): [flag.decode() for flag in f[5]] for f in functions}
    names = set(flags)
    assert names == {library.library().function(n) for n in (*library.FUNCTIONS, "version")}
    # Only the version function never writes (XREADGROUP writes a pending list).
    assert {n for n, f in flags.items() if f} == {library.library().version_function}
    assert flags[library.library().version_function] == ["no-writes"]


def test_a_missing_library_fails_every_operation_with_functions_not_loaded(harness: Harness) -> None:
    h = harness
    h.create(shard_count=1)
    m1 = h.join("m1")
    (entry_id,) = h.produce(V1_0, 1, 1)
    h.plane.read("m1", m1.epoch, V1_0, 10)
    pending = h.pending(V1_0)
    h.client.function_flush()
    calls = [
        lambda: h.plane.fetch("m1", [ShardFetch(V1_0, m1.epoch, ack_ids=[entry_id])], 10),
        lambda: h.plane.read("m1", m1.epoch, V1_0, 10),
        lambda: h.plane.read_own_pending("m1", m1.epoch, V1_0, 10),
        lambda: h.plane.claim_orphans("m1", m1.epoch, V1_0, 10),
        lambda: h.plane.ack("m1", m1.epoch, V1_0, [entry_id]),
        lambda: h.plane.delete_ghost_consumers("m1", m1.epoch, V1_0),
        lambda: h.plane.dead_letter("m1", m1.epoch, V1_0, entry_id, "E: x"),
        lambda: h.plane.renew_lease("m1", m1.epoch),
        h.plane.require_functions,
    ]
    for call in calls:
        with pytest.raises(FunctionsNotLoaded, match=r"manage\.py redis_functions load") as raised:
            call()
        assert isinstance(raised.value, DataPlaneUnavailable) and raised.value.retriable
        assert raised.value.details == {"library": library.library().name}
    assert h.pending(V1_0) == pending  # nothing ran

    h.store.tick()  # the coordinator's tick loads it back
    h.plane.require_functions()
    assert h.plane.ack("m1", m1.epoch, V1_0, [entry_id]) is FenceStatus.OK


def test_the_error_translation_knows_the_function_texts() -> None:
    missing = scripts.translate_reply_error("x", redis.ResponseError("Function not found"))
    assert isinstance(missing, FunctionsNotLoaded)
    busy = redis.ResponseError("BUSY Redis is busy running a script. You can only call FUNCTION KILL")
    assert type(scripts.translate_reply_error("x", busy)) is DataPlaneUnavailable
    refused = redis.ResponseError("The user executing the script can't run this command or subcommand")
    assert type(scripts.translate_reply_error("x", refused)) is DataPlaneError
    failed = redis.ResponseError("stream key k is not shard v1:0 script: rsc_x_ack, on @user_function:9.")
    assert type(scripts.translate_reply_error("x", failed)) is DataPlaneError
