"""manage.py run_tick [--interval-ms N] [--once]: the coordinator tick without Celery beat.

Runs coordinator.service.run_tick, the function behind the Celery task, every N ms (default
RSC_TICK_INTERVAL_MS) until SIGTERM or SIGINT; the tick in progress finishes first. While Redis is
unreachable it logs a warning and backs off. Running it next to Celery beat, or twice, is harmless (the
tick is idempotent) but pointless. ``--once`` runs a single tick and exits non-zero if it failed, for
cron-style schedulers.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import conf
from coordinator.service import TickLoop, is_retriable, run_tick, stopped_by_signals

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the coordinator tick (lease expiry, clean-up, drain detection) in a loop, without Celery."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval-ms",
            type=int,
            default=None,
            help="milliseconds between ticks (default: RSC_TICK_INTERVAL_MS)",
        )
        parser.add_argument("--once", action="store_true", help="run one tick and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        interval_ms = options["interval_ms"]
        if interval_ms is None:
            interval_ms = conf.settings().RSC_TICK_INTERVAL_MS
        lease_ms = conf.settings().RSC_MEMBER_LEASE_TTL_MS
        if not 0 < interval_ms < lease_ms:
            # The same rule as rsc.E002: a tick as coarse as the lease keeps dead members' shards.
            raise CommandError(
                f"--interval-ms must be positive and below RSC_MEMBER_LEASE_TTL_MS ({lease_ms}), "
                f"got {interval_ms}"
            )
        if options["once"]:
            self._once()
            return
        loop = TickLoop(interval_ms)
        with stopped_by_signals(loop) as received:
            log.info("run_tick: ticking every %d ms (SIGTERM or Ctrl-C stops)", interval_ms)
            try:
                loop.run()
            except Exception as error:
                log.exception("run_tick: stopping on an unexpected error")
                raise CommandError(f"tick failed: {error!r}") from error
        log.info("run_tick: stopped (%s) after %d ticks", ", ".join(received) or "stop()", loop.ticks)

    def _once(self) -> None:
        try:
            reports = run_tick()
        except Exception as error:
            if is_retriable(error):
                raise CommandError(f"tick failed, retry later: {error}") from error
            raise
        changes = sum(len(r.expired) + len(r.collected) + len(r.drained) for r in reports)
        self.stdout.write(f"tick done: {len(reports)} stream prefixes, {changes} member/shard changes")

