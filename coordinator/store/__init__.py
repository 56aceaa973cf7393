"""The Redis metadata store (one hash per stream prefix) and its Lua scripts. See docs/store.md."""

from __future__ import annotations

import threading

from coordinator.protocol.errors import StoreUnavailable

from .credential_limits import Admission, JoinLimits
from .redis_store import CredentialsChanged, HeartbeatFloor, MetadataStore
from .ticking import StoreTickReport

__all__ = [
    "Admission",
    "CredentialsChanged",
    "HeartbeatFloor",
    "JoinLimits",
    "MetadataStore",
    "StoreTickReport",
    "get_store",
    "reset_store",
]

_lock = threading.Lock()
_stores: dict[str, MetadataStore] = {}


def get_store() -> MetadataStore:
    """The process's store for ``settings.REDIS_URL`` (one connection pool per URL)."""
    from django.conf import settings

    url = settings.REDIS_URL
    if not url:
        raise StoreUnavailable("REDIS_URL is not configured")
    with _lock:
        store = _stores.get(url)
        built = store is None
        if store is None:
            store = _stores[url] = MetadataStore.from_url(url)
    if built:
        # The coordinator's start: the data plane's library where it is missing (logged, not raised, if
        # Redis cannot be reached yet: the tick loads it then). Outside the lock: a round trip per primary.
        store.functions.ensure_quietly("coordinator start")
    return store


def reset_store() -> None:
    """Drop cached clients (tests that point REDIS_URL elsewhere)."""
    with _lock:
        for store in _stores.values():
            store.client.close()
        _stores.clear()
