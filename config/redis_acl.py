"""Redis ACL profiles of the three kinds of Redis client, as data (docs/redis-acl.md explains them).

One definition for the tests and the docs: tests/test_redis_acl.py starts a Redis with exactly these
users and runs the real store, data plane and producer as each of them, and it checks that
docs/redis-acl.md shows exactly these rules.

Why selectors
-------------
Redis checks ACLs on every command a Lua script runs, and it also checks the keys a script *declares*
(EVALSHA's KEYS) as read-write, because it cannot know what the script will do with them. So a user
whose metadata key pattern is read-only (``%R~rsc:{*}:meta``) cannot even start a fenced script that
declares the metadata key. The member and producer profiles therefore use Redis 7 selectors:

* the root permissions allow only connection set-up and the script commands, with the keys a script
  may declare (read-write, as EVALSHA demands);
* each selector (in parentheses) pairs the data commands with the keys they may touch: ``HGET`` on the
  metadata hash, read only; stream commands on the shard streams; ``XADD`` on the dead-letter stream.

Redis allows a command when the root or one selector allows the command *and* all of its keys, so a
direct ``HSET rsc:{P}:meta`` is refused (no selector has ``HSET``), and so is ``XADD rsc:{P}:meta``
(``XADD`` is allowed only on the keys of its selector).

What ACLs cannot express: whether a command comes from one of *our* scripts. A member may run the
stream commands of its selector directly, outside the fence; only the fence (a script) checks epochs,
owners and leases. The docs spell this out.
"""

from __future__ import annotations

from collections.abc import Sequence

from rsc_redis import keys

COORDINATOR = "rsc-coordinator"
MEMBER = "rsc-member"
PRODUCER = "rsc-producer"

# Key patterns, from the key layout (rsc_redis/keys.py; docs/protocol.md section 9). Identifiers never
# contain ':' or braces, so `{*}` is one stream prefix and `v[0-9]*` one shard stream of some routing
# version.
META = keys.META.pattern()
SHARDS = keys.SHARD_STREAMS.pattern()
DEAD_LETTERS = keys.DEAD_LETTERS.pattern()
REDELIVER = keys.REDELIVER.pattern()
LEASE_RECORDS = keys.LEASE_RECORDS.pattern()

# What redis-py sends on connect and for health checks. AUTH needs no permission. Not CLIENT SETINFO:
# Redis 7.0 does not know it (an ACL file naming it does not load), and redis-py ignores its refusal.
# +cluster|slots and +command: a cluster client (redis+cluster://, docs/cluster.md) reads the slot map
# and the command table; harmless on a single Redis.
_CONNECTION = ("+ping", "+hello", "+client|setname", "+cluster|slots", "+command")
# What redis-py's Script uses: EVALSHA, SCRIPT LOAD after NOSCRIPT, SCRIPT EXISTS in pipelines. EVAL is
# not needed (and SCRIPT LOAD + EVALSHA could run any script anyway).
_SCRIPTS = ("+evalsha", "+script|load", "+script|exists")

ACL_RULES: dict[str, tuple[str, ...]] = {
    # Every rsc:* key, and every command the store runs (coordinator/store/*.py and *.lua).
    COORDINATOR: (
        "resetchannels",
        f"~{keys.ALL_KEYS_PATTERN}",
        *_CONNECTION,
        *_SCRIPTS,
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
    ),
    # The fenced scripts of consumers/dataplane: fence.lua + fetch, read_new, read_pending, claim, ack,
    # delete_ghosts, dead_letter (fetch reads every shard's redeliver token with one HMGET); and
    # renew_lease.lua, the member's own lease renewal: the only write a member makes outside streams.
    MEMBER: (
        "resetchannels",
        f"~{META}",
        f"~{SHARDS}",
        f"~{DEAD_LETTERS}",
        f"~{REDELIVER}",
        f"~{LEASE_RECORDS}",
        *_CONNECTION,
        *_SCRIPTS,
        "+time",
        f"(%R~{META} %R~{REDELIVER} +hget +hmget)",
        f"(~{LEASE_RECORDS} +hget +hset)",
        f"(~{SHARDS} +xreadgroup +xack +xclaim +xpending +xrange +xinfo|consumers +xgroup|delconsumer)",
        f"(~{DEAD_LETTERS} +xadd)",
    ),
    # produce.lua, and the route read of Producer.route().
    PRODUCER: (
        "resetchannels",
        f"~{META}",
        f"~{SHARDS}",
        *_CONNECTION,
        *_SCRIPTS,
        "+time",
        f"(%R~{META} +hget)",
        f"(~{SHARDS} +exists +xadd)",
    ),
}


def setuser_args(user: str, password_rule: str) -> list[str]:
    """Arguments of ``ACL SETUSER`` after the user name: ``reset`` first, so running it again replaces
    whatever the user had. ``password_rule``: ``>cleartext`` or ``#<sha256 hex>``."""
    return ["reset", "on", password_rule, *ACL_RULES[user]]


def setuser_command(user: str, password_rule: str) -> str:
    """The ``ACL SETUSER`` line (as redis-cli takes it) for ``user``."""
    return " ".join(["ACL SETUSER", user, *(_quoted(a) for a in setuser_args(user, password_rule))])


def aclfile_line(user: str, password_rule: str) -> str:
    """The line of an ACL file (``aclfile`` in redis.conf) for ``user``."""
    return " ".join(["user", user, *setuser_args(user, password_rule)])


def aclfile(passwords: dict[str, str], extra_lines: Sequence[str] = ()) -> str:
    """An ACL file with every user of ``passwords`` (user -> ``>cleartext`` or ``#<sha256 hex>``)."""
    return "\n".join([*extra_lines, *(aclfile_line(u, p) for u, p in passwords.items())]) + "\n"


def _quoted(arg: str) -> str:
    """redis-cli splits on spaces: a selector, which holds spaces, goes in double quotes."""
    return f'"{arg}"' if " " in arg else arg
