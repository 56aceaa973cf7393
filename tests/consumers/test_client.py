"""The coordinator clients: HTTP (against a scripted stdlib server for the transport, and against the real
API on a live server) and in-process (against the real store), which must fail the same way."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from consumers.client import (
    CoordinatorRequestError,
    CoordinatorUnreachable,
    HttpCoordinatorClient,
    StoreCoordinatorClient,
    insecure_url_problem,
)
from consumers.member.state import HeartbeatRequest
from coordinator.protocol.model import Shard
from tests.consumers.harness import GROUP, PREFIX, Cluster, Recorder, eventually

JOIN = HeartbeatRequest(member_id="m-1", member_epoch=0, capacity=2, client={"host": "h", "pid": 1})

# ------------------------------------------------------------------------------------------ scripted server


class Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.replies: list[tuple[int, dict[str, str], bytes]] = []
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.connections: set[tuple[str, int]] = set()
        self.delay_s = 0.0
        self.close_after_reply = False

    def reply(self, status: int, body: Any, content_type: str = "application/json", **headers: str) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append((status, {"Content-Type": content_type, **headers}, data))

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and went away: expected in these tests

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: Scripted

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        self.server.requests.append((self.path, dict(self.headers), body))
        self.server.connections.add(self.client_address)
        if self.server.delay_s:
            threading.Event().wait(self.server.delay_s)
        status, headers, data = self.server.replies.pop(0)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if self.server.close_after_reply:
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Scripted]:
    s = Scripted()
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    yield s
    s.shutdown()
    s.server_close()


OK = {"member_id": "m-1", "member_epoch": 1, "shards": []}


def test_a_heartbeat_posts_json_with_the_bearer_token_under_the_base_path(server: Scripted) -> None:
    server.reply(200, OK)
    client = HttpCoordinatorClient(server.url + "/coordinator/", "s3cret")
    owned = HeartbeatRequest(member_id="m-1", member_epoch=4, owned_shards=(Shard(version=1, index=2),))
    assert client.heartbeat("orders", "billing", owned) == OK
    path, headers, body = server.requests[0]
    assert path == "/coordinator/api/v1/groups/orders/billing/heartbeat"
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    assert body == {"member_id": "m-1", "member_epoch": 4, "owned_shards": ["v1:2"]}


def test_the_connection_is_kept_alive(server: Scripted) -> None:
    client = HttpCoordinatorClient(server.url, "t")
    for _ in range(3):
        server.reply(200, OK)
        client.heartbeat(PREFIX, GROUP, JOIN)
    assert len(server.connections) == 1
    client.close()


def test_a_keep_alive_connection_closed_by_the_server_is_replaced_transparently(server: Scripted) -> None:
    client = HttpCoordinatorClient(server.url, "t")
    server.reply(200, OK)
    client.heartbeat(PREFIX, GROUP, JOIN)
    # The server drops the idle connection without telling (as servers with idle timeouts do).
    client._conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
    server.reply(200, OK)
    assert client.heartbeat(PREFIX, GROUP, JOIN) == OK
    assert len(server.requests) == 2


def test_problem_details_become_a_typed_error_with_the_code(server: Scripted) -> None:
    problem = {
        "type": "urn:redis-stream-coordinator:problem:fenced-member-epoch",
        "title": "Fenced member epoch",
        "status": 409,
        "detail": "member m-1 must rejoin",
        "code": "FENCED_MEMBER_EPOCH",
        "retriable": False,
    }
    server.reply(409, problem, "application/problem+json")
    client = HttpCoordinatorClient(server.url, "t")
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, GROUP, JOIN)
    error = info.value
    assert (error.code, error.status, error.retriable, error.message) == (
        "FENCED_MEMBER_EPOCH",
        409,
        False,
        "member m-1 must rejoin",
    )
    assert error.details["problem"] == problem


def test_retry_after_and_the_retriable_default_of_a_code(server: Scripted) -> None:
    server.reply(503, {"code": "STORE_UNAVAILABLE", "detail": "down"}, "application/problem+json", **{
        "Retry-After": "1"
    })  # fmt: skip
    with pytest.raises(CoordinatorRequestError) as info:
        HttpCoordinatorClient(server.url, "t").heartbeat(PREFIX, GROUP, JOIN)
    assert (info.value.code, info.value.retriable, info.value.retry_after_ms) == (
        "STORE_UNAVAILABLE",
        True,
        1000,
    )


def test_a_proxy_error_page_is_unreachable_and_other_non_problems_keep_their_status(server: Scripted) -> None:
    client = HttpCoordinatorClient(server.url, "t")
    server.reply(502, b"<html>bad gateway</html>", "text/html")
    with pytest.raises(CoordinatorUnreachable):
        client.heartbeat(PREFIX, GROUP, JOIN)
    server.reply(404, b"<html>nope</html>", "text/html")
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, GROUP, JOIN)
    assert (info.value.code, info.value.retriable) == ("HTTP_404", False)
    server.reply(200, b"[]")
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, GROUP, JOIN)
    assert info.value.code == "INVALID_RESPONSE"


def test_a_timeout_is_unreachable_and_the_next_call_uses_a_new_connection(server: Scripted) -> None:
    client = HttpCoordinatorClient(server.url, "t", timeout_s=0.2)
    server.delay_s = 1.0
    server.reply(200, OK)
    with pytest.raises(CoordinatorUnreachable, match="timed out"):
        client.heartbeat(PREFIX, GROUP, JOIN)
    server.delay_s = 0
    server.reply(200, OK)
    assert client.heartbeat(PREFIX, GROUP, JOIN) == OK


def test_a_refused_connection_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(CoordinatorUnreachable) as info:
        HttpCoordinatorClient(f"http://127.0.0.1:{port}", "t").heartbeat(PREFIX, GROUP, JOIN)
    assert info.value.code == "COORDINATOR_UNREACHABLE"
    assert info.value.retriable


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:8000", "http://"])
def test_bad_coordinator_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        HttpCoordinatorClient(url, "t")


@pytest.mark.parametrize(
    "url",
    ["http://coordinator.internal:8000", "http://10.0.0.5", "http://web:8000/rsc", "http://[2001:db8::1]:80",
     "http://127.0.0.1.example.com", "http://localhost.example.com"],
)  # fmt: skip
def test_plain_http_to_another_machine_is_refused_unless_allowed(url: str) -> None:
    """The bearer token goes in every heartbeat: in clear only to this machine, or when allowed."""
    with pytest.raises(ValueError, match=r"in clear.*RSC_ALLOW_INSECURE_COORDINATOR_URL"):
        HttpCoordinatorClient(url, "t")
    assert HttpCoordinatorClient(url, "t", allow_insecure=True).base_url == url


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://127.9.8.7", "http://[::1]:8000", "http://localhost:8000",
     "http://LOCALHOST.", "http://api.localhost/rsc", "http://[::ffff:127.0.0.1]", "https://coordinator.internal"],
)  # fmt: skip
def test_https_and_local_http_need_no_allowance(url: str) -> None:
    assert insecure_url_problem(url) is None
    assert HttpCoordinatorClient(url, "t").base_url == url


# ------------------------------------------------------------------------------------------ in-process


def test_the_store_client_answers_like_the_api_and_fails_with_the_same_codes(cluster: Cluster) -> None:
    client = StoreCoordinatorClient(cluster.store)
    body = client.heartbeat(PREFIX, GROUP, JOIN)
    assert body["member_epoch"] == 1
    assert [s["shard"] for s in body["shards"]] == ["v1:0", "v1:1", "v1:2", "v1:3"]
    stale = HeartbeatRequest(member_id="m-1", member_epoch=7, owned_shards=())
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, GROUP, stale)
    assert (info.value.code, info.value.retriable) == ("FENCED_MEMBER_EPOCH", False)
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, "nobody", JOIN)
    assert (info.value.code, info.value.retriable) == ("GROUP_NOT_FOUND", True)
    with pytest.raises(CoordinatorRequestError) as info:
        client.heartbeat(PREFIX, GROUP, HeartbeatRequest(member_id="m 1", member_epoch=0, capacity=1))
    assert info.value.code == "INVALID_IDENTIFIER"


# ------------------------------------------------------------------------------------------ the real API

MEMBER_TOKEN = "member-token-for-consumer-tests"


@pytest.fixture
def live_api(settings: Any, redis_url: str, live_server: Any, transactional_db: None) -> Iterator[str]:
    from coordinator.store import reset_store

    settings.REDIS_URL = redis_url
    settings.RSC_MEMBER_TOKENS = [MEMBER_TOKEN]
    reset_store()
    yield live_server.url
    reset_store()


def test_a_member_runs_against_the_real_http_api(live_api: str, redis_url: str) -> None:
    cluster = Cluster(redis_url)
    try:
        recorder = Recorder()
        m = cluster.member(recorder, coordinator=HttpCoordinatorClient(live_api, MEMBER_TOKEN))
        eventually(lambda: cluster.stable(m), what="joined over HTTP")
        sent = cluster.send_many([cluster.key_for(i) for i in range(4)], per_key=3)
        eventually(lambda: recorder.count() == sent, what="consumed")
        m.stop(5.0)
        assert m.wait(10.0)
        assert cluster.member_view(m.member_id)["state"] == "LEFT"
        assert cluster.member_view(m.member_id)["client"]["listener"] == "bill"
    finally:
        cluster.close()


def test_the_real_api_errors_arrive_with_their_codes(live_api: str, redis_url: str) -> None:
    cluster = Cluster(redis_url)
    try:
        bad_token = HttpCoordinatorClient(live_api, "wrong")
        with pytest.raises(CoordinatorRequestError) as info:
            bad_token.heartbeat(PREFIX, GROUP, JOIN)
        assert (info.value.code, info.value.status) == ("UNAUTHENTICATED", 401)
        client = HttpCoordinatorClient(live_api, MEMBER_TOKEN)
        with pytest.raises(CoordinatorRequestError) as info:
            client.heartbeat(
                PREFIX, GROUP, HeartbeatRequest(member_id="m-1", member_epoch=3, owned_shards=())
            )
        assert (info.value.code, info.value.status) == ("UNKNOWN_MEMBER_ID", 409)
        with pytest.raises(CoordinatorRequestError) as info:
            client.heartbeat(PREFIX, "nobody", JOIN)
        assert (info.value.code, info.value.retriable) == ("GROUP_NOT_FOUND", True)
    finally:
        cluster.close()


# ------------------------------------------------------------------------------------------ join_seq


def test_a_join_sends_its_join_seq_and_a_renewal_none(server: Scripted) -> None:
    client = HttpCoordinatorClient(server.url, "t")
    server.reply(200, OK)
    client.heartbeat(PREFIX, GROUP, HeartbeatRequest(member_id="m-1", member_epoch=0, capacity=2, join_seq=3))
    server.reply(200, OK)
    client.heartbeat(PREFIX, GROUP, HeartbeatRequest(member_id="m-1", member_epoch=4, owned_shards=()))
    assert [body.get("join_seq") for _, _, body in server.requests] == [3, None]
    assert server.requests[0][2] == {"member_id": "m-1", "member_epoch": 0, "capacity": 2, "join_seq": 3}


def test_a_problems_details_are_kept_and_its_exact_retry_after_wins_over_the_header(server: Scripted) -> None:
    throttled = {"code": "JOINS_THROTTLED", "detail": "busy", "details": {"retry_after_ms": 1_234}}
    server.reply(429, throttled, "application/problem+json", **{"Retry-After": "2"})
    with pytest.raises(CoordinatorRequestError) as info:
        HttpCoordinatorClient(server.url, "t").heartbeat(PREFIX, GROUP, JOIN)
    assert (info.value.code, info.value.retriable, info.value.retry_after_ms) == (
        "JOINS_THROTTLED",
        True,
        1_234,
    )
    stale = {"code": "STALE_JOIN", "retriable": False, "details": {"join_seq": 1, "current_join_seq": 2}}
    server.reply(409, stale, "application/problem+json")
    with pytest.raises(CoordinatorRequestError) as info:
        HttpCoordinatorClient(server.url, "t").heartbeat(PREFIX, GROUP, JOIN)
    assert info.value.problem_details == {"join_seq": 1, "current_join_seq": 2}
    assert info.value.retry_after_ms is None


def test_the_store_client_sends_join_seq_a_retried_join_is_not_fenced_and_a_stale_one_refused(
    cluster: Cluster,
) -> None:
    client = StoreCoordinatorClient(cluster.store)

    def join(seq: int) -> dict[str, Any]:
        request = HeartbeatRequest(member_id="m-1", member_epoch=0, capacity=2, join_seq=seq)
        return client.heartbeat(PREFIX, GROUP, request)

    first = join(1)
    assert join(1)["member_epoch"] == first["member_epoch"]  # a retry: answered as it is, not fenced
    rejoined = join(2)
    assert rejoined["member_epoch"] > first["member_epoch"]  # a new incarnation
    with pytest.raises(CoordinatorRequestError) as info:
        join(1)
    assert (info.value.code, info.value.retriable) == ("STALE_JOIN", False)
    assert info.value.problem_details["current_join_seq"] == 2
    assert cluster.member_view("m-1")["member_epoch"] == rejoined["member_epoch"]
