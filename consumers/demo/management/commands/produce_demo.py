"""``manage.py produce_demo``: append an event to the demo stream prefix every ``--interval-ms``."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from consumers.dataplane import redis_client
from consumers.errors import ConsumersError, FunctionsNotLoaded
from consumers.producer import Producer


class Command(BaseCommand):
    help = "Produce demo events (keys customer-0..9) to the `demo` stream prefix until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval-ms", type=int, default=500)
        parser.add_argument("--stream-prefix", default="demo")

    def handle(self, *args: Any, interval_ms: int, stream_prefix: str, **options: Any) -> None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        producer = Producer(redis_client(settings.REDIS_URL))
        try:
            producer.require_functions()  # the coordinator's library: a clear error naming its command
        except FunctionsNotLoaded as e:
            raise CommandError(e.message) from e
        except ConsumersError as e:  # Redis not up yet: the loop below retries
            self.stderr.write(f"produce_demo: {e}")
        n = 0
        while not stop.wait(interval_ms / 1000):
            try:
                sent = producer.send(stream_prefix, f"customer-{n % 10}", {"n": n})
            except ConsumersError as e:  # the demo group not created yet, Redis restarting: try again
                self.stderr.write(f"produce_demo: {e}")
                continue
            n += 1
            if n % 20 == 0:
                self.stdout.write(f"produced {n} events (last: {sent.stream_key} {sent.entry_id})")
