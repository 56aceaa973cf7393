"""Prometheus metrics of the coordinator, served at ``/metrics`` (docs/operations.md, "Metrics").

Theory of operation
-------------------
Three kinds of figures, each collected where it is true:

1. **State, read at scrape time** (:class:`StateCollector`): for every stream prefix, the metadata
   (epochs, members by state, shards by assignment, migration progress), per shard the group's lag
   (counted from its position, ``backlog_count.lua``) and pending count, and per group the autoscaling
   sums (coordinator/store/scaling.py, docs/autoscaling.md). Nothing is cached between scrapes, so every
   API process answers the same figures and none can drift. Cost: one metadata load, and a few pipelined
   round trips (``XINFO GROUPS``, the count scripts) per group, per scrape (scrape every 15-60 s).
2. **Events counted in Redis** (:func:`count`): tick runs, tick duration, expired members, CAS
   conflicts. They happen in whichever process runs the tick (a Celery worker, ``run_tick``) or the
   command (any API worker); a ``HINCRBYFLOAT`` on ``rsc:metrics`` makes them one cluster-wide counter
   whatever process scrapes, at one write per tick or conflict (never per heartbeat).
3. **Per-request figures in the API process** (:data:`HEARTBEAT_SECONDS`): heartbeat rate and latency
   by path (``fast``: the one-script path; ``full``: load / decide / commit; ``refused``: an error).
   With several worker processes each has its own registry: set ``PROMETHEUS_MULTIPROC_DIR`` to an
   empty directory shared by the workers (``config/serve.py`` empties it at start), and ``/metrics``
   aggregates them (prometheus-client's multiprocess mode). Without it, a scrape sees the worker that
   answered.

``/metrics`` needs a bearer token: an admin credential, or one of ``RSC_METRICS_TOKENS`` (scrape-only
tokens, which can do nothing else).
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator import conf
from coordinator.credentials import Role, match_token
from coordinator.models import token_digest
from coordinator.protocol.describe import ShardAssignment
from coordinator.protocol.errors import CoordinatorError
from coordinator.store.instruments import HEARTBEAT_SECONDS, METRICS_FIELDS
from rsc_redis.keys import METRICS_KEY

log = logging.getLogger(__name__)



class StateCollector(Collector):
    """Gauges of every group, read from the store at scrape time."""

    def collect(self) -> Iterator[Any]:
        from coordinator.store import get_store

        store = get_store()
        up = GaugeMetricFamily("rsc_metadata_up", "1 if the metadata store answered this scrape.")
        try:
            prefixes = store.stream_prefixes()
        except CoordinatorError as e:
            log.warning("metrics: the metadata store is unavailable: %s", e)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        families = _Families()
        for prefix in prefixes:
            try:
                families.add_prefix(store, prefix)
            except CoordinatorError as e:  # one unreadable prefix does not hide the others
                log.warning("metrics: stream prefix %r skipped: %s", prefix, e)
                families.failed.add_metric([prefix], 1)
        yield from families.all()
        yield from _counted(store.client)


class _Families:
    def __init__(self) -> None:
        group, shard = ["stream_prefix", "consumer_group"], ["stream_prefix", "consumer_group", "shard"]
        gauge = GaugeMetricFamily
        self.group_epoch = gauge("rsc_group_epoch", "The group epoch.", labels=group)
        self.assignment_epoch = gauge("rsc_assignment_epoch", "The assignment epoch.", labels=group)
        self.members = gauge(
            "rsc_members", "Members by state (ended ones still remembered too).", labels=[*group, "state"]
        )
        self.shards = gauge(
            "rsc_shards",
            "Shards of the group by assignment: READABLE, HELD_BACK, REVOKING, UNASSIGNED, DRAINED.",
            labels=[*group, "assignment"],
        )
        self.to_drain = gauge(
            "rsc_migration_shards_to_drain",
            "Old-version shards this group has yet to drain (0: none).",
            labels=group,
        )
        self.lag = gauge("rsc_shard_lag", "Entries not yet delivered to the group.", labels=shard)
        self.pending = gauge("rsc_shard_pending", "Entries delivered and not acknowledged.", labels=shard)
        self.oldest = gauge(
            "rsc_shard_oldest_pending_age_seconds", "Age of the oldest pending entry (0: none).", labels=shard
        )
        self.active_version = gauge(
            "rsc_routing_version", "The active routing version.", labels=["stream_prefix"]
        )
        # Autoscaling (coordinator/store/scaling.py, docs/autoscaling.md): one number per group.
        self.backlog = gauge(
            "rsc_group_backlog",
            "Entries not yet delivered plus pending, over every shard the group reads.",
            labels=group,
        )
        self.undelivered = gauge(
            "rsc_group_undelivered", "Entries not yet delivered to the group, over its shards.", labels=group
        )
        self.group_shards = gauge(
            "rsc_group_shards", "Shards the group reads (ACTIVE and undrained DRAINING ones).", labels=group
        )
        self.shards_with_backlog = gauge(
            "rsc_group_shards_with_backlog", "Shards with entries undelivered or pending.", labels=group
        )
        self.oldest_undelivered = gauge(
            "rsc_group_oldest_undelivered_age_seconds",
            "Age of the oldest entry not yet delivered to the group (0: none).",
            labels=group,
        )
        self.failed = gauge(
            "rsc_metrics_prefix_failed", "1: this prefix could not be read.", labels=["stream_prefix"]
        )

    def add_prefix(self, store: Any, prefix: str) -> None:
        snapshot = store.snapshot(prefix)
        if snapshot is None:
            return
        topology = snapshot.state.topology
        self.active_version.add_metric([prefix], topology.active_version.version)
        for name, group in snapshot.state.groups.items():
            labels = [prefix, name]
            self.group_epoch.add_metric(labels, group.group_epoch)
            self.assignment_epoch.add_metric(labels, group.assignment_epoch)
            by_state: dict[str, int] = {}
            for member in group.members.values():
                by_state[member.state.value] = by_state.get(member.state.value, 0) + 1
            for member_state, n in sorted(by_state.items()):
                self.members.add_metric([*labels, member_state], n)
            by_assignment = dict.fromkeys((a.value for a in ShardAssignment), 0)
            for row in snapshot.backlog[name]:
                by_assignment[row["assignment"]] += 1
                shard_labels = [*labels, row["shard"]]
                self.lag.add_metric(shard_labels, row["lag"] or 0)
                self.pending.add_metric(shard_labels, row["pending"])
                self.oldest.add_metric(shard_labels, (row["oldest_pending_age_ms"] or 0) / 1000)
            for assignment, n in by_assignment.items():
                self.shards.add_metric([*labels, assignment], n)
            self.to_drain.add_metric(labels, len(snapshot.undrained[name]))
        scaling = store.scaling.of_state(snapshot.state, snapshot.now_ms, snapshot.state.groups)
        for name, figures in scaling.items():
            labels = [prefix, name]
            self.backlog.add_metric(labels, figures.backlog)
            self.undelivered.add_metric(labels, figures.undelivered)
            self.group_shards.add_metric(labels, figures.shards)
            self.shards_with_backlog.add_metric(labels, figures.shards_with_backlog)
            self.oldest_undelivered.add_metric(labels, figures.oldest_undelivered_age_ms / 1000)

    def all(self) -> list[Any]:
        return [
            self.active_version,
            self.group_epoch,
            self.assignment_epoch,
            self.members,
            self.shards,
            self.to_drain,
            self.lag,
            self.pending,
            self.oldest,
            self.backlog,
            self.undelivered,
            self.group_shards,
            self.shards_with_backlog,
            self.oldest_undelivered,
            self.failed,
        ]


def _counted(client: Any) -> Iterator[Any]:
    try:
        raw = client.hgetall(METRICS_KEY)
    except Exception as e:
        log.warning("metrics: counters unreadable: %s", e)
        return
    values = {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in raw.items()}
    for field, (name, text) in METRICS_FIELDS.items():
        family = CounterMetricFamily(name, text)
        family.add_metric([], values.get(field, 0.0))
        yield family


def registry() -> CollectorRegistry:
    """This request's registry: the state collector plus this process's (or, in multiprocess mode,
    every worker's) per-request metrics."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StateCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(reg)
    else:
        reg.register(HEARTBEAT_SECONDS)
    return reg


MISSING_TOKEN = "metrics need 'Authorization: Bearer <token>': an RSC_METRICS_TOKENS token or an admin one\n"
WRONG_TOKEN = (
    "this bearer token is neither an RSC_METRICS_TOKENS token nor an API credential: check the scrape "
    "configuration's token\n"
)
MEMBER_TOKEN = "a member token cannot read metrics: use an RSC_METRICS_TOKENS token or an admin one\n"


@dataclass(frozen=True, slots=True)
class ScrapeRefusal:
    """Why a request may not read the metrics (or the autoscaling figures, coordinator/api/scaling.py)."""

    status: int  # 401 no token / a token nobody issued, 403 a member's, 503 cannot check now
    text: str
    authenticate: str = ""  # the WWW-Authenticate header, if any


def scrape_refusal(request: HttpRequest) -> ScrapeRefusal | None:
    """None when the request may read the metrics, else why not: no token (401), a token nobody issued
    (401, ``error="invalid_token"``), a member credential's (403, ``insufficient_scope``, RFC 6750
    section 3.1), or the credentials cannot be read now (503)."""
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return ScrapeRefusal(401, MISSING_TOKEN, 'Bearer realm="metrics"')
    presented = token_digest(token)
    scrape = [t for t in conf.settings().RSC_METRICS_TOKENS or () if t]
    if any(hmac.compare_digest(token_digest(t), presented) for t in scrape):
        return None
    try:
        principal = match_token(token)
    except CoordinatorError as e:
        return ScrapeRefusal(503, f"cannot check the token now: {e.message}\n")
    if principal is None:
        return ScrapeRefusal(401, WRONG_TOKEN, 'Bearer realm="metrics", error="invalid_token"')
    if principal.role is not Role.ADMIN:
        return ScrapeRefusal(403, MEMBER_TOKEN, 'Bearer realm="metrics", error="insufficient_scope"')
    return None


def _refusal(request: HttpRequest) -> HttpResponse | None:
    refusal = scrape_refusal(request)
    return None if refusal is None else _text(refusal.text, refusal.status, refusal.authenticate)


def _text(body: str, status: int, authenticate: str = "") -> HttpResponse:
    response = HttpResponse(body, status=status, content_type="text/plain; charset=utf-8")
    if authenticate:
        response["WWW-Authenticate"] = authenticate
    return response


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus text format, for an admin credential or an RSC_METRICS_TOKENS token."""
    if (refusal := _refusal(request)) is not None:
        return refusal
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
