"""Dead letters from the operator's side: list, inspect, replay, purge; real Redis.

The dead letters are written here by hand, with XADD, in the exact format the data plane's
``dead_letter.lua`` writes (docs/protocol.md section 14): the source entry's fields in order, then the
``dlq_*`` bookkeeping. The source entry is one packed ``envelope`` field (what the producer writes:
``packed_dead_letter``) or the seven fields of the entries written before that (``dead_letter``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.protocol import envelope
from coordinator.protocol.errors import (
    DeadLetterNotFound,
    DeadLetterNotVerified,
    GroupNotFound,
    InvalidRequest,
)
from coordinator.protocol.model import OrderingMode, Shard
from coordinator.protocol.routing import shard_index
from coordinator.store import MetadataStore
from coordinator.store import dead_letters as dead_letters_module
from rsc_redis import keys as rkeys
from tests.signing import signed

from .conftest import GROUP, PREFIX, create


@pytest.fixture
def dl_store(redis_url: str) -> Iterator[Any]:
    s = MetadataStore.from_url(redis_url)
    yield s
    s.client.close()


def dead_letter(
    store: Any,
    key: str = "customer-42",
    *,
    event_id: str = "ev-1",
    payload: bytes = b'{"order":7}',
    source_shard: str = "v1:2",
    source_id: str = "1700000000000-0",
    group: str = GROUP,
) -> str:
    """XADD one dead letter in the contract's format; returns its id."""
    fields: list[tuple[str, str | bytes]] = [
        ("event_id", event_id),
        ("partition_key", key),
        ("routing_version", "1"),
        ("produced_at_ms", "1700000000000"),
        ("content_type", "application/json"),
        ("payload", payload),
        ("headers", '{"trace":"t-1"}'),
        ("dlq_source_shard", source_shard),
        ("dlq_source_id", source_id),
        ("dlq_deliveries", "5"),
        ("dlq_error", "ValueError: bad order"),
        ("dlq_member_id", "worker-1"),
        ("dlq_at_ms", "1700000001000"),
    ]
    dlq = rkeys.dead_letter_key(PREFIX, group)
    entry_id = store.client.xadd(dlq, signed(dlq, dict(fields)), maxlen=100_000)
    return str(entry_id.decode())


BOOKKEEPING = [
    ("dlq_source_shard", "v1:2"),
    ("dlq_source_id", "1700000000000-0"),
    ("dlq_deliveries", "5"),
    ("dlq_error", "ValueError: bad order"),
    ("dlq_member_id", "worker-1"),
    ("dlq_at_ms", "1700000001000"),
]


def packed_dead_letter(
    store: Any,
    key: bytes,
    *,
    event_id: bytes = b"ev-9",
    payload: bytes = b"{}",
    produced_at_ms: int = envelope.NOT_WRITTEN,
) -> str:
    """XADD one dead letter of an entry the producer packed (its one field, then the bookkeeping); with a
    ``produced_at_ms``, as an older producer's function packed it."""
    body = envelope.pack_body(event_id, key, b"application/json", b'{"trace":"t-9"}', payload)
    fields = [("envelope", envelope.pack(1, body, produced_at_ms)), *BOOKKEEPING]
    dlq = rkeys.dead_letter_key(PREFIX, GROUP)
    return str(store.client.xadd(dlq, signed(dlq, dict(fields))).decode())


def entry(store: Any, shard: str, entry_id: str) -> dict[str, str]:
    ((_, fields),) = store.client.xrange(rkeys.stream_key(PREFIX, Shard.parse(shard)), entry_id, entry_id)
    return {k.decode(): v.decode() for k, v in fields.items()}


def everything(store: Any) -> dict[bytes, Any]:
    """Every stream's entries (dead letters included): what a refused action must leave as it was."""
    return {k: store.client.xrange(k) for k in sorted(store.client.keys("rsc:{orders}:[vd]*"))}


# ---------------------------------------------------------------------------------------------- read


