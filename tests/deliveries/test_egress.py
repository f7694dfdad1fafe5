"""The egress guard: which targets a delivery may reach, checked by address and connected to by that address."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from oberik.adapters import http_delivery
from oberik.domain import egress
from oberik.domain.egress import TargetRefused
from oberik.domain.errors import Invalid
from tests.deliveries.conftest import Receiver

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.9.9.9", "loopback"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.10", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.10.10", "link-local"),
    ("fe80::1", "link-local"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("100.64.0.1", "not a public"),
    ("198.18.0.1", "private"),
]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_internal_addresses_are_refused(address: str, kind: str):
    why = egress.address_refusal(address)
    assert why is not None and kind in why


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str):
    assert egress.address_refusal(address) is None


def test_allowing_private_targets_never_allows_cloud_metadata():
    # Given the switch only tests and `oberik dev` turn on
    # Then loopback and private networks are reachable, and metadata endpoints still are not
    assert egress.address_refusal("127.0.0.1", allow_private=True) is None
    assert egress.address_refusal("10.0.0.5", allow_private=True) is None
    assert "metadata" in (egress.address_refusal("169.254.169.254", allow_private=True) or "")
    assert "metadata" in (egress.name_refusal("metadata.google.internal", allow_private=True) or "")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/x", "https:// or http://"),
        ("https://", "no host"),
        ("example.com/hook", "https:// or http://"),
        ("https://exa mple.com/", "whitespace"),
        ("https://example.com:99999/", "not a valid URL"),
        ("https://example.com/#top", "fragment"),
    ],
)
def test_malformed_urls_are_refused_with_a_sentence(url: str, words: str):
    with pytest.raises(Invalid) as refused:
        egress.parse_target(url, field="webhook_url")
    assert words in refused.value.detail and refused.value.field == "webhook_url"


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8080/x", "http://api.localhost/x", "http://metadata.google.internal/computeMetadata/v1/"],
)
def test_names_that_always_point_inward_are_refused_without_resolving(url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(http_delivery, "resolve", _no_dns)
    with pytest.raises(TargetRefused):
        http_delivery.check(url, allow_private=False, field="webhook_url")


def _no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} should not have been resolved")


def test_a_name_is_refused_if_any_address_it_resolves_to_is_internal(monkeypatch: pytest.MonkeyPatch):
    # Given a name that resolves to a public address and a private one
    monkeypatch.setattr(http_delivery, "resolve", lambda host, port: ["93.184.215.14", "10.0.0.7"])
    # When it is checked
    with pytest.raises(TargetRefused) as refused:
        http_delivery.check("https://hooks.example.com/x", allow_private=False, field="webhook_url")
    # Then it is refused, saying which address and why
    assert "10.0.0.7" in refused.value.detail and "private" in refused.value.detail


def test_a_name_that_does_not_resolve_is_invalid(monkeypatch: pytest.MonkeyPatch):
    def fail(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(http_delivery, "resolve", fail)
    with pytest.raises(Invalid) as refused:
        http_delivery.check("https://nowhere.example/x", allow_private=False, field="webhook_url")
    assert "does not resolve" in refused.value.detail and not isinstance(refused.value, TargetRefused)


def test_a_post_connects_to_the_address_that_was_checked(receiver: Receiver, monkeypatch: pytest.MonkeyPatch):
    # Given a name the guard resolves to the receiver's address, and a resolver that would answer differently
    # (a rebinding name) if anything looked the name up a second time
    lookups: list[str] = []
    real = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        lookups.append(str(host))
        if host == "hooks.example.test":
            return real("127.0.0.1", *args, **kwargs) if len(lookups) == 1 else real("10.9.9.9", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    port = receiver.url.split(":")[2].split("/")[0]

    # When a delivery is posted to that name
    result = http_delivery.post(
        f"http://hooks.example.test:{port}/in", b'{"a":1}', {"X-Test": "1"}, timeout=5, allow_private=True
    )

    # Then it reached the checked address, naming the host it was sent to, and the name was looked up once
    assert result.ok, result
    (got,) = receiver.wait_for(1)
    assert got.header("Host") == f"hooks.example.test:{port}" and got.raw == b'{"a":1}' and got.path == "/in"
    assert lookups.count("hooks.example.test") == 1


def test_a_refused_target_is_never_contacted(receiver: Receiver):
    result = http_delivery.post(receiver.url, b"{}", {}, timeout=2, allow_private=False)
    assert result.refused and not result.ok and "loopback" in (result.error or "")
    assert receiver.requests == []


def test_a_receiver_error_or_a_closed_port_is_a_failure_not_an_exception(receiver: Receiver):
    receiver.script(503)
    answered = http_delivery.post(receiver.url, b"{}", {}, timeout=2, allow_private=True)
    assert answered.status_code == 503 and not answered.ok and "503" in (answered.error or "")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = http_delivery.post(f"http://127.0.0.1:{closed}/", b"{}", {}, timeout=2, allow_private=True)
    assert refused.status_code is None and "could not connect" in (refused.error or "") and not refused.refused


def test_redirects_are_not_followed(receiver: Receiver):
    receiver.script(302)
    result = http_delivery.post(receiver.url, b"{}", {}, timeout=2, allow_private=True)
    assert result.status_code == 302 and not result.ok
    assert len(receiver.requests) == 1
