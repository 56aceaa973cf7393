"""A group in a known, busy state, built through the store, and small page helpers."""

from __future__ import annotations

import html
import re
from typing import Any

from django.urls import reverse

from config.embedded_redis import RedisServer
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import ClientInfo, GroupConfig, OrderingMode, Shard
from coordinator.store import MetadataStore, reset_store
from rsc_redis import keys as rkeys
from tests.signing import signed

PREFIX, GROUP, OTHER_GROUP = "orders", "billing", "audit"
LIST_URL = "/admin/admin_ui/consumergroup/"


def url(name: str, prefix: str = PREFIX, group: str = GROUP) -> str:
    return reverse(f"admin:admin_ui_{name}", kwargs={"stream_prefix": prefix, "consumer_group": group})


def create(store: MetadataStore, group: str = GROUP, shard_count: int = 4, **config: int) -> None:
    defaults = {"lease_ttl_ms": 60_000, "heartbeat_interval_ms": 1_000}
    store.create_group(
        CreateGroup(
            stream_prefix=PREFIX,
            consumer_group=group,
            shard_count=shard_count,
            config=GroupConfig(**{**defaults, **config}),
        )
    )


def store_gone_after_create(settings: Any, server: RedisServer) -> None:
    """Point the pages at ``server``, create the usual group there, then kill it: every page and action
    now meets an unreachable store."""
    settings.REDIS_URL = server.url
    reset_store()
    own = MetadataStore.from_url(server.url)
    create(own)
    own.client.close()
    server.kill()


def hb(
    store: MetadataStore, member: str, epoch: int, owned: Any = None, capacity: int | None = None
) -> dict[str, Any]:
    owned_set = None if owned is None else frozenset(Shard.parse(s) for s in owned)
    client = ClientInfo(
        host=f"10.0.0.{ord(member[0]) - 96}", pid=4000 + ord(member[0]), listener="ship", version="1.2.3"
    )
    heartbeat = Heartbeat(
        member_id=member, member_epoch=epoch, owned=owned_set, capacity=capacity, client=client
    )
    return store.heartbeat(PREFIX, GROUP, heartbeat)


def busy_group(store: MetadataStore) -> dict[str, Any]:
    """Two groups on one prefix; in ``billing`` two members, a revocation pending, a strict migration
    4 -> 8 shards half drained. Returns billing's description."""
    create(store, max_concurrency=3)
    create(store, group=OTHER_GROUP)
    hb(store, "a", 0, [], capacity=2)  # a: v1:0-3 at epoch 1
    hb(store, "b", 0, [], capacity=4)  # group epoch 2: b wants v1:2, v1:3
    hb(store, "a", 1)  # a learns: revoke v1:2, v1:3 (not acknowledged: the revocation stays pending)
    for index in (1, 3):  # undelivered entries: these old shards cannot drain
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:{index}", {"k": "v"})
    store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)  # group epoch 3
    store.tick()  # v1:0 and v1:2 drained (empty) for both groups: group epoch 4
    hb(store, "b", 2)  # b takes the new shards nobody owns
    return store.describe_group(PREFIX, GROUP)


def text(response: Any) -> str:
    """The page's visible text with whitespace collapsed (tags stripped, entities decoded)."""
    body = response.content.decode()
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()


def table_rows(response: Any, table_id: str) -> list[list[str]]:
    """The cell texts of each body row of ``<table id=table_id>``."""
    body = response.content.decode()
    match = re.search(rf'<table[^>]*id="{table_id}".*?<tbody>(.*?)</tbody>', body, flags=re.S)
    assert match, f"no table {table_id!r}"
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), flags=re.S):
        cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.S)
        rows.append([re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", c))).strip() for c in cells])
    return rows


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# ------------------------------------------------------------------------------------------ entries


def stream(shard: str, prefix: str = PREFIX) -> str:
    return rkeys.stream_key(prefix, Shard.parse(shard))


def redis_now_ms(store: MetadataStore) -> int:
    seconds, micros = store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def pend(
    store: MetadataStore,
    shard: str,
    count: int = 1,
    *,
    consumer: str = "a",
    deliveries: int = 1,
    age_ms: int = 0,
    group: str = GROUP,
) -> list[str]:
    """Append ``count`` entries to ``shard`` (ids ``age_ms`` in the past when given) and deliver them to
    ``consumer`` of ``group`` ``deliveries`` times without acknowledging them: pending entries, as a
    handler that keeps failing leaves them. Returns their ids."""
    key = stream(shard)
    base_ms = redis_now_ms(store) - age_ms
    ids = []
    for n in range(count):
        fields = {"event_id": f"e-{shard}-{n}", "partition_key": f"k{n}", "payload": f"body {n} " + "x" * 100}
        entry_id = store.client.xadd(key, fields, id=f"{base_ms}-{n}" if age_ms else "*")
        ids.append(entry_id.decode())
    store.client.xreadgroup(group, consumer, {key: ">"}, count=count)
    for _ in range(deliveries - 1):
        store.client.xclaim(key, group, consumer, 0, ids)
    return ids


def pending_ids(store: MetadataStore, shard: str, group: str = GROUP) -> list[str]:
    return [
        p["message_id"].decode() for p in store.client.xpending_range(stream(shard), group, "-", "+", 100)
    ]


def add_dead_letter(store: MetadataStore, n: int, *, group: str = GROUP, error: str = "") -> str:
    """A dead letter as the data plane's dead_letter function writes it: the source entry's fields, then
    the ``dlq_*`` bookkeeping, signed (tests/signing.py). Returns its id."""
    fields = {
        "event_id": f"dead-{n}",
        "partition_key": f"key-{n}",
        "content_type": "application/json",
        "payload": f'{{"n": {n}}}',
        "headers": "{}",
        "dlq_source_shard": "v1:1",
        "dlq_source_id": f"1700000000000-{n}",
        "dlq_deliveries": "5",
        "dlq_error": error or f"ValueError: poison {n}",
        "dlq_member_id": "a",
        "dlq_at_ms": "1700000000500",
    }
    key = rkeys.dead_letter_key(PREFIX, group)
    return store.client.xadd(key, signed(key, fields)).decode()
