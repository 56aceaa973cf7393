"""manage.py run_retention [--interval-ms N] [--once]: the retention pass without Celery beat.

Runs coordinator.service.run_retention, the function behind the Celery task coordinator.tasks.retention,
every N ms (default RSC_RETENTION_INTERVAL_MS, at least 1000) until SIGTERM or SIGINT; the pass in
progress finishes first. Each pass trims at most RSC_RETENTION_MAX_STREAMS streams to what every
consumer group has finished with (plus the prefixes' opt-in caps), deletes retired versions' streams
once fully acked and past their grace period, and prunes old audit rows. While Redis is unreachable it
logs a warning and backs off. Running it next to the beat task, or twice, is harmless (every trim decides
on what its stream holds at that moment). ``--once`` runs a single pass and exits non-zero if it failed.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import conf
from coordinator.service import TickLoop, is_retriable, run_retention, stopped_by_signals

log = logging.getLogger(__name__)

MIN_INTERVAL_MS = 1000  # the same floor as the system check rsc.E005 for RSC_RETENTION_INTERVAL_MS


class Command(BaseCommand):
    help = "Run the retention pass (trim streams, delete retired streams, prune audit rows) in a loop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval-ms",
            type=int,
            default=None,
            help="milliseconds between passes (default: RSC_RETENTION_INTERVAL_MS; at least 1000)",
        )
        parser.add_argument("--once", action="store_true", help="run one pass and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        interval_ms = options["interval_ms"]
        if interval_ms is None:
            interval_ms = conf.settings().RSC_RETENTION_INTERVAL_MS
        if interval_ms < MIN_INTERVAL_MS:
            raise CommandError(f"--interval-ms must be at least {MIN_INTERVAL_MS}, got {interval_ms}")
        if options["once"]:
            self._once()
            return
        loop = TickLoop(interval_ms, tick=run_retention, name="retention pass")
        with stopped_by_signals(loop) as received:
            log.info("run_retention: a pass every %d ms (SIGTERM or Ctrl-C stops)", interval_ms)
            try:
                loop.run()
            except Exception as error:
                log.exception("run_retention: stopping on an unexpected error")
                raise CommandError(f"retention pass failed: {error!r}") from error
        log.info("run_retention: stopped (%s) after %d passes", ", ".join(received) or "stop()", loop.ticks)

    def _once(self) -> None:
        try:
            reports = run_retention()
        except Exception as error:
            if is_retriable(error):
                raise CommandError(f"retention pass failed, retry later: {error}") from error
            raise
        trimmed = sum(sum(r.trimmed.values()) for r in reports)
        capped = sum(sum(r.trimmed_by_caps.values()) for r in reports)
        deleted = sum(len(r.deleted_keys) for r in reports)
        visited = sum(r.streams_visited for r in reports)
        failed = [r.stream_prefix for r in reports if r.error is not None]
        self.stdout.write(
            f"retention pass done: {len(reports)} stream prefixes, {visited} streams visited, {trimmed} "
            f"entries trimmed ({capped} by caps), {deleted} retired streams deleted"
        )
        for report in reports:
            for reason in report.waiting:
                self.stdout.write(f"  {report.stream_prefix}: waiting: {reason}")
        if failed:
            raise CommandError(f"retention failed for stream prefixes: {', '.join(failed)}")
