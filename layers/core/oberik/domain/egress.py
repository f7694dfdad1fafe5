"""Where the platform may send a request of its own making (webhooks today; webhook tools and browsing later).

A URL a project owner configures is checked here twice: when it is set, and again for every address its host
resolves to just before each request, so that a name re-pointed at an internal address after it was accepted
(DNS rebinding) is refused too. Refused are loopback, private, link-local, multicast and reserved addresses, and
the cloud metadata endpoints whatever else is allowed. Pure: resolving names and connecting is the adapter's job
(`oberik.adapters.http_delivery`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from oberik.domain.errors import Invalid

MAX_URL_CHARS = 2048

# Instance metadata and credential endpoints of the clouds a deployment may run on. Never reachable, even where
# private targets are allowed for local testing: a request there can hand out the deployment's own credentials.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack instance metadata
        "169.254.170.2",  # ECS task credentials
        "169.254.170.23",  # EKS Pod Identity
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "fd00:ec2::23",  # EKS Pod Identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)


class TargetRefused(Invalid):
    """A URL or address the platform will not send requests to."""

    code = "target_refused"


@dataclass(frozen=True)
class Target:
    """A checked URL, taken apart: the adapter connects to a checked address of `host` and names `host` in the
    Host header (and in TLS SNI), so the request reaches exactly the address that was checked."""

    url: str
    scheme: str
    host: str  # lower-case, without brackets
    port: int

    @property
    def literal(self) -> bool:
        """The host is an IP address rather than a name."""
        return _as_address(self.host) is not None


def _as_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def address_refusal(address: str, *, allow_private: bool = False) -> str | None:
    """Why a request may not go to `address` (an IP address as text), or None when it may."""
    ip = _as_address(address)
    if ip is None:
        return f"{address} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if allow_private:
        return None
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_private:
        return f"{ip} is a private address"
    if ip.is_reserved or not ip.is_global:
        return f"{ip} is not a public internet address"
    return None


def parse_target(url: str, *, field: str = "url") -> Target:
    """Check the shape of an outbound URL (absolute http or https, a host, nothing that points inward by name).

    Raises Invalid with a sentence naming `field`. What the host is (`name_refusal`) and where it resolves
    (`address_refusal`, for every address) are checked by the caller.
    """
    if not isinstance(url, str) or not url.strip():
        raise Invalid(f"{field} must be an absolute http or https URL.", field=field)
    if len(url) > MAX_URL_CHARS:
        raise Invalid(f"{field} is longer than {MAX_URL_CHARS} characters.", field=field)
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        raise Invalid(f"{field} contains whitespace or control characters.", field=field)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise Invalid(f"{field} is not a valid URL ({e}).", field=field) from e
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Invalid(f"{field} must start with https:// or http://, not {parts.scheme or 'nothing'}.", field=field)
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Invalid(f"{field} has no host name.", field=field)
    if parts.fragment:
        raise Invalid(f"{field} has a #fragment, which is never sent; remove it.", field=field)
    return Target(url=url, scheme=scheme, host=host, port=port or (443 if scheme == "https" else 80))


def name_refusal(host: str, *, allow_private: bool = False) -> str | None:
    """Why a host may not be used whatever it resolves to: metadata names, names of this machine, and IP
    literals that are refused themselves. None when the host may be resolved and its addresses checked."""
    if _as_address(host) is not None:
        return address_refusal(host, allow_private=allow_private)
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata endpoint"
    if not allow_private and (host == "localhost" or host.endswith(".localhost")):
        return f"{host} names this machine (loopback)"
    return None
