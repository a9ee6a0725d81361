"""The real game day's load driver names each request left unanswered, instead of one bare ReadTimeout."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from observer_dev.gameday import GamedayError
from observer_dev.gameday.real import drive


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and reads requests, never answers (a stalled engine or proxy)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            held.append(conn)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=5)
        for c in held:
            c.close()
        sock.close()


def test_each_unanswered_request_is_named(silent_server: str) -> None:
    with pytest.raises(GamedayError) as e:
        drive({"canary": silent_server}, requests=2, concurrency=2, timeout=0.5)
    message = str(e.value)
    assert message.startswith("no answer: ")
    assert f"canary request 0 (12 words) to {silent_server}: ReadTimeout" in message
    assert f"canary request 1 (12 words) to {silent_server}: ReadTimeout" in message
