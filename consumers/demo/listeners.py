"""The demo listener: two members (``concurrency="2"``) of ``demo`` / ``demo-workers``."""

from __future__ import annotations

import logging

from consumers import listener
from consumers.dataplane import Entry

log = logging.getLogger("consumers.demo")


@listener(stream_prefix="demo", consumer_group="demo-workers", concurrency="2", name="demo")
def handle_demo_event(entry: Entry) -> None:
    log.info("handled %s key=%s shard=%s payload=%s", entry.event_id[:8], entry.partition_key, entry.shard,
             entry.payload)  # fmt: skip
