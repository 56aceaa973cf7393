"""Read-only look at one shard's pending entries, for the skip form and its confirmation page.

The confirmation of a skip must list exactly the entries that will be acknowledged, with their fields,
before anything is acknowledged; the store's ``skip_entries`` reads and acks in one script, so it cannot
show them first. This reads the same things (``XPENDING`` for consumer and delivery count, ``XRANGE``
for the fields) without changing anything. The confirmation then posts the ids it listed, so the store
acks those and no others (an entry acked meanwhile makes the store refuse with ENTRY_NOT_PENDING and
nothing is acked).

Field values are decoded as UTF-8 with replacement and cut to 4096 characters, like the store's skip
result. Redis errors become ``StoreUnavailable`` / ``MetadataCorrupt`` like everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from coordinator.protocol.errors import MetadataCorrupt, StoreUnavailable
from coordinator.protocol.model import Shard
from coordinator.store import MetadataStore, codec

MAX_FIELD_CHARS = 4096
# Ids of an XPENDING range are fetched this many at a time.
PAGE = 1000


class _NoConsumerGroup(Exception):
    """The shard has no Redis consumer group for the group (released from a drain, not created yet)."""


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise StoreUnavailable(f"the metadata store is unreachable: {e}") from e
    except redis.ResponseError as e:
        if str(e).startswith("NOGROUP"):
            raise _NoConsumerGroup() from e
        raise MetadataCorrupt(f"the metadata store refused to list pending entries: {e}") from e
    except redis.RedisError as e:
        raise StoreUnavailable(f"the metadata store failed: {e}") from e


def _text(value: Any) -> str:
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
    return text[:MAX_FIELD_CHARS]


def _id_key(entry_id: Any) -> tuple[int, int]:
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def redis_now_ms(store: MetadataStore) -> int:
    with _translated():
        seconds, micros = store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def pending_entries(
    store: MetadataStore,
    stream_prefix: str,
    consumer_group: str,
    shard: str,
    *,
    entry_ids: list[str] | None = None,
    older_than_ms: int | None = None,
    now_ms: int | None = None,
    limit: int = PAGE,
) -> tuple[list[dict[str, Any]], list[str]]:
    """``([{id, consumer, deliveries, idle_ms, fields | None}], ids_not_pending)``, oldest first.

    With ``entry_ids``: those of them that are pending (the others in the second list). With
    ``older_than_ms``: the pending entries whose id is at least that old by ``now_ms`` (Redis's clock),
    at most ``limit``. With neither: the ``limit`` oldest pending entries. ``fields`` is None for an
    entry that is pending but no longer in the stream (trimmed or deleted).
    """
    key = codec.stream_key(stream_prefix, Shard.parse(shard))
    try:
        return _pending_entries(store, key, consumer_group, entry_ids, older_than_ms, now_ms, limit)
    except _NoConsumerGroup:
        return [], list(entry_ids or ())  # nothing can be pending


def _pending_entries(
    store: MetadataStore,
    key: str,
    consumer_group: str,
    entry_ids: list[str] | None,
    older_than_ms: int | None,
    now_ms: int | None,
    limit: int,
) -> tuple[list[dict[str, Any]], list[str]]:
    with _translated():
        if entry_ids is not None:
            pipe = store.client.pipeline(transaction=False)
            for entry_id in entry_ids:
                pipe.xpending_range(key, consumer_group, min=entry_id, max=entry_id, count=1)
            found = [rows[0] for rows in pipe.execute() if rows]
        else:
            upper = "+"
            if older_than_ms is not None:
                cutoff_ms = (redis_now_ms(store) if now_ms is None else now_ms) - older_than_ms
                if cutoff_ms < 0:
                    return [], []
                upper = str(cutoff_ms)  # an id's ms part alone: every sequence number of that ms included
            found = store.client.xpending_range(key, consumer_group, min="-", max=upper, count=limit)
        pending = {_text(p["message_id"]): p for p in sorted(found, key=lambda p: _id_key(p["message_id"]))}
        pipe = store.client.pipeline(transaction=False)
        for entry_id in pending:
            pipe.xrange(key, entry_id, entry_id, count=1)
        bodies = pipe.execute()
    entries = [
        {
            "id": entry_id,
            "consumer": _text(p["consumer"]),
            "deliveries": int(p["times_delivered"]),
            "idle_ms": int(p["time_since_delivered"]),
            "fields": {_text(k): _text(v) for k, v in body[0][1].items()} if body else None,
        }
        for (entry_id, p), body in zip(pending.items(), bodies, strict=True)
    ]
    missing = [i for i in entry_ids or () if i not in pending]
    return entries, missing
