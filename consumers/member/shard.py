"""The fetch loop of one shard (a *unit*): a thin loop over the fenced data plane.

Theory of operation
-------------------
A unit runs on its own thread from the moment the member decides to take a shard until it is told to
stop. It

1. takes over what previous owners read and did not ack (``claim_orphans`` until the cursor is back at
   ``0-0``), deletes their now-empty Redis consumers, and re-reads its own pending entries (a member
   that kept its id across a fence or a reconnect) - all in stream order, before anything new;
2. then polls for new entries (``read`` never blocks): a batch at a time, backing off from
   ``idle_backoff_min_ms`` to ``idle_backoff_max_ms`` while the shard is empty.

Each batch goes to the member's worker pool as one task, which calls the handler entry by entry and
returns the ids it handled; the unit acks them and only then reads the next batch. So one shard is on at
most one worker at a time and is handled in stream order, while different shards run in parallel. The
worker does no I/O of its own beyond the handler (the unit reads and acks).

A handler that raises: the error is logged with its traceback and counted, the entry stays pending, the
batch goes on. Told to *drain* (revoked, shutting down): the unit reads nothing more, the worker stops
after the entry in flight, the unit acks what was handled and stops; the unhandled rest of the batch
stays pending for the next owner to claim. Told to *abandon* (fenced): the same, minus the ack.

While the member cannot be sure its lease holds (no heartbeat accepted for the lease TTL), the unit
starts no handler call and reads nothing; it probes the fence (an ack of no entries) until the lease is
renewed or the data plane says the member is fenced. A batch cut short that way resumes where it
stopped, in order.

Fence statuses go to the member (its state machine decides); ``STALE_EPOCH`` and ``NOT_READABLE`` are
retried after a pause, ``DataPlaneUnavailable`` with exponential backoff. Any other exception is a bug
or a broken stream: logged with its traceback, and the unit stops (the member restarts it after its
next heartbeat).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from typing import Any, Protocol

from consumers.dataplane import FenceStatus
from consumers.errors import DataPlaneUnavailable
from consumers.member.pool import PoolClosed, WorkerPool
from consumers.member.state import ShardStart
from consumers.runtime import Runtime
from coordinator.protocol.model import Shard

log = logging.getLogger("consumers.member")

STALE_EPOCH_PAUSE_S = 0.02  # a heartbeat is on its way; the next try will likely carry the new epoch
LEASE_PAUSE_S = 0.1  # the lease may have ended: probe the fence at this pace until it is renewed
NOT_READABLE_PAUSE_S = 0.25  # strict ordering: the old shards this one waits for are still draining


class UnitHost(Protocol):
    """What a unit needs from its member (thread-safe)."""

    member_id: str
    label: str

    def epoch_for(self, incarnation: int) -> int | None: ...
    def lease_valid(self, incarnation: int) -> bool: ...
    def report_member_fenced(self, incarnation: int) -> None: ...
    def report_not_owner(self, shard: Shard, incarnation: int) -> None: ...
    def report_stale_epoch(self, incarnation: int) -> None: ...
    def record(self, handled: int = 0, failed: int = 0, acked: int = 0) -> None: ...
    def unit_stopped(self, unit: ShardUnit, failed: bool) -> None: ...


class _Stopped(Exception):
    """The unit must stop (told to, or the data plane said so)."""


class ShardUnit:
    def __init__(
        self,
        *,
        host: UnitHost,
        start: ShardStart,
        dataplane: Any,
        pool: WorkerPool,
        handler: Callable[[Any], Any],
        runtime: Runtime,
        batch_hooks: Sequence[Callable[[], None]] = (),
    ) -> None:
        self.host = host
        self.shard = start.shard
        self.incarnation = start.incarnation
        self.dataplane = dataplane
        self.pool = pool
        self.handler = handler
        self.runtime = runtime
        self.batch_hooks = tuple(batch_hooks)
        self._stopping = threading.Event()  # drain or abandon: read nothing more
        self._abandoned = threading.Event()  # fenced: ack nothing either
        self.thread = threading.Thread(target=self._run, name=f"{host.label}-{self.shard}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, *, abandon: bool) -> None:
        if abandon:
            self._abandoned.set()
        self._stopping.set()

    # ---------------------------------------------------------------------------------------- the loop

    def _run(self) -> None:
        failed = False
        try:
            self._take_over()
            self._consume()
        except _Stopped:
            pass
        except Exception:
            log.exception("%s: shard %s: its fetch loop failed; stopping it", self.host.label, self.shard)
            failed = True
        finally:
            self.host.unit_stopped(self, failed)

    def _take_over(self) -> None:
        count = self.runtime.batch_size
        attempted: set[str] = set()  # claimed entries whose handler failed are ours now: not twice
        cursor = "0-0"
        while True:
            result, cursor = self._call(self.dataplane.claim_orphans, count, cursor)
            attempted.update(e.entry_id for e in result.entries)
            self._process(result.entries)
            if cursor == "0-0":
                break
        deleted = self._call(self.dataplane.delete_ghost_consumers)
        if deleted:
            log.debug("%s: shard %s: deleted %d idle consumers", self.host.label, self.shard, deleted)
        after = "0-0"
        while True:
            result = self._call(self.dataplane.read_own_pending, count, after)
            if not result.entries:
                break
            self._process([e for e in result.entries if e.entry_id not in attempted])
            after = result.entries[-1].entry_id

    def _consume(self) -> None:
        idle_s = self.runtime.idle_backoff_min_ms / 1000
        while True:
            result = self._call(self.dataplane.read, self.runtime.batch_size)
            if result.entries:
                self._process(result.entries)
                idle_s = self.runtime.idle_backoff_min_ms / 1000
            else:
                self._pause(idle_s)
                idle_s = min(idle_s * 2, self.runtime.idle_backoff_max_ms / 1000)

    # ---------------------------------------------------------------------------------------- batches

    def _process(self, entries: list[Any]) -> None:
        """Hand ``entries`` (in stream order) to a worker, ack what it handled. A batch cut short
        because the lease may have ended resumes once the lease is renewed (still in order); one cut
        short by a stop stays pending for the next owner."""
        while entries:
            try:
                handled, attempted = self.pool.submit(self._run_batch, entries).result()
            except (CancelledError, PoolClosed):
                raise _Stopped() from None  # the member is finishing: its pool is gone
            if handled and not self._abandoned.is_set():
                self._call(self.dataplane.ack, handled, ack=True)
                self.host.record(acked=len(handled))
            entries = entries[attempted:]
            if entries:
                self._call(_lease_confirmed)  # returns once renewed; raises _Stopped on stop or fence

    def _run_batch(self, entries: list[Any]) -> tuple[list[str], int]:
        """On a worker thread: the handler, entry by entry, until done, told to stop, or the lease may
        have ended. Returns the ids handled (to ack) and how many entries were attempted."""
        self._run_hooks()
        handled: list[str] = []
        failed = 0
        attempted = 0
        try:
            for entry in entries:
                if self._stopping.is_set() or not self.host.lease_valid(self.incarnation):
                    break
                attempted += 1
                try:
                    self.handler(entry)
                except Exception:
                    failed += 1
                    log.exception(
                        "%s: handler failed on entry %s of shard %s (event %s); it stays pending",
                        self.host.label,
                        entry.entry_id,
                        self.shard,
                        getattr(entry, "event_id", "?"),
                    )
                else:
                    handled.append(entry.entry_id)
        finally:
            self.host.record(handled=len(handled), failed=failed)
            self._run_hooks()
        return handled, attempted

    def _run_hooks(self) -> None:
        for hook in self.batch_hooks:
            try:
                hook()
            except Exception:
                log.exception("%s: batch hook %r failed", self.host.label, hook)

    # ---------------------------------------------------------------------------------------- data plane

    def _call(self, operation: Callable[..., Any], *args: Any, ack: bool = False) -> Any:
        """One fenced data-plane call at the member's current epoch; returns its result once OK.

        Acks go on while draining (the data plane allows acking a shard being revoked); everything
        else stops as soon as the unit is told to. While the lease may have ended (no heartbeat accepted
        for its TTL) nothing is read: the unit only *probes* the fence (an ack of no entries, which
        changes nothing) until the heartbeat thread renews the lease or the data plane says we are
        fenced."""
        backoff_s = 0.05
        failures = 0
        while True:
            if self._abandoned.is_set() or (self._stopping.is_set() and not ack):
                raise _Stopped()
            epoch = self.host.epoch_for(self.incarnation)
            if epoch is None:
                raise _Stopped()
            probing = not ack and not self.host.lease_valid(self.incarnation)
            try:
                if probing:
                    result = self.dataplane.ack(self.host.member_id, epoch, self.shard, [])
                else:
                    result = operation(self.host.member_id, epoch, self.shard, *args)
            except DataPlaneUnavailable as e:
                failures += 1
                level = logging.WARNING if failures & (failures - 1) == 0 else logging.DEBUG
                log.log(
                    level,
                    "%s: shard %s: %s; retry %d in %.0f ms",
                    self.host.label,
                    self.shard,
                    e,
                    failures,
                    backoff_s * 1000,
                )
                self._pause(backoff_s, ack=ack)
                backoff_s = min(backoff_s * 2, self.runtime.retry_backoff_max_ms / 1000)
                continue
            if failures:
                log.info("%s: shard %s: Redis answers again", self.host.label, self.shard)
                failures = 0
            status = _status(result)
            if status is FenceStatus.OK:
                if probing:
                    self._pause(LEASE_PAUSE_S)
                    continue
                return result
            if status is FenceStatus.MEMBER_FENCED:
                self.host.report_member_fenced(self.incarnation)
                raise _Stopped()
            if status is FenceStatus.NOT_OWNER:
                self.host.report_not_owner(self.shard, self.incarnation)
                raise _Stopped()
            if status is FenceStatus.STALE_EPOCH:
                self.host.report_stale_epoch(self.incarnation)
                self._pause(STALE_EPOCH_PAUSE_S, ack=ack)
            else:  # NOT_READABLE
                self._pause(NOT_READABLE_PAUSE_S, ack=ack)

    def _pause(self, seconds: float, *, ack: bool = False) -> None:
        """Sleep, waking early when the unit must stop (an ack retry wakes only when abandoned)."""
        (self._abandoned if ack else self._stopping).wait(seconds)


def _lease_confirmed(member_id: str, epoch: int, shard: Shard) -> FenceStatus:
    """A no-op "operation" for :meth:`ShardUnit._call`: it runs once the lease is known valid again."""
    return FenceStatus.OK


def _status(result: Any) -> FenceStatus:
    if isinstance(result, FenceStatus):
        return result
    if isinstance(result, tuple):  # claim_orphans: (ReadResult, cursor)
        return _status(result[0])
    if isinstance(result, int):  # delete_ghost_consumers: a count (0 when fenced)
        return FenceStatus.OK
    return FenceStatus(result.status)
