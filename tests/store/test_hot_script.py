"""clients.HotScript, the hot paths' script call (a steady heartbeat, a member's fetch), on a real Redis:
the same replies and errors as redis-py's Script, never a stray reply after a cut call, no re-send, a
reload after NOSCRIPT, one connection per concurrent caller, and a forked child that never touches its
parent's sockets."""

from __future__ import annotations

import os
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from rsc_redis.clients import HotScript

ECHO = "return {KEYS[1], ARGV[1], ARGV[2]}"
SLOW = (  # 300 ms of Redis's time, after counting the run in KEYS[1]
    "redis.call('INCR', KEYS[1]); local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; "
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 300000; return 'slow'"
)
FAIL = "return redis.error_reply('ERR refused on purpose')"
INCR = "return redis.call('INCR', KEYS[1])"


def make(url: str, **options: object) -> redis.Redis:
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **options)  # type: ignore[arg-type]


def test_a_call_answers_as_redis_pys_script_does_and_keeps_its_connection(redis_url: str) -> None:
    client = make(redis_url)
    hot = HotScript(client, ECHO)
    assert hot(keys=["k"], args=[1, b"\xff"]) == [b"k", b"1", b"\xff"]
    assert hot(keys=["k"], args=["a", "b"]) == client.register_script(ECHO)(keys=["k"], args=["a", "b"])
    assert hot.sha == client.register_script(ECHO).sha
    assert len(hot._free) == 1  # one caller at a time: one connection, used again and again


def test_the_hot_call_sends_the_bytes_redis_pys_packer_sends(redis_url: str) -> None:
    """The hot calls pack with hiredis directly (rsc_redis/clients.py, _HotCall): for what they send
    (str, bytes and int arguments, a value past redis-py's 6,000-byte buffer cut included) that is
    byte for byte redis-py's own packing."""
    client = make(redis_url)
    connection = client.connection_pool.get_connection()
    command = ("FCALL", "rsc_0123456789ab_produce", 2, "rsc:{p}:meta", "rsc:{p}:v1:0", "1", "8", "0", 2)
    command += (b"1 0 \xff\x00 \r\n", b"x" * 10_000)
    sent: list[bytes] = []
    connection.send_packed_command = lambda packed, check_health=True: sent.append(b"".join(packed))
    HotScript._command(connection, *command)
    assert sent == [b"".join(connection.pack_command(*command))]
    client.connection_pool.release(connection)
    client.close()


def test_an_error_reply_raises_and_leaves_the_connection_in_step(redis_url: str) -> None:
    client = make(redis_url)
    failing, echo = HotScript(client, FAIL), HotScript(client, ECHO)
    with pytest.raises(redis.ResponseError, match="refused on purpose"):
        failing(keys=["k"], args=[])
    assert len(failing._free) == 1
    echo._free = failing._free  # the very connection that carried the error reply
    assert echo(keys=["k"], args=["x", "y"]) == [b"k", b"x", b"y"]


def test_noscript_loads_the_script_and_sends_it_again_once(redis_url: str) -> None:
    client = make(redis_url)
    hot = HotScript(client, INCR)
    assert hot(keys=["n"]) == 1
    client.script_flush()
    assert hot(keys=["n"]) == 2  # ran once: not twice, not zero times
    assert client.get("n") == b"2"


def test_a_timed_out_call_is_never_re_sent_and_its_late_reply_never_read(redis_url: str) -> None:
    client = make(redis_url, socket_timeout=0.1)
    slow, echo = HotScript(client, SLOW), HotScript(client, ECHO)
    with pytest.raises(redis.TimeoutError):
        slow(keys=["k"])
    assert slow._free == []  # not kept: disconnected and handed back to the pool
    cut = client.connection_pool._available_connections[-1]
    assert cut._sock is None  # so the late 'slow' reply is never read by anyone
    make(redis_url, socket_timeout=5).ping()  # waits until the slow script has ended
    for _ in range(20):  # ECHO may be sent again after a timeout on a loaded machine: it writes nothing
        try:
            assert echo(keys=["k"], args=["x", "y"]) == [b"k", b"x", b"y"]  # its own reply, not 'slow'
            break
        except redis.TimeoutError:
            continue
    else:
        pytest.fail("ECHO never answered")
    assert make(redis_url).get("k") == b"1"  # the slow script ran once: never sent again


def test_a_dead_redis_raises_a_connection_error_and_a_restarted_one_answers(disposable_redis) -> None:  # type: ignore[no-untyped-def]
    client = make(disposable_redis.url, socket_timeout=1, socket_connect_timeout=1)
    hot = HotScript(client, INCR)
    assert hot(keys=["n"]) == 1
    disposable_redis.kill()
    with pytest.raises(redis.ConnectionError):
        hot(keys=["n"])
    assert hot._free == []
    disposable_redis.restart()  # empty (no data dir), and without the script: NOSCRIPT, then a load
    assert hot(keys=["n"]) == 1


def test_concurrent_callers_each_get_their_own_reply_on_their_own_connection(redis_url: str) -> None:
    client = make(redis_url)
    hot = HotScript(client, ECHO)
    wrong: list[object] = []
    start = threading.Barrier(8)

    def caller(n: int) -> None:
        start.wait()
        for i in range(300):
            reply = hot(keys=[f"k{n}"], args=[n, i])
            if reply != [f"k{n}".encode(), str(n).encode(), str(i).encode()]:
                wrong.append(reply)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert 1 <= len(hot._free) <= 8
    assert len({id(c) for c in hot._free}) == len(hot._free)


def test_client_close_disconnects_the_kept_connections_and_the_next_call_reconnects(redis_url: str) -> None:
    client = make(redis_url)
    hot = HotScript(client, INCR)
    hot(keys=["n"])
    kept = hot._free[0]
    client.close()
    assert kept._sock is None
    assert hot(keys=["n"]) == 2


def test_a_forked_child_opens_its_own_connection(redis_url: str) -> None:
    client = make(redis_url)
    hot = HotScript(client, INCR)
    hot(keys=["n"])
    parents = hot._free[0]
    pid = os.fork()
    if pid == 0:  # the child: a new connection of its own, the parent's untouched
        code = 0
        try:
            ok = hot(keys=["n"]) == 2 and parents not in hot._free and len(hot._free) == 1
            code = 0 if ok else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert hot._free == [parents] and hot(keys=["n"]) == 3  # the parent's connection still in step


def test_other_clients_take_redis_pys_own_call(redis_url: str) -> None:
    single = make(redis_url, single_connection_client=True)
    hot = HotScript(single, ECHO)
    assert hot._pool is None
    assert hot(keys=["k"], args=["a", "b"]) == [b"k", b"a", b"b"]
