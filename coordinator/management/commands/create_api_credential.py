"""``manage.py create_api_credential NAME --role member|admin [--stream-prefixes P] [--groups G]
[--member-id-prefix X]``: issue an API token, print it once.

A member credential is scoped (docs/protocol.md section 13, "Credentials and scopes"): the stream prefixes
and consumer groups it may use (glob patterns, ``*`` by default) and, optionally, a prefix every member
id it joins must start with. An admin credential takes no scope.

Only the token's SHA-256 is stored; a lost token cannot be recovered, only replaced (issue a new
credential, deactivate the old one: ``manage.py api_credential deactivate NAME`` or the Django admin).

Issued through the operations layer (``coordinator.operations.issue_credential``), as an admin (whoever
runs manage.py with the coordinator's settings holds its secrets): the audit row (source "command",
the OS user, the credential's name, role and scope, never the token) is committed first; if it cannot
be, no credential is created.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import operations
from coordinator.models import ApiCredential
from coordinator.protocol.errors import CoordinatorError


class Command(BaseCommand):
    help = "Create an API credential and print its bearer token (shown once; only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who holds the credential, e.g. 'orders-workers' (unique)")
        parser.add_argument("--role", required=True, choices=[r.value for r in ApiCredential.Role])
        scope = "member credentials only"
        parser.add_argument(
            "--stream-prefixes",
            default=None,
            help=f"{scope}: glob patterns of the stream prefixes it may use, e.g. 'orders-* billing' "
            "(default '*': any)",
        )
        parser.add_argument(
            "--groups",
            default=None,
            help=f"{scope}: glob patterns of the consumer groups it may join (default '*': any)",
        )
        parser.add_argument(
            "--member-id-prefix",
            default=None,
            help=f"{scope}: every member id it joins must start with this (default: none)",
        )
        parser.add_argument("--reason", default="", help="why, for the audit trail (optional)")

    def handle(
        self,
        *args: Any,
        name: str,
        role: str,
        stream_prefixes: str | None,
        groups: str | None,
        member_id_prefix: str | None,
        **options: Any,
    ) -> None:
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("NAME must be 1-100 characters")
        scoped = (stream_prefixes, groups, member_id_prefix) != (None, None, None)
        if role == ApiCredential.Role.ADMIN and scoped:
            raise CommandError(
                "an admin credential has no scope: drop --stream-prefixes, --groups and "
                "--member-id-prefix, or use --role member"
            )
        if ApiCredential.objects.filter(name=name).exists():
            raise CommandError(f"a credential named {name!r} already exists")
        try:
            credential, token = operations.issue_credential(
                operations.actor_from_command("create_api_credential"),
                name,
                role,
                stream_prefixes=stream_prefixes,
                consumer_groups=groups,
                member_id_prefix=member_id_prefix,
                reason=options.get("reason") or "",
            )
        except CoordinatorError as e:
            raise CommandError(f"{e.message} (nothing was created)") from e
        scope = ""
        if role == ApiCredential.Role.MEMBER:
            scope = (
                f" (stream prefixes {credential.stream_prefixes!r}, groups {credential.consumer_groups!r}"
                + (
                    f", member ids starting {credential.member_id_prefix!r}"
                    if credential.member_id_prefix
                    else ""
                )
                + ")"
            )
        self.stderr.write(
            f"Created {role} credential {name!r}{scope}. The token is shown once; store it now:"
        )
        self.stdout.write(token)
