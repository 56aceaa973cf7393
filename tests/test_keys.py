"""The key layout is written once (rsc_redis/keys.py): its key functions build the templates their
families state, the docs show exactly its families (docs/protocol.md section 9) and field families
(docs/store.md), the ACL patterns derived from it match exactly its keys, its Lua helper
(rsc_redis/keys.lua) builds the same keys in Redis, and a store at work writes no key and no metadata
field outside it."""

from __future__ import annotations

import fnmatch
import inspect
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import GroupConfig, Shard
from coordinator.store import HeartbeatFloor, MetadataStore
from rsc_redis import keys
from rsc_redis.lua import keys_lua, lease_record_lua

DOCS = Path(__file__).resolve().parent.parent / "docs"

# The placeholder each parameter of a key function stands for in a template.
PLACEHOLDERS: dict[str, Any] = {
    "stream_prefix": "P",
    "consumer_group": "<G>",
    "member_id": "<member>",
    "shard": SimpleNamespace(version="<version>", index="<index>"),
    "credential": "<credential>",
}


def built_template(family: keys.KeyFamily) -> str:
    if isinstance(family.key, str):
        return family.key
    names = inspect.signature(family.key).parameters
    return family.key(*(PLACEHOLDERS[name] for name in names))


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, cells stripped."""
    rows, started = [], False
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if started and not set(line) <= set("|- "):
                rows.append(cells)
            started = True
        elif started:
            break
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else None]


# ------------------------------------------------------------------------------------------ the module


@pytest.mark.parametrize("family", keys.FAMILIES, ids=lambda f: f.template)
def test_each_key_function_builds_its_familys_template(family: keys.KeyFamily) -> None:
    assert built_template(family) == family.template


def test_the_families_are_the_module_level_ones_each_once() -> None:
    declared = [v for v in vars(keys).values() if isinstance(v, keys.KeyFamily)]
    assert sorted(f.template for f in declared) == sorted(f.template for f in keys.FAMILIES)
    assert len({f.template for f in keys.FAMILIES}) == len(keys.FAMILIES)
    assert all(f.template.startswith(keys.NAMESPACE + ":") for f in keys.FAMILIES)


def test_every_key_of_a_prefix_carries_its_hash_tag() -> None:
    shard = Shard(version=2, index=7)
    for family in keys.FAMILIES:
        if "{P}" in family.template:
            assert callable(family.key)
            names = inspect.signature(family.key).parameters
            values = {"stream_prefix": "orders", "consumer_group": "g", "member_id": "m", "shard": shard}
            key = family.key(*(values[n] for n in names))
            assert key.startswith("rsc:{orders}:"), key


# -------------------------------------------------------------------------------------------- the docs


def test_protocol_section_9_lists_exactly_the_key_families() -> None:
    text = section((DOCS / "protocol.md").read_text(), "## 9. Key layout")
    documented = {(row[0].strip("`"), row[1]) for row in table_rows(text)}
    assert documented == {(f.template, f.redis_type) for f in keys.FAMILIES}


def test_store_doc_lists_exactly_the_metadata_field_families() -> None:
    text = section((DOCS / "store.md").read_text(), "## One hash per stream prefix")
    documented = {name.strip().strip("`") for row in table_rows(text) for name in row[0].split(",")}
    assert documented == {f.template for f in keys.META_FIELDS}


# --------------------------------------------------------------------------------------- ACL patterns


def sample_keys() -> dict[str, list[str]]:
    """Keys of every family, for two prefixes, groups and members."""
    found: dict[str, list[str]] = {}
    for family in keys.FAMILIES:
        if isinstance(family.key, str):
            found[family.template] = [family.key]
            continue
        names = inspect.signature(family.key).parameters
        built = []
        for prefix in ("orders", "a.b-c_9"):
            for group, member, shard in (("billing", "m-1", Shard(1, 0)), ("g2", "x", Shard(12, 345))):
                values = {
                    "stream_prefix": prefix,
                    "consumer_group": group,
                    "member_id": member,
                    "shard": shard,
                    "credential": f"{abs(hash((prefix, member))):016x}"[:16],
                }
                built.append(family.key(*(values[n] for n in names)))
        found[family.template] = built
    return found


def test_each_familys_acl_pattern_matches_its_keys_and_no_other_familys() -> None:
    samples = sample_keys()
    for family in keys.FAMILIES:
        pattern = family.pattern()
        for template, built in samples.items():
            for key in built:
                assert fnmatch.fnmatchcase(key, pattern) == (template == family.template), (pattern, key)
    every = [key for built in samples.values() for key in built]
    assert all(fnmatch.fnmatchcase(key, keys.ALL_KEYS_PATTERN) for key in every)


def test_a_pattern_narrowed_to_a_prefix_matches_only_that_prefix() -> None:
    pattern = keys.DEAD_LETTERS.pattern("orders")
    assert pattern == "rsc:{orders}:dlq:*"
    assert fnmatch.fnmatchcase(keys.dead_letter_key("orders", "billing"), pattern)
    assert not fnmatch.fnmatchcase(keys.dead_letter_key("other", "billing"), pattern)


def test_the_acl_profiles_take_their_patterns_from_the_layout() -> None:
    from rsc_redis import acl as redis_acl

    assert redis_acl.META == "rsc:{*}:meta" == keys.META.pattern()
    assert redis_acl.SHARDS == "rsc:{*}:v[0-9]*" == keys.SHARD_STREAMS.pattern()
    assert redis_acl.DEAD_LETTERS == "rsc:{*}:dlq:*"
    assert redis_acl.REDELIVER == "rsc:{*}:rd:*"
    assert redis_acl.LEASE_RECORDS == "rsc:{*}:lr"
    assert f"~{keys.ALL_KEYS_PATTERN}" == "~rsc:*" in redis_acl.ACL_RULES[redis_acl.COORDINATOR]


# ---------------------------------------------------------------------------------------- keys.lua


@pytest.mark.parametrize("prefix", ["orders", "a.b-c_9", "P"])
def test_the_lua_helpers_build_the_same_keys_in_redis(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        body = (
            "return {stream_key_of(KEYS[1], ARGV[1]), group_key_of(KEYS[1], 'rd', ARGV[2]),"
            " group_key_of(KEYS[1], 'dlq', ARGV[2]), prefix_key(KEYS[1], 'lr'), CREDENTIALS_GENERATION_KEY}"
        )
        meta = keys.meta_key(prefix)
        got = client.eval(keys_lua() + "\n" + body, 1, meta, "v12:3", "billing")
        assert got == [
            keys.stream_key(prefix, Shard(version=12, index=3)),
            keys.redeliver_key(prefix, "billing"),
            keys.dead_letter_key(prefix, "billing"),
            keys.lease_records_key(prefix),
            keys.CREDENTIALS_GENERATION_KEY,
        ]
        # lease_record.lua's checks of the keys a lease reader is given, through the same helper.
        checks = (
            "return {require_lease_records_key(KEYS[1], KEYS[2]), require_lease_index_key(KEYS[1], KEYS[3]),"
            " require_schedule_index_key(KEYS[1], KEYS[4])}"
        )
        given = [
            keys.lease_records_key(prefix),
            keys.lease_index_key(prefix),
            keys.schedule_index_key(prefix),
        ]
        assert client.eval(lease_record_lua() + "\n" + checks, 4, meta, *given) == given
        wrong = [keys.lease_records_key("other"), *given[1:]]
        with pytest.raises(redis.ResponseError, match="is not the lease-renewal key"):
            client.eval(lease_record_lua() + "\n" + checks, 4, meta, *wrong)
    finally:
        client.close()


# ------------------------------------------------------------------------------- a store at work


def test_a_store_at_work_writes_no_key_or_field_outside_the_layout(redis_url: str) -> None:
    store = MetadataStore.from_url(redis_url)
    try:
        config = GroupConfig(lease_ttl_ms=10_000, heartbeat_interval_ms=1_000)
        store.create_group(
            CreateGroup(stream_prefix="orders", consumer_group="billing", shard_count=4, config=config)
        )
        floor = HeartbeatFloor(period_ms=1, burst=100)
        views = {
            m: store.heartbeat(
                "orders",
                "billing",
                Heartbeat(member_id=m, member_epoch=0, owned=frozenset(), capacity=8),
                floor,
            )
            for m in "ab"
        }
        store.heartbeat("orders", "billing", Heartbeat(member_id="b", member_epoch=-1))
        del views["b"]
        for _ in range(3):  # until "a" is settled (s:, r:)
            owned = frozenset(Shard.parse(s["shard"]) for s in views["a"]["shards"])
            hb = Heartbeat(member_id="a", member_epoch=views["a"]["member_epoch"], owned=owned)
            views["a"] = store.heartbeat("orders", "billing", hb, floor)
        store.tick()
        present = [k.decode() for k in store.client.scan_iter(count=1000)]
        fields = [f.decode() for f in store.client.hkeys(keys.meta_key("orders"))]
    finally:
        store.client.close()
    patterns = [f.pattern() for f in keys.FAMILIES]
    assert [k for k in present if not any(fnmatch.fnmatchcase(k, p) for p in patterns)] == []
    assert keys.meta_key("orders") in present and keys.PREFIXES_KEY in present
    families = [field_regex(f.template) for f in keys.META_FIELDS]
    assert [f for f in fields if not any(r.match(f) for r in families)] == []
    assert any(f.startswith("s:billing:") for f in fields), fields  # the run reached the settled fields


_FIELD_NAMES = {"<G>": "[^:]+", "<member>": "[^:]+", "<shard>": r"v\d+:\d+", "<slot>": r"\d+"}


def field_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"(<\w+>)", template)
    return re.compile("".join(_FIELD_NAMES.get(p, re.escape(p)) for p in parts) + r"\Z")


def test_a_credentials_keys_share_its_hash_tag_and_no_prefix_family_matches_them() -> None:
    digest = "0123456789abcdef"
    members, joins = keys.credential_members_key(digest), keys.credential_joins_key(digest)
    assert members == "rsc:credential:{0123456789abcdef}:members"
    assert joins == "rsc:credential:{0123456789abcdef}:joins"
    prefix_families = [f for f in keys.FAMILIES if "{P}" in f.template]
    assert not any(fnmatch.fnmatchcase(k, f.pattern()) for k in (members, joins) for f in prefix_families)
