"""The Lua text the coordinator's and the data plane's scripts share. Lua scripts cannot include one
another, so each caller puts this text in front of its scripts before registering them (EVALSHA).

* :func:`keys_lua`: ``keys.lua``, the one helper by which a script names a key of its prefix
  (rsc_redis/keys.py is the layout);
* :func:`lease_record_lua`: ``keys.lua`` and ``lease_record.lua``, the lease-record rule every
  lease-reading script starts with (the store's ``load.lua``, ``commit.lua``, ``fast_heartbeat.lua``,
  ``tick_due.lua``; the data plane's fenced scripts and ``renew_lease.lua``).
"""

from __future__ import annotations

import functools
from pathlib import Path

_DIR = Path(__file__).resolve().parent


@functools.cache
def keys_lua() -> str:
    """``keys.lua``: ``prefix_key``, ``stream_key_of``, ``group_key_of`` and the global keys a script
    names."""
    return (_DIR / "keys.lua").read_text()


@functools.cache
def lease_record_lua() -> str:
    """``keys.lua`` then ``lease_record.lua`` (which checks the keys it is given with ``prefix_key``):
    the members' own lease renewals, one rule for every script that reads a lease."""
    return keys_lua() + "\n" + (_DIR / "lease_record.lua").read_text()
