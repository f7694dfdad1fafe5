"""Fetching from the web for the web tools (`web_search`'s provider, `browse_url`), behind the egress guard.

The same rule as webhooks (`oberik.domain.egress`), applied the same way as `oberik.adapters.http_delivery`:
the host is resolved, every address it resolves to is checked (no loopback, private, link-local, multicast,
reserved or cloud-metadata targets), and the request is sent to one of exactly those addresses with the host
kept in the Host header and in TLS SNI, so a name cannot pass the check with one address and connect to
another. Redirects are followed by hand, a few at most, and each new location is checked like the first. No
proxy from the environment is used. Bodies are read up to a size limit, within a deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx

from oberik.adapters import http_delivery
from oberik.domain import egress
from oberik.domain.egress import Target, TargetRefused
from oberik.domain.errors import Invalid

USER_AGENT = "oberik-web/0.1 (+https://github.com/oberik)"
MAX_BYTES = 2_000_000
MAX_REDIRECTS = 5
TIMEOUT_SECONDS = 15.0
CONNECT_TIMEOUT_SECONDS = 5.0
_REFUSED = "The web tools reach only public internet addresses."

# Looked up at call time so a test can stand in for DNS (a name that resolves to an internal address).
resolve = http_delivery.resolve


class FetchFailed(Exception):
    """The request could not be made or answered: a sentence the model can read and act on."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True)
class Fetched:
    url: str  # where the answer came from, after any redirects
    status: int
    content_type: str  # the media type, lower case, without parameters
    charset: str | None
    body: bytes
    truncated: bool  # the body was longer than the limit and was cut

    def text(self) -> str:
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def check(url: str, *, allow_private: bool, field: str = "url") -> tuple[Target, list[str]]:
    """The parsed target and the addresses a request to it may go to. Raises TargetRefused for a target the guard
    refuses (before or after resolving its name), Invalid for a malformed URL or a name that does not resolve."""
    target = egress.parse_target(url, field=field)
    why = egress.name_refusal(target.host, allow_private=allow_private)
    if why:
        raise TargetRefused(f"{target.url} is refused: {why}. {_REFUSED}", field=field)
    if target.literal:
        return target, [target.host.split("%", 1)[0]]
    try:
        addresses = resolve(target.host, target.port)
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise Invalid(f"{field}: the host {target.host} does not resolve ({reason}).", field=field) from e
    if not addresses:
        raise Invalid(f"{field}: the host {target.host} resolves to no address.", field=field)
    for address in addresses:
        why = egress.address_refusal(address, allow_private=allow_private)
        if why:
            raise TargetRefused(
                f"{target.url} is refused: {target.host} resolves to {address}, and {why}. {_REFUSED}", field=field
            )
    return target, addresses


def _media_type(header: str) -> tuple[str, str | None]:
    parts = [p.strip() for p in header.split(";")]
    charset = None
    for p in parts[1:]:
        key, _, value = p.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"').lower()
    return parts[0].lower(), charset


def fetch(
    url: str,
    *,
    allow_private: bool,
    method: str = "GET",
    params: dict[str, Any] | None = None,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT_SECONDS,
    max_redirects: int = MAX_REDIRECTS,
    field: str = "url",
) -> Fetched:
    """Send one request through the guard and read its answer (following redirects for GET).

    Raises TargetRefused (an Invalid) when the guard refuses a target, Invalid for a malformed URL, FetchFailed
    when the network or the server fails. An HTTP error status is an answer, not an exception."""
    deadline = time.monotonic() + timeout
    current = str(httpx.URL(url).copy_merge_params(params)) if params else url
    sent_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate", **(headers or {})}
    with httpx.Client(
        timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_SECONDS)),
        follow_redirects=False,
        trust_env=False,
    ) as client:
        for _hop in range(max_redirects + 1):
            target, addresses = check(current, allow_private=allow_private, field=field)
            response = _send(client, target, addresses, method, sent_headers, json_body, deadline)
            try:
                location = response.headers.get("location")
                if method == "GET" and response.status_code in (301, 302, 303, 307, 308) and location:
                    current = urljoin(current, location).split("#", 1)[0]
                    continue
                body, truncated = _read(response, max_bytes, deadline, target.host)
                media, charset = _media_type(response.headers.get("content-type", ""))
                return Fetched(current, response.status_code, media, charset, body, truncated)
            finally:
                response.close()
    raise FetchFailed(f"{url} redirected more than {max_redirects} times; giving up.")


