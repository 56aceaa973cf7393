"""``manage.py consumer_groups``: the coordinator's groups from a shell, like ``kafka-consumer-groups``.

    manage.py consumer_groups list [--json]
    manage.py consumer_groups create PREFIX GROUP [--shards N] [--max-concurrency N]
                                     [--start-from latest|earliest] [--if-not-exists]
    manage.py consumer_groups describe PREFIX GROUP [--json]
    manage.py consumer_groups reshard PREFIX SHARD_COUNT [--ordering strict|relaxed]
    manage.py consumer_groups set-max-concurrency PREFIX GROUP N
    manage.py consumer_groups delete PREFIX GROUP [--force] [--reason TEXT]

Reads go to the metadata store (as the API's reads do); every change goes through
``coordinator.operations`` (as the API and the operator pages do): validated by the same rules, audited
first (source "command", the OS user named), refused with the same error codes. A refusal exits with
status 1 and prints the code and message (and ``--json``: the problem's fields).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import conf, operations
from coordinator.management.reachable import require_reachable_redis
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import CoordinatorError, GroupAlreadyExists
from coordinator.protocol.model import OrderingMode
from coordinator.store import get_store
from coordinator.store.redis_store import default_config_from_settings

COMMAND = "consumer_groups"


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart (the ``kafka-consumer-groups --describe`` look)."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def describe_lines(view: dict[str, Any]) -> list[str]:
    """The human form of a group description: a header, the shard table, the live members."""
    members = {m["member_id"]: m for m in view["members"]}
    live = [m for m in view["members"] if m["state"] in ("STABLE", "UNREVOKED_SHARDS", "UNRELEASED_SHARDS")]
    header = (
        f"Group {view['consumer_group']!r} of stream prefix {view['stream_prefix']!r}: {view['state']}, "
        f"group epoch {view['group_epoch']}, assignment epoch {view['assignment_epoch']}, "
        f"{len(live)} live member(s)"
    )
    shard_rows = [
        (
            row["shard"],
            row["owner"],
            members[row["owner"]]["state"] if row["owner"] in members else None,
            row["assignment"],
            row["lag"],
            row["pending"],
            _age(row["oldest_pending_age_ms"]),
            row["length"],
        )
        for row in view["backlog"]
    ]
    lines = [
        header,
        "",
        table(
            ("SHARD", "OWNER", "MEMBER-STATE", "ASSIGNMENT", "LAG", "PENDING", "OLDEST-PENDING", "LENGTH"),
            shard_rows,
        ),
    ]
    if live:
        member_rows = [
            (
                m["member_id"],
                m["state"],
                m["member_epoch"],
                m["effective_concurrency"],
                len(m["current_assignment"]),
                ",".join(m["revoking"]) or None,
                _age(m["lease_remaining_ms"]),
                f"{m['client']['host']}:{m['client']['pid']}",
                m.get("instance_id"),
            )
            for m in live
        ]
        lines += [
            "",
            table(
                (
                    "MEMBER",
                    "STATE",
                    "EPOCH",
                    "CONCURRENCY",
                    "SHARDS",
                    "REVOKING",
                    "LEASE-LEFT",
                    "CLIENT",
                    "INSTANCE-ID",
                ),
                member_rows,
            ),
        ]
    held = view.get("held_instances") or []
    if held:  # static members' targets kept for their instance ids (docs/protocol.md section 3)
        now_ms = int(view.get("now_ms") or 0)
        held_rows = [
            (
                h["instance_id"],
                h["member_id"],
                ",".join(h["shards"]) or None,
                _age(max(0, h["held_until_ms"] - now_ms)),
            )
            for h in held
        ]
        lines += [
            "",
            "Held for restart:",
            table(("INSTANCE-ID", "ENDED-MEMBER", "SHARDS", "HELD-FOR"), held_rows),
        ]
    parked = [
        (shard, member_id, r["count"], ", ".join(r["keys"]) + (" ..." if r["count"] > len(r["keys"]) else ""))
        for member_id, shards in sorted((view.get("parked_keys") or {}).items())
        for shard, r in sorted(shards.items())
    ]
    if parked:  # keys waiting for a retry (issue 27), as their members last reported them
        lines += ["", table(("SHARD", "MEMBER", "PARKED-KEYS", "KEYS"), parked)]
    migration = view.get("migration")
    if isinstance(migration, dict) and migration.get("active"):
        undrained = ", ".join(row["shard"] for row in migration.get("undrained", [])) or "none"
        lines += [
            "",
            f"Migration v{migration['from_version']} -> v{migration['to_version']} "
            f"({migration['ordering']}): this group still has to drain {undrained}",
        ]
    return lines


class Command(BaseCommand):
    help = "List, describe, reshard, set max concurrency of, and delete consumer groups (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser("list", help="every consumer group of every stream prefix")
        listing.add_argument("--json", action="store_true", help="the API's JSON instead of a table")
        create = sub.add_parser("create", help="create a group (and its stream prefix, given --shards)")
        create.add_argument("stream_prefix")
        create.add_argument("consumer_group")
        create.add_argument("--shards", type=int, default=None, help="the shard count of a new prefix")
        create.add_argument("--max-concurrency", type=int, default=1)
        create.add_argument("--start-from", choices=["latest", "earliest"], default="latest")
        create.add_argument(
            "--if-not-exists", action="store_true", help="an existing group is success (setup scripts)"
        )
        describe = sub.add_parser("describe", help="one group: shards, owners, lag, pending, members")
        describe.add_argument("stream_prefix")
        describe.add_argument("consumer_group")
        describe.add_argument("--json", action="store_true", help="the API's group description (JSON)")
        reshard = sub.add_parser("reshard", help="start a shard-count change of a stream prefix")
        reshard.add_argument("stream_prefix")
        reshard.add_argument("shard_count", type=int)
        reshard.add_argument("--ordering", choices=[m.value for m in OrderingMode], default="strict")
        concurrency = sub.add_parser("set-max-concurrency", help="the group's cap on threads per member")
        concurrency.add_argument("stream_prefix")
        concurrency.add_argument("consumer_group")
        concurrency.add_argument("max_concurrency", type=int)
        delete = sub.add_parser("delete", help="delete a group (refused while it has lag or pending)")
        delete.add_argument("stream_prefix")
        delete.add_argument("consumer_group")
        delete.add_argument("--force", action="store_true", help="delete even with unconsumed entries")
        delete.add_argument("--reason", default="", help="kept in the audit record")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "list": self._list,
            "create": self._create,
            "describe": self._describe,
            "reshard": self._reshard,
            "set-max-concurrency": self._set_max_concurrency,
            "delete": self._delete,
        }
        require_reachable_redis()  # one line saying what to set, before the store logs its own error
        try:
            handlers[action](options)
        except CoordinatorError as e:
            details = f" {json.dumps(e.details, sort_keys=True, default=str)}" if e.details else ""
            raise CommandError(f"{e.code}: {e.message}{details}", returncode=1) from e

    def _print_json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str))

    def _list(self, options: dict[str, Any]) -> None:
        groups = get_store().list_groups()
        if options["json"]:
            return self._print_json(groups)
        rows = [
            (
                g["stream_prefix"],
                g["consumer_group"],
                g["state"],
                g["group_epoch"],
                g["assignment_epoch"],
                g["members"],
            )
            for g in groups
        ]
        self.stdout.write(
            table(("STREAM-PREFIX", "GROUP", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "MEMBERS"), rows)
        )
        return None

    def _create(self, options: dict[str, Any]) -> None:
        config = default_config_from_settings(conf.settings())
        command = CreateGroup(
            stream_prefix=options["stream_prefix"],
            consumer_group=options["consumer_group"],
            shard_count=options["shards"],
            config=dataclasses.replace(config, max_concurrency=options["max_concurrency"]),
        )
        actor = operations.actor_from_command(f"{COMMAND} create")
        try:
            view = operations.create_group(actor, command, start_from=options["start_from"])
        except GroupAlreadyExists:
            if not options["if_not_exists"]:
                raise
            self.stdout.write(
                f"Group {command.consumer_group!r} of {command.stream_prefix!r} already exists."
            )
            return
        shards = len(view["backlog"])
        self.stdout.write(
            f"Created group {view['consumer_group']!r} of {view['stream_prefix']!r} ({shards} shards)."
        )

    def _describe(self, options: dict[str, Any]) -> None:
        view = get_store().describe_group(options["stream_prefix"], options["consumer_group"])
        if options["json"]:
            return self._print_json(view)
        self.stdout.write("\n".join(describe_lines(view)))
        return None

    def _reshard(self, options: dict[str, Any]) -> None:
        actor = operations.actor_from_command(f"{COMMAND} reshard")
        view = operations.change_shard_count(
            actor, options["stream_prefix"], options["shard_count"], OrderingMode(options["ordering"])
        )
        migration = view.get("migration") or {}
        self.stdout.write(
            f"Shard-count change started: v{migration.get('from_version')} -> v{migration.get('to_version')} "
            f"({options['shard_count']} shards, {options['ordering']}). Follow it with "
            f"`manage.py {COMMAND} describe {options['stream_prefix']} <group>`."
        )

    def _set_max_concurrency(self, options: dict[str, Any]) -> None:
        actor = operations.actor_from_command(f"{COMMAND} set-max-concurrency")
        view = operations.set_max_concurrency(
            actor, options["stream_prefix"], options["consumer_group"], options["max_concurrency"]
        )
        self.stdout.write(
            f"max_concurrency of {view['consumer_group']!r} is now {view['config']['max_concurrency']}"
        )

    def _delete(self, options: dict[str, Any]) -> None:
        actor = operations.actor_from_command(f"{COMMAND} delete")
        result = operations.delete_group(
            actor,
            options["stream_prefix"],
            options["consumer_group"],
            force=options["force"],
            reason=options["reason"],
        )
        self.stdout.write(
            f"Deleted group {options['consumer_group']!r} of {options['stream_prefix']!r} "
            f"(it had {result['lag']} undelivered and {result['pending']} pending entries)."
        )
