"""How a member talks to the coordinator: one call, ``heartbeat``, behind a small interface.

* :class:`HttpCoordinatorClient` speaks the HTTP API (docs/protocol.md section 13) with the standard
  library's ``http.client``: one keep-alive connection, timeouts, problem+json errors parsed into
  :class:`CoordinatorRequestError` (with the problem's ``code``).
* :class:`StoreCoordinatorClient` calls :meth:`coordinator.store.MetadataStore.heartbeat` in-process (tests,
  and deployments that run members next to the store); the core's ``CoordinatorError`` becomes the same
  :class:`CoordinatorRequestError`, so the member cannot tell the two apart.

The bearer token goes in every request, so a plain ``http://`` URL is refused unless its host is this
machine (``localhost``, a ``*.localhost`` name, a loopback address: :func:`insecure_url_problem`) or the
caller allows it explicitly (``allow_insecure``; ``RSC_ALLOW_INSECURE_COORDINATOR_URL`` for
``run_member``, whose system check ``consumers.E005`` says the same at start-up): a token sent in clear
across a network is a token anyone on the path may use.

Transport failures (refused, reset, timed out, a non-JSON answer from a proxy) raise
:class:`CoordinatorUnreachable`, a retriable :class:`CoordinatorRequestError` whose code is
``COORDINATOR_UNREACHABLE``: the member keeps consuming and retries with backoff.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from consumers.errors import ConsumersError
from consumers.member.state import COORDINATOR_UNREACHABLE, INVALID_RESPONSE, HeartbeatRequest

# Codes a client may retry (docs/protocol.md section 12), for problems that do not say so themselves.
RETRIABLE_CODES = frozenset(
    {"GROUP_NOT_FOUND", "STREAM_PREFIX_NOT_FOUND", "GROUP_MAX_SIZE_REACHED", "STORE_UNAVAILABLE",
     "CONCURRENT_UPDATE", "TOO_MANY_REQUESTS", "JOINS_THROTTLED", "HEARTBEAT_TOO_FREQUENT",
     "CREDENTIAL_JOINS_TOO_FREQUENT", "CREDENTIAL_MEMBER_LIMIT_REACHED", COORDINATOR_UNREACHABLE}
)  # fmt: skip


class CoordinatorRequestError(ConsumersError):
    """The coordinator refused a request (or could not be asked). ``code`` is the coordinator's code
    (``FENCED_MEMBER_EPOCH``, ``GROUP_NOT_FOUND``, ...) or ``COORDINATOR_UNREACHABLE``;
    ``problem_details`` the problem's structured fields (its ``details`` object: ``current_join_seq``
    of a ``STALE_JOIN``, ``retry_after_ms`` of a 429, ...); ``retry_after_ms`` when to come back."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retriable: bool | None = None,
        retry_after_ms: int | None = None,
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, status=status, problem=dict(problem or {}))
        self.code = code  # type: ignore[misc]  # per instance: the coordinator's code, not ours
        self.retriable = code in RETRIABLE_CODES if retriable is None else retriable  # type: ignore[misc]
        self.status = status
        self.retry_after_ms = retry_after_ms
        details = (problem or {}).get("details")
        self.problem_details: dict[str, Any] = dict(details) if isinstance(details, Mapping) else {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code})"


class CoordinatorUnreachable(CoordinatorRequestError):
    def __init__(self, message: str) -> None:
        super().__init__(COORDINATOR_UNREACHABLE, message, retriable=True)


def is_local_host(host: str) -> bool:
    """``host`` (a URL's host name, without brackets) is this machine: ``localhost``, a name under
    ``.localhost`` (RFC 6761: always loopback), or a loopback address (127.0.0.0/8, ::1, and the
    IPv4-mapped ::ffff:127.x.y.z). Decided from the name alone: no lookup, which a resolver could answer
    otherwise."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def insecure_url_problem(url: str) -> str | None:
    """Why a member must not send its bearer token to ``url``: a plain ``http://`` URL whose host is not
    this machine (:func:`is_local_host`); None for ``https://`` and local ``http://`` URLs (and for what
    is not an http(s) URL at all: that is another refusal)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or is_local_host(parts.hostname):
        return None
    return (
        f"{url!r} is plain http:// to another machine: every heartbeat would carry the member's bearer "
        "token in clear. Use https://, or set RSC_ALLOW_INSECURE_COORDINATOR_URL=true if the network "
        "between them is yours alone (a container network, a private link)"
    )


