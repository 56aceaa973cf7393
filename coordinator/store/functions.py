"""The coordinator's side of the data plane's Redis Functions library (docs/protocol.md section 7,
"Functions"; docs/redis-acl.md, "No code from clients").

Members and producers call the library's functions (``FCALL``) and never send Lua; the coordinator,
whose Redis user may ``FUNCTION LOAD``, loads it:

* when a process first builds its store (:func:`coordinator.store.get_store`), where it is missing;
* on every tick (:class:`coordinator.store.ticking.Ticker`), where it is missing or rendered with other
  keys: a new, restarted or flushed Redis, a promoted replica that never had it, a new cluster node;
  so the system heals itself within a tick;
* on request: ``manage.py redis_functions load`` (and ``make run``), ``check``, ``prune``.

It renders the library with the dead-letter MAC keys (:mod:`rsc_redis.dead_letter_mac`), derived from
the ``RSC_DEAD_LETTER_SECRET`` setting or, when that is empty, from ``SECRET_KEY``; and it verifies
dead letters with them (and with the keys of ``SECRET_KEY_FALLBACKS``, so rotating ``SECRET_KEY`` does
not make the dead letters already written unverifiable). Every coordinator process must derive the same
keys: two processes with different secrets would load the library in turn, each over the other's.

Django is read only by the default key provider, lazily; the store itself stays usable without it when
given keys (benchmarks, tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsc_redis import functions
from rsc_redis.dataplane import library
from rsc_redis.dead_letter_mac import MacKeys, Verdict, verify

log = logging.getLogger(__name__)

# The tick reports a library it cannot load (an ACL without FUNCTION LOAD, say) at most this often.
FAILURE_LOG_INTERVAL_S = 60.0
# Salt of the keys derived from SECRET_KEY: never the same bytes as Django's own uses of the key.
_SECRET_KEY_SALT = "redis-stream-coordinator dead-letter mac:"


def keys_from_settings() -> list[MacKeys]:
    """The dead-letter MAC keys of this deployment (Django settings): the signing keys first, then
    those that only verify (from ``SECRET_KEY_FALLBACKS``, when the keys derive from ``SECRET_KEY``)."""
    from django.conf import settings

    secret = settings.RSC_DEAD_LETTER_SECRET or ""  # the table's default set by apply_defaults
    if secret:
        return [MacKeys.derive(secret)]
    if not settings.SECRET_KEY:
        raise ValueError("the dead-letter MAC needs RSC_DEAD_LETTER_SECRET or SECRET_KEY")
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    return [MacKeys.derive(_SECRET_KEY_SALT + key) for key in secrets if key]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What ``manage.py redis_functions check`` reports for one primary."""

    node: str
    loaded: bool  # this version's library answers there
    current_keys: bool  # ... rendered with this deployment's keys (its version function says so)
    same_code: bool  # ... and its code is exactly what this process renders (FUNCTION LIST WITHCODE)
    libraries: tuple[str, ...]  # every rsc_* library loaded there (other versions included)

    @property
    def ok(self) -> bool:
        return self.loaded and self.current_keys and self.same_code


class DataPlaneFunctions:
    """Loads, checks and prunes the data plane's library, and verifies dead letters. ``keys``: the MAC
    keys (signing keys first) or a callable that gives them, resolved once, on first use (by default
    :func:`keys_from_settings`)."""

    def __init__(
        self, client: Any, keys: Sequence[MacKeys] | Callable[[], Sequence[MacKeys]] | None = None
    ) -> None:
        self.client = client
        self._provider = keys if callable(keys) else None
        self._keys: list[MacKeys] | None = None if callable(keys) or keys is None else list(keys)
        if keys is None:
            self._provider = keys_from_settings
        self._failed_at = 0.0

    @property
    def library(self) -> functions.Library:
        return library.library()

    @property
    def keys(self) -> list[MacKeys]:
        if self._keys is None:
            assert self._provider is not None
            resolved = list(self._provider())
            if not resolved:
                raise ValueError("no dead-letter MAC keys")
            self._keys = resolved
        return self._keys

    def text(self) -> str:
        """The library as loaded: rendered with the signing keys."""
        return library.render(self.keys[0])

    def ensure(self) -> list[str]:
        """Load the library on every primary where this version is missing or rendered with other keys;
        the names of the primaries loaded. Raises redis errors."""
        return functions.ensure_loaded(
            self.client, self.library, self.text(), library.expected_version(self.keys[0])
        )

    def ensure_quietly(self, where: str) -> list[str]:
        """:meth:`ensure` for the tick and the store's start: a failure (Redis down, a Redis user without
        ``FUNCTION LOAD``) is logged, at most once per :data:`FAILURE_LOG_INTERVAL_S`, never raised:
        the next tick tries again."""
        try:
            loaded = self.ensure()
        except Exception as error:  # redis errors, a missing secret: never stop the tick for it
            now = time.monotonic()
            if now - self._failed_at >= FAILURE_LOG_INTERVAL_S or not self._failed_at:
                self._failed_at = now
                log.error(
                    "%s: cannot load the data plane's Redis Functions library %s (members and producers "
                    "fail with FUNCTIONS_NOT_LOADED until it is loaded): %s",
                    where,
                    self.library.name,
                    error,
                )
            return []
        if loaded:
            log.warning(
                "%s: loaded the data plane's Redis Functions library %s on %s (it was missing or rendered "
                "with other keys)",
                where,
                self.library.name,
                ", ".join(loaded),
            )
        return loaded

    def load(self) -> list[str]:
        """``FUNCTION LOAD REPLACE`` on every primary, whatever is there."""
        return functions.load(self.client, self.text())

    def status(self) -> list[NodeStatus]:
        expected = library.expected_version(self.keys[0])
        text = self.text()
        installed = functions.installed_libraries(self.client)
        report = []
        for name, node in functions.primaries(self.client):
            version = functions.installed_version(node, self.library)
            report.append(
                NodeStatus(
                    node=name,
                    loaded=version is not None,
                    current_keys=version == expected,
                    same_code=functions.installed_text(node, self.library) == text,
                    libraries=tuple(installed.get(name, ())),
                )
            )
        return report

    def prune(self, keep: Sequence[str] = ()) -> dict[str, list[str]]:
        """Delete every ``rsc_*`` library but this version's and ``keep``'s, on every primary: once no
        process of an older version runs (docs/redis-acl.md, "Versions and upgrades")."""
        installed = functions.installed_libraries(self.client)
        others = sorted(
            {n for names in installed.values() for n in names} - {self.library.name, *keep}
        )
        return functions.delete_libraries(self.client, others)

    def verdict(self, dead_letter_key: str, fields: Mapping[bytes, bytes]) -> Verdict:
        """Whether a dead letter was written by the data plane's ``dead_letter`` function."""
        return verify(self.keys, dead_letter_key, fields)
