"""Backlog actions: what operators do to a group's entries, skip, redeliver and release from a
migration's drain (docs/protocol.md section 14). The figures they confirm against come from
``backlog_reads.py``; dead letters are in ``dead_letters.py``.

Theory of operation
-------------------
The actions that change entries are Lua scripts that check, in the same script, that the group still
exists and the shard's version is still ACTIVE or DRAINING (``operator_checks.lua``), so a refused
action changes nothing and an action racing a group deletion leaves nothing behind:
* ``skip_entries``: acknowledge listed ids (all must be pending, or none is acked) or every pending
  entry older than an age, returning their fields for the audit record (``skip.lua``).
  ``pending_entries`` runs the same script's selection read-only: what a skip with the same arguments
  would acknowledge now (a confirmation page lists it, then skips exactly those ids);
* ``redeliver``: bump the shard's counter in ``rsc:{P}:rd:<G>``; the owner re-reads its pending entries
  when its fenced read returns a new value (``redeliver.lua``);
* ``release_drain``: the core command :class:`ReleaseDrain`, after the count the operator confirmed is
  checked against the current one, naming the shards that count covered (the core refuses if the group
  has others by commit time); then the group's Redis consumer groups on the released shards are
  destroyed (the group will never read them again, and they would hold back the deletion of the
  retired version's streams) by ``forget_released.lua``, which re-checks that the group as it is then
  has them drained: a group deleted and created again meanwhile keeps the consumer groups it needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import Command, ReleaseDrain
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    CoordinatorError,
    EntryNotPending,
    InvalidRequest,
)
from coordinator.protocol.model import (
    MAX_ENTRY_IDS,
    MAX_RETENTION_MS,
    Shard,
    entry_id_key,
    require_int_in_range,
    validate_entry_ids,
)
from coordinator.protocol.resharding import release_drain
from rsc_redis import keys as rkeys

from .backlog_reads import BacklogReads
from .operator_scripts import OperatorScripts, decode_fields, load_group, raise_for_status, require_shard
from .reading import Reader
from .replies import text
from .replies import translate_redis_errors as redis_errors

log = logging.getLogger(__name__)

MAX_AGE_MS = MAX_RETENTION_MS  # one year: the largest older_than_ms


class BacklogActions:
    """The operators' actions on entries. ``execute`` runs a core command through the store's full path
    (``Committer.execute``, committing.py); ``describe_prefix`` is the store's prefix view, returned by
    a release."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        reader: Reader,
        scripts: OperatorScripts,
        reads: BacklogReads,
        *,
        execute: Callable[[Command, list[str] | None], Any],
        describe_prefix: Callable[[str], dict[str, Any]],
    ) -> None:
        self.client = client
        self.reader = reader
        self.scripts = scripts
        self.reads = reads
        self.execute = execute
        self.describe_prefix = describe_prefix

    # -- skip, and what a skip would take -------------------------------------------------------------

    def skip_entries(
        self,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        *,
        entry_ids: list[str] | None = None,
        older_than_ms: int | None = None,
        limit: int = MAX_ENTRY_IDS,
    ) -> dict[str, Any]:
        """Acknowledge pending entries without handling them; returns each one's id, consumer, delivery
        count and fields. ``entry_ids``: all of them must be pending, else ``ENTRY_NOT_PENDING`` and
        nothing is acknowledged. ``older_than_ms``: the oldest pending entries whose id is at least that
        old by Redis ``TIME``, at most ``limit``."""
        if (entry_ids is None) == (older_than_ms is None):
            raise InvalidRequest("give exactly one of entry_ids and older_than_ms", field="entry_ids")
        parsed, rows, missing, _now = self._select(
            "skip", stream_prefix, consumer_group, shard, entry_ids, older_than_ms, limit
        )
        if missing:
            raise EntryNotPending(
                f"not pending for group {consumer_group!r} on {parsed}: {', '.join(missing[:10])}"
                f"{', ...' if len(missing) > 10 else ''}; nothing was skipped",
                entry_ids=missing,
                shard=str(parsed),
            )
        skipped = [
            {
                "id": text(entry_id),
                "consumer": text(consumer),
                "deliveries": int(deliveries),
                "fields": decode_fields(flat or (), entry_id),  # {} for an entry trimmed while pending
            }
            for entry_id, consumer, _idle, deliveries, flat in rows
        ]
        return {"shard": str(parsed), "skipped": skipped}

    def pending_entries(
        self,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        *,
        entry_ids: list[str] | None = None,
        older_than_ms: int | None = None,
        limit: int = MAX_ENTRY_IDS,
    ) -> dict[str, Any]:
        """Read-only: the pending entries :meth:`skip_entries` with the same arguments would acknowledge
        now (the same script's selection, so the two cannot differ), or with neither ``entry_ids`` nor
        ``older_than_ms`` the ``limit`` oldest pending entries. Returns ``{"shard", "entries": [{"id",
        "consumer", "deliveries", "idle_ms", "age_ms", "fields"}], "not_pending": [ids]}``: ``fields``
        is None for an entry deleted from the stream while pending; ``not_pending`` holds the listed
        ids that are not pending (where a skip would refuse). A shard the group has no Redis consumer
        group on (released from a drain) has nothing pending."""
        if entry_ids is not None and older_than_ms is not None:
            raise InvalidRequest("give at most one of entry_ids and older_than_ms", field="entry_ids")
        parsed, rows, missing, now_ms = self._select(
            "list", stream_prefix, consumer_group, shard, entry_ids, older_than_ms, limit
        )
        entries = [
            {
                "id": text(entry_id),
                "consumer": text(consumer),
                "deliveries": int(deliveries),
                "idle_ms": int(idle),
                "age_ms": max(0, now_ms - entry_id_key(text(entry_id))[0]),
                "fields": None if flat is None else decode_fields(flat, entry_id),
            }
            for entry_id, consumer, idle, deliveries, flat in rows
        ]
        return {"shard": str(parsed), "entries": entries, "not_pending": missing}

    def _select(
        self,
        action: str,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        entry_ids: list[str] | None,
        older_than_ms: int | None,
        limit: int,
    ) -> tuple[Shard, list[Any], list[str], int]:
        """Run ``skip.lua``'s selection (``action`` 'skip' or 'list'): the shard, the selected rows
        ``(id, consumer, idle ms, deliveries, flat fields | None)``, the listed ids not pending and Redis
        time. Validation first: a refused request reads nothing."""
        require_int_in_range(limit, "limit", 1, MAX_ENTRY_IDS)
        if entry_ids is not None:
            ids = validate_entry_ids(entry_ids, "entry_ids")
            if len(ids) > limit:
                raise InvalidRequest(f"at most limit={limit} entry ids", field="entry_ids")
            mode_args = ["ids", str(limit), *ids]
        elif older_than_ms is not None:
            require_int_in_range(older_than_ms, "older_than_ms", 0, MAX_AGE_MS)
            mode_args = ["older", str(limit), str(older_than_ms)]
        else:
            mode_args = ["oldest", str(limit)]
        _now, state, _group = load_group(self.reader, stream_prefix, consumer_group)
        parsed = require_shard(state, shard)
        keys = [rkeys.meta_key(stream_prefix), rkeys.stream_key(stream_prefix, parsed)]
        with redis_errors():
            reply = self.scripts["skip"](
                keys=keys, args=[consumer_group, str(parsed.version), action, *mode_args]
            )
        status = text(reply[0])
        if status == "NOT_PENDING":
            return parsed, [], [text(i) for i in reply[1]], 0
        raise_for_status(status, stream_prefix, consumer_group, parsed)
        return parsed, list(reply[1]), [text(i) for i in reply[2]], int(reply[3])

    # -- redeliver -------------------------------------------------------------------------------------

    def redeliver(self, stream_prefix: str, consumer_group: str, shard: str) -> dict[str, Any]:
        """Ask the shard's owner to re-read its own pending entries now (``HINCRBY rsc:{P}:rd:<G>``)."""
        _now, state, group = load_group(self.reader, stream_prefix, consumer_group)
        parsed = require_shard(state, shard)
        keys = [rkeys.meta_key(stream_prefix), rkeys.redeliver_key(stream_prefix, consumer_group)]
        with redis_errors():
            reply = self.scripts["redeliver"](
                keys=keys, args=[consumer_group, str(parsed), str(parsed.version)]
            )
        raise_for_status(text(reply[0]), stream_prefix, consumer_group, parsed)
        return {"shard": str(parsed), "redeliver_token": int(reply[1]), "owner": group.owners().get(parsed)}

    # -- release from a migration's drain -------------------------------------------------------------

    def unconsumed_for_release(self, stream_prefix: str, consumer_group: str) -> int:
        """How many entries releasing the group from the drain would abandon (what a confirmation shows).
        Raises what :meth:`release_drain` would: ``GROUP_HAS_LIVE_MEMBERS``, ``MIGRATION_NOT_ACTIVE``."""
        now_ms, state, _group = load_group(self.reader, stream_prefix, consumer_group)
        release_drain(state, consumer_group, now_ms)  # the core's refusal, if any; the result is dropped
        return self.reads.unconsumed(state, consumer_group)[1]

    def release_drain(
        self, stream_prefix: str, consumer_group: str, *, confirm_unconsumed: int
    ) -> dict[str, Any]:
        """Stop waiting for a group without live members in the active migration: its undrained old
        shards are marked drained (completing the migration if it was the last group holding it back).
        ``confirm_unconsumed`` must equal :meth:`unconsumed_for_release` (else
        ``CONFIRMATION_MISMATCH``, details ``unconsumed_entries``): nothing is abandoned unseen."""
        require_int_in_range(confirm_unconsumed, "confirm_unconsumed", 0, 2**63 - 1)
        now_ms, state, _group = load_group(self.reader, stream_prefix, consumer_group)
        release_drain(state, consumer_group, now_ms)  # refuse before counting, as the commit would
        shards, unconsumed = self.reads.unconsumed(state, consumer_group)
        if unconsumed != confirm_unconsumed:
            raise ConfirmationMismatch(
                f"group {consumer_group!r} has {unconsumed} unconsumed entries on the old shards, not "
                f"{confirm_unconsumed}: look again and confirm the current figure",
                unconsumed_entries=unconsumed,
                confirm_unconsumed=confirm_unconsumed,
            )
        # The core re-checks live members, the migration and the shards counted atomically with the
        # commit: a member that joined meanwhile, or a migration that completed and another that started,
        # makes this refuse, having written nothing.
        command = ReleaseDrain(stream_prefix=stream_prefix, consumer_group=consumer_group, shards=shards)
        try:
            self.execute(command, None)
        except ConfirmationMismatch as e:
            current = self._current_unconsumed(stream_prefix, consumer_group)
            e.details.setdefault("unconsumed_entries", current)
            raise
        self._forget_released(stream_prefix, consumer_group, shards)
        return {
            "released": [str(s) for s in sorted(shards)],
            "unconsumed_entries": unconsumed,
            "prefix": self.describe_prefix(stream_prefix),
        }

    def _current_unconsumed(self, stream_prefix: str, consumer_group: str) -> int | None:
        """The figure a refused confirmation should have named (None if it cannot be had any more)."""
        try:
            return self.unconsumed_for_release(stream_prefix, consumer_group)
        except CoordinatorError:
            return None

    def _forget_released(self, stream_prefix: str, consumer_group: str, shards: Iterable[Shard]) -> None:
        """Destroy the group's Redis consumer groups on the released shards: it never reads them again,
        and their pending lists would otherwise keep the retired streams from being deleted. Only where
        the group, as it is when the script runs, has the shard drained (``forget_released.lua``). Best
        effort after the commit (like ``delete_group``): the release stands if this fails."""
        ordered = sorted(shards)
        if not ordered:
            return
        keys = [rkeys.meta_key(stream_prefix), *(rkeys.stream_key(stream_prefix, s) for s in ordered)]
        try:
            with redis_errors():
                self.scripts["forget_released"](keys=keys, args=[consumer_group, *(str(s) for s in ordered)])
        except CoordinatorError as e:
            log.warning(
                "group %r of %r released from the drain; its consumer groups on %s were not destroyed: %s",
                consumer_group,
                stream_prefix,
                [str(s) for s in ordered],
                e,
            )
