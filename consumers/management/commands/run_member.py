"""``manage.py run_member [LISTENER ...]``: run the discovered listeners as one long-lived process.

Discovery imports the ``listeners`` module of every installed app (like the admin's autodiscover); with
no names, every declared listener runs. Each listener runs ``concurrency`` members (overridden per
listener by ``RSC_LISTENER_CONCURRENCY``), each with ``RSC_RUNTIME``'s max concurrency as capacity.

Settings: ``RSC_COORDINATOR_URL`` (the coordinator's HTTP API, or ``inprocess`` to call the metadata store
directly, for deployments next to it; plain ``http://`` only to this machine unless
``RSC_ALLOW_INSECURE_COORDINATOR_URL``), ``RSC_MEMBER_TOKEN``, ``REDIS_URL`` (the stream data plane),
``RSC_RUNTIME``, ``RSC_LISTENER_CONCURRENCY``, ``RSC_SHUTDOWN_TIMEOUT_S``, ``RSC_INSTANCE_ID``.

``--instance-id`` (or ``RSC_INSTANCE_ID``; e.g. the pod name): static membership. Member ``i`` of
listener ``L`` joins with instance id ``<instance id>.<L>.<i>``; a clean stop leaves for now (the shards
wait one lease TTL for the next process with that instance id) unless ``--leave-group``
(docs/consumers.md, "Static membership").

SIGTERM / SIGINT: every member stops reading, finishes its in-flight entries, acks them and leaves its
group, bounded by ``--shutdown-timeout``; a second signal exits at once. Between batches each worker
closes stale database connections (``django.db.close_old_connections``), as Django does per request;
a thread that never opened one skips the search (consumers/dbconnections.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from consumers import conf, logdefaults
from consumers import metrics as consumers_metrics
from consumers.client import CoordinatorClient, HttpCoordinatorClient, StoreCoordinatorClient
from consumers.conf import IN_PROCESS
from consumers.dbconnections import close_old_connections
from consumers.errors import ConsumersError
from consumers.listener import Listener, apply_concurrency_overrides, autodiscover_listeners
from consumers.member.ids import make_instance_id
from consumers.process import ConsumerProcess, dataplane_factory_for, redis_client_for, require_functions
from consumers.runtime import Runtime, load_runtime

log = logging.getLogger("consumers.process")


class Command(BaseCommand):
    help = "Run the discovered @listener functions as coordinator members until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("listeners", nargs="*", metavar="LISTENER", help="listener names (default: all)")
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=None,
            help="seconds to finish in-flight work on SIGTERM (default: RSC_SHUTDOWN_TIMEOUT_S, 30)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="serve this process's Prometheus metrics on this port (default: RSC_MEMBER_METRICS_PORT; "
            "unset or 0: none). docs/metrics.md",
        )
        parser.add_argument(
            "--metrics-addr",
            default=None,
            help="the address the metrics listen on (default: RSC_MEMBER_METRICS_ADDR, 127.0.0.1: this "
            "machine only; 0.0.0.0 for every interface, then set RSC_MEMBER_METRICS_TOKEN)",
        )
        parser.add_argument(
            "--instance-id",
            default=None,
            help="static membership: the name of the place this process runs, e.g. the pod name "
            "(default: RSC_INSTANCE_ID; empty: dynamic members). Member i of listener L joins with instance "
            "id <INSTANCE_ID>.<L>.<i>; a clean stop leaves for now, and the next process with the same "
            "instance id gets the same shards back within one lease TTL. docs/consumers.md",
        )
        parser.add_argument(
            "--leave-group",
            action="store_true",
            help="with an instance id: on stop, leave the group for good (the shards move at once), as for "
            "a scale-in, instead of leaving for now",
        )
        parser.add_argument("--list", action="store_true", help="print the discovered listeners and exit")

    def handle(
        self, *args: Any, listeners: list[str], shutdown_timeout: float | None, **options: Any
    ) -> None:
        # A long-running worker, like `celery worker`: without a root handler of the host's LOGGING, its
        # own and the listeners' INFO lines go to stderr (consumers/logdefaults.py; docs/plugin.md).
        logdefaults.install("")
        current = conf.settings()
        try:
            selected = autodiscover_listeners().select(listeners)
            runtime = load_runtime(current.RSC_RUNTIME)
            overrides = dict(current.RSC_LISTENER_CONCURRENCY or {})
            selected = apply_concurrency_overrides(selected, overrides)
        except ConsumersError as e:
            raise CommandError(str(e)) from e
        if options["list"]:
            for item in selected:
                self.stdout.write(
                    f"{item.name}: {item.stream_prefix}/{item.consumer_group} x{item.concurrency}"
                )
            return
        if not selected:
            raise CommandError("no listeners: declare them with @listener in an installed app's listeners.py")
        unknown = sorted(set(overrides) - {item.name for item in selected})
        if unknown and not listeners:
            self.stderr.write(f"RSC_LISTENER_CONCURRENCY names no declared listener: {', '.join(unknown)}")
        timeout_s = float(current.RSC_SHUTDOWN_TIMEOUT_S) if shutdown_timeout is None else shutdown_timeout
        if timeout_s < 0:
            raise CommandError("--shutdown-timeout must not be negative")
        metrics_port = options.get("metrics_port")
        if metrics_port is None:
            metrics_port = int(current.RSC_MEMBER_METRICS_PORT or 0)
        if not 0 <= metrics_port <= 65535:
            raise CommandError("--metrics-port must be between 0 and 65535")
        if metrics_port:
            addr = options.get("metrics_addr") or str(current.RSC_MEMBER_METRICS_ADDR or "127.0.0.1")
            try:
                consumers_metrics.serve(metrics_port, addr, str(current.RSC_MEMBER_METRICS_TOKEN or ""))
            except OSError as e:
                raise CommandError(f"cannot serve metrics on {addr} port {metrics_port}: {e}") from e
        instance = options.get("instance_id")
        if instance is None:
            instance = str(current.RSC_INSTANCE_ID or "")
        if instance:
            try:
                for item in selected:
                    make_instance_id(instance, item.name, item.concurrency - 1)
            except ValueError as e:
                raise CommandError(f"--instance-id / RSC_INSTANCE_ID: {e}") from e
        coordinator = _coordinator_factory(current, runtime)  # in-process: its store loads the library first
        redis_client = redis_client_for(_redis_url())
        try:
            require_functions(redis_client)
        except ConsumersError as e:
            raise CommandError(e.message) from e
        process = ConsumerProcess(
            selected,
            coordinator=coordinator,
            dataplane_factory=dataplane_factory_for(redis_client),
            runtime=runtime,
            batch_hooks=(close_old_connections,),
            instance=instance or None,
            leave_group=bool(options.get("leave_group")),
        )
        _describe(selected, runtime)
        close_old_connections()
        if not process.serve(timeout_s):
            sys.exit(1)


def _redis_url() -> str:
    url = getattr(settings, "REDIS_URL", None)
    if not url:
        raise CommandError("REDIS_URL is not set: the members need the stream data plane's Redis")
    return str(url)


def _in_process_store() -> Any:
    """The coordinator app's metadata store, looked up by its app label in Django's registry (the
    coordinator's ``CoordinatorConfig.metadata_store``): this package never imports the store."""
    try:
        coordinator_app = apps.get_app_config("coordinator")
    except LookupError as e:
        raise CommandError(
            f'RSC_COORDINATOR_URL="{IN_PROCESS}" hosts the coordinator in this process: it needs the '
            '"coordinator" app in INSTALLED_APPS'
        ) from e
    return coordinator_app.metadata_store()  # type: ignore[attr-defined]


def _coordinator_factory(current: Any, runtime: Runtime) -> Callable[[], CoordinatorClient]:
    """``current``: the member settings (consumers.conf.settings()); an empty URL is the default's."""
    url = str(current.RSC_COORDINATOR_URL or conf.default("RSC_COORDINATOR_URL"))
    if url == IN_PROCESS:
        store = _in_process_store()
        return lambda: StoreCoordinatorClient(store)
    token = str(current.RSC_MEMBER_TOKEN or "")
    if not token:
        log.warning("RSC_MEMBER_TOKEN is not set: the coordinator will refuse the heartbeats (401)")
    insecure = current.RSC_ALLOW_INSECURE_COORDINATOR_URL is True
    try:
        HttpCoordinatorClient(url, token, allow_insecure=insecure)
    except ValueError as e:
        raise CommandError(f"RSC_COORDINATOR_URL: {e}") from e
    return lambda: HttpCoordinatorClient(
        url, token, timeout_s=runtime.heartbeat_timeout_s, allow_insecure=insecure
    )


def _describe(selected: list[Listener], runtime: Runtime) -> None:
    for item in selected:
        policy = item.error_policy
        on_error = (
            f"redeliver (max_deliveries {policy.max_deliveries}, backoff {policy.redeliver_backoff_ms} ms, "
            f"dead_letter {policy.dead_letter})"
            if policy.redeliver
            else "keep"
        )
        ordering = item.ordering.value
        if item.ordering.value != "shard":
            ordering += f" (max_in_flight {item.max_in_flight})"
        log.info(
            "listener %s: %s/%s, %d member(s), runtime max concurrency %d, on_error %s, ordering %s",
            item.name,
            item.stream_prefix,
            item.consumer_group,
            item.concurrency,
            runtime.max_concurrency,
            on_error,
            ordering,
        )
