"""The full path: load, decide, commit; decide again on a conflict (docs/store.md, "Paths").

:class:`Committer` is composed by :class:`coordinator.store.redis_store.MetadataStore`, with its Redis
client, its :class:`~coordinator.store.reading.Reader`, its ``commit.lua`` and its
:class:`~coordinator.store.turns.Turns`; the commit of a prefix's deletion (the retention part's) is
handed in as a callable. Every command of the core (coordinator/protocol/commands.py) is run by
:meth:`Committer.execute`.

Theory of operation
-------------------
``load.lua`` reads the documents the command needs and Redis's clock, the pure core
(:func:`coordinator.protocol.commands.apply`) decides, and ``commit.lua`` writes the changed documents
and derived fields (commit_plan.py works out which) only if none of the loaded documents changed
meanwhile (compare-and-set on their revisions). On a conflict the command is re-run on fresh state,
with jittered backoff.

Two coordinators racing therefore never lose an update: one commit wins, the other re-decides on the
winner's state. A rejected command (the core raises) writes nothing. A command whose outcome state is
``None`` for an existing prefix (``DeletePrefix``) commits by deleting the prefix's keys instead
(``delete_prefix.lua``, in ``retention.py``), under the same compare-and-set on the topology revision.
Within a process, decisions on a prefix queue (:meth:`Committer.deciding_on`); across processes they
take turns while they contend (turns.py).

Stream keys and Redis consumer groups are created before the commit that makes them visible
(idempotently, :meth:`Committer.create_consumer_groups`), so a member never gets a shard whose stream
does not exist; what a lost race created there is taken back after it (:meth:`Committer.remove_unused`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from coordinator.protocol.commands import Command, Outcome, apply
from coordinator.protocol.errors import ConcurrentUpdate, CoordinatorError
from coordinator.protocol.model import Group, PrefixState, VersionState
from rsc_redis import keys as rkeys

from . import codec, commit_plan, instruments
from .reading import Loaded, Reader
from .replies import translate_redis_errors
from .turns import Turns

log = logging.getLogger(__name__)

# The longest a decision waits for another of this process on the same stream prefix (deciding_on).
DECISION_WAIT_S = 1.0


@dataclass(slots=True)
class Created:
    """What one create_group / change_shard_count call created in Redis before its commit(s)."""

    streams: set[str] = field(default_factory=set)  # stream keys
    groups: set[tuple[str, str]] = field(default_factory=set)  # (stream key, consumer group)


class Committer:
    """Runs commands on the full path. Thread-safe, as the store is."""

    max_attempts = 64

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        reader: Reader,
        commit_script: Any,
        turns: Turns,
        *,
        commit_deletion: Callable[[Command, str, Outcome], Outcome | None],
    ) -> None:
        self.client = client
        self.reader = reader
        self.commit_script = commit_script  # commit.lua, with the lease-record and change-log rules
        # Across processes, decisions on a prefix take turns while they contend (turns.py).
        self.turns = turns
        # The commit of a prefix's deletion (Retention.commit_deletion): None on a conflict.
        self.commit_deletion = commit_deletion
        self._delete_if_unused = client.register_script(
            (Path(__file__).parent / "delete_if_unused.lua").read_text()
        )
        # One decision at a time per stream prefix in this process (deciding_on); made again in a
        # forked child, whose locks could have been copied held.
        self._deciding: dict[str, threading.RLock] = {}
        self._deciding_pid = os.getpid()

    def execute(
        self,
        command: Command,
        groups: list[str] | None,
        before_commit: Callable[[PrefixState], None] | None = None,
        lease_of: Collection[str] | None = None,
    ) -> Outcome:
        """Load, decide, commit; re-decide on conflict. ``groups=None`` loads every group. ``lease_of``:
        the command is those members' heartbeats, which decide on no other member's lease
        (:meth:`Reader.load`)."""
        delay_s = 0.001
        prefix = command.stream_prefix
        for _attempt in range(self.max_attempts):
            with self.deciding_on(prefix), self.turns.turn(prefix, DECISION_WAIT_S):
                loaded = self.reader.load(prefix, groups, lease_of)
                outcome = apply(loaded.state, command, loaded.now_ms)  # raises, having written nothing
                if outcome.state is None and loaded.state is not None:
                    # The prefix is gone (DeletePrefix): delete its keys if the topology is unchanged.
                    deleted = self.commit_deletion(command, loaded.topology_rev, outcome)
                    if deleted is not None:
                        return deleted
                elif outcome.state is None or outcome.state == loaded.state:
                    return outcome
                elif before_commit is not None:
                    with translate_redis_errors():
                        before_commit(outcome.state)
                if outcome.state is not None and self.commit(prefix, loaded, outcome):
                    return outcome
            instruments.count(self.client, cas_conflicts=1)
            self.turns.contended(prefix)
            time.sleep(random.uniform(0, delay_s))
            delay_s = min(delay_s * 2, 0.05)
        raise ConcurrentUpdate(
            f"gave up after {self.max_attempts} conflicting attempts on stream prefix "
            f"{command.stream_prefix!r}"
        )

    @contextlib.contextmanager
    def deciding_on(self, stream_prefix: str) -> Iterator[None]:
        """One load-decide-commit at a time per stream prefix among this process's threads.

        Two decisions on one prefix that both change the group's header (joins, leaves, epoch bumps)
        cannot both commit: the second is decided again. Under Python's GIL the threads of one process
        do not decide in parallel anyway, so letting them race only spends CPU on attempts that lose
        (at 10,000 members, ~10 ms each) and, with enough of them, ends in CONCURRENT_UPDATE. Queued
        here, they lose only to other processes. The wait is bounded (DECISION_WAIT_S): past it (a
        decision stuck on an unresponsive Redis) the attempt goes ahead unqueued, as before, so a Redis
        stall does not add up one socket timeout per queued request. Steady heartbeats (the fast path)
        never queue here."""
        if self._deciding_pid != os.getpid():  # a forked child: its only thread is this one
            self._deciding, self._deciding_pid = {}, os.getpid()
        locks = self._deciding
        # setdefault is atomic: two threads asking for a new prefix's lock at once get the same one
        lock = locks.get(stream_prefix) or locks.setdefault(stream_prefix, threading.RLock())
        queued = lock.acquire(timeout=DECISION_WAIT_S)
        try:
            yield
        finally:
            if queued:
                lock.release()

    def commit(self, stream_prefix: str, loaded: Loaded, outcome: Outcome) -> bool:
        """Write what the decision changed (the core's records, turned into commit.lua's arguments by
        commit_plan.py) if nothing it was decided on changed since it was loaded; False on a conflict."""
        plan = commit_plan.plan(loaded, outcome)
        args: list[str | bytes] = [uuid.uuid4().hex, str(loaded.now_ms), *plan.arguments()]
        with translate_redis_errors():
            reply = self.commit_script(keys=codec.commit_keys(stream_prefix), args=args)
        if int(reply[0]) not in (1, 2):
            return False
        # What this process just wrote is what it will most likely read next (the next join, the next
        # heartbeat of the same group): its leases are applied from Redis when it is read. Its records
        # are exactly Redis's at this commit's position if no other commit came between the load and
        # this one; else at the load's position, plus this commit's records (which the log lists again
        # after it, so a delta from there reads them again: harmless).
        # A load without a position knows nothing of what came before this commit (an unlogged commit of
        # a coordinator from before the log may have), so neither does its commit.
        position = loaded.position
        if int(reply[0]) == 1:
            seq, previous = int(reply[1]), reply[2]
            if position is not None and seq == position[0] + 1 and previous == position[1]:
                position = (seq, args[0].encode() if isinstance(args[0], str) else args[0])
        else:
            position = None  # a retry of a commit whose reply was lost: where it landed is unknown
        for name, decoded in plan.written.items():
            self.reader.remember(stream_prefix, name, replace(decoded, position=position))
        return True

    # ------------------------------------------------------------------- streams and consumer groups

    def create_consumer_groups(
        self,
        state: PrefixState,
        groups: list[Group],
        start_id: str,
        created: Created | None = None,
        only_version: int | None = None,
    ) -> None:
        """XGROUP CREATE ... MKSTREAM on every shard of the non-retired versions (or ``only_version``);
        BUSYGROUP is fine. ``created`` collects what this call created (a consumer group whose CREATE
        answered OK, a stream that did not exist just before), so that :meth:`remove_unused` can take
        back what the committed state does not use. One MULTI: EXISTS and CREATE of a key are not split
        by another client (all keys share the prefix's hash tag, so this also works on a Cluster)."""
        prefix = state.topology.stream_prefix
        pipe = self.client.pipeline(transaction=True)
        targets: list[tuple[str, str]] = []
        for v in state.topology.versions:
            if v.state is VersionState.RETIRED or (only_version is not None and v.version != only_version):
                continue
            for shard in v.shards():
                for group in groups:
                    key = rkeys.stream_key(prefix, shard)
                    pipe.exists(key)
                    pipe.xgroup_create(key, group.consumer_group, id=start_id, mkstream=True)
                    targets.append((key, group.consumer_group))
        replies = pipe.execute(raise_on_error=False) if targets else []
        for (key, name), existed, reply in zip(targets, replies[0::2], replies[1::2], strict=True):
            if isinstance(reply, Exception):
                if "BUSYGROUP" not in str(reply):
                    raise reply
                continue
            if created is not None:
                created.groups.add((key, name))
                if not existed:
                    created.streams.add(key)

    def remove_unused(self, stream_prefix: str, created: Created) -> None:
        """Best effort, once a create_group / change_shard_count call has won, lost or failed: destroy
        the consumer groups and delete the (still empty, group-less) streams its attempts created that
        the committed metadata does not use: a loser's debris, left otherwise. What is used is read
        after the outcome, so a winner's streams and groups are never touched; a rival that commits
        later re-creates what it needs after its commit (idempotently)."""
        if not created.groups and not created.streams:
            return
        try:
            state = self.reader.read(stream_prefix, None)[1]
        except CoordinatorError as e:
            log.warning("could not check for debris of a lost race on %r: %s", stream_prefix, e)
            return
        used_keys = (
            set()
            if state is None
            else {rkeys.stream_key(stream_prefix, s) for v in state.topology.versions for s in v.shards()}
        )
        used_groups = set() if state is None else set(state.groups)
        groups = sorted((k, g) for k, g in created.groups if k not in used_keys or g not in used_groups)
        streams = sorted(k for k in created.streams if k not in used_keys)
        if not groups and not streams:
            return
        try:
            with translate_redis_errors():
                pipe = self.client.pipeline(transaction=False)
                for key, name in groups:
                    pipe.xgroup_destroy(key, name)
                pipe.execute(raise_on_error=False)
                deleted = sum(int(self._delete_if_unused(keys=[k])) for k in streams)
        except CoordinatorError as e:
            log.warning("debris of a lost race on %r not removed: %s", stream_prefix, e)
            return
        log.info(
            "removed debris of a lost race on %r: %d consumer group(s), %d stream(s)",
            stream_prefix,
            len(groups),
            deleted,
        )