def test_list_pages_through_dead_letters_oldest_first(dl_store: Any) -> None:
    create(dl_store, shard_count=4)
    ids = [dead_letter(dl_store, event_id=f"ev-{i}") for i in range(3)]

    page = dl_store.dead_letters(PREFIX, GROUP, count=2)
    assert (page["stream_key"], page["length"]) == ("rsc:{orders}:dlq:billing", 3)
    assert [e["id"] for e in page["entries"]] == ids[:2]
    rest = dl_store.dead_letters(PREFIX, GROUP, after=ids[1])
    assert [e["id"] for e in rest["entries"]] == ids[2:]
    assert dl_store.dead_letters(PREFIX, GROUP, after=ids[2])["entries"] == []

    assert page["entries"][0] == {
        "id": ids[0],
        "source_shard": "v1:2",
        "source_id": "1700000000000-0",
        "deliveries": 5,
        "error": "ValueError: bad order",
        "member_id": "worker-1",
        "at_ms": 1700000001000,
        "event_id": "ev-0",
        "partition_key": "customer-42",
        "fields": {
            "event_id": "ev-0",
            "partition_key": "customer-42",
            "routing_version": "1",
            "produced_at_ms": "1700000000000",
            "content_type": "application/json",
            "payload": '{"order":7}',
            "headers": '{"trace":"t-1"}',
        },
        "verdict": "SIGNED",
        "verdict_reason": "written by the dead-letter function (its MAC verifies)",
    }
    assert dl_store.dead_letter(PREFIX, GROUP, ids[1]) == page["entries"][1]


@pytest.mark.parametrize(
    ("produced_at_ms", "shown"),
    [
        (1699999999000, {"produced_at_ms": "1699999999000"}),  # an older producer's: Redis TIME in it
        # this producer's: not written; shown as the source entry id's ms (dlq_source_id 1700000000000-0)
        (envelope.NOT_WRITTEN, {"produced_at_ms": "1700000000000"}),
    ],
)
def test_a_packed_dead_letter_shows_the_envelopes_fields(
    dl_store: Any, produced_at_ms: int, shown: dict[str, str]
) -> None:
    create(dl_store, shard_count=1)
    letter = packed_dead_letter(
        dl_store, b"customer 42\n", payload=b'{"order":9}', produced_at_ms=produced_at_ms
    )

    view = dl_store.dead_letter(PREFIX, GROUP, letter)

    assert (view["event_id"], view["partition_key"], view["deliveries"]) == ("ev-9", "customer 42\n", 5)
    assert view["fields"] == {
        "event_id": "ev-9",
        "partition_key": "customer 42\n",
        "routing_version": "1",
        **shown,
        "content_type": "application/json",
        "payload": '{"order":9}',
        "headers": '{"trace":"t-9"}',
    }
    assert dl_store.dead_letters(PREFIX, GROUP)["entries"] == [view]


def test_inspect_and_list_refuse_what_does_not_exist_or_is_malformed(dl_store: Any) -> None:
    create(dl_store, shard_count=1)
    with pytest.raises(DeadLetterNotFound):
        dl_store.dead_letter(PREFIX, GROUP, "1-0")
    with pytest.raises(InvalidRequest):
        dl_store.dead_letter(PREFIX, GROUP, "latest")
    for bad in ({"count": 0}, {"count": 501}, {"after": "+"}, {"after": "1"}):
        with pytest.raises(InvalidRequest):
            dl_store.dead_letters(PREFIX, GROUP, **bad)
    with pytest.raises(GroupNotFound):
        dl_store.dead_letters(PREFIX, "audit")
    assert dl_store.dead_letters(PREFIX, GROUP) == {
        "stream_key": "rsc:{orders}:dlq:billing",
        "length": 0,
        "entries": [],
    }


# ---------------------------------------------------------------------------------------------- replay


