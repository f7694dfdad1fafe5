"""The egress guard for the browser: which addresses a page may load.

The same rules as webhooks (`oberik.domain.egress`): no loopback, private, link-local or reserved targets and
never a cloud metadata endpoint. The address the agent asks for is checked before navigating, and every request
the page then makes (redirects, frames, images, scripts, fetches) is checked again by a route on the browser
context, so a public page cannot walk the browser into the deployment's network.
"""

from __future__ import annotations

import asyncio
import socket
import weakref
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from oberik.domain import egress

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Route


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why the browser may not go to `url` (a sentence for the agent), or None when it may."""
    try:
        target = egress.parse_target(url)
    except egress.Invalid as e:
        return str(e)
    why = egress.name_refusal(target.host, allow_private=allow_private)
    if why:
        return f"{url} is refused: {why}. The browser only goes to public internet addresses."
    if target.literal:
        return None
    try:
        addresses = resolve(target.host, target.port)
    except (socket.gaierror, UnicodeError) as e:
        return f"the host {target.host} does not resolve ({getattr(e, 'strerror', None) or e})."
    for address in addresses:
        why = egress.address_refusal(address, allow_private=allow_private)
        if why:
            return (
                f"{url} is refused: {target.host} resolves to {address}, and {why}. "
                "The browser only goes to public internet addresses."
            )
    return None


_BLOCKED: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def blocked(context: Any) -> list[str]:
    """Why requests of this context were refused, oldest first (the guard appends; callers may clear)."""
    return _BLOCKED.setdefault(context, [])


async def install(context: BrowserContext, *, allow_private: bool) -> None:
    """Check every http(s) request the context makes; refused ones are aborted as blocked by the client.

    A route is not consulted for the hops of a redirect Chromium follows by itself, and Chromium resolves names on
    its own: those are what the egress proxy (`egress_proxy.py`) every connection goes through is for. This
    check answers first, with a clearer error, for everything the route does see."""
    verdicts: dict[str, str | None] = {}
    blocked = _BLOCKED.setdefault(context, [])

    async def refusal(url: str) -> str | None:
        parts = urlsplit(url)
        key = f"{parts.scheme}://{parts.netloc}"
        if key not in verdicts:
            # Resolving blocks, so it runs off the loop; one verdict per scheme, host and port per context.
            clean = url.split("#", 1)[0]
            verdicts[key] = await asyncio.get_running_loop().run_in_executor(
                None, lambda: url_refusal(clean, allow_private=allow_private)
            )
        return verdicts[key]

    async def handle(route: Route) -> None:
        request = route.request
        url = request.url
        if not url.startswith(("http://", "https://")):
            await route.continue_()
            return
        why = await refusal(url)
        if why:
            blocked.append(why)
            await route.abort("blockedbyclient")
            return
        await route.continue_()

    await context.route("**/*", handle)
