"""Outbound HTTP to addresses a project configured, behind the one guard every such request passes.

`check` resolves the URL's host and refuses it unless every address it resolves to is allowed
(`oberik.domain.egress`). `post` then connects to one of exactly those addresses (the URL's host stays in the
Host header and, for https, in TLS SNI and certificate checking), so a name cannot resolve to a public address
for the check and an internal one for the connection. No redirects are followed and no proxy from the
environment is used: either would send the request somewhere that was never checked.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx

from oberik.domain import egress
from oberik.domain.egress import Target, TargetRefused
from oberik.domain.errors import Invalid

CONNECT_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    error: str | None
    duration_ms: int
    refused: bool = False  # the guard refused the target: trying again will not help
    body: bytes = b""  # the start of what the receiver answered, when the caller asked to read it (read_limit)

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in the resolver's order, each once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check(url: str, *, allow_private: bool, field: str = "url") -> tuple[Target, list[str]]:
    """The parsed target and the addresses a request to it may use. Raises TargetRefused for a target that is
    refused, Invalid for a malformed URL or a host that does not resolve."""
    target = egress.parse_target(url, field=field)
    why = egress.name_refusal(target.host, allow_private=allow_private)
    if why:
        raise TargetRefused(f"{field} is refused: {why}. Deliveries go only to public internet addresses.", field=field)
    if target.literal:
        return target, [target.host]
    try:
        addresses = resolve(target.host, target.port)
    except (socket.gaierror, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise Invalid(f"{field}: the host {target.host} does not resolve ({reason}).", field=field) from e
    for address in addresses:
        why = egress.address_refusal(address, allow_private=allow_private)
        if why:
            raise TargetRefused(
                f"{field} is refused: {target.host} resolves to {address}, and {why}. "
                "Deliveries go only to public internet addresses.",
                field=field,
            )
    return target, addresses


def post(
    url: str,
    content: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allow_private: bool,
    field: str = "webhook_url",
    read_limit: int = 0,
) -> PostResult:
    """POST `content` to `url` through the guard. Never raises for the receiver's or the network's failures.
    With `read_limit`, up to that many bytes of the answer's body come back in `body`."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        target, addresses = check(url, allow_private=allow_private, field=field)
    except TargetRefused as e:
        return PostResult(None, e.detail, took(), refused=True)
    except Invalid as e:
        return PostResult(None, e.detail, took())
    original = httpx.URL(url)
    send_headers = {**headers, "Host": original.netloc.decode("ascii")}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" and not target.literal else {}
    error = "no address to connect to"
    with httpx.Client(
        timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_SECONDS)),
        follow_redirects=False,
        trust_env=False,
    ) as client:
        for address in addresses:  # each one was checked above; the next is tried only if this one is unreachable
            request = client.build_request(
                "POST", original.copy_with(host=address), content=content, headers=send_headers, extensions=extensions
            )
            try:
                response = client.send(request, stream=True)
                try:
                    body = _read(response, read_limit)  # nothing unless asked: a delivery's answer is not read
                finally:
                    response.close()
                if 200 <= response.status_code < 300:
                    return PostResult(response.status_code, None, took(), body=body)
                return PostResult(
                    response.status_code, f"the receiver answered HTTP {response.status_code}", took(), body=body
                )
            except httpx.ConnectError as e:
                error = f"could not connect to {target.host} ({address}): {e}"
            except httpx.TimeoutException:
                return PostResult(None, f"no answer from {target.host} within {timeout:g} s", took())
            except httpx.HTTPError as e:
                return PostResult(None, f"the request to {target.host} failed: {e}", took())
    return PostResult(None, error, took())


def _read(response: httpx.Response, limit: int) -> bytes:
    """At most `limit` bytes of a streamed response's body (decoded from any content-encoding)."""
    if limit <= 0:
        return b""
    out = bytearray()
    for chunk in response.iter_bytes():
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])