def test_replay_appends_the_original_event_to_the_active_shard_and_removes_the_dead_letter(
    dl_store: Any,
) -> None:
    create(dl_store, shard_count=4)
    create(dl_store, shard_count=4, group="audit")
    first = dead_letter(dl_store, "customer-42", event_id="ev-1")
    second = dead_letter(dl_store, "customer-7", event_id="ev-2", payload=b"\x00\xff")

    result = dl_store.replay_dead_letters(PREFIX, GROUP, [second, first])  # replayed in id order

    shards = [f"v1:{shard_index('customer-42', 4)}", f"v1:{shard_index('customer-7', 4)}"]
    assert [(r["id"], r["shard"]) for r in result["replayed"]] == [(first, shards[0]), (second, shards[1])]
    appended = entry(dl_store, shards[0], result["replayed"][0]["entry_id"])
    now_ms = dl_store.describe_group(PREFIX, GROUP)["now_ms"]
    assert 0 <= now_ms - int(appended.pop("produced_at_ms")) < 60_000  # set anew, by Redis TIME
    assert appended == {
        "event_id": "ev-1",
        "partition_key": "customer-42",
        "routing_version": "1",
        "content_type": "application/json",
        "payload": '{"order":7}',
        "headers": '{"trace":"t-1"}',
    }
    raw = dl_store.client.xrange(rkeys.stream_key(PREFIX, Shard.parse(shards[1])))
    assert raw[-1][1][b"payload"] == b"\x00\xff"  # bytes kept exactly
    assert dl_store.dead_letters(PREFIX, GROUP)["length"] == 0
    for group in (GROUP, "audit"):  # every group of the prefix gets it again
        key = rkeys.stream_key(PREFIX, Shard.parse(shards[0]))
        got = dl_store.client.xreadgroup(group, "m", {key: ">"})
        assert [e[1][b"event_id"] for e in got[0][1]] == [b"ev-1"]


@pytest.mark.parametrize("produced_at_ms", [envelope.NOT_WRITTEN, 1700000000000])  # this producer, an older
def test_replay_of_a_packed_dead_letter_appends_its_envelope_with_a_new_head(
    dl_store: Any, produced_at_ms: int
) -> None:
    create(dl_store, shard_count=4)
    dl_store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)  # version 2 is the active one
    key = b"customer \xff 7"
    letter = packed_dead_letter(dl_store, key, payload=b"\x00 raw\n", produced_at_ms=produced_at_ms)
    ((_, dead),) = dl_store.client.xrange(rkeys.dead_letter_key(PREFIX, GROUP))

    (replayed,) = dl_store.replay_dead_letters(PREFIX, GROUP, [letter])["replayed"]

    assert replayed["shard"] == f"v2:{shard_index(key, 8)}"
    stream = rkeys.stream_key(PREFIX, Shard.parse(replayed["shard"]))
    ((_, fields),) = dl_store.client.xrange(stream, replayed["entry_id"], replayed["entry_id"])
    assert list(fields) == [b"envelope"]  # the bookkeeping is not copied
    now_ms = dl_store.describe_group(PREFIX, GROUP)["now_ms"]
    old, new = envelope.unpack(dead[b"envelope"]), envelope.unpack(fields[b"envelope"])
    assert new[b"routing_version"] == b"2" and 0 <= now_ms - int(new[b"produced_at_ms"]) < 60_000
    assert {k: v for k, v in new.items() if k not in (b"routing_version", b"produced_at_ms")} == {
        k: v for k, v in old.items() if k not in (b"routing_version", b"produced_at_ms")
    }
    assert (new[b"event_id"], new[b"partition_key"], new[b"payload"]) == (b"ev-9", key, b"\x00 raw\n")
    assert dl_store.dead_letters(PREFIX, GROUP)["length"] == 0


def test_replay_during_a_migration_goes_to_the_new_version(dl_store: Any) -> None:
    create(dl_store, shard_count=4)
    dl_store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)
    letter = dead_letter(dl_store, "customer-42")
    (replayed,) = dl_store.replay_dead_letters(PREFIX, GROUP, [letter])["replayed"]
    assert replayed["shard"] == f"v2:{shard_index('customer-42', 8)}"
    assert entry(dl_store, replayed["shard"], replayed["entry_id"])["routing_version"] == "2"


