"""Redis errors classified once, by exception type and error code: transient ("not now") or permanent.

The data plane (consumers/dataplane/scripts.py), the producer and the metadata store
(coordinator/store/replies.py) each translate redis-py's exceptions into their own typed errors; they
all ask this module which side of the line an error is on, so a failover reads the same everywhere.

Why not the message text: redis-py's parser (``redis/_parsers/base.py``, ``EXCEPTION_CLASSES``) strips
the code word of the replies it knows and raises a class of its own with the code in ``status_code``
(``-CLUSTERDOWN The cluster is down`` becomes ``ClusterDownError('The cluster is down')``), while the
codes it does not know (``BUSY``, ``NOREPLICAS``, ``WRONGTYPE``, ``MISCONF``) stay a plain
``ResponseError`` whose text still starts with the code. So :func:`error_code` reads ``status_code``
first and the reply's first word only when redis-py left it there; nothing here matches prose.

The classes (:class:`Kind`):

* ``UNKNOWN_OUTCOME``: the connection failed or timed out (``ConnectionError``, ``TimeoutError``, a
  garbled reply): the command may have run, its reply is lost. Transient.
* ``NOT_NOW``: Redis (or the cluster client) answered that it cannot serve the command right now, and
  it did not run: a failover (``CLUSTERDOWN``, ``MASTERDOWN``, ``READONLY`` from a demoted primary,
  ``MOVED`` / ``ASK`` / ``TRYAGAIN`` storms, the cluster client's ``TTL exhausted`` and uncovered
  slots), a node starting (``LOADING``), a long script (``BUSY``), a lost script cache (``NOSCRIPT``),
  memory or replicas short (``OOM``, ``NOREPLICAS``, ``MISCONF``: an operator may have to act, but
  the same command will work once they have). Transient.
* ``PERMANENT``: a refusal that sending the same command again cannot fix: an ACL or authentication
  refusal (``NOPERM``, ``NOAUTH``, ``WRONGPASS``), a wrong key type, a cross-slot call, a script's own
  ``ERR``, a client-side ``DataError``.
"""

from __future__ import annotations

from enum import StrEnum

import redis
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    BusyLoadingError,
    ClusterError,
    InvalidResponse,
    NoPermissionError,
    RedisClusterException,
    SlotNotCoveredError,
)


class Kind(StrEnum):
    UNKNOWN_OUTCOME = "unknown_outcome"  # unreachable or timed out: the command may have run
    NOT_NOW = "not_now"  # answered "not now": the command did not run; retry after a back-off
    PERMANENT = "permanent"  # retrying the same command cannot help

    @property
    def transient(self) -> bool:
        return self is not Kind.PERMANENT


# Error codes (the reply's first word) that mean "not now" (module docstring).
TRANSIENT_CODES = frozenset(
    {
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MASTERDOWN",
        "LOADING",
        "BUSY",
        "READONLY",
        "MOVED",
        "ASK",
        "NOSCRIPT",
        "OOM",
        "NOREPLICAS",
        "MISCONF",
    }
)

# Refused for who we are, not for when: authentication and ACLs. Checked before ConnectionError, of
# which redis-py makes the authentication errors subclasses.
_REFUSED_FOR_GOOD = (
    AuthenticationError,
    AuthorizationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
)


def error_code(error: BaseException) -> str | None:
    """The Redis error code of an error reply (``CLUSTERDOWN``, ``ERR``, ``BUSY``, ...), or None for an
    error that is not a reply (a connection error). redis-py keeps it in ``status_code`` for the codes
    its parser knows and leaves it as the message's first word for the others."""
    code = getattr(error, "status_code", None)
    if isinstance(code, str) and code:
        return code
    if isinstance(error, redis.ResponseError) and error.args and isinstance(error.args[0], str):
        word = error.args[0].split(" ", 1)[0]
        if word.isupper() and word.isalpha():
            return word
    return None


def classify(error: BaseException) -> Kind:
    """Which kind of failure ``error`` (raised by redis-py, or returned as an error reply) is."""
    if isinstance(error, _REFUSED_FOR_GOOD):
        return Kind.PERMANENT
    if isinstance(error, BusyLoadingError):  # a ConnectionError for redis-py, but a reply: nothing ran
        return Kind.NOT_NOW
    if isinstance(error, redis.ConnectionError | redis.TimeoutError | InvalidResponse):
        return Kind.UNKNOWN_OUTCOME
    if isinstance(error, redis.ResponseError):
        return Kind.NOT_NOW if error_code(error) in TRANSIENT_CODES else Kind.PERMANENT
    if isinstance(error, ClusterError):  # "TTL exhausted": redirections until the client gave up
        return Kind.NOT_NOW
    # The cluster client's own: a slot no node serves (mid-failover), or no node reachable to learn the
    # layout from (type exactly RedisClusterException). Its other subclasses are misuse: permanent.
    if isinstance(error, SlotNotCoveredError) or type(error) is RedisClusterException:
        return Kind.NOT_NOW
    return Kind.PERMANENT


def is_transient(error: BaseException) -> bool:
    return classify(error).transient


def is_redis_error(error: BaseException) -> bool:
    """Raised by redis-py: a ``RedisError``, or one of the cluster client's own exceptions (which do not
    derive from it)."""
    return isinstance(error, redis.RedisError | RedisClusterException)


def describe(error: BaseException) -> str:
    """The error as Redis said it, with the code word redis-py stripped put back in front
    (``CLUSTERDOWN The cluster is down``), for messages and logs."""
    message = str(error)
    code = error_code(error)
    if code is None or message.startswith(code):
        return message or type(error).__name__
    return f"{code} {message}".rstrip()
