"""Helpers of the HTTP API tests: a thin JSON client and the problem-details assertion."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from django.test import Client

from rsc_redis.keys import CREDENTIAL_JOINS
from tests.signing import signed

MEMBER_TOKEN = "test-member-token-7f3a9c2e1b4d"
ADMIN_TOKEN = "test-admin-token-5e8d1c0a9f2b"
PREFIX = "orders"
GROUP = "billing"
NO_BODY = object()


class Api:
    """``api.post("admin/groups", {...})``: paths are relative to /api/v1/; the admin token by default."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def request(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        *,
        token: str | None = ADMIN_TOKEN,
        content_type: str | None = "application/json",
        raw: bytes | None = None,
        **headers: str,
    ) -> Any:
        extra: dict[str, Any] = dict(headers)
        if token is not None:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        data = raw if raw is not None else (b"" if body is NO_BODY else json.dumps(body).encode())
        kwargs: dict[str, Any] = {"data": data, **extra}
        if content_type is not None:
            kwargs["content_type"] = content_type
            kwargs["CONTENT_TYPE"] = content_type  # the test client drops it when the body is empty
        url = path if path.startswith("/") else f"/api/v1/{path}"
        return self.client.generic(method, url, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = NO_BODY, **kwargs: Any) -> Any:
        return self.request("POST", path, body, **kwargs)

    def put(self, path: str, body: Any = NO_BODY, **kwargs: Any) -> Any:
        return self.request("PUT", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    # -- shortcuts that assert success

    def create_group(self, prefix: str = PREFIX, group: str = GROUP, **fields: Any) -> dict[str, Any]:
        fields.setdefault("shard_count", 4)
        response = self.post("admin/groups", {"stream_prefix": prefix, "consumer_group": group, **fields})
        assert response.status_code == 201, response.content
        return dict(response.json())

    def heartbeat(self, prefix: str = PREFIX, group: str = GROUP, **body: Any) -> Any:
        return self.post(f"groups/{prefix}/{group}/heartbeat", body, token=MEMBER_TOKEN)

    def join(self, member_id: str, capacity: int = 2, **body: Any) -> dict[str, Any]:
        response = self.heartbeat(member_id=member_id, member_epoch=0, capacity=capacity, **body)
        assert response.status_code == 200, response.content
        return dict(response.json())


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """The response is RFC 9457 problem details with this status and code; returns the body."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json", response["Content-Type"]
    body = json.loads(response.content)
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["type"].startswith("urn:redis-stream-coordinator:problem:")
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["details"], dict)
    if status == 503:
        assert response["Retry-After"] == "1"
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")
    return dict(body)


# ---------------------------------------------------------------------------------------------- lifecycle


def expires_by_itself(key: bytes) -> bool:
    """A heartbeat floor's (``rsc:{P}:hbr:...``) or a credential's join rate
    (``rsc:credential:{<credential>}:joins``): not data, they expire by themselves, and every heartbeat
    of a live member (every join of a credential) counts against them whatever its outcome."""
    return b":hbr:" in key or fnmatch.fnmatchcase(key.decode(), CREDENTIAL_JOINS.pattern())


def redis_snapshot(client: Any) -> dict[bytes, Any]:
    """Every key of the private Redis with its content: streams as their DUMP (entries, consumer groups
    and pending lists), hashes as their sorted fields, sets as their sorted members, and anything else
    as its DUMP. Equal snapshots mean that not a byte of data changed. (A hash's DUMP is not compared:
    a large hash is a hash table whose order a plain read may change while Redis rehashes it.) A
    credential's join rate (``rsc:credential:{<credential>}:joins``) is left out: not data, it expires by
    itself, milliseconds after a join at the default rate."""
    snapshot: dict[bytes, Any] = {}
    for key in sorted(client.keys("*")):
        if fnmatch.fnmatchcase(key.decode(), CREDENTIAL_JOINS.pattern()):  # not a heartbeat floor's
            continue
        kind = client.type(key)
        if kind == b"hash":
            snapshot[key] = ("hash", sorted(client.hgetall(key).items()))
        elif kind == b"set":
            snapshot[key] = ("set", sorted(client.smembers(key)))
        else:
            snapshot[key] = client.dump(key)
    return snapshot


def envelope(index: int, key: str | None = None) -> dict[str, str]:
    """The fields a producer appends (consumers/producer.py)."""
    return {
        "event_id": f"evt-{index}",
        "partition_key": key or f"key-{index}",
        "content_type": "application/json",
        "payload": f'{{"n": {index}}}',
        "headers": "{}",
        "routing_version": "1",
        "produced_at_ms": "1700000000000",
    }


def make_pending(client: Any, count: int, *, shard: str = "v1:0", member: str = "m1",
                 prefix: str = PREFIX, group: str = GROUP) -> list[str]:  # fmt: skip
    """Append ``count`` entries to the shard's stream and deliver them to ``member`` (XREADGROUP), so
    that they are pending for the group. Returns their ids, oldest first."""
    version, index = shard[1:].split(":")
    stream = f"rsc:{{{prefix}}}:v{version}:{index}"
    ids = [client.xadd(stream, envelope(i)).decode() for i in range(count)]
    client.xreadgroup(group, member, {stream: ">"}, count=count)
    return ids


def add_dead_letter(client: Any, index: int, *, prefix: str = PREFIX, group: str = GROUP,
                    source_shard: str = "v1:0", key: str | None = None) -> str:  # fmt: skip
    """A dead letter in the format the dead_letter function writes (docs/protocol.md, "Dead-letter entry
    format"), signed as it signs them (tests/signing.py)."""
    fields = {
        **envelope(index, key),
        "dlq_source_shard": source_shard,
        "dlq_source_id": f"1700000000000-{index}",
        "dlq_deliveries": "5",
        "dlq_error": "ValueError: bad payload",
        "dlq_member_id": "m1",
        "dlq_at_ms": "1700000001000",
    }
    dlq = f"rsc:{{{prefix}}}:dlq:{group}"
    return str(client.xadd(dlq, signed(dlq, fields)).decode())
