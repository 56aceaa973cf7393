"""The fenced data plane: a member's reads, acks and take-overs of its shards' streams.

Theory of operation
-------------------
The coordinator decides who owns which shard at which epoch; this module makes Redis *enforce* it
(docs/protocol.md section 7). Every operation is one Lua function (``FCALL`` of the data plane's Redis
Functions library, :mod:`consumers.dataplane.library`) that, atomically and before it touches the
stream, reads from the metadata hash ``rsc:{P}:meta``

* ``m:<group>:<member>``: the member's epoch, present only while it is live;
* ``l:<group>:<member>``: its lease deadline, compared with Redis's ``TIME`` so a paused or partitioned
  member is fenced the instant its lease ends, without waiting for the coordinator's tick;
* ``o:<group>:<shard>``: ``"<owner> <shard assignment epoch> <R|B|V>"``

and only then runs ``XREADGROUP`` / ``XCLAIM`` / ``XACK`` / ``XGROUP DELCONSUMER``. A refusal is a
:class:`FenceStatus`, not an exception: it is the protocol working, and the caller acts on which one it
got. Because the check and the command are one function, there is no window in which a member fenced by
a commit can still read: Redis runs the commit and the function one after the other, never interleaved.

The Redis consumer group is named after the coordinator group and the Redis consumer after the member
id, so the pending list of a consumer is exactly what that member read and has not acked.

A member's steady state is :meth:`DataPlane.fetch`: for all its shards in one script, each shard's ack
of the batch it handled, then the read of its next batch, each shard fenced on its own (``fetch.lua``).

Reads never block (Lua cannot): an idle member waits for new entries on a plain blocking ``XREAD``
(:mod:`consumers.dataplane.wait`), then reads. Every call is one round trip. This class holds no state
but the client and the names of its functions, so one instance may serve every thread of a member. The
coordinator loads the library; :meth:`DataPlane.require_functions` checks at a member's start that it
is there, and a call that finds it missing raises :class:`consumers.errors.FunctionsNotLoaded`.

Every call is sent once: the client must not re-send commands after a connection error (see
:mod:`consumers.dataplane.connection`). When a call raises ``DataPlaneUnavailable`` its outcome is
unknown, and the caller recovers: a member re-reads its own pending entries before it reads new ones.

Besides entries, a read of new entries (and a claim) returns the shard's *redeliver token*
(``rsc:{P}:rd:<group>``, bumped by an operator's "redeliver"): a member that sees it change re-reads its
own pending entries.
The opt-in dead-letter policy uses :meth:`DataPlane.dead_letter`, which copies an entry to the group's
dead-letter stream ``rsc:{P}:dlq:<group>`` (signed: docs/protocol.md section 14) and acks it in one
fenced function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis

from consumers.errors import DataPlaneError, InvalidRequest
from coordinator.protocol.model import Shard
from rsc_redis.keys import dead_letter_key, lease_records_key, meta_key, redeliver_key, stream_key

from . import checks, connection, library, scripts
from .envelope import Delivery, Entry, decode_entries, decode_fetched
from .wait import EntryWait

MAX_ERROR_CHARS = 1000  # a dead letter's dlq_error (docs/protocol.md, "Dead-letter entry format")


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
    # The shard's redeliver counter as a read of new entries or a claim saw it ("0" before any redeliver
    # request); "" for re-reads of own pending entries, which do not look at it.
    redeliver_token: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FenceStatus.OK


@dataclass(frozen=True, slots=True)
class ShardFetch:
    """One shard of a :meth:`DataPlane.fetch`: what to acknowledge, and whether to read."""

    shard: Shard
    epoch: int  # the member epoch presented for this shard
    ack_ids: Sequence[str] = ()  # handled since this shard's last fetch: acknowledged before the read
    read: bool = True  # False: acknowledge only
    token: str | None = None  # the shard's redeliver token as the caller knows it (None: not known)
    # With read: when nothing is new, report the group's last-delivered id (FetchResult.last_id)
    wait: bool = False


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What a :meth:`DataPlane.fetch` did for one shard."""

    status: FenceStatus  # the read's status (or the ack's, for an ack-only fetch)
    acked: bool  # the ack ids were acknowledged (False: the fence refused before; nothing changed)
    entries: list[Entry]
    redeliver_token: str = ""  # as in ReadResult, when the shard was read; "" otherwise
    # ShardFetch.wait and nothing new: the group's last-delivered id on the shard, after which new
    # entries come (what a member waits on: consumers/member/waiter.py); "" otherwise
    last_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FenceStatus.OK


class DeadLetterOutcome(StrEnum):
    DEAD_LETTERED = "DEAD_LETTERED"  # copied to the dead-letter stream and acked
    NOT_PENDING = "NOT_PENDING"  # not pending for this member (already acked or skipped): nothing changed
    GONE = "GONE"  # pending, but deleted from the stream (trimmed): nothing to copy; acked


