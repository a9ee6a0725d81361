"""The one poll helper of the test suite: wait for a condition with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

Message = str | Callable[[], str]


def _text(message: Message) -> str:
    return message() if callable(message) else message


def wait_until(predicate: Callable[[], object], *, timeout: float = 10.0, interval: float = 0.02,
               message: Message = "condition") -> None:
    """Poll `predicate` until true, or raise AssertionError naming `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{_text(message)} not reached within {timeout}s")
        time.sleep(interval)


async def async_wait_until(predicate: Callable[[], object], *, timeout: float = 5.0, interval: float = 0.01,
                           message: Message = "condition") -> None:
    """`wait_until` for async tests: yields to the event loop between polls."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{_text(message)} not reached within {timeout}s")
        await asyncio.sleep(interval)
