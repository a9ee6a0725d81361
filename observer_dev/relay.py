"""A TCP relay that can be cut: the partition between one observer replica and PostgreSQL in the cluster game
day. Every connection through it is forwarded byte for byte; `cut()` closes them all and refuses new ones
(as a network partition looks to a client: resets, then connection errors), `restore()` lets them through
again. With `record`, it also keeps every byte the target sent back (`take()`), for tests that must see what
went over the wire. Threads, one pair per connection; 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from observer_dev.promserver import free_port


class Relay:
    """127.0.0.1:`port` → `target_host`:`target_port`, until cut."""

    def __init__(self, target_host: str, target_port: int, *, record: bool = False) -> None:
        self.target = (target_host, target_port)
        self.record = record
        self.recorded = bytearray()
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        self.refused = 0  # connections refused while cut
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def cut(self) -> None:
        """Close every connection through the relay and refuse new ones."""
        with self._lock:
            self._cut = True
            conns, self._open = list(self._open), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b, back in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(a, b, back and self.record), name="relay-pipe",
                                 daemon=True).start()

    def take(self) -> bytes:
        """The bytes the target sent back since the last `take` (with `record`)."""
        with self._lock:
            out = bytes(self.recorded)
            self.recorded.clear()
        return out

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    with self._lock:
                        self.recorded += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)


@contextmanager
def relay(target_host: str, target_port: int, *, record: bool = False) -> Iterator[Relay]:
    """A running relay; closed on exit."""
    r = Relay(target_host, target_port, record=record)
    try:
        yield r
    finally:
        r.close()
