"""manage.py redis_acl NAME:KIND[:PREFIX,...] ...: print Redis ACL users for a deployment or a tenant.

Each argument is one user: its name, its kind (``coordinator``, ``member`` or ``producer``: the profiles
of docs/redis-acl.md, rsc_redis/acl.py) and, for a member or a producer, the stream prefixes its keys
are limited to (comma-separated; none: every prefix). For example, one tenant's two users::

    manage.py redis_acl orders-members:member:orders,payments orders-producer:producer:orders \\
        --password-sha256 orders-members=<hex> --password-sha256 orders-producer=<hex>

prints ACL file lines (``--format aclfile``, the default: for ``aclfile`` in redis.conf, then ``ACL
LOAD``) or ``ACL SETUSER`` commands to type at a ``redis-cli`` prompt (``--format setuser``). A user
without ``--password-sha256`` gets the placeholder ``#<sha256 of NAME's password>``, which you replace
(``printf %s "$PASSWORD" | sha256sum``) before loading: Redis refuses a file with a placeholder.

``--gated``: the profiles for a Redis that loads the gate module (docs/redis-acl.md, "The gate module"):
members and producers call the functions through the gate's commands and hold none of the raw ones.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rsc_redis import acl

KINDS = {"coordinator": acl.COORDINATOR, "member": acl.MEMBER, "producer": acl.PRODUCER}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Command(BaseCommand):
    help = "Print Redis ACL users (ACL file lines or ACL SETUSER) for the coordinator, members, producers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("users", nargs="+", metavar="NAME:KIND[:PREFIX,...]")
        parser.add_argument("--format", choices=["aclfile", "setuser"], default="aclfile")
        parser.add_argument(
            "--password-sha256",
            action="append",
            default=[],
            metavar="NAME=HEX",
            help="a user's password as its SHA-256 (hex); repeat per user",
        )
        parser.add_argument(
            "--gated",
            action="store_true",
            help="profiles for a Redis that loads the gate module rsc_gate.so (docs/redis-acl.md)",
        )

    def handle(
        self, *args: Any, users: list[str], format: str, password_sha256: list[str], gated: bool, **_: Any
    ) -> None:
        hashes = self._hashes(password_sha256)
        for spec in users:
            name, rules = self._user(spec, gated)
            digest = hashes.pop(name, None)
            if format == "aclfile":
                rule = f"#{digest}" if digest else f"#<sha256 of {name}'s password>"
                self.stdout.write(acl.aclfile_line(name, rule, rules))
            else:
                rule = f"#{digest}" if digest else f">${{{name.upper().replace('-', '_')}_PASSWORD}}"
                self.stdout.write(acl.setuser_command(name, rule, rules))
        if hashes:
            raise CommandError(f"--password-sha256 for users not listed: {', '.join(sorted(hashes))}")

    @staticmethod
    def _user(spec: str, gated: bool) -> tuple[str, tuple[str, ...]]:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not _NAME.fullmatch(parts[0]) or parts[1] not in KINDS:
            raise CommandError(
                f"{spec!r}: give NAME:KIND or NAME:KIND:PREFIX,... with KIND one of {', '.join(KINDS)}"
            )
        prefixes = [p for p in parts[2].split(",") if p] if len(parts) == 3 else None
        try:
            return parts[0], acl.rules_for(KINDS[parts[1]], prefixes, gated=gated)
        except ValueError as e:
            raise CommandError(f"{spec!r}: {e}") from e

    @staticmethod
    def _hashes(values: list[str]) -> dict[str, str]:
        found = {}
        for value in values:
            name, _, digest = value.partition("=")
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise CommandError(f"--password-sha256 {value!r}: give NAME=<64 lower-case hex digits>")
            found[name] = digest
        return found
