"""Stale database connections, closed between batches as Django closes them between requests.

``manage.py run_member`` runs :func:`close_old_connections` before and after every batch, in the worker
thread that runs the handler (``batch_hooks``). Django's own ``close_old_connections`` looks for this
thread's connections on every call, about 4 µs even when the thread never opened one; most handlers
never touch the database, and a member runs the hook twice per batch. So this one asks Django only in a
thread that has opened a connection (Django's ``connection_created`` signal, sent in the thread that
connects): a thread that did is treated exactly as Django treats it, one that did not has nothing to
close.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import close_old_connections as _django_close_old_connections
from django.db.backends.signals import connection_created

_threads = threading.local()


def _opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    _threads.opened = True


connection_created.connect(_opened, dispatch_uid="consumers.dbconnections")


def close_old_connections() -> None:
    """``django.db.close_old_connections`` for a thread that has opened a database connection."""
    if getattr(_threads, "opened", False):
        _django_close_old_connections()
