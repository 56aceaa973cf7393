"""Two operators changing the same group at once (coordinator/operations.py): exactly one wins, the
other gets its refusal, and both are in the audit trail with their outcome; no row is left "pending".

Real threads, each with its own database connection, released together by a barrier. The store's checks
run atomically in Redis; the audit rows are written by both threads at once, and on PostgreSQL their
transactions really overlap. These tests run in the PostgreSQL pass only (see the skip reason below).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from coordinator import operations
from coordinator.models import AuditEntry
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig
from coordinator.store import MetadataStore
from tests.api.helpers import GROUP, PREFIX, Api, make_pending

from .threads import Outcome, postgresql_only, run_together

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        "the SQLite test database is a shared-cache in-memory database, which refuses a second writer "
        "at once ('database table is locked') instead of making it wait; the loser's audit row is then "
        "refused (AUDIT_UNAVAILABLE, fail closed, nothing changed), so the race under test never happens"
    ),
]

ALICE = operations.Actor(username="alice", source="admin_ui", is_admin=True)
BOB = operations.Actor(username="bob", source="api", is_admin=True)
ROUNDS = 5  # each round a fresh race: more interleavings for the same few seconds


def audit_rows() -> list[tuple[str, str, str]]:
    return [(e.username, e.action, e.outcome) for e in AuditEntry.objects.order_by("id")]


def winner_and_loser(outcomes: list[Outcome], actors: list[operations.Actor]) -> tuple[str, str, Any, str]:
    """(winner's name, loser's name, winner's result, loser's error code); asserts exactly one won."""
    won = [i for i, o in enumerate(outcomes) if o.error is None]
    assert len(won) == 1, outcomes
    lost = 1 - won[0]
    error = outcomes[lost].error
    assert isinstance(error, CoordinatorError), outcomes
    return actors[won[0]].username, actors[lost].username, outcomes[won[0]].value, str(error.code)


@pytest.fixture
def member_group(store: MetadataStore) -> MetadataStore:
    """orders/billing, 2 shards, member m1 owning both."""
    config = GroupConfig(lease_ttl_ms=60_000, heartbeat_interval_ms=1_000)
    store.create_group(CreateGroup(stream_prefix=PREFIX, consumer_group=GROUP, shard_count=2, config=config))
    store.heartbeat(PREFIX, GROUP, Heartbeat(member_id="m1", member_epoch=0, capacity=1))
    return store


def skip(actor: operations.Actor, entry_id: str) -> dict[str, Any]:
    reason = f"poison ({actor.username})"
    return operations.skip_entries(actor, PREFIX, GROUP, "v1:0", entry_ids=[entry_id], reason=reason)


def test_two_operators_skip_the_same_entry_one_wins_both_are_audited(member_group: MetadataStore) -> None:
    store = member_group
    for round_ in range(ROUNDS):
        [entry_id] = make_pending(store.client, 1)
        actors = [ALICE, BOB]
        outcomes = run_together(*(partial(skip, actor, entry_id) for actor in actors))
        winner, loser, result, code = winner_and_loser(outcomes, actors)
        assert code == "ENTRY_NOT_PENDING"
        assert [e["id"] for e in result["skipped"]] == [entry_id]
        assert store.client.xpending(f"rsc:{{{PREFIX}}}:v1:0", GROUP)["pending"] == 0

        rows = list(AuditEntry.objects.order_by("id")[2 * round_ :])
        by_name = {r.username: r for r in rows}
        assert len(rows) == 2 and {n: (r.action, r.outcome) for n, r in by_name.items()} == {
            winner: ("skip_entries", "ok"),
            loser: ("skip_entries", "ENTRY_NOT_PENDING"),
        }
        assert [e["id"] for e in by_name[winner].details["skipped"]] == [entry_id]
        assert by_name[loser].details["error"]["entry_ids"] == [entry_id]
        assert by_name[loser].details["reason"] == f"poison ({loser})"
    assert not AuditEntry.objects.filter(outcome=AuditEntry.PENDING).exists()


@pytest.fixture
def stranded(api: Api, store: MetadataStore) -> int:
    """A strict migration 2 -> 4 held back by billing, which has no live member and 3 unconsumed entries
    on v1:0; the group ``audit`` has a live member (tests/api/test_lifecycle.py). Returns the count."""
    api.create_group(shard_count=2)
    api.create_group(group="audit", shard_count=2)
    api.heartbeat(group="audit", member_id="a1", member_epoch=0, capacity=1)
    for i in range(3):
        store.client.xadd(f"rsc:{{{PREFIX}}}:v1:0", {"n": str(i)})
    r = api.post(f"admin/stream-prefixes/{PREFIX}/shard-count", {"shard_count": 4})
    assert r.status_code == 202, r.content
    AuditEntry.objects.all().delete()  # the set-up's own rows (create_group, change_shard_count)
    return int(store.unconsumed_for_release(PREFIX, GROUP))


def test_two_operators_release_the_same_drain_one_wins_both_are_audited(
    store: MetadataStore, stranded: int
) -> None:
    assert stranded == 3
    actors = [ALICE, BOB]
    outcomes = run_together(
        *(
            partial(operations.release_drain, actor, PREFIX, GROUP, confirm_unconsumed=3, reason="gone")
            for actor in actors
        )
    )
    winner, loser, result, code = winner_and_loser(outcomes, actors)
    assert (result["released"], result["unconsumed_entries"]) == (["v1:0", "v1:1"], 3)
    # The loser was refused by the store's own check, whichever step of it saw the winner's commit:
    # the migration it would release from is over.
    assert code == "MIGRATION_NOT_ACTIVE"
    assert sorted(audit_rows()) == sorted(
        [(winner, "release_drain", "ok"), (loser, "release_drain", "MIGRATION_NOT_ACTIVE")]
    )
    assert AuditEntry.objects.get(username=winner).details["released"] == ["v1:0", "v1:1"]
    assert store.describe_prefix(PREFIX)["migration"]["drained"][GROUP] == ["v1:0", "v1:1"]
