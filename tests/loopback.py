"""HTTP servers on 127.0.0.1 for tests that play the other end of a call the platform makes: a webhook
receiver, a tool you host, a push service."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OnPost = Callable[[BaseHTTPRequestHandler, bytes], None]


HTML = {"Content-Type": "text/html; charset=utf-8"}


def reply(
    handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None
) -> None:
    """Answer one request; a sender that already gave up waiting is not an error."""
    try:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    except OSError:
        pass


@contextmanager
def listening(on_post: OnPost) -> Iterator[str]:
    """Serve POSTs on a free loopback port with `on_post(handler, raw_body)`; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            on_post(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
