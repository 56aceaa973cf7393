"""Runs coordinator members (listeners) and producers as long-lived processes.

Public API (imported lazily, so that loading the Django app costs nothing)::

    from consumers import listener, Listener, Runtime, run, ConsumerProcess
    from consumers import HttpCoordinatorClient, StoreCoordinatorClient, CoordinatorRequestError

Nothing here needs Django: ``consumers.run(...)`` works in a plain Python process. The Django side is
``manage.py run_member`` and the ``RSC_*`` settings.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported eagerly (both are light: no Django, no redis): `consumers.listener` is also the name of a
# submodule, and binding the decorator here, after that submodule is loaded, is what makes
# `from consumers import listener` always the decorator (dramatiq does the same with `actor`).
from consumers.listener import Listener, ListenerConfigError, ListenerRegistry, listener
from consumers.runtime import Runtime, load_runtime

__all__ = ["Listener", "ListenerConfigError", "ListenerRegistry", "Runtime", "listener", "load_runtime"]

_EXPORTS = {
    "run": "consumers.process",
    "ConsumerProcess": "consumers.process",
    "Member": "consumers.member.member",
    "CoordinatorClient": "consumers.client",
    "CoordinatorRequestError": "consumers.client",
    "CoordinatorUnreachable": "consumers.client",
    "HttpCoordinatorClient": "consumers.client",
    "StoreCoordinatorClient": "consumers.client",
}

__all__ += sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'consumers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
