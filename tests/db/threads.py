"""Real threads for the concurrency tests: each closes its own database connection when it ends, and
what each call returned or raised comes back to the test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection

JOIN_TIMEOUT_S = 30.0


def postgresql_only(reason: str) -> pytest.MarkDecorator:
    """Skip unless the test database is PostgreSQL (``python -m tests.postgres``), saying why."""
    return pytest.mark.skipif(connection.vendor != "postgresql", reason=f"PostgreSQL only: {reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None


def run_in_threads(*calls: Callable[[], Any], barrier: bool = False) -> list[Outcome]:
    """Run each call in its own thread (with ``barrier``, released together once all have started) and
    wait for all of them; their outcomes, in order. Each thread closes its database connection."""
    start = threading.Barrier(len(calls)) if barrier else None
    outcomes: list[Outcome] = [Outcome()] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            if start is not None:
                start.wait(timeout=JOIN_TIMEOUT_S)
            outcomes[index] = Outcome(value=call())
        except BaseException as e:  # handed to the test, which asserts on it
            outcomes[index] = Outcome(error=e)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a test thread did not finish"
    return outcomes


def run_together(*calls: Callable[[], Any]) -> list[Outcome]:
    """Start the calls at the same moment (a barrier); their outcomes, in order."""
    return run_in_threads(*calls, barrier=True)


def run_all(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call in its own thread; their results, or the first error raised in any of them."""
    outcomes = run_in_threads(*calls)
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error
    return [o.value for o in outcomes]
