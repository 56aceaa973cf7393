"""``manage.py consumer_groups``: the kafka-consumer-groups of the coordinator. Real private Redis; the
changes go through the operations layer and are audited (source "command")."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from config.embedded_redis import free_port
from coordinator.models import AuditEntry
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, Shard
from coordinator.store import MetadataStore, get_store, reset_store

PREFIX, GROUP = "orders", "billing"


@pytest.fixture(autouse=True)
def store(settings: Any, redis_url: str, db: None) -> MetadataStore:
    settings.REDIS_URL = redis_url
    reset_store()
    store = get_store()
    config = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)
    store.create_group(CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=4, config=config))
    joined = store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=2))
    assert joined["member_state"] == "STABLE"
    for index in range(3):  # 3 entries on v1:0, never read: lag 3
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:0", {"n": str(index)})
    return store


def run(*argv: str) -> str:
    out = io.StringIO()
    call_command("consumer_groups", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_list_shows_every_group() -> None:
    lines = run("list").splitlines()
    assert lines[0].split() == [
        "STREAM-PREFIX",
        "GROUP",
        "STATE",
        "GROUP-EPOCH",
        "ASSIGNMENT-EPOCH",
        "MEMBERS",
    ]
    assert lines[1].split() == [PREFIX, GROUP, "STABLE", "1", "1", "1"]
    assert json.loads(run("list", "--json"))[0]["consumer_group"] == GROUP


def test_describe_is_a_table_of_shards_with_lag_and_pending() -> None:
    text = run("describe", PREFIX, GROUP)
    lines = text.splitlines()
    assert lines[0].startswith("Group 'billing' of stream prefix 'orders': STABLE, group epoch 1")
    header = lines[2].split()
    assert header == [
        "SHARD",
        "OWNER",
        "MEMBER-STATE",
        "ASSIGNMENT",
        "LAG",
        "PENDING",
        "OLDEST-PENDING",
        "LENGTH",
    ]
    rows = {line.split()[0]: line.split() for line in lines[3:7]}
    assert rows["v1:0"] == ["v1:0", "m1", "STABLE", "READABLE", "3", "0", "-", "3"]
    assert rows["v1:3"] == ["v1:3", "m1", "STABLE", "READABLE", "0", "0", "-", "0"]
    assert "MEMBER" in text and "m1" in text
    view = json.loads(run("describe", PREFIX, GROUP, "--json"))
    assert [row["assignment"] for row in view["backlog"]] == ["READABLE"] * 4


def test_describe_lists_the_keys_members_report_parked(store: MetadataStore) -> None:
    assert "PARKED-KEYS" not in run("describe", PREFIX, GROUP)
    store.parked.record(PREFIX, GROUP, "m1", {"v1:2": {"count": 3, "keys": ["a", "b"]}})
    lines = run("describe", PREFIX, GROUP).splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:3] == ["SHARD", "MEMBER", "PARKED-KEYS"])
    assert lines[at + 1].split() == ["v1:2", "m1", "3", "a,", "b", "..."]


def test_reshard_and_max_concurrency_go_through_the_operations_layer(store: MetadataStore) -> None:
    assert "v1 -> v2" in run("reshard", PREFIX, "6")
    assert "is now 3" in run("set-max-concurrency", PREFIX, GROUP, "3")
    rows = AuditEntry.objects.order_by("pk")
    assert [(r.action, r.source, r.outcome) for r in rows] == [
        ("change_shard_count", "command", "ok"),
        ("set_max_concurrency", "command", "ok"),
    ]
    assert rows[0].username.startswith("command:consumer_groups reshard:")
    lines = run("describe", PREFIX, GROUP).splitlines()
    assert sum("UNASSIGNED" in line for line in lines) == 6  # v2's shards, until m1 heartbeats
    owned = frozenset(Shard.parse(f"v1:{i}") for i in range(4))
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=1, owned=owned))
    lines = run("describe", PREFIX, GROUP).splitlines()
    assert sum("HELD_BACK" in line for line in lines) == 6  # strict: v2 waits for v1 to drain
    assert any(line.startswith("Migration v1 -> v2 (strict)") for line in lines)


def test_refusals_exit_non_zero_with_the_code_and_change_nothing(store: MetadataStore) -> None:
    before = store.raw_metadata(PREFIX)
    with pytest.raises(CommandError, match=r"GROUP_HAS_UNCONSUMED_ENTRIES.*force") as refused:
        run("delete", PREFIX, GROUP)
    assert refused.value.returncode == 1
    assert '"lag": 3' in str(refused.value)
    with pytest.raises(CommandError, match="SHARD_COUNT_UNCHANGED"):
        run("reshard", PREFIX, "4")
    with pytest.raises(CommandError, match="INVALID_REQUEST"):
        run("set-max-concurrency", PREFIX, GROUP, "0")
    with pytest.raises(CommandError, match="GROUP_NOT_FOUND"):
        run("describe", PREFIX, "nope")
    assert store.raw_metadata(PREFIX) == before
    outcomes = list(AuditEntry.objects.order_by("pk").values_list("outcome", flat=True))
    assert outcomes[0] == "GROUP_HAS_UNCONSUMED_ENTRIES"  # refusals are recorded too

    assert "3 undelivered" in run("delete", PREFIX, GROUP, "--force", "--reason", "decommissioned")
    assert run("list").splitlines()[1:] == []


def test_create_is_audited_and_if_not_exists_makes_it_idempotent(store: MetadataStore) -> None:
    assert "Created group 'shipping' of 'orders' (4 shards)" in run(
        "create", PREFIX, "shipping", "--max-concurrency", "2"
    )
    assert store.describe_group(PREFIX, "shipping")["config"]["max_concurrency"] == 2
    with pytest.raises(CommandError, match="GROUP_ALREADY_EXISTS"):
        run("create", PREFIX, "shipping")
    assert "already exists" in run("create", PREFIX, "shipping", "--if-not-exists")
    with pytest.raises(CommandError, match="SHARD_COUNT_CONFLICT"):
        run("create", PREFIX, "audit", "--shards", "6", "--if-not-exists")
    assert "(2 shards)" in run("create", "payments", "ledger", "--shards", "2")
    outcomes = list(AuditEntry.objects.order_by("pk").values_list("action", "outcome"))
    assert outcomes == [
        ("create_group", "ok"),
        ("create_group", "GROUP_ALREADY_EXISTS"),
        ("create_group", "GROUP_ALREADY_EXISTS"),
        ("create_group", "SHARD_COUNT_CONFLICT"),
        ("create_group", "ok"),
    ]


def test_describe_shows_instance_ids_and_the_targets_held_for_restart(store: MetadataStore) -> None:
    """Static membership (docs/protocol.md section 3): a member's instance id, and a held target."""
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=-1))
    joined = store.heartbeat(
        PREFIX, GROUP, Heartbeat(member_id="s1", member_epoch=0, capacity=1, instance_id="pod-0.ship.0")
    )
    lines = run("describe", PREFIX, GROUP).splitlines()
    (member,) = [line.split() for line in lines if line.startswith("s1 ")]
    assert member[-1] == "pod-0.ship.0"
    assert "Held for restart:" not in lines
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="s1", member_epoch=-2))
    lines = run("describe", PREFIX, GROUP).splitlines()
    held = lines[lines.index("Held for restart:") + 2].split()
    assert held[:3] == ["pod-0.ship.0", "s1", ",".join(s["shard"] for s in joined["shards"])]
    assert held[3].endswith("s") and 0 < float(held[3][:-1]) <= 60


@pytest.mark.parametrize("action", [("list",), ("describe", "orders", "billing")])
def test_no_or_an_unreachable_redis_is_one_line_saying_what_to_set(
    settings: Any, action: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31: `STORE_UNAVAILABLE: REDIS_URL is not configured`, or a store error after the store's own
    ERROR log, said nothing of what to set. Now one line naming REDIS_URL, and nothing logged before it."""
    reset_store()
    settings.REDIS_URL = ""
    with pytest.raises(CommandError) as missing:
        run(*action)
    assert str(missing.value).startswith("STORE_UNAVAILABLE: REDIS_URL is not set: set it to")
    settings.REDIS_URL = f"redis://user:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(CommandError) as unreachable:
        run(*action)
    message = str(unreachable.value)
    assert message.startswith("STORE_UNAVAILABLE: cannot reach the coordinator's Redis at REDIS_URL=redis://")
    assert "set REDIS_URL" in message and "hunter2" not in message and "\n" not in message
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    reset_store()
