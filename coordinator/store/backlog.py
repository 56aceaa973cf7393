"""Entries of a group's shards, seen and handled by operators: backlog figures, skip, redeliver, release
from a migration's drain, and the dead-letter stream (docs/protocol.md section 14).

A mixin of :class:`coordinator.store.redis_store.MetadataStore` (it uses ``self.client``, ``self._read``
and ``self._execute``). Placeholder: the implementation follows.
"""

from __future__ import annotations

from typing import Any

from coordinator.protocol.model import PrefixState


class BacklogMixin:
    def _decorate_group_view(
        self, view: dict[str, Any], state: PrefixState, consumer_group: str, now_ms: int
    ) -> None:
        """Add ``backlog``, ``dead_letters`` and the migration's ``undrained`` rows to a group view."""

    def _decorate_prefix_view(self, view: dict[str, Any], state: PrefixState, now_ms: int) -> None:
        """Add the migration's ``blocking`` rows to a prefix view."""
