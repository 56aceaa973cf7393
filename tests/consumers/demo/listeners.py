"""Discovered by run_member. Records each entry it handles in the Redis list ``demo:handled``; an entry
with ``{"sleep": s}`` keeps its handler busy for ``s`` seconds (after setting ``demo:sleeping``)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis

from consumers import listener

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


@listener(stream_prefix="orders", consumer_group="billing", concurrency="1")
def bill(entry: Any) -> None:
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if payload.get("sleep"):
        _redis().set("demo:sleeping", "1")
        time.sleep(payload["sleep"])
    record = {"n": payload.get("n"), "shard": str(entry.shard), "thread": threading.current_thread().name}
    _redis().rpush("demo:handled", json.dumps(record))
