"""The fenced data plane: a member's reads, acks and take-overs of its shards' streams.

Theory of operation
-------------------
The coordinator decides who owns which shard at which epoch; this module makes Redis *enforce* it
(docs/protocol.md section 7). Every operation is one Lua script that, atomically and before it touches
the stream, reads from the metadata hash ``rsc:{P}:meta``

* ``m:<group>:<member>``: the member's epoch, present only while it is live;
* ``l:<group>:<member>``: its lease deadline, compared with Redis's ``TIME`` so a paused or partitioned
  member is fenced the instant its lease ends, without waiting for the coordinator's tick;
* ``o:<group>:<shard>``: ``"<owner> <shard assignment epoch> <R|B|V>"``

and only then runs ``XREADGROUP`` / ``XCLAIM`` / ``XACK`` / ``XGROUP DELCONSUMER``. A refusal is a
:class:`FenceStatus`, not an exception: it is the protocol working, and the caller acts on which one it
got. Because the check and the command are one script, there is no window in which a member fenced by a
commit can still read: Redis runs the commit and the script one after the other, never interleaved.

The Redis consumer group is named after the coordinator group and the Redis consumer after the member
id, so the pending list of a consumer is exactly what that member read and has not acked.

Reads never block (Lua cannot): members poll. Every call is one round trip. This class holds no state
but the client and the registered scripts, so one instance may serve every thread of a member.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis
from redis.commands.core import Script

from consumers.errors import DataPlaneError, InvalidRequest
from coordinator.protocol.model import Shard
from coordinator.store.codec import meta_key, stream_key

from . import checks, scripts
from .envelope import Delivery, Entry, decode_entries


class FenceStatus(StrEnum):
    """The outcome of every fenced operation, and what the member must do about it."""

    OK = "OK"
    # The member is not live in the group, or its lease ended by Redis's clock: drop every shard at once
    # and rejoin with epoch 0.
    MEMBER_FENCED = "MEMBER_FENCED"
    # The shard is not assigned to this member (or, for reads and claims, is being revoked from it):
    # stop this shard and heartbeat.
    NOT_OWNER = "NOT_OWNER"
    # The epoch presented is outside [shard assignment epoch, member epoch]: heartbeat now and retry
    # with the epoch the response carries.
    STALE_EPOCH = "STALE_EPOCH"
    # Strict ordering holds the shard back until the old shards it depends on drain: do not read yet.
    NOT_READABLE = "NOT_READABLE"


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: FenceStatus
    entries: list[Entry]

    @property
    def ok(self) -> bool:
        return self.status is FenceStatus.OK


class DataPlane:
    """Fenced stream operations of one consumer group on one stream prefix.

    ``client`` must not decode responses (payloads are bytes). Its retry policy applies to every call;
    when it gives up, :class:`consumers.errors.DataPlaneUnavailable` (retriable) is raised and the
    outcome of the call is unknown (see that class). Thread-safe.
    """

    def __init__(self, client: redis.Redis, stream_prefix: str, consumer_group: str) -> None:
        scripts.require_bytes_client(client)
        self.client = client
        self.stream_prefix = checks.identifier(stream_prefix, "stream_prefix")
        self.consumer_group = checks.identifier(consumer_group, "consumer_group")
        self._meta = meta_key(self.stream_prefix)
        self._read_new = scripts.register(client, "read_new")
        self._read_pending = scripts.register(client, "read_pending")
        self._claim = scripts.register(client, "claim")
        self._ack = scripts.register(client, "ack")
        self._delete_ghosts = scripts.register(client, "delete_ghosts")

    def stream_key(self, shard: Shard) -> str:
        return stream_key(self.stream_prefix, shard)

    # ------------------------------------------------------------------------------------------ reads

    def read(self, member_id: str, member_epoch: int, shard: Shard, count: int) -> ReadResult:
        """Up to ``count`` entries never delivered to this group (``XREADGROUP ... >``), non-blocking."""
        reply = self._run(self._read_new, "read", member_id, member_epoch, shard, [checks.count(count)])
        return _read_result(reply, shard, Delivery.NEW)

    def read_own_pending(
        self, member_id: str, member_epoch: int, shard: Shard, count: int, after_id: str = "0-0"
    ) -> ReadResult:
        """Up to ``count`` of this member's own pending entries with ids above ``after_id``, in id order.

        For a member that lost what it read (a reconnect after ``DataPlaneUnavailable``, a restart that
        kept its member id). Page on with the last entry id; an empty result means nothing is left.
        Entries deleted from the stream while pending are acked and skipped.
        """
        args = [checks.count(count), checks.entry_id(after_id, "after_id")]
        reply = self._run(self._read_pending, "read_own_pending", member_id, member_epoch, shard, args)
        return _read_result(reply, shard, Delivery.PENDING)

    def claim_orphans(
        self, member_id: str, member_epoch: int, shard: Shard, count: int, start_id: str = "0-0"
    ) -> tuple[ReadResult, str]:
        """Take over entries pending for *other* consumers of this shard (its previous owners).

        Scans up to ``count`` pending entries from the cursor ``start_id`` and claims (min-idle 0) those
        not already this member's. Returns the claimed entries and the next cursor: ``"0-0"`` when the
        scan is complete; otherwise pass it back (a page may be empty while the scan is not). A new
        owner processes these before it reads new entries. Allowed only on a readable (R) shard.
        """
        args = [checks.count(count), checks.entry_id(start_id, "start_id")]
        reply = self._run(self._claim, "claim_orphans", member_id, member_epoch, shard, args)
        result = _read_result(reply, shard, Delivery.CLAIMED)
        cursor = _text(reply[2]) if result.ok else "0-0"
        return result, cursor

    # ------------------------------------------------------------------------------------------ writes

    def ack(self, member_id: str, member_epoch: int, shard: Shard, entry_ids: Sequence[str]) -> FenceStatus:
        """Acknowledge entries. Allowed on assigned shards (readable or held back) and on shards being
        revoked from this member: it finishes what it read before it releases them. An empty list only
        checks the fence."""
        if isinstance(entry_ids, str | bytes):
            raise InvalidRequest("entry_ids must be a list of entry ids, not one id", field="entry_ids")
        ids = [checks.entry_id(i, "entry_ids") for i in entry_ids]
        return _status(self._run(self._ack, "ack", member_id, member_epoch, shard, ids))

    def delete_ghost_consumers(self, member_id: str, member_epoch: int, shard: Shard) -> int:
        """Delete every other Redis consumer of this group on the shard that has nothing pending (the
        leftovers of earlier owners). Fenced like a claim; returns how many were deleted (0 if fenced)."""
        reply = self._run(self._delete_ghosts, "delete_ghost_consumers", member_id, member_epoch, shard, [])
        return int(reply[1]) if _status(reply) is FenceStatus.OK else 0

    # ------------------------------------------------------------------------------------------ internals

    def _run(
        self, script: Script, what: str, member_id: str, member_epoch: int, shard: Shard, extra: list[Any]
    ) -> list[Any]:
        if not isinstance(shard, Shard):
            raise InvalidRequest(f"shard must be a Shard; got {shard!r}", field="shard")
        args: list[Any] = [
            self.consumer_group,
            checks.member_id(member_id),
            checks.epoch(member_epoch),
            str(shard),
        ]
        with scripts.translate_redis_errors(f"{what} of shard {shard} of {self.stream_prefix!r}"):
            reply = script(keys=[self._meta, self.stream_key(shard)], args=[*args, *extra])
        if not isinstance(reply, list) or not reply:
            raise DataPlaneError(f"{what}: unexpected script reply {reply!r}")
        return reply


def _status(reply: list[Any]) -> FenceStatus:
    try:
        return FenceStatus(_text(reply[0]))
    except ValueError as e:
        raise DataPlaneError(f"unexpected fence status {reply[0]!r}") from e


def _read_result(reply: list[Any], shard: Shard, delivery: Delivery) -> ReadResult:
    status = _status(reply)
    if status is not FenceStatus.OK:
        return ReadResult(status, [])
    return ReadResult(status, decode_entries(reply[1], shard, delivery))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
