"""Entries of a group's shards, seen and handled by operators: backlog figures, skip, redeliver and release
from a migration's drain (docs/protocol.md section 14). Dead letters are in ``dead_letters.py``.

A mixin of :class:`coordinator.store.redis_store.MetadataStore` (it uses ``self.client``, ``self._read``
and ``self._execute``).

Theory of operation
-------------------
The metadata hash knows who owns a shard; only the stream knows how far a group got in it. The figures
therefore come from Redis per shard, in two pipelined round trips whatever the shard count: ``XINFO
GROUPS`` (pending count, last-delivered id, ``lag``: entries not yet delivered, which Redis 7 may
report as nil when it cannot compute it) and ``XLEN`` for every shard, then ``XPENDING - + n`` only
for the shards that have pending entries (the oldest one's id, idle time, consumer, and the highest
delivery count among the oldest ``n``). Ages are Redis ``TIME`` (read with the metadata) minus the ms
part of the entry id: the clock the ids are made from, never this host's.

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

import contextlib
import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from redis.commands.core import Script

from coordinator.protocol import envelope
from coordinator.protocol.commands import ReleaseDrain
from coordinator.protocol.describe import shard_assignment
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    CoordinatorError,
    EntryNotPending,
    GroupNotFound,
    InvalidRequest,
    MetadataCorrupt,
    UnknownShard,
)
from coordinator.protocol.model import (
    MAX_ENTRY_IDS,
    MAX_RETENTION_MS,
    Group,
    PrefixState,
    Shard,
    VersionState,
    entry_id_key,
    require_int_in_range,
    validate_entry_ids,
    validate_identifier,
)
from coordinator.protocol.resharding import release_drain, undrained_shards
from rsc_redis import keys as rkeys
from rsc_redis import lua

from .replies import text
from .replies import translate_redis_errors as redis_errors

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PrefixSnapshot:
    now_ms: int
    state: PrefixState
    backlog: dict[str, list[dict[str, Any]]]  # group -> its backlog rows
    undrained: dict[str, tuple[Shard, ...]]  # group -> old shards it has yet to drain


_DIR = Path(__file__).resolve().parent
MAX_AGE_MS = MAX_RETENTION_MS  # one year: the largest older_than_ms
MAX_FIELD_CHARS = 4096
PENDING_SAMPLE = 100  # the oldest pending entries read per shard for the backlog's max_deliveries


# ---------------------------------------------------------------------------------------------- helpers


@functools.cache
def _script_text(name: str) -> str:
    text = (_DIR / "operator_checks.lua").read_text() + "\n" + (_DIR / f"{name}.lua").read_text()
    return lua.keys_lua() + "\n" + text


def operator_script(store: Any, name: str) -> Script:
    """``<name>.lua`` with ``operator_checks.lua`` in front, registered once per store (EVALSHA)."""
    scripts: dict[str, Script] = store.__dict__.setdefault("_operator_scripts", {})
    script = scripts.get(name)
    if script is None:
        script = scripts[name] = store.client.register_script(_script_text(name))
    return script


def decode_fields(flat_or_pairs: Iterable[Any]) -> dict[str, str]:
    """Entry fields for people: a packed ``envelope`` field unpacked into the envelope's fields (left as it
    is if it does not unpack), UTF-8 with replacement characters, each value cut at 4096 characters."""
    items = list(flat_or_pairs)
    pairs = zip(items[0::2], items[1::2], strict=True) if items and not isinstance(items[0], tuple) else items
    fields = dict(pairs)
    with contextlib.suppress(envelope.MalformedEnvelope):
        fields = envelope.fields_of(fields)
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


def load_group(store: Any, stream_prefix: str, consumer_group: str) -> tuple[int, PrefixState, Group]:
    """Redis time, the prefix's state with this one group loaded, and the group (or GROUP_NOT_FOUND)."""
    validate_identifier(consumer_group, "consumer_group")
    now_ms, state = store._read(stream_prefix, [consumer_group])
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
        raise UnknownShard(
            f"{parsed} is not a shard of stream prefix {state.topology.stream_prefix!r}; its shards are "
            f"{live}",
            field="shard",
            shard=str(parsed),
        )
    return parsed


# ---------------------------------------------------------------------------------------------- figures


