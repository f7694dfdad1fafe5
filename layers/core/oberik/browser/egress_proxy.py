"""A forward proxy in front of Chromium that applies the egress guard to every connection it makes.

Checking the address the agent asks for is not enough: Chromium follows redirects by itself (Playwright's routes
never see the hops), loads frames and images from anywhere, and resolves names on its own, so a name checked a
moment ago can point elsewhere when Chromium connects (DNS rebinding). All of its traffic goes through this proxy
instead (loopback included), and the proxy resolves each host itself, checks every address with
`oberik.domain.egress` and connects only to an address it checked. A refused plain-HTTP request gets a 403
page saying why; a refused HTTPS tunnel is refused before any byte reaches the target.

One proxy per browser, on 127.0.0.1, on the browser's own asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from oberik.domain import egress

_HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT = 15.0


class EgressProxy:
    def __init__(self, *, allow_private: bool, on_refused: Callable[[str], None] | None = None):
        self.allow_private = allow_private
        self.on_refused = on_refused
        self._server: asyncio.base_events.Server | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _checked_address(self, host: str, port: int) -> tuple[str | None, str | None]:
        """(address to connect to, None) or (None, why it is refused)."""
        host = host.strip("[]").rstrip(".").lower()
        why = egress.name_refusal(host, allow_private=self.allow_private)
        if why:
            return None, why
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            return None, f"{host} does not resolve ({e})"
        addresses = list(dict.fromkeys(str(i[4][0]) for i in infos))
        for address in addresses:
            why = egress.address_refusal(address, allow_private=self.allow_private)
            if why:
                return None, f"{host} resolves to {address}, and {why}"
        return (addresses[0], None) if addresses else (None, f"{host} has no address")

    def _refused(self, why: str) -> None:
        if self.on_refused is not None:
            self.on_refused(why)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except Exception:
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return
        lines = head.split(b"\r\n")
        method, target, version = lines[0].split(b" ", 2)
        if method == b"CONNECT":
            host, _, port_text = target.decode().rpartition(":")
            address, why = await self._checked_address(host, int(port_text or 443))
            if address is None:
                self._refused(f"{host} is refused: {why}")
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(address, int(port_text or 443)), CONNECT_TIMEOUT
            )
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await _pipe_both(reader, writer, up_reader, up_writer)
            return
        url = target.decode()
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        port = parts.port or 80
        address, why = await self._checked_address(parts.hostname, port)
        if address is None:
            reason = f"{url} is refused: {why}"
            self._refused(reason)
            body = f"<!doctype html><title>Refused</title><p>The browser may not visit this address: {why}.</p>"
            data = body.encode()
            writer.write(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html; charset=utf-8\r\nConnection: close\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        out = [b" ".join((method, path.encode(), version))]
        for line in lines[1:]:
            if not line:
                continue
            name = line.split(b":", 1)[0].strip().lower()
            if name not in _HOP_HEADERS:
                out.append(line)
        out.append(b"Connection: close")
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
        up_writer.write(b"\r\n".join(out) + b"\r\n\r\n")
        await up_writer.drain()
        await _pipe_both(reader, writer, up_reader, up_writer)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            if dst.can_write_eof():
                dst.write_eof()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    up = asyncio.ensure_future(_pipe(reader, up_writer))
    try:
        await _pipe(up_reader, writer)  # the exchange is over when the target is done answering
    finally:
        up.cancel()
        with contextlib.suppress(Exception):
            up_writer.close()
