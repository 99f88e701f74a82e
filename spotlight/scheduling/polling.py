"""Polling with a deadline and doubling delays, for waits on Ray actors that cannot notify."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    probe: Callable[[], T | None],
    timeout_s: float,
    first_delay_s: float = 0.005,
    max_delay_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """Call ``probe()`` until it returns something not None, sleeping between tries (from
    ``first_delay_s``, doubling up to ``max_delay_s``); None once ``timeout_s`` has passed.
    What ``probe`` raises propagates (a wait that can tell it will never succeed)."""
    deadline = clock() + timeout_s
    delay = first_delay_s
    while True:
        value = probe()
        if value is not None or clock() > deadline:
            return value
        sleep(delay)
        delay = min(2 * delay, max_delay_s)