@dataclass(frozen=True, slots=True)
class DeadLetterResult:
    status: FenceStatus
    outcome: DeadLetterOutcome | None = None  # None when fenced
    dead_letter_id: str | None = None  # the copy's id in the dead-letter stream
    deliveries: int = 0  # the entry's delivery count, as recorded in the copy

    @property
    def ok(self) -> bool:
        return self.status is FenceStatus.OK

    @property
    def dead_lettered(self) -> bool:
        return self.outcome is DeadLetterOutcome.DEAD_LETTERED


class LeaseRenewal(StrEnum):
    """The outcome of :meth:`DataPlane.renew_lease` (``renew_lease.lua``)."""

    RENEWED = "OK"  # the lease lasts until Redis's TIME + ``ttl_ms``
    # Not live, the lease already ended, or its revocation deadline passed: drop everything, rejoin.
    MEMBER_FENCED = "MEMBER_FENCED"
    STALE_EPOCH = "STALE_EPOCH"  # live at another epoch: only a heartbeat can say which; nothing changed
    NO_LEASE_TTL = "NO_LEASE_TTL"  # the metadata holds no lease TTL for it yet; nothing changed


@dataclass(frozen=True, slots=True)
class LeaseRenewalResult:
    outcome: LeaseRenewal
    # RENEWED: for how long, from the script's run: the group's lease TTL, or less when the member's
    # revocation deadline comes first.
    ttl_ms: int = 0

    @property
    def renewed(self) -> bool:
        return self.outcome is LeaseRenewal.RENEWED


