"""Redis ACL profiles of the three kinds of Redis client, as data (docs/redis-acl.md explains them).

One definition for the tests, the docs and ``manage.py redis_acl``: tests/test_redis_acl.py starts a
Redis with exactly these users and runs the real store, data plane and producer as each of them, and it
checks that docs/redis-acl.md shows exactly these rules. (Here, under rsc_redis/, rather than in the
project's config/: the coordinator's ``manage.py redis_acl`` renders them, and the coordinator does not
import the project, tests/test_layering.py.)

No code from clients
--------------------
Members and producers run their operations as functions of the data plane's Redis Functions library,
which the coordinator loads (rsc_redis/dataplane/library.py): they get ``FCALL`` and ``FCALL_RO`` (the
version check), never ``EVAL``, ``EVALSHA``, ``SCRIPT`` or ``FUNCTION``, so they cannot run Lua of
their own (a script that writes once and then loops forever cannot be killed: ``SCRIPT KILL`` answers
``UNKILLABLE``) nor read the library's code (it holds the dead-letter MAC keys). Only the coordinator
keeps ``EVALSHA`` (its store's scripts) and may ``FUNCTION LOAD``.

Why selectors
-------------
Redis checks ACLs on every command a Lua script or function runs *as the calling user* (functions
elevate nothing), and it also checks the keys a call *declares* (``FCALL``'s KEYS) as read-write,
because it cannot know what the code will do with them. So a user whose metadata key pattern is
read-only (``%R~rsc:{*}:meta``) cannot even call a fenced function that declares the metadata key. The
member and producer profiles therefore use Redis 7 selectors:

* the root permissions allow only connection set-up and ``FCALL`` / ``FCALL_RO``, with the keys a
  function may declare (read-write, as ``FCALL`` demands), and ``TIME``;
* each selector (in parentheses) pairs the data commands with the keys they may touch: ``HGET`` on the
  metadata hash, read only; stream commands on the shard streams; ``XADD`` on the dead-letter stream.

Redis allows a command when the root or one selector allows the command *and* all of its keys, so a
direct ``HSET rsc:{P}:meta`` is refused (no selector has ``HSET``), and so is ``XADD rsc:{P}:meta``
(``XADD`` is allowed only on the keys of its selector).

What ACLs cannot express: whether a command comes from one of *our* functions. A member may run the
stream commands of its selector directly, outside the fence; only the fence (a function) checks epochs,
owners and leases. The docs spell this out.

The gate
--------
Where Redis loads the gate module (rsc_redis/module/rsc_gate.c), members and producers get *gated*
profiles (``rules_for(kind, gated=True)``; ``manage.py redis_acl --gated``): the gate's command of their
role (``RSC.FCALL_MEMBER`` or ``RSC.FCALL_PRODUCER``) and ``RSC.FCALL_RO`` instead of ``FCALL`` /
``FCALL_RO``, and none of the data commands the functions run, because the gate runs a function's inner
commands unchecked by the caller's command rules (its key patterns still apply to the keys the call
declares). What is left outside the gate is read-only: the producer's route read (``HGET`` of the
metadata) and the member's wake-up (``XREAD`` and ``XINFO GROUPS`` on the shard streams, ``CLIENT ID``
/ ``CLIENT UNBLOCK``). Gated rules name the gate's commands, so Redis refuses to load them where the
module is not loaded (``Unknown command``). The coordinator's gated profile adds ``+rsc.fcall_ro``, for
its library check through the gate (rsc_redis/clients.py, ``gated``).

Scoped users
------------
:func:`rules_for` renders a member's or a producer's rules for a list of stream prefixes (every key
pattern of the families of rsc_redis/keys.py, under ``{<prefix>}`` instead of ``{*}``): a platform
gives each tenant users of its own prefixes (docs/redis-acl.md, "One user per tenant");
``manage.py redis_acl`` prints them. Pure: no Redis, no Django.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rsc_redis import keys

COORDINATOR = "rsc-coordinator"
MEMBER = "rsc-member"
PRODUCER = "rsc-producer"
KINDS = (COORDINATOR, MEMBER, PRODUCER)

# Key patterns, from the key layout (rsc_redis/keys.py; docs/protocol.md section 9). Identifiers never
# contain ':' or braces, so `{*}` is one stream prefix and `v[0-9]*` one shard stream of some routing
# version.
META = keys.META.pattern()
SHARDS = keys.SHARD_STREAMS.pattern()
DEAD_LETTERS = keys.DEAD_LETTERS.pattern()
REDELIVER = keys.REDELIVER.pattern()
LEASE_RECORDS = keys.LEASE_RECORDS.pattern()

# A stream prefix, as coordinator.protocol.model.IDENTIFIER_RE states it (tests/test_redis_acl.py holds
# the two in step): never ':', '{', '}', '*' or '?', so a prefix's pattern matches that prefix alone.
PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# What redis-py sends on connect and for health checks. AUTH needs no permission. Not CLIENT SETINFO:
# Redis 7.0 does not know it (an ACL file naming it does not load), and redis-py ignores its refusal.
# +cluster|slots and +command: a cluster client (redis+cluster://, docs/cluster.md) reads the slot map
# and the command table; harmless on a single Redis.
_CONNECTION = ("+ping", "+hello", "+client|setname", "+cluster|slots", "+command")
# The coordinator's store: redis-py's Script uses EVALSHA, SCRIPT LOAD after NOSCRIPT, SCRIPT EXISTS in
# pipelines. The coordinator is trusted with code; members and producers are not.
_SCRIPTS = ("+evalsha", "+script|load", "+script|exists")
# The coordinator loads, checks and prunes the data plane's library (coordinator/store/functions.py):
# FCALL_RO of its version function, FUNCTION LOAD / LIST (with its code, for `check`) / DELETE.
_LOADS_FUNCTIONS = ("+fcall_ro", "+function|load", "+function|list", "+function|delete")
# Members and producers: the library's functions (FCALL) and its version check (FCALL_RO). Nothing that
# sends or reads code: no EVAL*, SCRIPT, FUNCTION.
_CALLS_FUNCTIONS = ("+fcall", "+fcall_ro")
# The same through the gate module (rsc_redis/module/rsc_gate.c): the function's inner commands are not
# checked against these users' command rules, so they hold none of them.
_MEMBER_GATE = ("+rsc.fcall_member", "+rsc.fcall_ro")
_PRODUCER_GATE = ("+rsc.fcall_producer", "+rsc.fcall_ro")
# Members: the wake-up's blocking XREAD runs on its own connection, which another one interrupts when
# the set of streams to wait on changes (consumers/dataplane/wait.py). CLIENT UNBLOCK can end any
# client's blocking command early (it then returns as on its timeout): a member could make other
# clients' blocking reads return empty, nothing more.
_WAITS = ("+client|id", "+client|unblock")

_COORDINATOR_RULES: tuple[str, ...] = (
    # Every rsc:* key, and every command the store runs (coordinator/store/*.py and *.lua).
    "resetchannels",
    f"~{keys.ALL_KEYS_PATTERN}",
    *_CONNECTION,
    *_SCRIPTS,
    *_LOADS_FUNCTIONS,
    "+multi",
    "+exec",
    "+discard",
    "+time",
    "+exists",
    "+type",
    "+del",
    "+unlink",
    "+get",
    "+set",
    "+sadd",
    "+srem",
    "+smembers",
    "+hget",
    "+hgetall",
    "+hmget",
    "+hexists",
    "+hlen",
    "+hscan",
    "+hset",
    "+hdel",
    "+hincrby",
    "+incr",
    "+hincrbyfloat",
    "+zadd",
    "+zrem",
    "+zrangebyscore",
    # The per-credential join limits (coordinator/store/credential_limits.py).
    "+zscore",
    "+zcard",
    "+xadd",
    "+xack",
    "+xdel",
    "+xlen",
    "+xrange",
    "+xpending",
    "+xtrim",
    "+xinfo|stream",
    "+xinfo|groups",
    "+xgroup|create",
    "+xgroup|destroy",
)


def _patterns(family: keys.KeyFamily, prefixes: Sequence[str], mode: str = "~") -> list[str]:
    return [f"{mode}{family.pattern(p)}" for p in prefixes]


def _selector(*parts: str) -> str:
    return "(" + " ".join(parts) + ")"


def rules_for(kind: str, prefixes: Sequence[str] | None = None, *, gated: bool = False) -> tuple[str, ...]:
    """The ACL rules (after ``reset on <password>``) of a user of ``kind`` (:data:`KINDS`) whose keys
    are those of ``prefixes`` (None: every prefix, ``{*}``). The coordinator is never scoped: it keeps
    the global keys (the prefix index, the retention cursor, the metrics) and every prefix. ``gated``:
    the profile for a Redis with the gate module (module docstring, "The gate")."""
    if kind == COORDINATOR:
        if prefixes is not None:
            raise ValueError("the coordinator's user is not scoped to prefixes: it serves them all")
        return (*_COORDINATOR_RULES, "+rsc.fcall_ro") if gated else _COORDINATOR_RULES
    if kind not in (MEMBER, PRODUCER):
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    scope = ["*"] if prefixes is None else _checked(prefixes)
    if gated:
        return _gated_rules(kind, scope)
    meta, shards = keys.META, keys.SHARD_STREAMS
    if kind == PRODUCER:
        # produce (produce.lua), and the route read of Producer.route(). TIME: idempotent_produce.lua
        # reads it (and produce.lua of earlier versions, which a rolling upgrade runs beside this one).
        # The idempotency keys' two generations (idempotent_produce.lua): look up, record, rotate.
        once = [*_patterns(keys.ONCE, scope), *_patterns(keys.ONCE_PREVIOUS, scope)]
        return (
            "resetchannels",
            *_patterns(meta, scope),
            *_patterns(shards, scope),
            *once,
            *_CONNECTION,
            *_CALLS_FUNCTIONS,
            "+time",
            _selector(*_patterns(meta, scope, "%R~"), "+hget"),
            _selector(*_patterns(shards, scope), "+exists", "+xadd"),
            _selector(*once, "+hmget", "+hset", "+rename", "+pexpire"),
        )
    # The fenced functions (fence.lua + fetch, read_new, read_pending, claim, ack, delete_ghosts,
    # dead_letter; fetch reads every shard's redeliver token with one HMGET) and renew_lease, the
    # member's own lease renewal: the only write a member makes outside streams.
    dead, redeliver, records = keys.DEAD_LETTERS, keys.REDELIVER, keys.LEASE_RECORDS
    return (
        "resetchannels",
        *_patterns(meta, scope),
        *_patterns(shards, scope),
        *_patterns(dead, scope),
        *_patterns(redeliver, scope),
        *_patterns(records, scope),
        *_CONNECTION,
        *_CALLS_FUNCTIONS,
        *_WAITS,
        "+time",
        _selector(*_patterns(meta, scope, "%R~"), *_patterns(redeliver, scope, "%R~"), "+hget", "+hmget"),
        _selector(*_patterns(records, scope), "+hget", "+hset"),
        _selector(
            *_patterns(shards, scope),
            "+xreadgroup",
            "+xack",
            "+xclaim",
            "+xpending",
            "+xrange",
            "+xinfo|consumers",
            "+xinfo|groups",
            "+xread",
            "+xgroup|delconsumer",
        ),
        _selector(*_patterns(dead, scope), "+xadd"),
    )


def _gated_rules(kind: str, scope: list[str]) -> tuple[str, ...]:
    """A member's or a producer's rules on a Redis with the gate module: the keys the library's functions
    are given (read-write, as the gate declares them), the gate's two commands, and only reads besides."""
    meta, shards = keys.META, keys.SHARD_STREAMS
    if kind == PRODUCER:
        # produce / idempotent_produce declare the metadata, the shard streams and the idempotency keys;
        # Producer.route() reads the route itself (HGET).
        once = [*_patterns(keys.ONCE, scope), *_patterns(keys.ONCE_PREVIOUS, scope)]
        return (
            "resetchannels",
            *_patterns(meta, scope),
            *_patterns(shards, scope),
            *once,
            *_CONNECTION,
            *_PRODUCER_GATE,
            _selector(*_patterns(meta, scope, "%R~"), "+hget"),
        )
    # The fenced functions and renew_lease declare these five families; the wake-up reads the shard
    # streams itself (consumers/dataplane/wait.py: XREAD, and XINFO GROUPS in its start-up probe).
    families = (meta, shards, keys.DEAD_LETTERS, keys.REDELIVER, keys.LEASE_RECORDS)
    return (
        "resetchannels",
        *(pattern for family in families for pattern in _patterns(family, scope)),
        *_CONNECTION,
        *_MEMBER_GATE,
        *_WAITS,
        _selector(*_patterns(shards, scope, "%R~"), "+xread", "+xinfo|groups"),
    )


