"""The KEDA trigger of docs/autoscaling.md against a live stack: the API on granian, the Celery tick,
a private Redis and, at the end, a real member. The trigger's URL route, ``valueLocation`` and thresholds
are read from the document (tests/autoscaling_doc.py), so the document and the product cannot drift.

At every step the value KEDA would read is compared with the backlog counted the slow way
(tests/backlog_truth.py): with entries produced and none read; with some delivered and pending; after
the retention pass trimmed what was handled and a cap trimmed entries the group never read (where Redis
7's own ``lag`` is wrong); across a resharding (the old version's shards still count until drained);
and once a member has consumed everything (0: KEDA may scale the group to zero)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

from consumers.producer import Producer
from coordinator.protocol.model import Shard
from coordinator.store.redis_store import MetadataStore
from rsc_redis import keys as rkeys
from tests.autoscaling_doc import documented_trigger, value_at
from tests.backlog_truth import Truth, true_backlog

from .conftest import TIMINGS, keys_for_every_shard
from .stack import GROUP, PREFIX, Stack, wait_until

SCALER_TOKEN = "e2e-scaler-token-5a4b3c2d1e0f"


def read_scaler(stack: Stack, path: str) -> dict[str, Any]:
    """What KEDA's metrics-api trigger does: GET the URL with the bearer token, parse the JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", stack.api_port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {SCALER_TOKEN}"})
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, body
        return dict(json.loads(body))
    finally:
        conn.close()


def test_the_documented_scaler_reads_the_true_backlog(make_stack: Callable[..., Stack]) -> None:
    trigger = documented_trigger()
    path = trigger.path(PREFIX, GROUP)
    stack = make_stack(env={"RSC_METRICS_TOKENS": SCALER_TOKEN})
    store = MetadataStore(stack.client())

    def truth() -> Truth:
        state = store.reader.read(PREFIX, None)[1]
        assert state is not None
        return true_backlog(stack.client(), state, GROUP)

    def check() -> dict[str, Any]:
        document = read_scaler(stack, path)
        expected = truth()
        assert value_at(document, trigger.value_location) == expected.backlog
        assert (document["undelivered"], document["pending"]) == (expected.undelivered, expected.pending)
        assert document["shards_with_backlog"] == expected.shards_with_backlog
        assert document["exact"] is True
        return document

    # Before the group exists: zeros, not an error, and the scaler stays inactive (at zero replicas).
    absent = read_scaler(stack, path)
    assert absent["exists"] is False
    assert value_at(absent, trigger.value_location) <= trigger.activation_target_value

    stack.create_group(shard_count=4, **TIMINGS)
    producer = Producer(stack.client())
    keys = keys_for_every_shard(4, per_shard=2)
    for n in range(40):
        producer.send(PREFIX, keys[n % len(keys)], {"n": n})
    document = check()
    assert (document["backlog"], document["shards"], document["shards_with_backlog"]) == (40, 4, 4)
    assert value_at(document, trigger.value_location) > trigger.activation_target_value  # wakes from zero

    # A member that went away had 6 entries of v1:0 delivered and acked 4: 2 stay pending.
    v1_0 = rkeys.stream_key(PREFIX, Shard.parse("v1:0"))
    delivered = stack.client().xreadgroup(GROUP, "gone", {v1_0: ">"}, count=6)[0][1]
    stack.client().xack(v1_0, GROUP, *[entry_id for entry_id, _ in delivered[:4]])
    assert check()["pending"] == 2

    # Trims: the retention pass removes what every group handled; a cap (what max_len does, trim.lua)
    # removes entries the group never read, which are then no backlog.
    store.retention_pass()
    stack.client().xtrim(v1_0, maxlen=2, approximate=False)
    assert check()["undelivered"] < 40 - 6

    # A resharding: new entries go to v2; v1's undrained shards still count.
    stack.admin.ok("POST", f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 6})
    for n in range(40, 58):
        producer.send(PREFIX, keys[n % len(keys)], {"n": n})
    document = check()
    assert (document["active_shards"], document["shards"]) == (6, 10)

    # A member consumes everything: the backlog KEDA reads falls to 0 (the old shards drain, and the
    # entries left pending by the member that went away are taken over), and the group may go to zero.
    stack.start_member("m1")
    wait_until(lambda: read_scaler(stack, path)["backlog"], lambda n: n == 0, timeout_s=120, what="consumed")
    final = check()
    assert value_at(final, trigger.value_location) <= trigger.activation_target_value
    wait_until(lambda: read_scaler(stack, path)["shards"], lambda n: n == 6, timeout_s=60, what="v1 drained")
