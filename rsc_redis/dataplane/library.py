"""The data plane's and the producer's Redis Functions library (docs/protocol.md section 7, "Functions").

Members and producers send no Lua: every operation of theirs is a function of one library, which the
coordinator loads (``FUNCTION LOAD``, :func:`render` with its dead-letter keys) and they call with
``FCALL`` (docs/redis-acl.md, "No code from clients"). The library is assembled here, once:

* the prelude, shared by every function and written once in the library: the key helpers and the
  lease-record rule (``rsc_redis/keys.lua``, ``rsc_redis/lease_record.lua``), the fence
  (``fence.lua``), the dead-letter MAC (``rsc_redis/dead_letter_mac.lua``) and the producer's route
  check (``produce_route.lua``);
* one function per operation, its body the ``.lua`` file of that name in this directory: the fenced
  ``fetch``, ``read_new``, ``read_pending``, ``claim``, ``ack``, ``delete_ghosts`` and ``dead_letter``,
  the member's own ``renew_lease`` and the producer's ``produce`` and ``idempotent_produce``;
* the version function (``no-writes``), which members and producers call at start
  (:func:`require_loaded`).

The library is named after a digest of its template (:class:`rsc_redis.functions.Library`): this code
calls ``rsc_<digest>_fetch`` and so on, the functions of its own version, never another's.

Pure text and names, importable by both sides without the other: the coordinator (coordinator/store/
functions.py) renders and loads it; the members and producers (consumers/dataplane/library.py, which
adds the start-up check and its error) call its functions.
"""

from __future__ import annotations

import functools
from pathlib import Path

from rsc_redis import functions
from rsc_redis.dead_letter_mac import MacKeys
from rsc_redis.lua import dead_letter_mac_lua, lease_record_lua

_DIR = Path(__file__).resolve().parent

# The fenced operations (fence.lua), then the member's own lease renewal and the producer's appends. None
# of them is `no-writes`: reads move entries into a pending list (XREADGROUP is a write).
FENCED = ("fetch", "read_new", "read_pending", "claim", "ack", "delete_ghosts", "dead_letter")
FUNCTIONS = (*FENCED, "renew_lease", "produce", "idempotent_produce")
LOAD_COMMAND = "manage.py redis_functions load"


@functools.cache
def library() -> functions.Library:
    prelude = "\n".join(
        [
            lease_record_lua(),
            (_DIR / "fence.lua").read_text(),
            dead_letter_mac_lua(),
            (_DIR / "produce_route.lua").read_text(),
        ]
    )
    return functions.Library(
        "the data plane's and the producer's functions (rsc_redis/dataplane/library.py)",
        prelude,
        [functions.Function(name, (_DIR / f"{name}.lua").read_text()) for name in FUNCTIONS],
        placeholders=("DLQ_MAC_INNER", "DLQ_MAC_OUTER"),
    )


def function_name(name: str) -> str:
    """The server-side name of operation ``name`` in this version's library (``rsc_<digest>_<name>``)."""
    if name not in FUNCTIONS:
        raise ValueError(f"no data-plane function {name!r}")
    return library().function(name)


def render(keys: MacKeys) -> str:
    """The library's text for ``FUNCTION LOAD``, with the dead-letter MAC ``keys`` in it (the
    coordinator's; never a member's or a producer's)."""
    return library().render(keys.placeholders(), keys.key_id)


def expected_version(keys: MacKeys) -> str:
    """What the version function of the library rendered with ``keys`` answers."""
    return library().version(keys.key_id)
