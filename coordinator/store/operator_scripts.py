"""What the operator scripts and their callers share: the scripts themselves (each ``<name>.lua`` with
``operator_checks.lua`` in front), the refusals those checks return, and the loads and checks the
operator actions start with (backlog_actions.py, dead_letters.py, coordinator/operations.py)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from coordinator.protocol import envelope
from coordinator.protocol.errors import GroupNotFound, InvalidRequest, MetadataCorrupt, ShardNotFound
from coordinator.protocol.model import (
    Group,
    PrefixState,
    Shard,
    VersionState,
    entry_id_key,
    validate_identifier,
)
from rsc_redis import lua

from .reading import Reader
from .replies import text

_DIR = Path(__file__).resolve().parent
MAX_FIELD_CHARS = 4096


@functools.cache
def _script_text(name: str) -> str:
    text = (_DIR / "operator_checks.lua").read_text() + "\n" + (_DIR / f"{name}.lua").read_text()
    return lua.keys_lua() + "\n" + text


class OperatorScripts:
    """``<name>.lua`` with ``operator_checks.lua`` in front, registered once per instance (EVALSHA)."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        self._scripts: dict[str, Script] = {}

    def __getitem__(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(_script_text(name))
        return script


def decode_fields(flat_or_pairs: Iterable[Any], entry_id: Any = None) -> dict[str, str]:
    """Entry fields for people: a packed ``envelope`` field unpacked into the envelope's fields (left as it
    is if it does not unpack), UTF-8 with replacement characters, each value cut at 4096 characters.
    An envelope whose ``produced_at_ms`` was not written (the producer's, coordinator/protocol/envelope.py)
    shows the ms of ``entry_id``, the entry's own id, when it is given: the time Redis appended it."""
    items = list(flat_or_pairs)
    pairs = zip(items[0::2], items[1::2], strict=True) if items and not isinstance(items[0], tuple) else items
    fields = dict(pairs)
    with contextlib.suppress(envelope.MalformedEnvelope):
        fields = envelope.fields_of(fields)
        if b"produced_at_ms" not in fields and b"routing_version" in fields and entry_id is not None:
            with contextlib.suppress(ValueError):
                at = str(entry_id_key(text(entry_id))[0])
                shown: dict[Any, Any] = {}
                for name, value in fields.items():  # in its place, after routing_version
                    shown[name] = value
                    if name == b"routing_version":
                        shown[b"produced_at_ms"] = at
                fields = shown
    return {text(k): text(v)[:MAX_FIELD_CHARS] for k, v in fields.items()}


def require_group(state: PrefixState | None, stream_prefix: str, consumer_group: str) -> Group:
    group = state.groups.get(consumer_group) if state is not None else None
    if group is None:
        raise GroupNotFound(
            f"group {consumer_group!r} does not exist on stream prefix {stream_prefix!r}",
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
        )
    return group


def load_group(reader: Reader, stream_prefix: str, consumer_group: str) -> tuple[int, PrefixState, Group]:
    """Redis time, the prefix's state with this one group loaded, and the group (or GROUP_NOT_FOUND)."""
    validate_identifier(consumer_group, "consumer_group")
    now_ms, state = reader.read(stream_prefix, [consumer_group])
    group = require_group(state, stream_prefix, consumer_group)
    assert state is not None
    return now_ms, state, group


def require_shard(state: PrefixState, shard: object) -> Shard:
    """A shard of the prefix's ACTIVE or DRAINING version, from its wire form ``v<version>:<index>``."""
    try:
        parsed = Shard.parse(shard)  # type: ignore[arg-type]
    except InvalidRequest as e:
        raise InvalidRequest(e.message, field="shard") from e
    if parsed not in state.topology.live_shards():
        live = ", ".join(
            f"v{v.version}:0..v{v.version}:{v.shard_count - 1} ({v.state.value})"
            for v in state.topology.versions
            if v.state is not VersionState.RETIRED
        )
        raise ShardNotFound(
            f"{parsed} is not a shard of stream prefix {state.topology.stream_prefix!r}; its shards are "
            f"{live}",
            field="shard",
            shard=str(parsed),
        )
    return parsed


def raise_for_status(status: str, stream_prefix: str, consumer_group: str, shard: Shard) -> None:
    """The refusals the operator scripts share (``operator_checks.lua``)."""
    if status == "OK":
        return
    if status == "NO_GROUP":
        raise GroupNotFound(
            f"group {consumer_group!r} does not exist on stream prefix {stream_prefix!r} (or has no "
            f"consumer group on {shard})",
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
        )
    if status == "RETIRED":
        raise ShardNotFound(
            f"{shard} was retired meanwhile: it is no longer a shard of {stream_prefix!r}",
            field="shard",
            shard=str(shard),
        )
    raise MetadataCorrupt(f"unexpected reply {status!r} from an operator script")
