"""The heartbeat door (coordinator/api/door.py) answers exactly what Django answers: a corpus of requests,
each sent from the same Redis state through the door (wrapping Django) and through Django alone, must
give the same status, headers (in order) and body, byte for byte, and leave the same metadata. Steady
heartbeats must be answered without Django; a credential change made elsewhere applies to the very
next request the door sees."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterable
from typing import Any

import pytest
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections

from coordinator import credentials
from coordinator.api import door
from coordinator.models import ApiCredential
from coordinator.store import MetadataStore
from rsc_redis import keys as rkeys

from .helpers import GROUP, MEMBER_TOKEN, PREFIX, Api, expires_by_itself
from .test_fastpath import TIMING, _normalized, comparable_body, corpus, restore, snapshot


@pytest.fixture
def steady(api: Api) -> int:
    api.create_group(heartbeat_interval_ms=1_000, lease_ttl_ms=60_000)
    joined = api.join("m1")
    assert joined["member_state"] == "STABLE"
    return int(joined["member_epoch"])


class Recorder:
    """A WSGI application behind the door that records what reaches it, then lets Django answer."""

    def __init__(self) -> None:
        self.django = WSGIHandler()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.calls.append(environ)
        return self.django(environ, start_response)


def environ_of(body: Any, token: str | None, **meta: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    prefix = meta.pop("prefix", PREFIX)
    environ = {
        "REQUEST_METHOD": meta.pop("method", "POST"),
        "PATH_INFO": f"/api/v1/groups/{prefix}/{GROUP}/heartbeat",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": meta.pop("host", "testserver"),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": meta.pop("content_type", "application/json"),
    }
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    environ.update(meta)
    return environ


def call(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.update(status=status, headers=headers)

    # Django's WSGIHandler closes the database connection at the end of every request (its
    # request_finished signal), and the test's connection holds the test's transaction: unhooked for
    # the request, as Django's own test client does.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        chunks = app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return started["status"], started["headers"], body


def comparable(answer: tuple[str, list[tuple[str, str]], bytes]) -> tuple[str, list[tuple[str, str]], bytes]:
    status, headers, body = answer
    headers = [(k, "<present>" if k in TIMING else v) for k, v in headers]
    return status, headers, comparable_body(dict(headers).get("Content-Type", ""), body)


def comparable_state(store: MetadataStore) -> dict[bytes, Any]:
    """Every key but the heartbeat floors' and the credentials' join rates, by content: hashes field
    by field with the lease deadlines (Redis TIME + TTL, so they differ between two runs) blanked, the
    metadata hash's documents without their time stamps and random revision tokens
    (test_fastpath._normalized), sorted sets without their scores (the lease index's scores are those
    deadlines), anything else byte for byte."""
    state: dict[bytes, Any] = {}
    for key in store.client.keys("*"):
        if expires_by_itself(key):
            continue
        kind = store.client.type(key)
        if kind == b"hash":
            fields = store.client.hgetall(key)
            fields = {f: (b"<lease>" if f.startswith(b"l:") else v) for f, v in fields.items()}
            state[key] = _normalized(fields) if key.endswith(b":meta") else fields
        elif kind == b"zset":
            state[key] = sorted(store.client.zrange(key, 0, -1))
        else:
            state[key] = store.client.dump(key)
    return state


def door_corpus(epoch: int, scoped: str) -> list[tuple[str, Any, str | None, dict[str, Any]]]:
    steady = {"member_id": "m1", "member_epoch": epoch}
    return [
        *corpus(epoch, scoped),
        ("with a cookie", steady, MEMBER_TOKEN, {"HTTP_COOKIE": "sessionid=abc"}),
        ("disallowed host", steady, MEMBER_TOKEN, {"host": "evil.example"}),
        ("GET", b"", MEMBER_TOKEN, {"method": "GET"}),
        ("PUT", steady, MEMBER_TOKEN, {"method": "PUT"}),
        ("body shorter than its length", steady, MEMBER_TOKEN, {"CONTENT_LENGTH": "5"}),
        ("no content length", steady, MEMBER_TOKEN, {"CONTENT_LENGTH": ""}),
        ("chunked", steady, MEMBER_TOKEN, {"HTTP_TRANSFER_ENCODING": "chunked"}),
        ("over https", steady, MEMBER_TOKEN, {"wsgi.url_scheme": "https", "SERVER_PORT": "443"}),
        ("under a script name", steady, MEMBER_TOKEN, {"SCRIPT_NAME": "/coord"}),
        (
            "the mount repeated under a script name",
            steady,
            MEMBER_TOKEN,
            {"SCRIPT_NAME": "/coord", "PATH_INFO": f"/coord/api/v1/groups/{PREFIX}/{GROUP}/heartbeat"},
        ),
        ("a non-ASCII prefix", steady, MEMBER_TOKEN, {"prefix": "\xe2\x82\xac"}),  # UTF-8 of the euro sign
        ("a percent sign", steady, MEMBER_TOKEN, {"prefix": "a%2Fb"}),
    ]


def test_both_doors_answer_every_request_alike(steady: int, store: MetadataStore, settings: Any) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS = 0  # the floor has its own case below
    settings.SECURE_HSTS_SECONDS = 3600  # so the answer over https carries HSTS, from Django's own hook
    _credential, scoped = ApiCredential.issue("elsewhere", "member", stream_prefixes="payments")
    django = WSGIHandler()
    start = snapshot(store)
    answered_by_door = []
    for name, body, token, meta in door_corpus(steady, scoped):
        restore(store, start)
        credentials.match_token(MEMBER_TOKEN)  # credentials cached, as after any earlier request
        behind = Recorder()
        through_door = call(door.HeartbeatDoor(behind), environ_of(body, token, **dict(meta)))
        after_door = comparable_state(store)
        if not behind.calls:
            answered_by_door.append(name)
        restore(store, start)
        alone = call(django, environ_of(body, token, **dict(meta)))
        assert comparable(through_door) == comparable(alone), name
        assert after_door == comparable_state(store), name
    # The steady ones (and only ones a script call can answer) never reached Django.
    assert {"steady", "steady, owned reported", "over https", "under a script name"} <= set(answered_by_door)
    assert not {
        "with a cookie",
        "disallowed host",
        "join",
        "no credential",
        "the mount repeated under a script name",
        "a non-ASCII prefix",
    } & set(answered_by_door)


@pytest.mark.parametrize(
    "setting, value, meta",
    [
        ("SECURE_SSL_REDIRECT", True, {}),
        ("DISALLOWED_USER_AGENTS", [re.compile("bad-bot")], {"HTTP_USER_AGENT": "bad-bot/1.0"}),
        ("PREPEND_WWW", True, {}),
    ],
)
def test_django_refusals_and_redirects_stay_djangos(
    steady: int, store: MetadataStore, settings: Any, setting: str, value: Any, meta: dict[str, str]
) -> None:
    setattr(settings, setting, value)
    body = {"member_id": "m1", "member_epoch": steady}
    credentials.match_token(MEMBER_TOKEN)
    behind = Recorder()
    start = snapshot(store)
    through_door = call(door.HeartbeatDoor(behind), environ_of(body, MEMBER_TOKEN, **meta))
    restore(store, start)
    alone = call(WSGIHandler(), environ_of(body, MEMBER_TOKEN, **meta))
    assert len(behind.calls) == 1  # Django's to answer
    assert comparable(through_door) == comparable(alone)
    assert through_door[0].split()[0] in ("301", "403")


def test_a_door_that_cannot_be_set_up_stays_off(
    steady: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> str:
        raise door.NoReverseMatch("no api-v1 namespace in this project")

    monkeypatch.setattr(door, "reverse", broken)
    credentials.match_token(MEMBER_TOKEN)
    behind = Recorder()
    app = door.HeartbeatDoor(behind)
    for _ in range(2):
        answer = call(app, environ_of({"member_id": "m1", "member_epoch": steady}, MEMBER_TOKEN))
        assert answer[0] == "200 OK"
    assert len(behind.calls) == 2
    assert sum("could not be set up" in r.getMessage() for r in caplog.records) == 1  # once, not per request


def test_steady_heartbeats_never_reach_django_and_the_floor_counts_once(
    steady: int, store: MetadataStore, settings: Any
) -> None:
    settings.RSC_HEARTBEAT_FLOOR_MS, settings.RSC_HEARTBEAT_BURST = 60_000, 2
    behind = Recorder()
    app = door.HeartbeatDoor(behind)
    body = {"member_id": "m1", "member_epoch": steady}
    credentials.match_token(MEMBER_TOKEN)
    assert call(app, environ_of(body, MEMBER_TOKEN))[0] == "200 OK"
    assert behind.calls == []
    # Not steady (a capacity change): the door ran the script (the floor's second heartbeat), Django
    # decides without running it again, and the body it reads is the one the door read.
    assert call(app, environ_of({**body, "capacity": 3}, MEMBER_TOKEN))[0] == "200 OK"
    assert len(behind.calls) == 1 and behind.calls[0].get("rsc.fast_tried") is True
    status, _headers, problem = call(app, environ_of(body, MEMBER_TOKEN))
    assert status == "429 Too Many Requests"  # the third: past the burst of 2, answered by the door
    assert json.loads(problem)["code"] == "HEARTBEAT_TOO_FREQUENT"
    assert len(behind.calls) == 1


def test_a_cold_credential_cache_goes_to_django(steady: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "_db_cache", None)
    behind = Recorder()
    answer = call(
        door.HeartbeatDoor(behind), environ_of({"member_id": "m1", "member_epoch": steady}, MEMBER_TOKEN)
    )
    assert answer[0] == "200 OK" and len(behind.calls) == 1  # the door never reads the database


def test_a_credential_change_elsewhere_applies_to_the_next_request(steady: int, store: MetadataStore) -> None:
    """Another process deactivates the credential and bumps the shared generation: this process's cache
    still holds the credential, but the script sees the generation moved and renews nothing."""
    credential, token = ApiCredential.issue("worker", "member")
    # The environment member token joined m1; a database credential joins m2 for this test.
    behind = Recorder()
    app = door.HeartbeatDoor(behind)
    status, _h, raw = call(app, environ_of({"member_id": "m2", "member_epoch": 0, "capacity": 1}, token))
    assert status == "200 OK", raw
    view = json.loads(raw)
    assert call(app, environ_of({"member_id": "m1", "member_epoch": -1}, MEMBER_TOKEN))[0] == "200 OK"
    for _ in range(10):  # until m2 is steady, owning the shards m1 left
        owned = [s["shard"] for s in view["shards"]]
        steady_body = {"member_id": "m2", "member_epoch": view["member_epoch"], "owned_shards": owned}
        view = json.loads(call(app, environ_of(steady_body, token))[2])
        if view["member_state"] == "STABLE" and [s["shard"] for s in view["shards"]] == owned:
            break
    behind.calls.clear()
    assert call(app, environ_of(steady_body, token))[0] == "200 OK"
    assert behind.calls == []  # answered by the door, from the cached credentials

    ApiCredential.objects.filter(pk=credential.pk).update(active=False)  # no signal: "another process"
    store.client.set(rkeys.CREDENTIALS_GENERATION_KEY, "changed")  # what that process's commit publishes
    lease = store.raw_metadata(PREFIX)[f"l:{GROUP}:m2".encode()]
    status, _h, raw = call(app, environ_of(steady_body, token))
    assert status == "401 Unauthorized", raw
    assert len(behind.calls) == 1  # the script refused to answer; Django authenticated afresh
    assert store.raw_metadata(PREFIX)[f"l:{GROUP}:m2".encode()] == lease  # nothing renewed


def test_unknown_middleware_turns_the_door_off(steady: int, settings: Any) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    credentials.match_token(MEMBER_TOKEN)
    behind = Recorder()
    answer = call(
        door.HeartbeatDoor(behind), environ_of({"member_id": "m1", "member_epoch": steady}, MEMBER_TOKEN)
    )
    assert answer[0] == "200 OK" and len(behind.calls) == 1


def test_the_setting_turns_the_door_off(steady: int, settings: Any) -> None:
    settings.RSC_HEARTBEAT_DOOR = False
    credentials.match_token(MEMBER_TOKEN)
    behind = Recorder()
    answer = call(
        door.HeartbeatDoor(behind), environ_of({"member_id": "m1", "member_epoch": steady}, MEMBER_TOKEN)
    )
    assert answer[0] == "200 OK" and len(behind.calls) == 1


def test_the_project_wsgi_application_has_the_door() -> None:
    from config.wsgi import application

    assert isinstance(application.wrapped, door.HeartbeatDoor)  # type: ignore[attr-defined]


def test_later_steady_answers_carry_the_headers_django_gives(steady: int, api: Api, settings: Any) -> None:
    """One door answers steady heartbeat after heartbeat: the headers it learnt from the middleware hooks
    on the first answer (per http / https) are Django's on every later one, and a settings change is
    learnt again."""
    settings.RSC_HEARTBEAT_FLOOR_MS = 0
    settings.SECURE_HSTS_SECONDS = 3600
    behind = Recorder()
    app = door.HeartbeatDoor(behind)
    django = WSGIHandler()
    credentials.match_token(MEMBER_TOKEN)
    # Two steady members with answers of different lengths (each is its own Content-Length).
    joined = api.join("a-member-with-a-longer-id")
    bodies = []
    for member_id in ("m1", "a-member-with-a-longer-id"):
        view = joined if member_id != "m1" else api.heartbeat(member_id="m1", member_epoch=steady).json()
        for _ in range(10):  # reconciled to its share of the shards, settled
            owned = [s["shard"] for s in view.get("shards", [])]
            body = {"member_id": member_id, "member_epoch": view["member_epoch"], "owned_shards": owned}
            answer = api.heartbeat(**body)
            assert answer.status_code == 200, answer.content
            view = answer.json()
            if view["member_state"] == "STABLE" and [s["shard"] for s in view["shards"]] == owned:
                break
        steady_body = {"member_id": member_id, "member_epoch": view["member_epoch"]}
        bodies += [steady_body, {**steady_body, "owned_shards": owned}]
    https = {"wsgi.url_scheme": "https", "SERVER_PORT": "443"}
    seen = []
    for frame_options in ("DENY", "SAMEORIGIN"):
        settings.X_FRAME_OPTIONS = frame_options
        for meta in ({}, https, {}, https):
            for body in bodies:
                through_door = call(app, environ_of(body, MEMBER_TOKEN, **meta))
                alone = call(django, environ_of(body, MEMBER_TOKEN, **meta))
                assert comparable(through_door) == comparable(alone), (frame_options, meta, body)
                seen.append(dict(through_door[1]))
    assert behind.calls == []  # every one answered by the door
    assert {h["X-Frame-Options"] for h in seen} == {"DENY", "SAMEORIGIN"}
    assert sum("Strict-Transport-Security" in h for h in seen) == len(seen) // 2
    assert len({h["Content-Length"] for h in seen}) == 2
