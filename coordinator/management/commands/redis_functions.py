"""manage.py redis_functions load|check|prune|show: the data plane's Redis Functions library.

Members and producers call the data plane's functions (``FCALL``) and send no Lua; the coordinator loads
the library (docs/redis-acl.md, "No code from clients"; coordinator/store/functions.py), rendered with
the dead-letter MAC keys of this deployment's settings, on every primary of ``REDIS_URL``:

* ``load``: ``FUNCTION LOAD REPLACE`` of this code version's library (what ``make run`` does; the
  coordinator also loads it at its start and on every tick where it is missing);
* ``check``: per primary, whether this version's library is loaded, rendered with the current keys and
  exactly the code this process renders, and which other ``rsc_*`` libraries (other versions) are there;
  exits non-zero unless every primary is in order;
* ``prune [--keep NAME ...]``: delete every other ``rsc_*`` library, once no process of those versions
  runs (a rolling upgrade keeps the old one until then);
* ``show``: the library's name and its functions' names (never its text: it holds the keys).

Run it with the coordinator's Redis user (its ACL has ``FUNCTION LOAD``, ``LIST`` and ``DELETE``).
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from consumers.dataplane import library
from coordinator.management.reachable import require_reachable_redis
from coordinator.store.functions import DataPlaneFunctions
from rsc_redis.clients import client_from_url


class Command(BaseCommand):
    help = "Load, check or prune the data plane's Redis Functions library (members and producers call it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["load", "check", "prune", "show"])
        parser.add_argument(
            "--keep",
            action="append",
            default=[],
            metavar="LIBRARY",
            help="prune: also keep this library (rsc_<digest>; repeat for several)",
        )

    def handle(self, *args: Any, action: str, keep: list[str], **options: Any) -> None:
        if action == "show":
            if not settings.REDIS_URL:
                raise CommandError("REDIS_URL is not configured")
        else:
            require_reachable_redis()  # one line saying what to set, not a connection traceback
        # Not get_store(): its first build loads a missing library, and `check` must see what is there.
        client = client_from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
        functions = DataPlaneFunctions(client)
        name = functions.library.name
        try:
            if action == "show":
                self.stdout.write(f"library {name}")
                for function in (*library.FUNCTIONS, "version"):
                    self.stdout.write(f"  {functions.library.function(function)}")
            elif action == "load":
                for node in functions.load():
                    self.stdout.write(f"{node}: loaded {name}")
            elif action == "prune":
                for node, deleted in functions.prune(keep).items():
                    self.stdout.write(f"{node}: deleted {', '.join(deleted) or 'nothing'}")
            else:
                self._check(functions)
        except redis.RedisError as e:
            raise CommandError(f"redis_functions {action}: {e}") from e
        finally:
            client.close()

    def _check(self, functions: Any) -> None:
        name = functions.library.name
        bad = []
        for status in functions.status():
            others = [lib for lib in status.libraries if lib != name]
            if status.ok:
                state = "ok"
            elif not status.loaded:
                state = "MISSING"
            elif not status.current_keys:
                state = "STALE (rendered with other dead-letter keys)"
            else:
                state = "STALE (its code is not what this version renders)"
            line = f"{status.node}: {name} {state}"
            if others:
                line += f"; other versions loaded: {', '.join(others)} (prune them once none runs)"
            self.stdout.write(line)
            if not status.ok:
                bad.append(status.node)
        if bad:
            raise CommandError(
                f"the library {name} is missing or stale on {', '.join(bad)}: run `manage.py redis_functions "
                "load` (the coordinator's tick also loads it where it is missing or rendered with other keys)"
            )
