"""The keys parked on members' shards, as the members report them (issue 27; docs/protocol.md section 3).

Under ``ordering="key"`` or ``"none"`` with ``on_error="redeliver"``, a failing entry parks its key (its
lane) until its retry; the other keys of the shard go on. Only the member knows which keys are parked:
the coordinator never sees an entry. So a member reports them, with a heartbeat, whenever they changed
since the coordinator last accepted a report from this incarnation (``parked_keys``: per shard, how many
keys are parked and up to :data:`MAX_KEYS_PER_SHARD` of them); ``{}`` clears the report.

The coordinator keeps the last report of each member in one hash per prefix
(:func:`rsc_redis.keys.parked_reports_key`), field ``<group>\\n<member id>``, written only after the
heartbeat that carried it was accepted (so only a member at its live epoch, through its own credential,
reports). It is not metadata: nothing the coordinator decides depends on it. Reads
(:meth:`ParkedReports.for_group`, used by ``describe`` and the operator pages) show the reports of live
members only, and delete those of members that are no longer live (their shards went to others, whose
own reports say what is parked now).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from rsc_redis import keys as rkeys

MAX_KEYS_PER_SHARD = 16  # keys named per shard in a report (the count says how many there are)
MAX_SHARDS = 256  # shards in a report (a member with parked keys on more reports the first ones)
MAX_KEY_CHARS = 256  # a partition key longer than this is shown cut to it
SEPARATOR = "\n"  # between group and member id in a field (neither identifier may contain it)


def _field(consumer_group: str, member_id: str) -> str:
    return f"{consumer_group}{SEPARATOR}{member_id}"


class ParkedReports:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def record(
        self, stream_prefix: str, consumer_group: str, member_id: str, shards: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Keep ``shards`` (``{shard: {"count": n, "keys": [...]}}``, validated by the API) as the member's
        report; an empty one deletes it."""
        key, field = rkeys.parked_reports_key(stream_prefix), _field(consumer_group, member_id)
        if not shards:
            self.client.hdel(key, field)
            return
        value = {shard: {"count": r["count"], "keys": list(r["keys"])} for shard, r in sorted(shards.items())}
        self.client.hset(key, field, json.dumps(value, separators=(",", ":")))

    def for_group(
        self, stream_prefix: str, consumer_group: str, live: Iterable[str]
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """``{member id: {shard: {"count": n, "keys": [...]}}}`` for the live members that reported parked
        keys; the reports of this group's members that are not live are deleted."""
        key, start = rkeys.parked_reports_key(stream_prefix), f"{consumer_group}{SEPARATOR}"
        alive = set(live)
        reports: dict[str, dict[str, dict[str, Any]]] = {}
        stale: list[str] = []
        for raw_field, raw_value in self.client.hgetall(key).items():
            field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
            if not field.startswith(start):
                continue
            member_id = field[len(start) :]
            if member_id not in alive:
                stale.append(field)
                continue
            try:
                reports[member_id] = json.loads(raw_value)
            except ValueError:  # not ours: only record() writes here
                stale.append(field)
        if stale:
            self.client.hdel(key, *stale)
        return reports
