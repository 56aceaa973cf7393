"""``@listener``: declare a function as the handler of a consumer group (like dramatiq's ``@actor``).

::

    from consumers import listener

    @listener(stream_prefix="orders", consumer_group="billing", concurrency="3")
    def bill(entry):            # entry: consumers.dataplane.Entry
        ...

* ``stream_prefix`` and ``consumer_group`` are required: together they are the group's identity at the
  coordinator, and no default can guess them. The bare form ``@listener`` is therefore refused with a
  message that says so (decided here rather than inventing a group from a function name, which would
  silently point a renamed function at a different group).
* ``concurrency`` (an int or a numeric string, default 1) is the *member fan-out*: the listener runs
  that many independent members, each with its own member id, heartbeat and assignment. It is not the
  number of worker threads (that is the process's :class:`consumers.Runtime`). Django's
  ``RSC_LISTENER_CONCURRENCY = {"<listener name>": N}`` overrides it per listener at start-up.
* ``name`` defaults to the function's name; ``manage.py run_member <name> ...`` selects by it.

Everything is validated when the decorator runs (at import time), with a message naming the listener.
The result is a :class:`Listener`, still callable like the function.

The handler gets one :class:`consumers.dataplane.Entry` per call, in stream order within a shard. An
entry is acked once the handler returns. Delivery is at-least-once, so a handler must tolerate seeing an
event twice.

When the handler raises, the listener's *error policy* decides (:class:`ErrorPolicy`):

* ``on_error="keep"`` (the default, and the only behaviour unless asked otherwise): the error is logged
  and counted, the entry stays pending and the shard goes on (no retry, no dead-letter queue). It is
  delivered again on a take-over, a rejoin, or an operator's "redeliver".
* ``on_error="redeliver"`` (opt-in): the shard stops at the failed entry, waits ``redeliver_backoff_ms``
  (doubling per consecutive failure, capped at 60 s), and hands the entry out again, up to
  ``max_deliveries`` deliveries (Redis's delivery count); later entries of the shard wait, so per-shard
  order holds. After the last one it gives up: with ``dead_letter=True`` the entry is copied to the
  group's dead-letter stream and acked (atomically); without, it stays pending and an ERROR is logged.

These are validated here, at import time: ``max_deliveries`` 1..1000 (default 5),
``redeliver_backoff_ms`` 10..600000 (default 1000), ``redeliver_backoff_max_ms`` (default 60000, at
least ``redeliver_backoff_ms``) and ``redeliver_jitter`` 0..1 (default 0: each pause is shortened by a
random part of up to that share), all only with ``on_error="redeliver"``, and ``dead_letter=True`` only
with ``on_error="redeliver"``.

``ordering`` says what may run at once inside one shard (docs/consumers.md, "Orderings"):

* ``"shard"`` (the default): one batch of the shard at a time, in stream order;
* ``"key"``: entries of one partition key one at a time, in stream order; entries of different keys of
  the shard at once, up to the member's workers; each acked when its handler returns. An entry with an
  empty partition key has no order with any other;
* ``"none"`` (a share mode, like Kafka's share groups): any entry on any free worker, each acked on its own.

``max_in_flight`` (1..10000, default 64; only with "key" and "none") bounds what a member holds of one
shard between the read and the end of an entry: that many keys (entries under "none") that may run,
run or wait for a retry, and ten times as many entries in all (entries waiting behind their key's
running or parked entry count only there); the shard is not read again until a whole batch fits.

Discovery: ``run_member`` imports each installed app's ``listeners`` module (like the admin's
autodiscover); nothing is imported in ``AppConfig.ready()``.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, overload

from consumers.errors import InvalidRequest
from coordinator.protocol.errors import CoordinatorError
from coordinator.protocol.model import validate_identifier

MAX_LISTENER_CONCURRENCY = 1024
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")

Handler = Callable[[Any], Any]


class ListenerConfigError(InvalidRequest):
    """A listener declaration (or a setting about listeners) is invalid."""


def parse_concurrency(value: object, where: str) -> int:
    """``3`` or ``"3"`` -> 3; anything else (bools, floats, "3.5", "", 0, > 1024) is an error."""
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        number: object = int(value)
    else:
        number = value
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_LISTENER_CONCURRENCY:
        raise ListenerConfigError(
            f"{where}: concurrency must be an integer (or a string of one) in [1, "
            f"{MAX_LISTENER_CONCURRENCY}]; got {value!r}"
        )
    return number


class OnError(StrEnum):
    KEEP = "keep"  # log, count, leave the entry pending and go on (the default)
    REDELIVER = "redeliver"  # stop the shard at the entry, back off, hand it out again (opt-in)


class Ordering(StrEnum):
    SHARD = "shard"  # one batch of a shard at a time (the default)
    KEY = "key"  # one entry per partition key at a time; keys of a shard run at once
    NONE = "none"  # any entry on any free worker (a share mode)


_ON_ERROR = {mode.value: mode for mode in OnError}
_ORDERING = {mode.value: mode for mode in Ordering}
MAX_IN_FLIGHT_RANGE = (1, 10_000)
DEFAULT_MAX_IN_FLIGHT = 64
MAX_DELIVERIES_RANGE = (1, 1_000)
REDELIVER_BACKOFF_RANGE_MS = (10, 600_000)
REDELIVER_BACKOFF_CAP_MS = 60_000  # doubling stops here by default (a larger first backoff is used as is)
REDELIVER_BACKOFF_MAX_RANGE_MS = (10, 3_600_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorPolicy:
    """What a member does with an entry whose handler raised (module docstring)."""

    on_error: OnError = OnError.KEEP
    max_deliveries: int = 5
    dead_letter: bool = False
    redeliver_backoff_ms: int = 1_000
    redeliver_backoff_max_ms: int = REDELIVER_BACKOFF_CAP_MS
    redeliver_jitter: float = 0.0

    @property
    def redeliver(self) -> bool:
        return self.on_error is OnError.REDELIVER

    def backoff_ms(self, failures: int, jitter: float = 0.0) -> int:
        """The pause before the ``failures``-th redelivery of one entry (1, 2, ...): the first backoff
        doubled per failure after the first, at most the maximum (a first backoff above it is used as
        is), then shortened by ``jitter`` (a number in [0, 1) the caller draws) times the jitter share."""
        cap = max(self.redeliver_backoff_max_ms, self.redeliver_backoff_ms)
        doublings = min(max(failures, 1) - 1, 30)
        pause = min(self.redeliver_backoff_ms << doublings, cap)
        return pause - int(pause * self.redeliver_jitter * min(max(jitter, 0.0), 1.0))


def parse_error_policy(
    where: str,
    on_error: object = "keep",
    max_deliveries: object = None,
    dead_letter: object = False,
    redeliver_backoff_ms: object = None,
    redeliver_backoff_max_ms: object = None,
    redeliver_jitter: object = None,
) -> ErrorPolicy:
    """Validate the listener options of an error policy; ``None`` means "not given" (the default)."""
    mode = _ON_ERROR.get(on_error) if isinstance(on_error, str) else None
    if mode is None:
        raise ListenerConfigError(
            f"{where}: on_error must be 'keep' (the default) or 'redeliver'; got {on_error!r}"
        )
    if not isinstance(dead_letter, bool):
        raise ListenerConfigError(f"{where}: dead_letter must be True or False; got {dead_letter!r}")
    if mode is OnError.KEEP:
        given = (max_deliveries, redeliver_backoff_ms, redeliver_backoff_max_ms, redeliver_jitter)
        _refuse_redeliver_options(where, *given, dead_letter)
        return ErrorPolicy()
    defaults = ErrorPolicy()
    backoff = _int_option(where, "redeliver_backoff_ms", redeliver_backoff_ms, defaults.redeliver_backoff_ms,
                          REDELIVER_BACKOFF_RANGE_MS)
    low, high = REDELIVER_BACKOFF_MAX_RANGE_MS
    backoff_max = _int_option(where, "redeliver_backoff_max_ms", redeliver_backoff_max_ms,
                              max(defaults.redeliver_backoff_max_ms, backoff), (max(low, backoff), high))
    return ErrorPolicy(
        on_error=mode,
        max_deliveries=_int_option(where, "max_deliveries", max_deliveries, defaults.max_deliveries,
                                   MAX_DELIVERIES_RANGE),
        dead_letter=dead_letter,
        redeliver_backoff_ms=backoff,
        redeliver_backoff_max_ms=backoff_max,
        redeliver_jitter=_ratio_option(where, "redeliver_jitter", redeliver_jitter,
                                       defaults.redeliver_jitter),
    )  # fmt: skip


def _ratio_option(where: str, what: str, value: object, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ListenerConfigError(f"{where}: {what} must be a number in [0, 1]; got {value!r}")
    return float(value)


def parse_ordering(where: str, ordering: object, max_in_flight: object) -> tuple[Ordering, int]:
    """Validate ``ordering`` and ``max_in_flight`` (which means nothing under "shard")."""
    mode = _ORDERING.get(ordering) if isinstance(ordering, str) else None
    if mode is None:
        raise ListenerConfigError(
            f"{where}: ordering must be 'shard' (the default), 'key' or 'none'; got {ordering!r}"
        )
    if mode is Ordering.SHARD and max_in_flight is not None:
        raise ListenerConfigError(
            f"{where}: max_in_flight requires ordering='key' or 'none' (under 'shard' one batch of a "
            "shard is in flight at a time)"
        )
    window = _int_option(where, "max_in_flight", max_in_flight, DEFAULT_MAX_IN_FLIGHT, MAX_IN_FLIGHT_RANGE)
    return mode, window


def _refuse_redeliver_options(
    where: str,
    max_deliveries: object,
    backoff_ms: object,
    backoff_max_ms: object,
    jitter: object,
    dead_letter: bool,
) -> None:
    """Options that do nothing under on_error='keep' are a mistake, not a silent no-op."""
    options = (
        ("max_deliveries", max_deliveries),
        ("redeliver_backoff_ms", backoff_ms),
        ("redeliver_backoff_max_ms", backoff_max_ms),
        ("redeliver_jitter", jitter),
        ("dead_letter=True", dead_letter or None),
    )
    given = [name for name, value in options if value is not None]
    if given:
        raise ListenerConfigError(
            f"{where}: {' and '.join(given)} {'requires' if len(given) == 1 else 'require'} "
            "on_error='redeliver' (with the default on_error='keep' a failed entry stays pending and is "
            "never retried)"
        )


def _int_option(where: str, what: str, value: object, default: int, bounds: tuple[int, int]) -> int:
    if value is None:
        return default
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ListenerConfigError(f"{where}: {what} must be an integer in [{low}, {high}]; got {value!r}")
    return value


class Listener:
    """A declared handler: its group identity, its member fan-out, its error policy, and the function."""

    def __init__(
        self,
        fn: Handler,
        *,
        stream_prefix: str,
        consumer_group: str,
        concurrency: int | str = 1,
        name: str | None = None,
        on_error: str = "keep",
        max_deliveries: int | None = None,
        dead_letter: bool = False,
        redeliver_backoff_ms: int | None = None,
        redeliver_backoff_max_ms: int | None = None,
        redeliver_jitter: float | None = None,
        ordering: str = "shard",
        max_in_flight: int | None = None,
    ) -> None:
        if not callable(fn):
            raise ListenerConfigError(f"a listener wraps a function; got {fn!r}")
        name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise ListenerConfigError(
                f"listener name must be 1-64 characters of [A-Za-z0-9._-]; got {name!r} "
                "(pass name=... for lambdas and callables without a usable __name__)"
            )
        where = f"listener {name!r}"
        for what, value in (("stream_prefix", stream_prefix), ("consumer_group", consumer_group)):
            try:
                validate_identifier(value, what)  # the coordinator's own rule
            except CoordinatorError as e:
                raise ListenerConfigError(f"{where}: {e.message}") from None
        self.fn = fn
        self.name = name
        self.stream_prefix = stream_prefix
        self.consumer_group = consumer_group
        self.concurrency = parse_concurrency(concurrency, where)
        self.error_policy = parse_error_policy(
            where, on_error, max_deliveries, dead_letter, redeliver_backoff_ms, redeliver_backoff_max_ms,
            redeliver_jitter,
        )  # fmt: skip
        self.ordering, self.max_in_flight = parse_ordering(where, ordering, max_in_flight)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        policy = self.error_policy
        extra = ""
        if policy.redeliver:
            extra = (
                f", on_error='redeliver', max_deliveries={policy.max_deliveries}, "
                f"dead_letter={policy.dead_letter}, redeliver_backoff_ms={policy.redeliver_backoff_ms}, "
                f"redeliver_backoff_max_ms={policy.redeliver_backoff_max_ms}, "
                f"redeliver_jitter={policy.redeliver_jitter}"
            )
        if self.ordering is not Ordering.SHARD:
            extra += f", ordering={self.ordering.value!r}, max_in_flight={self.max_in_flight}"
        return (
            f"Listener({self.name!r}, stream_prefix={self.stream_prefix!r}, "
            f"consumer_group={self.consumer_group!r}, concurrency={self.concurrency}{extra})"
        )

    @property
    def qualified_name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', self.name)}"

    def with_concurrency(self, concurrency: int | str) -> Listener:
        """A copy with another member fan-out (a settings override); everything else is kept."""
        clone = copy.copy(self)
        clone.concurrency = parse_concurrency(concurrency, f"listener {self.name!r}")
        return clone


class ListenerRegistry:
    """Listeners by name. Declaring a name twice is an error, unless it is the same function declared
    again (a module imported twice, or reloaded): then the newer declaration wins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, Listener] = {}

    def register(self, item: Listener) -> Listener:
        with self._lock:
            existing = self._listeners.get(item.name)
            if existing is not None and existing.qualified_name != item.qualified_name:
                raise ListenerConfigError(
                    f"listener name {item.name!r} is declared twice ({existing.qualified_name} and "
                    f"{item.qualified_name}); pass name=... to one of them"
                )
            self._listeners[item.name] = item
        return item

    def all(self) -> list[Listener]:
        with self._lock:
            return [self._listeners[n] for n in sorted(self._listeners)]

    def get(self, name: str) -> Listener:
        with self._lock:
            try:
                return self._listeners[name]
            except KeyError:
                known = ", ".join(sorted(self._listeners)) or "none"
                raise ListenerConfigError(f"no listener named {name!r} (declared: {known})") from None

    def select(self, names: Iterable[str] = ()) -> list[Listener]:
        """The named listeners, or all of them when no name is given."""
        names = list(names)
        return [self.get(n) for n in names] if names else self.all()

    def clear(self) -> None:
        with self._lock:
            self._listeners.clear()