def _send(
    client: httpx.Client,
    target: Target,
    addresses: list[str],
    method: str,
    headers: dict[str, str],
    json_body: Any,
    deadline: float,
) -> httpx.Response:
    original = httpx.URL(target.url)
    send_headers = {**headers, "Host": original.netloc.decode("ascii")}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" and not target.literal else {}
    error = f"could not connect to {target.host}"
    for address in addresses:  # each was checked; the next is tried only when this one cannot be reached
        if time.monotonic() >= deadline:
            break
        request = client.build_request(
            method,
            original.copy_with(host=address),
            headers=send_headers,
            json=json_body if method != "GET" else None,
            extensions=extensions,
        )
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as e:
            error = f"could not connect to {target.host} ({address}): {e}"
        except httpx.TimeoutException as e:
            raise FetchFailed(f"{target.host} did not answer in time.") from e
        except httpx.HTTPError as e:
            raise FetchFailed(f"the request to {target.host} failed: {e}") from e
    raise FetchFailed(error + ".")


def _read(response: httpx.Response, max_bytes: int, deadline: float, host: str) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
            if time.monotonic() > deadline:
                raise FetchFailed(f"{host} was still sending after the time allowed; nothing was read.")
    except httpx.TimeoutException as e:
        raise FetchFailed(f"{host} stopped sending before the answer was complete.") from e
    except httpx.HTTPError as e:
        raise FetchFailed(f"reading the answer from {host} failed: {e}") from e
    return b"".join(chunks), False


__all__ = ["FetchFailed", "Fetched", "check", "fetch"]


# --- what a reader sees of a page -----------------------------------------------------------------------

_HTML = frozenset({"text/html", "application/xhtml+xml"})
_TEXT = frozenset({"text/plain", "text/markdown", "text/csv", "application/json", "text/xml", "application/xml"})


class NotReadable(Exception):
    """The answer is not something browse_url reads (an image, a PDF, an archive...)."""


def readable(page: Fetched) -> tuple[str, str]:
    """The page's title and its main text, as it is served (its first paint: no script runs). HTML goes through
    trafilatura (boilerplate such as navigation and footers left out); plain text, markdown, CSV, JSON and XML are
    returned as they are."""
    media = page.content_type or "text/html"
    if media in _HTML or (media == "" and page.body.lstrip()[:1] == b"<"):
        return _html_text(page.text(), page.url)
    if media in _TEXT or media.startswith("text/"):
        return "", page.text().strip()
    raise NotReadable(f"{page.url} is {media}, not a web page or text")


def _html_text(html: str, url: str) -> tuple[str, str]:
    import trafilatura

    text = trafilatura.extract(html, url=url, include_comments=False, include_tables=True, favor_recall=True) or ""
    meta = trafilatura.extract_metadata(html, default_url=url)
    title = (meta.title if meta is not None else None) or _title_tag(html)
    if not text.strip():
        text = _all_text(html)
    return (title or "").strip(), text.strip()


def _title_tag(html: str) -> str:
    import re

    found = re.search(r"<title[^>]*>(.*?)</title>", html, re.IGNORECASE | re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


def _all_text(html: str) -> str:
    """Every visible text node, for pages too small or too odd for trafilatura to find a main text in."""
    from html.parser import HTMLParser

    class Collect(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self.skip = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in ("script", "style", "noscript", "template"):
                self.skip += 1

        def handle_endtag(self, tag: str) -> None:
            if tag in ("script", "style", "noscript", "template") and self.skip:
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip and data.strip():
                self.parts.append(" ".join(data.split()))

    parser = Collect()
    parser.feed(html)
    return "\n".join(parser.parts)
