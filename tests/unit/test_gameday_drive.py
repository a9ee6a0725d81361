"""The real game day's load driver names each request left unanswered, instead of one bare ReadTimeout."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from observer_dev.gameday import GamedayError
from observer_dev.gameday.real import drive


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Listens and never accepts: the kernel completes each connection and buffers its request, and no answer
    ever comes (a stalled engine or proxy)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_each_unanswered_request_is_named(silent_server: str) -> None:
    with pytest.raises(GamedayError) as e:
        drive({"canary": silent_server}, requests=2, concurrency=2, timeout=0.5)
    message = str(e.value)
    assert message.startswith("no answer: ")
    assert f"canary request 0 (12 words) to {silent_server}: ReadTimeout" in message
    assert f"canary request 1 (12 words) to {silent_server}: ReadTimeout" in message