class CoordinatorClient(Protocol):
    def heartbeat(
        self, stream_prefix: str, consumer_group: str, request: HeartbeatRequest
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------- HTTP


class HttpCoordinatorClient:
    """``POST {base_url}/api/v1/groups/{P}/{G}/heartbeat`` with ``Authorization: Bearer <token>``.

    One persistent connection, used under a lock (a member heartbeats one request at a time, so the
    lock is uncontended; give each member its own client). A request on a reused connection that the
    server had already closed is retried once on a fresh one: a heartbeat may be repeated safely (a
    repeated join carries the same ``join_seq``, so the coordinator answers it as a retry; renewals and
    leaves are idempotent).

    A plain ``http://`` URL to another machine is refused (ValueError) unless ``allow_insecure``: the
    token would travel in clear (:func:`insecure_url_problem`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 5.0,
        user_agent: str = "redis-stream-coordinator-member",
        allow_insecure: bool = False,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"coordinator URL must be http(s)://host[:port][/prefix]; got {base_url!r}")
        problem = insecure_url_problem(base_url)
        if problem is not None and not allow_insecure:
            raise ValueError(problem)
        self.base_url = base_url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path_prefix = parts.path.rstrip("/")
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, application/problem+json",
            "User-Agent": user_agent,
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None

    def heartbeat(self, stream_prefix: str, consumer_group: str, request: HeartbeatRequest) -> dict[str, Any]:
        p, g = (urllib.parse.quote(x, safe="") for x in (stream_prefix, consumer_group))
        return self.post(f"/api/v1/groups/{p}/{g}/heartbeat", request.to_json())

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        data = json.dumps(body, separators=(",", ":")).encode()
        with self._lock:
            for attempt in (1, 2):
                reused = self._conn is not None
                conn = self._connection()
                try:
                    conn.request("POST", self._path_prefix + path, body=data, headers=self._headers)
                    response = conn.getresponse()
                    payload = response.read()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                    self._close()
                    if reused and attempt == 1:
                        continue  # the server closed an idle keep-alive connection: try a fresh one
                    raise CoordinatorUnreachable(f"{self.base_url}: {type(e).__name__}: {e}") from e
                except (OSError, http.client.HTTPException) as e:
                    self._close()
                    raise CoordinatorUnreachable(f"{self.base_url}: {type(e).__name__}: {e}") from e
                if response.will_close:
                    self._close()
                return _parse(response.status, response.getheader("Content-Type", ""), payload, response)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self.timeout_s)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _parse(
    status: int, content_type: str, payload: bytes, response: http.client.HTTPResponse
) -> dict[str, Any]:
    try:
        body = json.loads(payload) if payload else None
    except ValueError:
        body = None
    if 200 <= status < 300:
        if not isinstance(body, dict):
            raise CoordinatorRequestError(
                INVALID_RESPONSE, f"HTTP {status} without a JSON object body", status=status, retriable=True
            )
        return body
    retry_after_ms = _retry_after_ms(response.getheader("Retry-After"))
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        # details.retry_after_ms is exact (the header is in whole seconds, rounded up): prefer it.
        exact_ms = _details_retry_after_ms(body)
        retry_after_ms = exact_ms if exact_ms is not None else retry_after_ms
        retriable = body.get("retriable")
        raise CoordinatorRequestError(
            body["code"],
            str(body.get("detail") or body.get("title") or body["code"]),
            status=status,
            retriable=retriable if isinstance(retriable, bool) else None,
            retry_after_ms=retry_after_ms,
            problem=body,
        )
    # Not a problem document: a proxy or load balancer answered. 5xx / 429 are transient.
    if status >= 500 or status == 429:
        raise CoordinatorUnreachable(
            f"HTTP {status} ({content_type or 'no content type'}) from the coordinator"
        )
    raise CoordinatorRequestError(
        f"HTTP_{status}", f"HTTP {status} without a problem document", status=status
    )


def _details_retry_after_ms(problem: Mapping[str, Any]) -> int | None:
    details = problem.get("details")
    value = details.get("retry_after_ms") if isinstance(details, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _retry_after_ms(value: str | None) -> int | None:
    try:
        return max(0, int(float(value) * 1000)) if value else None
    except ValueError:
        return None  # an HTTP date: ignore, our own backoff applies


# ---------------------------------------------------------------------------------------------- in-process


class StoreCoordinatorClient:
    """Heartbeats straight into a :class:`coordinator.store.MetadataStore` (no HTTP, no Django)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def heartbeat(self, stream_prefix: str, consumer_group: str, request: HeartbeatRequest) -> dict[str, Any]:
        from coordinator.protocol.errors import CoordinatorError
        from coordinator.protocol.group import Heartbeat
        from coordinator.protocol.model import ClientInfo

        client = request.client
        hb = Heartbeat(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            owned=None if request.owned_shards is None else frozenset(request.owned_shards),
            capacity=request.capacity,
            client=None if client is None else ClientInfo(**dict(client)),
            join_seq=request.join_seq,
            instance_id=request.instance_id,
        )
        try:
            answer = self.store.heartbeat(stream_prefix, consumer_group, hb)
            parked = request.parked_keys
            if parked is not None and request.member_epoch >= 0:  # as the API view does
                self.store.parked.record(stream_prefix, consumer_group, request.member_id, parked)
            return answer  # type: ignore[no-any-return]
        except CoordinatorError as e:
            wait_ms = e.details.get("retry_after_ms")
            raise CoordinatorRequestError(
                e.code.value,
                e.message,
                retriable=e.retriable,
                retry_after_ms=wait_ms if isinstance(wait_ms, int) else None,
                problem={"code": e.code.value, **e.details, "details": dict(e.details)},
            ) from e

    def close(self) -> None:
        pass
