"""The Lua text the coordinator's scripts and the data plane's functions share. Lua cannot include one
file in another, so each caller puts this text in front of its own: the store in front of each of its
scripts (EVALSHA), the data plane once at the top of its Redis Functions library
(rsc_redis/dataplane/library.py).

* :func:`keys_lua`: ``keys.lua``, the one helper by which a script names a key of its prefix
  (rsc_redis/keys.py is the layout);
* :func:`lease_record_lua`: ``keys.lua`` and ``lease_record.lua``, the lease-record rule every
  lease-reading script starts with (the store's ``load.lua``, ``commit.lua``, ``fast_heartbeat.lua``,
  ``tick_due.lua``; the data plane's fenced functions and ``renew_lease``);
* :func:`dead_letter_mac_lua`: ``dead_letter_mac.lua``, the MAC the data plane's ``dead_letter``
  function signs its copies with (its Python twin: :mod:`rsc_redis.dead_letter_mac`).
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


@functools.cache
def dead_letter_mac_lua() -> str:
    """``dead_letter_mac.lua``: ``dead_letter_mac`` and the placeholders of its two keys."""
    return (_DIR / "dead_letter_mac.lua").read_text()
