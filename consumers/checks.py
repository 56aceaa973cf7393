"""System checks that reject member-side settings that cannot work (they run before every manage.py
command, so ``run_member`` never starts with them):

    consumers.E001  RSC_RUNTIME is not a valid runtime (a dict of Runtime fields or a factory path)
    consumers.E002  RSC_LISTENER_CONCURRENCY is not a mapping of listener name -> 1..1024
    consumers.E003  RSC_COORDINATOR_URL is neither an http(s) URL nor "inprocess"
    consumers.E004  RSC_SHUTDOWN_TIMEOUT_S is not a non-negative number
    consumers.E005  RSC_COORDINATOR_URL is plain http:// to another machine (the bearer token would travel
                    in clear) and RSC_ALLOW_INSECURE_COORDINATOR_URL is not set

Listener names in RSC_LISTENER_CONCURRENCY are not checked against the declared listeners here:
discovery happens in run_member (which warns about names that match nothing).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Error

from consumers import conf
from consumers.client import insecure_url_problem
from consumers.conf import IN_PROCESS
from consumers.errors import ConsumersError
from consumers.listener import parse_concurrency
from consumers.runtime import load_runtime


def check_consumer_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    current = conf.settings()
    return [
        *_runtime(current.RSC_RUNTIME),
        *_fan_out(current.RSC_LISTENER_CONCURRENCY),
        *_coordinator_url(current.RSC_COORDINATOR_URL),
        *_insecure_coordinator_url(current.RSC_COORDINATOR_URL, current.RSC_ALLOW_INSECURE_COORDINATOR_URL),
        *_shutdown_timeout(current.RSC_SHUTDOWN_TIMEOUT_S),
    ]


def _runtime(value: Any) -> list[CheckMessage]:
    try:
        load_runtime(value)
    except ConsumersError as e:
        return [Error(f"RSC_RUNTIME: {e.message}", id="consumers.E001")]
    return []


def _fan_out(value: Any) -> list[CheckMessage]:
    value = value or {}
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


def _coordinator_url(url: Any) -> list[CheckMessage]:
    url = url or ""
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


def _insecure_coordinator_url(url: Any, allowed: Any) -> list[CheckMessage]:
    problem = insecure_url_problem(str(url or ""))
    if problem is None or allowed is True:
        return []
    return [
        Error(
            f"RSC_COORDINATOR_URL {problem}.",
            hint="e.g. https://coordinator.internal; http:// is accepted for 127.0.0.1, ::1 and localhost",
            id="consumers.E005",
        )
    ]


def _shutdown_timeout(value: Any) -> list[CheckMessage]:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return [
            Error(
                f"RSC_SHUTDOWN_TIMEOUT_S must be a non-negative number; got {value!r}.", id="consumers.E004"
            )
        ]
    return []