default_registry = ListenerRegistry()


@overload
def listener(fn: Handler, /) -> Listener: ...


@overload
def listener(
    fn: None = None,
    /,
    *,
    stream_prefix: str,
    consumer_group: str,
    concurrency: int | str = 1,
    name: str | None = None,
    on_error: str = "keep",
    max_deliveries: int | None = None,
    dead_letter: bool = False,
    redeliver_backoff_ms: int | None = None,
    redeliver_backoff_max_ms: int | None = None,
    redeliver_jitter: float | None = None,
    ordering: str = "shard",
    max_in_flight: int | None = None,
    registry: ListenerRegistry | None = None,
) -> Callable[[Handler], Listener]: ...


def listener(
    fn: Handler | None = None,
    /,
    *,
    stream_prefix: str | None = None,
    consumer_group: str | None = None,
    concurrency: int | str = 1,
    name: str | None = None,
    on_error: str = "keep",
    max_deliveries: int | None = None,
    dead_letter: bool = False,
    redeliver_backoff_ms: int | None = None,
    redeliver_backoff_max_ms: int | None = None,
    redeliver_jitter: float | None = None,
    ordering: str = "shard",
    max_in_flight: int | None = None,
    registry: ListenerRegistry | None = None,
) -> Listener | Callable[[Handler], Listener]:
    """Declare a listener; see the module docstring. ``registry`` defaults to the process registry."""
    target = registry if registry is not None else default_registry
    if fn is not None:
        raise ListenerConfigError(
            f"@listener on {getattr(fn, '__qualname__', fn)!r} needs arguments: "
            "@listener(stream_prefix=..., consumer_group=...) - the group's identity has no sensible default"
        )
    if stream_prefix is None or consumer_group is None:
        raise ListenerConfigError("@listener(...) needs both stream_prefix= and consumer_group=")

    def decorate(function: Handler) -> Listener:
        declared = Listener(
            function,
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
            concurrency=concurrency,
            name=name,
            on_error=on_error,
            max_deliveries=max_deliveries,
            dead_letter=dead_letter,
            redeliver_backoff_ms=redeliver_backoff_ms,
            redeliver_backoff_max_ms=redeliver_backoff_max_ms,
            redeliver_jitter=redeliver_jitter,
            ordering=ordering,
            max_in_flight=max_in_flight,
        )
        return target.register(declared)

    return decorate


def apply_concurrency_overrides(
    listeners: Iterable[Listener], overrides: Mapping[str, int | str] | None
) -> list[Listener]:
    """Apply ``RSC_LISTENER_CONCURRENCY`` (listener name -> fan-out). A name that matches no listener
    here is ignored (run_member may run a subset); a bad value is an error."""
    overrides = dict(overrides or {})
    result = []
    for item in listeners:
        if item.name in overrides:
            value = parse_concurrency(overrides[item.name], f"RSC_LISTENER_CONCURRENCY[{item.name!r}]")
            item = item.with_concurrency(value)
        result.append(item)
    return result


def autodiscover_listeners() -> ListenerRegistry:
    """Import the ``listeners`` module of every installed Django app; returns the process registry."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("listeners")
    return default_registry
