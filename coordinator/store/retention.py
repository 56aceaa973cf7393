"""Retention: trimming what every group has finished with, deleting retired versions' streams and empty
stream prefixes (docs/protocol.md section 15).

A mixin of :class:`coordinator.store.redis_store.MetadataStore`. Placeholder: the implementation follows.
"""

from __future__ import annotations


class RetentionMixin:
    pass
