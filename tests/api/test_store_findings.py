"""Regression tests for defects found in the core / store while building the API (all fixed):
identifiers with a trailing newline, a prefix missing from the tick's index, client info ignored by the
heartbeat fast path."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from coordinator.protocol.errors import InvalidIdentifier
from coordinator.protocol.model import validate_identifier, validate_member_id

from .helpers import GROUP, PREFIX, Api, assert_problem


@pytest.mark.parametrize("value", ["orders\n", "m1\n"])
def test_core_identifiers_refuse_a_trailing_newline(value: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_identifier(value, "stream_prefix")
    with pytest.raises(InvalidIdentifier):
        validate_member_id(value)


def test_a_stream_prefix_with_a_trailing_newline_is_refused(api: Api, store: Any) -> None:
    # Was: 201, and the keys rsc:{orders\n}:meta and rsc:{orders\n}:v1:0 existed (whitespace in a hash tag).
    body = {"stream_prefix": "orders\n", "consumer_group": "g", "shard_count": 1}
    assert_problem(api.post("admin/groups", body), 400, "INVALID_IDENTIFIER")
    assert store.client.keys("rsc:{orders\n}*") == []


def test_a_member_id_with_a_trailing_newline_is_refused(api: Api) -> None:
    # Was: the join succeeded, and the member's first full-path heartbeat was fenced ("the lease ... ended
    # at 0"): load.lua splits the `ml:<group>` field on whitespace, so it read the lease of "m1", not "m1\n".
    api.create_group(shard_count=2)
    r = api.heartbeat(member_id="m1\n", member_epoch=0, capacity=1)
    assert_problem(r, 400, "INVALID_IDENTIFIER")


def test_a_group_whose_index_write_failed_is_still_listed_after_a_retry(
    api: Api, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost_connection(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("connection reset by peer")

    body = {"stream_prefix": PREFIX, "consumer_group": GROUP, "shard_count": 2}
    with monkeypatch.context() as patch:
        patch.setattr(store.client, "sadd", lost_connection)
        assert_problem(api.post("admin/groups", body), 503, "STORE_UNAVAILABLE")
    api.post("admin/groups", body)  # the operator retries (409 GROUP_ALREADY_EXISTS)
    assert [row["consumer_group"] for row in api.get("admin/groups").json()] == [GROUP]
    assert PREFIX in store.stream_prefixes()


def test_an_accepted_steady_heartbeat_records_the_client(api: Api) -> None:
    api.create_group(shard_count=1)
    api.join("m1", client={"host": "10.0.0.1", "pid": 1, "listener": "l", "version": "1.0"})
    new_client = {"host": "10.0.0.1", "pid": 1, "listener": "l", "version": "1.1"}
    r = api.heartbeat(member_id="m1", member_epoch=1, owned_shards=["v1:0"], client=new_client)
    assert r.status_code == 200
    member = api.get(f"admin/groups/{PREFIX}/{GROUP}").json()["members"][0]
    assert member["client"] == new_client
