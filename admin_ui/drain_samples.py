"""Where the operator pages keep the drain-rate samples of a running migration
(admin_ui/resharding_progress.py explains the estimate): Django's cache, one key per
(stream prefix, migration, group).

The samples are a convenience of the pages, not coordinator state: losing them (a restart, another
process's local-memory cache) only means "no estimate yet" until the next refresh. With the default
local-memory cache each web process keeps its own; a shared cache (``CACHES`` pointing at Redis or
memcached) gives every process the same history. A cache that fails is ignored the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.cache import cache

from .resharding_progress import RATE_WINDOW_MS, Sample, add_sample, blocking_by_group, remaining_entries

log = logging.getLogger(__name__)

# A key outlives the window a little, so a page left alone for a while starts again from "no estimate".
KEY_TTL_S = 2 * RATE_WINDOW_MS // 1000


def key(stream_prefix: str, migration: Mapping[str, Any], consumer_group: str) -> str:
    return (
        f"admin_ui:drain:{stream_prefix}:v{migration['from_version']}-v{migration['to_version']}:"
        f"{migration['started_at_ms']}:{consumer_group}"
    )


def record(prefix_view: Mapping[str, Any]) -> dict[str, list[Sample]]:
    """Add this description's remaining entries of each group still draining to its samples; return
    the samples as they were *before* (what the estimate compares against), per group."""
    m = prefix_view.get("migration")
    if not m or not m.get("active"):
        return {}
    prefix, now_ms = prefix_view["topology"]["stream_prefix"], prefix_view["now_ms"]
    before: dict[str, list[Sample]] = {}
    for group, rows in blocking_by_group(prefix_view).items():
        remaining = remaining_entries(rows)
        if not rows or remaining is None:
            continue
        k = key(prefix, m, group)
        try:
            samples = [(int(t), int(r)) for t, r in cache.get(k, [])]
            cache.set(k, add_sample(samples, now_ms, remaining), KEY_TTL_S)
        except Exception as e:  # a cache is a convenience: never fail a page for it
            log.warning("drain-rate samples of %s/%s not kept: %s", prefix, group, e)
            samples = []
        before[group] = samples
    return before
