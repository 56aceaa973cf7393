"""Decisions on a stream prefix take turns across coordinator processes while they contend.

Theory of operation
-------------------
Every full-path decision is a compare-and-set: two processes deciding on one prefix at once never lose
an update, but the one whose commit comes second decided for nothing and decides again. Within a
process decisions already queue (``Committer.deciding_on``); across processes, a group that many
members join at once (10,000 members forming at Kafka's default heartbeat interval) kept two API
processes losing races to each other: thousands of decisions made twice, each costing milliseconds.

So once a process has lost a race on a prefix (a compare-and-set conflict), its decisions on that prefix
take a *turn* in Redis for a while (:data:`CONTENDED_FOR_S`): ``SET rsc:{P}:turn <token> NX PX 1000``
before loading, ``release_turn.lua`` after committing. A process that finds the turn taken waits for
it (polling, jittered) and counts that as contention too, so processes that keep meeting there keep
taking turns; a prefix nobody contends goes back to deciding without one, at no cost. Like Kafka's one
group coordinator per group, but only while it pays, and never needed for correctness: the
compare-and-set still decides. So the turn fails open: its wait is bounded (the caller's, ``DECISION_WAIT_S``)
and expires by itself (:data:`TURN_TTL_MS`, for a process that died holding it), after which the
decision goes ahead without it, as before.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from coordinator.protocol.model import validate_identifier
from rsc_redis import keys as rkeys

from .replies import translate_redis_errors

# How long after its last conflict, or its last wait for the turn, a process keeps taking turns on a
# prefix.
CONTENDED_FOR_S = 5.0
# A turn not given back (its holder died) expires after this long.
TURN_TTL_MS = 1_000
# Between two tries for a turn that is taken: a decision at 10,000 members takes milliseconds.
_POLL_S = (0.0005, 0.002)


class Turns:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._release = client.register_script((Path(__file__).parent / "release_turn.lua").read_text())
        self._contended: dict[str, float] = {}  # prefix -> when this process last saw contention

    def contended(self, stream_prefix: str) -> None:
        """This process lost a race on the prefix (or waited for its turn)."""
        self._contended[stream_prefix] = time.monotonic()

    def taking_turns(self, stream_prefix: str) -> bool:
        since = self._contended.get(stream_prefix)
        return since is not None and time.monotonic() - since < CONTENDED_FOR_S

    @contextlib.contextmanager
    def turn(self, stream_prefix: str, wait_s: float) -> Iterator[None]:
        """Hold the prefix's turn while it is contended (else nothing is done). Past ``wait_s`` of
        waiting, go ahead without it."""
        if not self.taking_turns(stream_prefix):
            yield
            return
        validate_identifier(stream_prefix, "stream_prefix")  # a key name: contended ones always are
        key, token = rkeys.turn_key(stream_prefix), uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        with translate_redis_errors():
            while not (held := bool(self.client.set(key, token, nx=True, px=TURN_TTL_MS))):
                self.contended(stream_prefix)
                if time.monotonic() >= deadline:
                    break
                time.sleep(random.uniform(*_POLL_S))
        try:
            yield
        finally:
            if held:
                # Not given back (Redis went away): it expires by itself.
                with contextlib.suppress(redis.RedisError):
                    self._release(keys=[key], args=[token])