@dataclass(frozen=True, slots=True, kw_only=True)
class _Figures:
    """One group on one shard, as Redis reports it."""

    length: int = 0
    lag: int | None = None
    pending: int = 0
    last_delivered_id: str = ""  # "" when the Redis consumer group is missing
    oldest_pending_id: str | None = None
    oldest_pending_idle_ms: int | None = None
    oldest_pending_consumer: str | None = None
    max_deliveries: int = 0

    @property
    def unconsumed(self) -> int:
        """Entries the group has not finished: not yet delivered (or the whole stream when Redis cannot
        tell) plus pending."""
        return (self.length if self.lag is None else self.lag) + self.pending

    def oldest_pending_age_ms(self, now_ms: int) -> int | None:
        if self.oldest_pending_id is None:
            return None
        return max(0, now_ms - entry_id_key(self.oldest_pending_id)[0])


def _group_info(reply: Any, consumer_group: str) -> dict[str, Any] | None:
    if isinstance(reply, Exception):
        return None  # no such stream
    for info in reply:
        if text(info.get("name", b"")) == consumer_group:
            return dict(info)
    return None


# ---------------------------------------------------------------------------------------------- mixin


class BacklogMixin:
    client: redis.Redis

    if TYPE_CHECKING:  # provided by MetadataStore

        def _read(self, stream_prefix: str, groups: list[str] | None) -> tuple[int, PrefixState | None]: ...
        def _execute(self, command: Any, groups: list[str] | None) -> Any: ...
        def describe_prefix(self, stream_prefix: str) -> dict[str, Any]: ...

    # -- figures ---------------------------------------------------------------------------------------

    def _figures(
        self,
        stream_prefix: str,
        pairs: list[tuple[str, Shard]],
        *,
        sample: int,
        extra: list[tuple[str, tuple[Any, ...]]] | None = None,
    ) -> tuple[dict[tuple[str, Shard], _Figures], list[Any]]:
        """Figures of each (group, shard), in two round trips: XINFO GROUPS + XLEN per shard (plus the
        ``extra`` commands, whose replies are returned), then XPENDING - + ``sample`` per pair with
        pending entries (``sample=0``: not read)."""
        shards = sorted({s for _, s in pairs})
        keys = {s: rkeys.stream_key(stream_prefix, s) for s in shards}
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                pipe.xinfo_groups(keys[shard])
                pipe.xlen(keys[shard])
            for method, args in extra or []:
                getattr(pipe, method)(*args)
            replies = pipe.execute(raise_on_error=False)
        extra_replies = replies[2 * len(shards) :]
        at = {shard: 2 * k for k, shard in enumerate(shards)}
        base: dict[tuple[str, Shard], _Figures] = {}
        for name, shard in pairs:
            length = replies[at[shard] + 1]
            length = 0 if isinstance(length, Exception) else int(length)
            info = _group_info(replies[at[shard]], name)
            if info is None:
                base[(name, shard)] = _Figures(length=length)
                continue
            lag = info.get("lag")
            base[(name, shard)] = _Figures(
                length=length,
                # Redis keeps counting entries an opt-in cap trimmed before the group read them (a
                # sealed stream trimmed empty still reports its old lag): none can be beyond the length.
                lag=None if lag is None else min(int(lag), length),
                pending=int(info.get("pending") or 0),
                last_delivered_id=text(info.get("last-delivered-id", b"0-0")),
            )
        with_pending = [p for p in pairs if base[p].pending > 0] if sample > 0 else []
        if with_pending:
            with redis_errors():
                pipe = self.client.pipeline(transaction=False)
                for name, shard in with_pending:
                    pipe.xpending_range(keys[shard], name, "-", "+", sample)
                details = pipe.execute(raise_on_error=False)
            for pair, rows in zip(with_pending, details, strict=True):
                if isinstance(rows, Exception) or not rows:
                    continue  # acked or destroyed between the two round trips
                oldest = rows[0]
                base[pair] = _Figures(
                    length=base[pair].length,
                    lag=base[pair].lag,
                    pending=base[pair].pending,
                    last_delivered_id=base[pair].last_delivered_id,
                    oldest_pending_id=text(oldest["message_id"]),
                    oldest_pending_idle_ms=int(oldest["time_since_delivered"]),
                    oldest_pending_consumer=text(oldest["consumer"]),
                    max_deliveries=max(int(r["times_delivered"]) for r in rows),
                )
        return base, extra_replies

    def _backlog_rows(
        self, state: PrefixState, consumer_group: str, now_ms: int, extra: list[tuple[str, tuple[Any, ...]]]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        prefix = state.topology.stream_prefix
        group = state.groups[consumer_group]
        versions = {v.version: v.state for v in state.topology.versions}
        shards = sorted(state.topology.live_shards())
        rd_key = rkeys.redeliver_key(prefix, consumer_group)
        figures, replies = self._figures(
            prefix,
            [(consumer_group, s) for s in shards],
            sample=PENDING_SAMPLE,
            extra=[("hgetall", (rd_key,)), *extra],
        )
        tokens = {} if isinstance(replies[0], Exception) else {text(k): v for k, v in replies[0].items()}
        owners = group.owners()
        rows = []
        for shard in shards:
            f = figures[(consumer_group, shard)]
            rows.append(
                {
                    "shard": str(shard),
                    "stream_key": rkeys.stream_key(prefix, shard),
                    "version_state": versions[shard.version].value,
                    "owner": owners.get(shard),
                    "assignment": shard_assignment(group, state.topology, shard, owners).value,
                    "length": f.length,
                    "lag": f.lag,
                    "pending": f.pending,
                    "last_delivered_id": f.last_delivered_id,
                    "oldest_pending_id": f.oldest_pending_id,
                    "oldest_pending_age_ms": f.oldest_pending_age_ms(now_ms),
                    "oldest_pending_idle_ms": f.oldest_pending_idle_ms,
                    "oldest_pending_consumer": f.oldest_pending_consumer,
                    "max_deliveries": f.max_deliveries,
                    "redeliver_token": int(tokens.get(str(shard), 0)),
                }
            )
        return rows, replies[1:]

    def snapshot(self, stream_prefix: str) -> PrefixSnapshot | None:
        """Everything a metrics scrape reads of a prefix: the state (one load) and, per group, its
        backlog rows and undrained shards. None if the prefix does not exist."""
        now_ms, state = self._read(stream_prefix, None)
        if state is None:
            return None
        backlog = {name: self._backlog_rows(state, name, now_ms, [])[0] for name in state.groups}
        undrained = {name: self._undrained(state, name) for name in state.groups}
        return PrefixSnapshot(now_ms=now_ms, state=state, backlog=backlog, undrained=undrained)

    def backlog(self, stream_prefix: str, consumer_group: str) -> list[dict[str, Any]]:
        """One row per shard of the ACTIVE and DRAINING versions, in shard order (docs/protocol.md 14)."""
        now_ms, state, _group = self._load_group(stream_prefix, consumer_group)
        return self._backlog_rows(state, consumer_group, now_ms, [])[0]

    # -- describe decorations --------------------------------------------------------------------------

    def _decorate_group_view(
        self, view: dict[str, Any], state: PrefixState, consumer_group: str, now_ms: int
    ) -> None:
        """Add ``backlog``, ``dead_letters`` and the migration's ``undrained`` rows to a group view."""
        prefix = state.topology.stream_prefix
        dlq_key = rkeys.dead_letter_key(prefix, consumer_group)
        rows, (dlq_length,) = self._backlog_rows(state, consumer_group, now_ms, [("xlen", (dlq_key,))])
        view["backlog"] = rows
        view["dead_letters"] = {
            "stream_key": dlq_key,
            "length": 0 if isinstance(dlq_length, Exception) else int(dlq_length),
        }
        if isinstance(view.get("migration"), dict):
            undrained = {str(s) for s in self._undrained(state, consumer_group)}
            live = _live_count(state.groups[consumer_group])
            view["migration"]["undrained"] = [
                {
                    "shard": row["shard"],
                    "owner": row["owner"],
                    "live_members": live,
                    "lag": row["lag"],
                    "pending": row["pending"],
                    "oldest_pending_age_ms": row["oldest_pending_age_ms"],
                }
                for row in rows
                if row["shard"] in undrained
            ]

    def _decorate_prefix_view(self, view: dict[str, Any], state: PrefixState, now_ms: int) -> None:
        """Add the migration's ``blocking`` rows to a prefix view: every undrained old shard of every
        group, with what holds it back (docs/operations.md tells an operator what to do about each)."""
        if not isinstance(view.get("migration"), dict):
            return
        pairs = [(name, s) for name in sorted(state.groups) for s in self._undrained(state, name)]
        figures = self._figures(state.topology.stream_prefix, pairs, sample=1)[0] if pairs else {}
        owners = {name: g.owners() for name, g in state.groups.items()}
        live = {name: _live_count(g) for name, g in state.groups.items()}
        blocking = []
        for name, shard in pairs:
            f = figures[(name, shard)]
            blocking.append(
                {
                    "consumer_group": name,
                    "shard": str(shard),
                    "owner": owners[name].get(shard),
                    "live_members": live[name],
                    "lag": f.lag,
                    "pending": f.pending,
                    "oldest_pending_age_ms": f.oldest_pending_age_ms(now_ms),
                }
            )
        view["migration"]["blocking"] = blocking

    @staticmethod
    def _undrained(state: PrefixState, consumer_group: str) -> tuple[Shard, ...]:
        m = state.topology.migration
        if m is None or not m.active:
            return ()
        return undrained_shards(state, consumer_group)

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
                "fields": decode_fields(flat or ()),  # {} for an entry trimmed while pending
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
                "fields": None if flat is None else decode_fields(flat),
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
        _now, state, _group = self._load_group(stream_prefix, consumer_group)
        parsed = require_shard(state, shard)
        keys = [rkeys.meta_key(stream_prefix), rkeys.stream_key(stream_prefix, parsed)]
        with redis_errors():
            reply = operator_script(self, "skip")(
                keys=keys, args=[consumer_group, str(parsed.version), action, *mode_args]
            )
        status = text(reply[0])
        if status == "NOT_PENDING":
            return parsed, [], [text(i) for i in reply[1]], 0
        self._raise_for_status(status, stream_prefix, consumer_group, parsed)
        return parsed, list(reply[1]), [text(i) for i in reply[2]], int(reply[3])

    # -- redeliver -------------------------------------------------------------------------------------

    def redeliver(self, stream_prefix: str, consumer_group: str, shard: str) -> dict[str, Any]:
        """Ask the shard's owner to re-read its own pending entries now (``HINCRBY rsc:{P}:rd:<G>``)."""
        _now, state, group = self._load_group(stream_prefix, consumer_group)
        parsed = require_shard(state, shard)
        keys = [rkeys.meta_key(stream_prefix), rkeys.redeliver_key(stream_prefix, consumer_group)]
        with redis_errors():
            reply = operator_script(self, "redeliver")(
                keys=keys, args=[consumer_group, str(parsed), str(parsed.version)]
            )
        self._raise_for_status(text(reply[0]), stream_prefix, consumer_group, parsed)
        return {"shard": str(parsed), "redeliver_token": int(reply[1]), "owner": group.owners().get(parsed)}

    # -- release from a migration's drain -------------------------------------------------------------

    def unconsumed_for_release(self, stream_prefix: str, consumer_group: str) -> int:
        """How many entries releasing the group from the drain would abandon (what a confirmation shows).
        Raises what :meth:`release_drain` would: ``GROUP_HAS_LIVE_MEMBERS``, ``MIGRATION_NOT_ACTIVE``."""
        now_ms, state, _group = self._load_group(stream_prefix, consumer_group)
        release_drain(state, consumer_group, now_ms)  # the core's refusal, if any; the result is dropped
        return self._unconsumed(state, consumer_group)[1]

    def release_drain(
        self, stream_prefix: str, consumer_group: str, *, confirm_unconsumed: int
    ) -> dict[str, Any]:
        """Stop waiting for a group without live members in the active migration: its undrained old
        shards are marked drained (completing the migration if it was the last group holding it back).
        ``confirm_unconsumed`` must equal :meth:`unconsumed_for_release` (else
        ``CONFIRMATION_MISMATCH``, details ``unconsumed_entries``): nothing is abandoned unseen."""
        require_int_in_range(confirm_unconsumed, "confirm_unconsumed", 0, 2**63 - 1)
        now_ms, state, _group = self._load_group(stream_prefix, consumer_group)
        release_drain(state, consumer_group, now_ms)  # refuse before counting, as the commit would
        shards, unconsumed = self._unconsumed(state, consumer_group)
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
            self._execute(command, None)
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

    def _unconsumed(self, state: PrefixState, consumer_group: str) -> tuple[frozenset[Shard], int]:
        shards = undrained_shards(state, consumer_group)
        pairs = [(consumer_group, s) for s in shards]
        figures = self._figures(state.topology.stream_prefix, pairs, sample=0)[0] if pairs else {}
        return frozenset(shards), sum(f.unconsumed for f in figures.values())

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
                operator_script(self, "forget_released")(
                    keys=keys, args=[consumer_group, *(str(s) for s in ordered)]
                )
        except CoordinatorError as e:
            log.warning(
                "group %r of %r released from the drain; its consumer groups on %s were not destroyed: %s",
                consumer_group,
                stream_prefix,
                [str(s) for s in ordered],
                e,
            )

    # -- shared ----------------------------------------------------------------------------------------

    def _load_group(self, stream_prefix: str, consumer_group: str) -> tuple[int, PrefixState, Group]:
        return load_group(self, stream_prefix, consumer_group)

    @staticmethod
    def _raise_for_status(status: str, stream_prefix: str, consumer_group: str, shard: Shard) -> None:
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
            raise UnknownShard(
                f"{shard} was retired meanwhile: it is no longer a shard of {stream_prefix!r}",
                field="shard",
                shard=str(shard),
            )
        raise MetadataCorrupt(f"unexpected reply {status!r} from an operator script")


def _live_count(group: Group) -> int:
    return sum(1 for _ in group.live_members())
