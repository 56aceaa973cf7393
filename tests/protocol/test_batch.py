"""MemberHeartbeats (the store's batch of queued heartbeats) is exactly its heartbeats decided one after
the other: the same state, and for each heartbeat the same response or the same refusal."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.protocol.commands import CreateGroup, MemberHeartbeat, MemberHeartbeats, apply
from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, PrefixState, Shard

PREFIX, GROUP = "orders", "billing"
IDS = ["a", "b", "c", "d", "e"]
CONFIG = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)


def _start(shards: int) -> PrefixState:
    create = CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=shards, config=CONFIG)
    state = apply(None, create, 0).state
    assert state is not None
    return state


heartbeats = st.lists(
    st.builds(
        Heartbeat,
        member_id=st.sampled_from(IDS),
        member_epoch=st.integers(-1, 6),
        owned=st.none()
        | st.frozensets(st.builds(Shard, version=st.just(1), index=st.integers(0, 5)), max_size=4),
        capacity=st.none() | st.integers(1, 3),
        join_seq=st.none() | st.integers(0, 2),
    ),
    min_size=1,
    max_size=12,
)


def _told(result: object) -> object:
    return (type(result).__name__, result.details) if isinstance(result, CoordinatorError) else result


@settings(max_examples=300, deadline=None)
@given(shards=st.integers(1, 6), warmup=heartbeats, batch=heartbeats)
def test_a_batch_is_its_heartbeats_one_after_the_other(
    shards: int, warmup: list[Heartbeat], batch: list[Heartbeat]
) -> None:
    state = _start(shards)
    for hb in warmup:  # some members, in some states
        with contextlib.suppress(CoordinatorError):
            state = apply(
                state, MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb), 5
            ).state
        assert state is not None
    now = 7
    one_by_one, expected = state, []
    for hb in batch:
        try:
            outcome = apply(
                one_by_one, MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb), now
            )
        except CoordinatorError as refused:
            expected.append(_told(refused))
            continue
        assert outcome.state is not None
        one_by_one = outcome.state
        expected.append(outcome.result)
    together = apply(
        state, MemberHeartbeats(stream_prefix=PREFIX, consumer_group=GROUP, heartbeats=tuple(batch)), now
    )
    assert together.state == one_by_one
    assert isinstance(together.result, tuple)
    assert [_told(r) for r in together.result] == expected