class DataPlane:
    """Fenced stream operations of one consumer group on one stream prefix.

    ``client`` must not decode responses (payloads are bytes) and must not re-send commands (build it
    with :func:`consumers.dataplane.redis_client`); both are refused here. A call that fails raises
    :class:`consumers.errors.DataPlaneUnavailable` (retriable), and its outcome is unknown (see that
    class). Thread-safe.
    """

    def __init__(self, client: redis.Redis, stream_prefix: str, consumer_group: str) -> None:
        scripts.require_bytes_client(client)
        connection.refuse_resending_client(client)
        self.client = client
        self.stream_prefix = checks.identifier(stream_prefix, "stream_prefix")
        self.consumer_group = checks.identifier(consumer_group, "consumer_group")
        self._meta = meta_key(self.stream_prefix)
        self._redeliver = redeliver_key(self.stream_prefix, self.consumer_group)
        self._lease_records = lease_records_key(self.stream_prefix)
        self._dead_letters = dead_letter_key(self.stream_prefix, self.consumer_group)
        self._shards: dict[Shard, tuple[str, str]] = {}
        self._fetch = scripts.hot_function(client, "fetch")  # the steady state's call
        self._read_new = scripts.function(client, "read_new")
        self._read_pending = scripts.function(client, "read_pending")
        self._claim = scripts.function(client, "claim")
        self._ack = scripts.function(client, "ack")
        self._delete_ghosts = scripts.function(client, "delete_ghosts")
        self._dead_letter = scripts.function(client, "dead_letter")
        self._renew_lease = scripts.function(client, "renew_lease")

    def require_functions(self) -> None:
        """Raise :class:`consumers.errors.FunctionsNotLoaded` unless the data plane's library of this code
        version is loaded (on every primary): a member checks it once at start
        (:func:`consumers.dataplane.library.require_loaded`)."""
        library.require_loaded(self.client)

    def stream_key(self, shard: Shard) -> str:
        return stream_key(self.stream_prefix, shard)

    def entry_wait(self) -> EntryWait:
        """A dedicated connection on which one member waits for new entries on its idle shards."""
        return EntryWait(self.client, self._meta, self.stream_key(Shard(1, 0)))

    def _shard_keys(self, shard: Shard) -> tuple[str, str]:
        """A shard's wire form and stream key, computed once (a fetch names every shard of the member)."""
        found = self._shards.get(shard)
        if found is None:
            found = self._shards[shard] = (str(shard), self.stream_key(shard))
        return found

    # ------------------------------------------------------------------------------------------ reads

    def fetch(self, member_id: str, shards: Sequence[ShardFetch], count: int) -> list[FetchResult]:
        """For every shard of ``shards``, in one call: acknowledge its ``ack_ids``, then read up to
        ``count`` new entries (``XREADGROUP ... >``) with its redeliver token. One result per shard, in
        order. Each shard is fenced on its own (its acks like :meth:`ack`, its read like :meth:`read`):
        a refusal for one shard does not touch the others. A member that is not live, or whose lease
        ended, gets ``MEMBER_FENCED`` for every shard and nothing is acked or read.

        This is the steady state of a member: the ack of batch n rides in the read of batch n+1, and
        idle shards cost one call for all of them (and almost no reply: a shard whose fence passed, with
        nothing new and the ``token`` the caller knows, is not in the script's reply, unless it asked
        to ``wait``: then its ``last_id`` is).
        ``DataPlaneUnavailable`` leaves the outcome of every part unknown (acks and reads alike), as with
        any other call."""
        member = checks.member_id(member_id)
        keys: list[str] = [self._meta, self._redeliver]
        args: list[Any] = [self.consumer_group, member, checks.count(count), len(shards)]
        for item in shards:
            if not isinstance(item, ShardFetch) or not isinstance(item.shard, Shard):
                raise InvalidRequest(f"shards must hold ShardFetch values; got {item!r}", field="shards")
            if isinstance(item.ack_ids, str | bytes):
                raise InvalidRequest("ack_ids must be a list of entry ids, not one id", field="ack_ids")
            ids = checks.entry_ids(item.ack_ids, "ack_ids")
            wire, key = self._shard_keys(item.shard)
            keys.append(key)
            known = "" if item.token is None else item.token
            read = (2 if item.wait else 1) if item.read else 0
            args += [wire, checks.epoch(item.epoch), read, known, len(ids), *ids]
        if not shards:
            return []
        keys.append(self._lease_records)  # the fence's last key
        with scripts.translate_redis_errors(f"fetch of {len(shards)} shards of {self.stream_prefix!r}"):
            reply = self._fetch(keys=keys, args=args)
        if not isinstance(reply, list) or not reply:
            raise DataPlaneError(f"fetch: unexpected script reply {reply!r}")
        status = _status(reply)
        if status is not FenceStatus.OK:
            return [FetchResult(status, False, []) for _ in shards]
        # A shard the script does not report had no news: fence passed, acks applied, nothing new.
        results = [FetchResult(status, True, [], (i.token or "") if i.read else "") for i in shards]
        try:
            for report in reply[1]:
                at = int(report[0]) - 1
                results[at] = _fetch_result(report[1:], shards[at].shard)
        except (IndexError, TypeError, ValueError) as e:
            raise DataPlaneError(f"fetch: unexpected script reply {reply!r}") from e
        return results

    def read(self, member_id: str, member_epoch: int, shard: Shard, count: int) -> ReadResult:
        """Up to ``count`` entries never delivered to this group (``XREADGROUP ... >``), non-blocking,
        with the shard's redeliver token."""
        args = [checks.count(count)]
        reply = self._run(self._read_new, "read", member_id, member_epoch, shard, args, self._redeliver)
        result = _read_result(reply, shard, Delivery.NEW)
        if not result.ok:
            return result
        return ReadResult(result.status, result.entries, _token(reply, 2))

    def read_own_pending(
        self, member_id: str, member_epoch: int, shard: Shard, count: int, after_id: str = "0-0"
    ) -> ReadResult:
        """Up to ``count`` of this member's own pending entries with ids above ``after_id``, in id order.

        For a member that lost what it read (a reconnect after ``DataPlaneUnavailable``, a restart that
        kept its member id), or that hands an entry out again (a failed handler under the "redeliver"
        policy, an operator's redeliver). Page on with the last entry id; an empty result means nothing
        is left. Entries deleted from the stream while pending are acked and skipped. Each entry's
        ``deliveries`` is its delivery count after this read (which bumps it).
        """
        args = [checks.count(count), checks.entry_id(after_id, "after_id")]
        reply = self._run(self._read_pending, "read_own_pending", member_id, member_epoch, shard, args)
        return _read_result(reply, shard, Delivery.PENDING, counts_at=2)

    def claim_orphans(
        self, member_id: str, member_epoch: int, shard: Shard, count: int, start_id: str = "0-0"
    ) -> tuple[ReadResult, str]:
        """Take over entries pending for *other* consumers of this shard (its previous owners).

        Scans up to ``count`` pending entries from the cursor ``start_id`` and claims (min-idle 0) those
        not already this member's. Returns the claimed entries and the next cursor: ``"0-0"`` when the
        scan is complete; otherwise pass it back (a page may be empty while the scan is not). A new
        owner processes these before it reads new entries. Allowed only on a readable (R) shard. The
        result carries the shard's redeliver token too, as :meth:`read` does: the token a new owner
        starts from.
        """
        args = [checks.count(count), checks.entry_id(start_id, "start_id")]
        reply = self._run(self._claim, "claim_orphans", member_id, member_epoch, shard, args, self._redeliver)
        result = _read_result(reply, shard, Delivery.CLAIMED, counts_at=3)
        if not result.ok:
            return result, "0-0"
        return ReadResult(result.status, result.entries, _token(reply, 4)), _text(reply[2])

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

    def dead_letter(
        self, member_id: str, member_epoch: int, shard: Shard, entry_id: str, error: str
    ) -> DeadLetterResult:
        """Copy one of this member's pending entries to the group's dead-letter stream and ack it, in one
        fenced script (fenced like an ack). ``error`` is the handler's exception, ``"<Type>: <message>"``;
        it is truncated to :data:`MAX_ERROR_CHARS`. The copy records Redis's delivery count of the entry.
        An entry that is not pending for this member is left alone (``NOT_PENDING``), so a call repeated
        after a lost reply changes nothing more."""
        if not isinstance(error, str):
            raise InvalidRequest(f"error must be a str; got {type(error).__name__}", field="error")
        # "replace": an exception message may carry lone surrogates (a bytes key decoded leniently).
        text = error[:MAX_ERROR_CHARS].encode("utf-8", "replace")
        args = [checks.entry_id(entry_id, "entry_id"), text]
        reply = self._run(
            self._dead_letter, "dead_letter", member_id, member_epoch, shard, args, self._dead_letters
        )
        status = _status(reply)
        if status is not FenceStatus.OK:
            return DeadLetterResult(status)
        outcome = DeadLetterOutcome(_text(reply[1]))
        if outcome is not DeadLetterOutcome.DEAD_LETTERED:
            return DeadLetterResult(status, outcome)
        return DeadLetterResult(status, outcome, _text(reply[2]), int(reply[3]))

    # ------------------------------------------------------------------------------------------ lease

    def renew_lease(self, member_id: str, member_epoch: int) -> LeaseRenewalResult:
        """Renew the member's own lease in Redis, without the coordinator (``renew_lease.lua``;
        docs/protocol.md section 5): for the group's lease TTL from the script's run, at
        ``member_epoch`` only, never bringing back a lease that has ended. Changes nothing else."""
        member = checks.member_id(member_id)
        epoch = checks.epoch(member_epoch)
        if epoch <= 0:
            raise InvalidRequest(
                f"member_epoch must be positive to renew a lease; got {epoch}", field="member_epoch"
            )
        with scripts.translate_redis_errors(f"lease renewal in {self.stream_prefix!r}"):
            reply = self._renew_lease(
                keys=[self._meta, self._lease_records], args=[self.consumer_group, member, epoch]
            )
        if not isinstance(reply, list) or not reply:
            raise DataPlaneError(f"renew_lease: unexpected script reply {reply!r}")
        try:
            outcome = LeaseRenewal(_text(reply[0]))
        except ValueError as e:
            raise DataPlaneError(f"renew_lease: unexpected outcome {reply[0]!r}") from e
        ttl = int(reply[1]) if outcome is LeaseRenewal.RENEWED and len(reply) > 1 else 0
        return LeaseRenewalResult(outcome, ttl)

    # ------------------------------------------------------------------------------------------ internals

    def _run(
        self,
        script: scripts.Function,
        what: str,
        member_id: str,
        member_epoch: int,
        shard: Shard,
        extra: list[Any],
        *extra_keys: str,
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
            keys = [self._meta, self.stream_key(shard), *extra_keys, self._lease_records]
            reply = script(keys=keys, args=[*args, *extra])
        if not isinstance(reply, list) or not reply:
            raise DataPlaneError(f"{what}: unexpected script reply {reply!r}")
        return reply


# A reply's status, as Redis sends it (bytes), to the member: a dict lookup, not an Enum call per reply.
_STATUSES: dict[Any, FenceStatus] = {s.value.encode(): s for s in FenceStatus}


def _status(reply: list[Any]) -> FenceStatus:
    first = reply[0]
    status = _STATUSES.get(first) if isinstance(first, bytes) else None
    if status is not None:
        return status
    try:
        return FenceStatus(_text(reply[0]))
    except ValueError as e:
        raise DataPlaneError(f"unexpected fence status {reply[0]!r}") from e


def _read_result(
    reply: list[Any], shard: Shard, delivery: Delivery, counts_at: int | None = None
) -> ReadResult:
    """``counts_at``: where the reply holds the delivery counts (absent for new entries: all 1)."""
    status = _status(reply)
    if status is not FenceStatus.OK:
        return ReadResult(status, [])
    counts = reply[counts_at] if counts_at is not None and len(reply) > counts_at else ()
    return ReadResult(status, decode_entries(reply[1], shard, delivery, counts))


def _fetch_result(part: list[Any], shard: Shard) -> FetchResult:
    status, acked = _status(part), int(part[1]) >= 0
    if len(part) < 4:
        return FetchResult(status, acked, [])
    last = _text(part[4]) if len(part) > 4 else ""
    return FetchResult(status, acked, decode_fetched(part[2], shard), _text(part[3]), last)


def _token(reply: list[Any], at: int) -> str:
    """The redeliver token at ``reply[at]`` ("0": never asked)."""
    return _text(reply[at]) if len(reply) > at else "0"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
