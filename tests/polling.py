"""Bounded polling for tests: wait for a condition, never assert on elapsed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    done: Callable[[T], bool] = bool,
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``probe`` until ``done(value)``; returns that value. Time bounds the wait, never the result."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s} s; last value: {value!r}")
        time.sleep(interval_s)
