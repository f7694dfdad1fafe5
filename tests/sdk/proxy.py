"""A TCP proxy that breaks connections on purpose, to show the SDK surviving it."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


class CuttingProxy:
    """Forwards every connection to `target`.

    The first connection is cut after `cut_after` bytes of the server's answer (mid-frame, as a dropped
    network would). With `refuse_after_first`, every later connection is closed before a byte is answered.
    """

    def __init__(self, target: str, *, cut_after: int, refuse_after_first: bool = False) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.cut_after = cut_after
        self.refuse_after_first = refuse_after_first
        self.connections = 0
        self.cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping = True
        _close(self._listener)
        self._thread.join(2)

    def _accept(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            first = self.connections == 1
            if not first and self.refuse_after_first:
                _close(client)
                continue
            upstream = socket.create_connection(self.target)
            limit = self.cut_after if first else None
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, limit), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                if limit is not None and sent + len(chunk) >= limit:
                    sink.sendall(chunk[: limit - sent])
                    self.cut.set()
                    break
                sink.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        _close(source, sink)
