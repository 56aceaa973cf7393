"""System checks that reject member-side settings that cannot work (they run before every manage.py
command, so ``run_member`` never starts with them):

    consumers.E001  RSC_RUNTIME is not a valid runtime (a dict of Runtime fields or a factory path)
    consumers.E002  RSC_LISTENER_CONCURRENCY is not a mapping of listener name -> 1..1024
    consumers.E003  RSC_COORDINATOR_URL is neither an http(s) URL nor "inprocess"
    consumers.E004  RSC_SHUTDOWN_TIMEOUT_S is not a non-negative number

Listener names in RSC_LISTENER_CONCURRENCY are not checked against the declared listeners here:
discovery happens in run_member (which warns about names that match nothing).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from consumers.errors import ConsumersError
from consumers.listener import parse_concurrency
from consumers.runtime import load_runtime

IN_PROCESS = "inprocess"


def check_consumer_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [*_runtime(), *_fan_out(), *_coordinator_url(), *_shutdown_timeout()]


def _runtime() -> list[CheckMessage]:
    try:
        load_runtime(getattr(settings, "RSC_RUNTIME", None))
    except ConsumersError as e:
        return [Error(f"RSC_RUNTIME: {e.message}", id="consumers.E001")]
    return []


def _fan_out() -> list[CheckMessage]:
    value = getattr(settings, "RSC_LISTENER_CONCURRENCY", None) or {}
    if not isinstance(value, Mapping):
        return [
            Error("RSC_LISTENER_CONCURRENCY must map listener names to a member count.", id="consumers.E002")
        ]
    errors: list[CheckMessage] = []
    for name, count in value.items():
        try:
            parse_concurrency(count, f"RSC_LISTENER_CONCURRENCY[{name!r}]")
        except ConsumersError as e:
            errors.append(Error(e.message, id="consumers.E002"))
    return errors


def _coordinator_url() -> list[CheckMessage]:
    url = getattr(settings, "RSC_COORDINATOR_URL", "") or ""
    parts = urllib.parse.urlsplit(str(url))
    if url == IN_PROCESS or (parts.scheme in ("http", "https") and parts.hostname):
        return []
    return [
        Error(
            f"RSC_COORDINATOR_URL must be an http(s) URL or {IN_PROCESS!r}; got {url!r}.",
            hint="e.g. http://coordinator.internal:8000",
            id="consumers.E003",
        )
    ]


def _shutdown_timeout() -> list[CheckMessage]:
    value = getattr(settings, "RSC_SHUTDOWN_TIMEOUT_S", 30.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return [
            Error(
                f"RSC_SHUTDOWN_TIMEOUT_S must be a non-negative number; got {value!r}.", id="consumers.E004"
            )
        ]
    return []
