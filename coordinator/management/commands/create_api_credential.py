"""``manage.py create_api_credential NAME --role member|admin [--stream-prefixes P] [--groups G]
[--member-id-prefix X]``: issue an API token, print it once.

A member credential is scoped (docs/protocol.md section 13, "Credentials and scopes"): the stream prefixes
and consumer groups it may use (glob patterns, ``*`` by default) and, optionally, a prefix every member
id it joins must start with. An admin credential takes no scope.

Only the token's SHA-256 is stored; a lost token cannot be recovered, only replaced (issue a new
credential, deactivate the old one in the Django admin).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator.models import ANY, ApiCredential


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
            credential, token = ApiCredential.issue(
                name,
                role,
                stream_prefixes=stream_prefixes or ANY,
                consumer_groups=groups or ANY,
                member_id_prefix=member_id_prefix or "",
            )
        except ValidationError as e:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in e.message_dict.items())) from e
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
