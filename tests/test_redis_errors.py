"""Every Redis error reply through redis-py's own parser and through the product's one classification
(rsc_redis/errors.py), and from there into the data plane's, the producer's and the store's typed errors.

Two sources of the same replies: the parser classes' ``parse_error`` (RESP2, RESP3, hiredis: the path a
reply takes off the socket), and a real server answering ``EVAL "return redis.error_reply(...)"``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser
from redis.exceptions import (
    AuthenticationError,
    ClusterError,
    CrossSlotTransactionError,
    DataError,
    MaxConnectionsError,
    RedisClusterException,
    SlotNotCoveredError,
)

from consumers.dataplane.scripts import translate_redis_errors as dataplane_errors
from consumers.errors import DataPlaneError, DataPlaneUnavailable, FunctionsNotLoaded
from coordinator.protocol.errors import MetadataCorrupt, StoreUnavailable
from coordinator.store.replies import translate_redis_errors as store_errors
from rsc_redis import errors
from rsc_redis.errors import Kind

# (the reply as Redis sends it, its code, the kind it is)
REPLIES = [
    ("CLUSTERDOWN The cluster is down", "CLUSTERDOWN", Kind.NOT_NOW),
    ("CLUSTERDOWN Hash slot not served", "CLUSTERDOWN", Kind.NOT_NOW),
    ("TRYAGAIN Multiple keys request during rehashing of slot", "TRYAGAIN", Kind.NOT_NOW),
    ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", "MASTERDOWN",
     Kind.NOT_NOW),
    ("LOADING Redis is loading the dataset in memory", "LOADING", Kind.NOT_NOW),
    ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", "BUSY",
     Kind.NOT_NOW),
    ("READONLY You can't write against a read only replica.", "READONLY", Kind.NOT_NOW),
    ("MOVED 3999 127.0.0.1:6381", "MOVED", Kind.NOT_NOW),
    ("ASK 3999 127.0.0.1:6381", "ASK", Kind.NOT_NOW),
    ("NOSCRIPT No matching script. Please use EVAL.", "NOSCRIPT", Kind.NOT_NOW),
    ("OOM command not allowed when used memory > 'maxmemory'.", "OOM", Kind.NOT_NOW),
    ("NOREPLICAS Not enough good replicas to write.", "NOREPLICAS", Kind.NOT_NOW),
    ("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
     "MISCONF", Kind.NOT_NOW),
    ("NOPERM User rsc has no permissions to run the 'xadd' command", "NOPERM", Kind.PERMANENT),
    ("NOAUTH Authentication required.", "NOAUTH", Kind.PERMANENT),
    ("WRONGPASS invalid username-password pair or user is disabled.", "WRONGPASS", Kind.PERMANENT),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", Kind.PERMANENT),
    ("CROSSSLOT Keys in request don't hash to the same slot", "CROSSSLOT", Kind.PERMANENT),
    ("EXECABORT Transaction discarded because of previous errors.", "EXECABORT", Kind.PERMANENT),
    ("ERR user_function:12: Script attempted to access nonexistent global variable", "ERR", Kind.PERMANENT),
    ("ERR The user executing the script can't run this command or subcommand", "ERR", Kind.PERMANENT),
    ("NOGROUP No such key 'rsc:{p}:v1:0' or consumer group 'g'", "NOGROUP", Kind.PERMANENT),
]  # fmt: skip

PARSERS: list[Callable[[str], Exception]] = [
    _RESP2Parser.parse_error,
    _RESP3Parser.parse_error,
    _HiredisParser.parse_error,
]


def _expect(reply: str, code: str, kind: Kind, error: Exception) -> None:
    assert errors.error_code(error) == code, (reply, type(error), error.args)
    assert errors.classify(error) is kind, (reply, type(error))
    assert errors.describe(error) == reply
    # The data plane and the producer (one translation: consumers/dataplane/scripts.py).
    with pytest.raises((DataPlaneUnavailable, DataPlaneError)) as dp, dataplane_errors("a call"):
        raise error
    assert type(dp.value) is (DataPlaneUnavailable if kind.transient else DataPlaneError), reply
    assert dp.value.retriable is kind.transient
    assert reply in dp.value.message  # the code word redis-py stripped is back in the message
    # The metadata store.
    with pytest.raises((StoreUnavailable, MetadataCorrupt)) as st, store_errors():
        raise error
    assert type(st.value) is (StoreUnavailable if kind.transient else MetadataCorrupt), reply


@pytest.mark.parametrize("parse", PARSERS, ids=["resp2", "resp3", "hiredis"])
@pytest.mark.parametrize(("reply", "code", "kind"), REPLIES, ids=[r[0].split()[0] + str(i) for i, r in
                                                                  enumerate(REPLIES)])
def test_every_error_reply_through_redis_pys_parser(
    parse: Callable[[str], Exception], reply: str, code: str, kind: Kind
) -> None:
    _expect(reply, code, kind, parse(reply))


def test_every_error_reply_from_a_real_server(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        for reply, code, kind in REPLIES:
            with pytest.raises(redis.RedisError) as e:  # LOADING: a ConnectionError for redis-py
                client.eval("return redis.error_reply(ARGV[1])", 0, reply)
            _expect(reply, code, kind, e.value)
    finally:
        client.close()


def test_a_missing_function_is_functions_not_loaded() -> None:
    with pytest.raises(FunctionsNotLoaded), dataplane_errors("a call"):
        raise _RESP2Parser.parse_error("ERR Function not found")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused."),
         Kind.UNKNOWN_OUTCOME),
        (redis.TimeoutError("Timeout reading from socket"), Kind.UNKNOWN_OUTCOME),
        (MaxConnectionsError("Too many connections"), Kind.UNKNOWN_OUTCOME),
        (ClusterError("TTL exhausted."), Kind.NOT_NOW),
        (SlotNotCoveredError('Slot "42" is not covered by the cluster.'), Kind.NOT_NOW),
        (RedisClusterException("Redis Cluster cannot be connected. Please provide at least one reachable "
                               "node"), Kind.NOT_NOW),
        (AuthenticationError("invalid username-password pair"), Kind.PERMANENT),
        (CrossSlotTransactionError("keys in several slots"), Kind.PERMANENT),
        (DataError("Invalid input of type: 'dict'"), Kind.PERMANENT),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)  # fmt: skip
def test_errors_that_are_not_replies(error: Exception, kind: Kind) -> None:
    assert errors.classify(error) is kind
    with pytest.raises((DataPlaneUnavailable, DataPlaneError)) as dp, dataplane_errors("a call"):
        raise error
    assert dp.value.retriable is kind.transient
    with pytest.raises((StoreUnavailable, MetadataCorrupt)) as st, store_errors():
        raise error
    assert st.value.retriable is kind.transient