def _checked(prefixes: Sequence[str]) -> list[str]:
    if isinstance(prefixes, str) or not prefixes:
        raise ValueError("give a non-empty list of stream prefixes")
    for prefix in prefixes:
        if not isinstance(prefix, str) or not PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"{prefix!r} is not a stream prefix ({PREFIX_RE.pattern})")
    return list(dict.fromkeys(prefixes))


# The three profiles over every prefix: the users of one deployment that serves all of its prefixes.
ACL_RULES: dict[str, tuple[str, ...]] = {kind: rules_for(kind) for kind in KINDS}
# The same users on a Redis with the gate module.
GATED_ACL_RULES: dict[str, tuple[str, ...]] = {kind: rules_for(kind, gated=True) for kind in KINDS}


def setuser_args(user: str, password_rule: str, rules: Sequence[str] | None = None) -> list[str]:
    """Arguments of ``ACL SETUSER`` after the user name: ``reset`` first, so running it again replaces
    whatever the user had. ``password_rule``: ``>cleartext`` or ``#<sha256 hex>``. ``rules``: by
    default the profile of ``user`` (one of :data:`KINDS`)."""
    return ["reset", "on", password_rule, *(ACL_RULES[user] if rules is None else rules)]


def setuser_command(user: str, password_rule: str, rules: Sequence[str] | None = None) -> str:
    """The ``ACL SETUSER`` line (as redis-cli takes it) for ``user``."""
    args = setuser_args(user, password_rule, rules)
    return " ".join(["ACL SETUSER", user, *(_quoted(a) for a in args)])


def aclfile_line(user: str, password_rule: str, rules: Sequence[str] | None = None) -> str:
    """The line of an ACL file (``aclfile`` in redis.conf) for ``user``."""
    return " ".join(["user", user, *setuser_args(user, password_rule, rules)])


def aclfile(
    passwords: Mapping[str, str],
    extra_lines: Sequence[str] = (),
    rules: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """An ACL file with every user of ``passwords`` (user -> ``>cleartext`` or ``#<sha256 hex>``), each
    with its profile, or with ``rules[user]`` when given."""
    chosen = rules or {}
    lines = [aclfile_line(u, p, chosen.get(u)) for u, p in passwords.items()]
    return "\n".join([*extra_lines, *lines]) + "\n"


def _quoted(arg: str) -> str:
    """redis-cli splits on spaces: a selector, which holds spaces, goes in double quotes."""
    return f'"{arg}"' if " " in arg else arg
