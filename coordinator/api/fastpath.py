"""The steady heartbeat before DRF: one script call, the stored response bytes back unchanged.

Theory of operation
-------------------
Most heartbeats come from a STABLE member that changes nothing but its lease: the store answers them in
one script (``fast_heartbeat.lua``) with a response it already holds as JSON. Through DRF such a
request paid for content negotiation, the serializer, decoding that JSON and rendering it again,
several times the cost of the Redis call. :func:`heartbeat` (the URL's view) takes a request that is
*plainly* a steady heartbeat and answers it here; every other request goes, untouched, to the DRF view
(``views.HeartbeatView``), which decides and words everything as before: joins, leaves, ``client``
info, anything malformed or unusual, a missing, unknown or out-of-scope credential, a member that is
not steady, Redis trouble.

"Plainly" means: ``POST`` with ``Content-Type: application/json`` (UTF-8) and a Content-Length within
``RSC_API_MAX_BODY_BYTES``; ``Authorization: Bearer <token>`` that matches a credential (the same cached
match as DRF's authentication), inside its scope; a body that is a JSON object (strictly parsed: no
duplicate keys, no NaN) with only ``member_id``, ``member_epoch`` > 0, ``owned_shards`` and ``capacity``,
each of the type and in the range the serializer accepts; valid path identifiers. The protocol core's
own ``Heartbeat.validated()`` runs as on the DRF path. Then the script: the heartbeat floor, then the
steady check (epoch, capacity, owned shards, the credential's identity as the member's owner, the
lease by Redis's clock). A steady member gets the stored bytes with the headers DRF would send; a
floor refusal gets the problem DRF would send; "not steady" marks the request (``FAST_TRIED`` in its
META) so the DRF view skips the script it already ran (the floor is counted once) and takes the full path.

tests/api/test_fastpath.py sends a corpus of requests through both doors and compares status, headers
and body byte for byte.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.http import parse_header_parameters
from django.views.decorators.csrf import csrf_exempt

from coordinator.credentials import match_token, match_token_cached
from coordinator.protocol.errors import CoordinatorError, HeartbeatTooFrequent
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import MAX_CAPACITY, Shard, validate_identifier
from coordinator.store import CredentialsChanged, MetadataStore, get_store
from coordinator.store.instruments import HEARTBEAT_SECONDS

from . import errors
from .auth import check_scope
from .parsers import JSON_MEDIA_TYPE, max_body_bytes, strict_loads
from .serializers import MAX_MEMBER_EPOCH, MAX_OWNED_SHARDS
from .throttling import heartbeat_floor
from .views import FAST_TRIED, HeartbeatView

log = logging.getLogger(__name__)

_FIELDS = frozenset({"member_id", "member_epoch", "owned_shards", "capacity"})
# What DRF adds to every response of HeartbeatView (APIView.finalize_response and ApiView's own).
DRF_HEADERS = {"Allow": "POST", "Cache-Control": "no-store"}
_FAST_SECONDS = HEARTBEAT_SECONDS.labels("fast")
_REFUSED_SECONDS = HEARTBEAT_SECONDS.labels("refused")

_drf_view = HeartbeatView.as_view()


@csrf_exempt  # as DRF's views: only token requests are answered here, and tokens are not cookies
def heartbeat(request: HttpRequest, stream_prefix: str, consumer_group: str) -> Any:
    if request.META.get(FAST_TRIED):  # the heartbeat door (door.py) ran the script
        return _drf_view(request, stream_prefix=stream_prefix, consumer_group=consumer_group)
    answer = steady_body(request, stream_prefix, consumer_group)
    if answer is None:
        return _drf_view(request, stream_prefix=stream_prefix, consumer_group=consumer_group)
    return stored_response(answer) if isinstance(answer, bytes) else answer


def steady_body(
    request: HttpRequest,
    stream_prefix: str,
    consumer_group: str,
    *,
    cached_only: bool = False,
    token: str | None = None,
) -> bytes | HttpResponse | None:
    """A plainly steady heartbeat's answer: the stored response's bytes (the body of a 200
    ``application/json`` response with :data:`DRF_HEADERS`, not yet an HttpResponse) or the floor's
    refusal; None when the DRF view must decide, and then ``FAST_TRIED`` is set in ``request.META`` if the
    script ran. ``cached_only``: answer only from this process's cached credentials (never a database
    read). ``token``: what :func:`plain_token` returned for this request, when the caller has it."""
    try:
        store = get_store()
    except CoordinatorError:  # no REDIS_URL: the DRF view words it
        return None
    steady = _plain_steady_heartbeat(request, store, stream_prefix, consumer_group, cached_only, token)
    if steady is None:
        return None
    hb, generation = steady
    started = time.perf_counter()
    try:
        raw = store.fast_heartbeat(
            stream_prefix, consumer_group, hb, heartbeat_floor(), credentials_generation=generation
        )
    except HeartbeatTooFrequent as refused:
        _REFUSED_SECONDS.observe(time.perf_counter() - started)
        return finalized(errors.exception_handler(refused, {"request": request}))
    except (CoordinatorError, CredentialsChanged):
        return None  # nothing was written: DRF authenticates afresh and words any error
    if raw is None:
        request.META[FAST_TRIED] = True
        return None
    _FAST_SECONDS.observe(time.perf_counter() - started)
    return raw


# The URL's view is this function; drf-spectacular (and anything else that inspects views) finds the DRF
# view behind it, as on the function DRF's as_view() returns.
heartbeat.cls = HeartbeatView  # type: ignore[attr-defined]
heartbeat.initkwargs = {}  # type: ignore[attr-defined]


def stored_response(raw: bytes) -> HttpResponse:
    """A steady member's answer, the stored response's bytes, as the DRF view would send it."""
    return finalized(HttpResponse(raw, content_type=JSON_MEDIA_TYPE))


def finalized(response: HttpResponse) -> HttpResponse:
    """The response with the headers DRF adds to every answer of HeartbeatView."""
    for name, value in DRF_HEADERS.items():
        response[name] = value
    return response


def _plain_steady_heartbeat(
    request: HttpRequest,
    store: MetadataStore,
    stream_prefix: str,
    consumer_group: str,
    cached_only: bool,
    token: str | None,
) -> tuple[Heartbeat, bytes | None] | None:
    """The heartbeat (with its sender's identity) if the request is plainly a steady heartbeat, and the
    credentials generation to check in the script (None: authenticated afresh), else None."""
    if token is None:
        token = plain_token(request)
    if token is None:
        return None
    try:
        validate_identifier(stream_prefix, "stream_prefix")
        validate_identifier(consumer_group, "consumer_group")
        body = strict_loads(request.body)
        hb = _heartbeat_of(body)
        if hb is None:
            return None
        # From the cache, checked against the shared generation inside the script (no GET of it here),
        # where one Redis holds both; else as DRF authenticates.
        cached = match_token_cached(token) if store.checks_credentials_in_script else None
        if cached is None:
            if cached_only:
                return None
            principal, generation = match_token(token), None
        else:
            principal, generation = cached
        if principal is None:
            return None
        check_scope(principal, stream_prefix, consumer_group, hb.member_id)
        return Heartbeat(
            member_id=hb.member_id,
            member_epoch=hb.member_epoch,
            owned=hb.owned,
            capacity=hb.capacity,
            owner=principal.identity,
        ).validated(), generation
    except (CoordinatorError, ValueError, RecursionError):
        return None  # the DRF view says what is wrong


def plain_token(request: HttpRequest) -> str | None:
    """The bearer token if the request's method and headers are plainly a heartbeat's (its body not yet
    read: a JSON body of an acceptable length, one bearer token), else None."""
    if request.method != "POST" or request.META.get("HTTP_TRANSFER_ENCODING"):
        return None
    media_type, params = parse_header_parameters(request.META.get("CONTENT_TYPE", ""))
    if media_type != JSON_MEDIA_TYPE or params.get("charset", "utf-8").lower() not in ("utf-8", "utf8"):
        return None
    try:
        length = int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    if not 0 < length <= max_body_bytes():
        return None
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def _heartbeat_of(body: Any) -> Heartbeat | None:
    if not isinstance(body, dict) or not body.keys() <= _FIELDS:
        return None
    member_id, epoch = body.get("member_id"), body.get("member_epoch")
    capacity, owned = body.get("capacity"), body.get("owned_shards")
    if not isinstance(member_id, str) or not _is_int(epoch) or not 0 < epoch <= MAX_MEMBER_EPOCH:
        return None
    if capacity is not None and not (_is_int(capacity) and 1 <= capacity <= MAX_CAPACITY):
        return None
    shards: frozenset[Shard] | None = None
    if owned is not None:
        if not isinstance(owned, list) or len(owned) > MAX_OWNED_SHARDS:
            return None
        # Shard.parse refuses anything but a string (CoordinatorError); a list or an object inside is
        # not hashable for the cache (TypeError): DRF words either.
        try:
            shards = _parsed(tuple(owned))
        except TypeError:
            return None
    return Heartbeat(member_id=member_id, member_epoch=epoch, owned=shards, capacity=capacity)


# A steady member sends the same owned list on every heartbeat: parsing it once per process, not per
# heartbeat, saves about 1 µs a shard (and gives the store the same frozenset, whose hash is cached, so
# its own per-owned-set cache hits without hashing the shards again). Bounded: at most this many lists,
# each of at most MAX_OWNED_SHARDS shards (a failed parse raises and is not kept).
@functools.lru_cache(maxsize=512)
def _parsed(owned: tuple[str, ...]) -> frozenset[Shard]:
    return frozenset(Shard.parse(s) for s in owned)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