def test_replay_routed_with_a_route_that_changed_meanwhile_is_routed_again(
    dl_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(dl_store, shard_count=4)
    letter = dead_letter(dl_store, "customer-42")
    real_shard_index = dead_letters_module.shard_index
    raced: list[int] = []

    def shard_index_racing_a_reshard(key: bytes, shard_count: int) -> int:
        if not raced:  # a shard-count change lands after the route was read, before the script runs
            raced.append(shard_count)
            dl_store.change_shard_count(PREFIX, 8, OrderingMode.STRICT)
        return real_shard_index(key, shard_count)

    monkeypatch.setattr(dead_letters_module, "shard_index", shard_index_racing_a_reshard)
    (replayed,) = dl_store.replay_dead_letters(PREFIX, GROUP, [letter])["replayed"]

    assert raced == [4]
    assert replayed["shard"] == f"v2:{shard_index('customer-42', 8)}"
    old_streams = [rkeys.stream_key(PREFIX, Shard(version=1, index=i)) for i in range(4)]
    assert [dl_store.client.xlen(k) for k in old_streams] == [0, 0, 0, 0]  # nothing reached the sealed one


def test_replay_of_a_foreign_dead_letter_copies_only_the_envelope_it_has(dl_store: Any) -> None:
    """An entry without a MAC (written before dead letters were signed, or by hand) is replayed only when
    the operator accepts unsigned ones."""
    create(dl_store, shard_count=2)
    letter = dl_store.client.xadd(
        rkeys.dead_letter_key(PREFIX, GROUP), {"payload": "raw", "other": "x", "dlq_source_shard": "v1:0"}
    ).decode()
    before = everything(dl_store)
    with pytest.raises(DeadLetterNotVerified) as refused:
        dl_store.replay_dead_letters(PREFIX, GROUP, [letter])
    assert refused.value.details["refused"] == [{"id": letter, "verdict": "UNSIGNED"}]
    assert everything(dl_store) == before
    (replayed,) = dl_store.replay_dead_letters(PREFIX, GROUP, [letter], accept_unsigned=True)["replayed"]
    assert replayed["shard"] == f"v1:{shard_index(b'', 2)}"
    fields = entry(dl_store, replayed["shard"], replayed["entry_id"])
    assert list(fields) == ["routing_version", "produced_at_ms", "payload"]


def test_a_refused_replay_changes_nothing(dl_store: Any) -> None:
    create(dl_store, shard_count=4)
    letter = dead_letter(dl_store)
    before = everything(dl_store)
    with pytest.raises(DeadLetterNotFound) as missing:
        dl_store.replay_dead_letters(PREFIX, GROUP, [letter, "1-0"])
    assert missing.value.details["ids"] == ["1-0"]
    for bad in ([], ["nope"], [letter] + [f"{i}-1" for i in range(1000)]):
        with pytest.raises(InvalidRequest):
            dl_store.replay_dead_letters(PREFIX, GROUP, bad)
    with pytest.raises(GroupNotFound):
        dl_store.replay_dead_letters(PREFIX, "audit", [letter])
    assert everything(dl_store) == before


# ---------------------------------------------------------------------------------------------- purge


def test_purge_listed_dead_letters_all_or_nothing_then_all(dl_store: Any) -> None:
    create(dl_store, shard_count=1)
    ids = [dead_letter(dl_store, event_id=f"ev-{i}") for i in range(4)]
    before = everything(dl_store)
    with pytest.raises(DeadLetterNotFound) as missing:
        dl_store.purge_dead_letters(PREFIX, GROUP, [ids[0], "2-2"])
    assert missing.value.details["ids"] == ["2-2"]
    with pytest.raises(InvalidRequest):
        dl_store.purge_dead_letters(PREFIX, GROUP, [])
    with pytest.raises(GroupNotFound):
        dl_store.purge_dead_letters(PREFIX, "audit", None)
    assert everything(dl_store) == before

    assert dl_store.purge_dead_letters(PREFIX, GROUP, [ids[1], ids[0], ids[1]]) == {"purged": 2}
    assert [e["id"] for e in dl_store.dead_letters(PREFIX, GROUP)["entries"]] == ids[2:]
    assert dl_store.purge_dead_letters(PREFIX, GROUP, None) == {"purged": 2}
    assert dl_store.dead_letters(PREFIX, GROUP)["length"] == 0
    assert dl_store.purge_dead_letters(PREFIX, GROUP, None) == {"purged": 0}


# ------------------------------------------------------------------------------------- trust (MAC)


def test_a_forged_dead_letter_is_shown_as_refused_and_never_replayed(dl_store: Any) -> None:
    """What a member's Redis user can append with a plain XADD: a MAC it cannot compute (or none). The
    pages show the verdict, a replay refuses the batch and changes nothing, accept_unsigned or not."""
    create(dl_store, shard_count=2)
    dlq = rkeys.dead_letter_key(PREFIX, GROUP)
    real = dead_letter(dl_store, event_id="ev-real")
    forged = dl_store.client.xadd(
        dlq, {"payload": "evil", "dlq_source_shard": "v1:0", "dlq_mac": "0" * 40}
    ).decode()
    fields = {"payload": "evil", "dlq_source_shard": "v1:0"}
    # A real MAC of other fields, and a MAC that is not the last field: refused too.
    moved = dl_store.client.xadd(dlq, {**signed(dlq, fields), "extra": "x"}).decode()
    other_group = dl_store.client.xadd(dlq, signed(rkeys.dead_letter_key(PREFIX, "audit"), fields)).decode()

    views = {e["id"]: e for e in dl_store.dead_letters(PREFIX, GROUP)["entries"]}
    assert {i: views[i]["verdict"] for i in views} == {
        real: "SIGNED",
        forged: "FORGED",
        moved: "FORGED",
        other_group: "FORGED",
    }
    assert views[forged]["verdict_reason"].startswith("refused: not written by the dead-letter function")
    assert "dlq_mac" not in views[real]["fields"]
    assert dl_store.dead_letter(PREFIX, GROUP, forged)["verdict"] == "FORGED"

    before = everything(dl_store)
    for accept_unsigned in (False, True):
        with pytest.raises(DeadLetterNotVerified, match="FORGED") as refused:
            dl_store.replay_dead_letters(
                PREFIX, GROUP, [real, forged, moved, other_group], accept_unsigned=accept_unsigned
            )
        assert [r["id"] for r in refused.value.details["refused"]] == [forged, moved, other_group]
        assert refused.value.code == "DEAD_LETTER_NOT_VERIFIED"
        assert everything(dl_store) == before
    assert len(dl_store.replay_dead_letters(PREFIX, GROUP, [real])["replayed"]) == 1


def test_dead_letters_signed_under_a_rotated_secret_still_verify(redis_url: str, dl_store: Any) -> None:
    """Keys derived from SECRET_KEY_FALLBACKS verify (they never sign): rotating SECRET_KEY does not make
    the dead letters already written unverifiable."""
    from rsc_redis.dead_letter_mac import MacKeys

    create(dl_store, shard_count=2)
    old, new = MacKeys.derive("old secret"), MacKeys.derive("new secret")
    dlq = rkeys.dead_letter_key(PREFIX, GROUP)
    fields = {"payload": "x", "dlq_source_shard": "v1:0"}
    flat = [item.encode() for name, value in fields.items() for item in (name, value)]
    letter = dl_store.client.xadd(dlq, {**fields, "dlq_mac": old.mac(dlq, flat)}).decode()
    rotated = MetadataStore.from_url(redis_url, dead_letter_keys=[new, old])
    only_new = MetadataStore.from_url(redis_url, dead_letter_keys=[new])
    try:
        assert rotated.dead_letter(PREFIX, GROUP, letter)["verdict"] == "SIGNED"
        assert only_new.dead_letter(PREFIX, GROUP, letter)["verdict"] == "FORGED"
    finally:
        rotated.client.close()
        only_new.client.close()
