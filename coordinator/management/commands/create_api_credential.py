"""``manage.py create_api_credential NAME --role member|admin``: issue an API token, print it once.

Only the token's SHA-256 is stored; a lost token cannot be recovered, only replaced (issue a new
credential, deactivate the old one in the Django admin).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator.models import ApiCredential


class Command(BaseCommand):
    help = "Create an API credential and print its bearer token (shown once; only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who holds the credential, e.g. 'orders-workers' (unique)")
        parser.add_argument("--role", required=True, choices=[r.value for r in ApiCredential.Role])

    def handle(self, *args: Any, name: str, role: str, **options: Any) -> None:
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("NAME must be 1-100 characters")
        if ApiCredential.objects.filter(name=name).exists():
            raise CommandError(f"a credential named {name!r} already exists")
        _credential, token = ApiCredential.issue(name, role)
        self.stderr.write(f"Created {role} credential {name!r}. The token is shown once; store it now:")
        self.stdout.write(token)
