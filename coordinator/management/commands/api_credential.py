"""``manage.py api_credential``: API credentials from a shell (issue them with ``create_api_credential``).

    manage.py api_credential list
    manage.py api_credential deactivate NAME [--reason TEXT]
    manage.py api_credential reactivate NAME [--reason TEXT]
    manage.py api_credential set-scope NAME [--stream-prefixes P] [--groups G] [--member-id-prefix X]
                                            [--reason TEXT]

Every change goes through ``coordinator.operations.change_credential``, as the Django admin's do: audited
first (source "command", the OS user named; nothing changes if the row cannot be written), and applied
in every API process from its next request. The command acts as an admin (whoever runs manage.py with
the coordinator's settings holds its secrets). A refusal exits with status 1 and says why.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from coordinator import operations
from coordinator.models import ApiCredential
from coordinator.protocol.errors import CoordinatorError

COMMAND = "api_credential"


class Command(BaseCommand):
    help = "List API credentials; deactivate, re-activate or re-scope one (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="every credential: name, role, active, scope")
        for action in ("deactivate", "reactivate"):
            p = sub.add_parser(action, help=f"{action} the credential NAME (applies at once everywhere)")
            p.add_argument("name")
            p.add_argument("--reason", default="", help="why, for the audit trail")
        p = sub.add_parser("set-scope", help="change what a member credential may touch")
        p.add_argument("name")
        p.add_argument("--stream-prefixes", default=None, help="glob patterns, e.g. 'orders-* billing'")
        p.add_argument("--groups", default=None, help="glob patterns of the consumer groups")
        p.add_argument("--member-id-prefix", default=None, help="'' for none")
        p.add_argument("--reason", default="", help="why, for the audit trail")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            for c in ApiCredential.objects.order_by("name"):
                scope = ""
                if c.role == ApiCredential.Role.MEMBER:
                    scope = f"  prefixes={c.stream_prefixes!r} groups={c.consumer_groups!r}"
                    scope += f" member_id_prefix={c.member_id_prefix!r}" if c.member_id_prefix else ""
                self.stdout.write(f"{c.name}  {c.role}  {'active' if c.active else 'inactive'}{scope}")
            return
        name = options["name"]
        credential = ApiCredential.objects.filter(name=name).first()
        if credential is None:
            raise CommandError(f"no API credential named {name!r}")
        changes: dict[str, Any]
        if action == "set-scope":
            given = {
                "stream_prefixes": options["stream_prefixes"],
                "consumer_groups": options["groups"],
                "member_id_prefix": options["member_id_prefix"],
            }
            changes = {k: v for k, v in given.items() if v is not None}
            if not changes:
                raise CommandError("give --stream-prefixes, --groups and/or --member-id-prefix")
            if credential.role != ApiCredential.Role.MEMBER:
                raise CommandError(f"{name!r} is an admin credential: it has no scope")
        else:
            changes = {"active": action == "reactivate"}
        try:
            saved = operations.change_credential(
                operations.actor_from_command(COMMAND), credential.pk, reason=options["reason"], **changes
            )
        except CoordinatorError as e:
            raise CommandError(f"{e.code}: {e.message} (nothing was changed)") from e
        state = "active" if saved.active else "inactive"
        self.stdout.write(f"{saved.name}: {state}, {saved.role}" + (
            f", prefixes {saved.stream_prefixes!r}, groups {saved.consumer_groups!r}, "
            f"member id prefix {saved.member_id_prefix!r}" if saved.role == ApiCredential.Role.MEMBER else ""
        ))  # fmt: skip
