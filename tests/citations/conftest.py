"""Fixtures for the citation, web and tool-narrowing tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oberik.engine import toolbox
from oberik.settings import get_settings
from tests.citations.fakes import FakeWeb, start_fake_web


@pytest.fixture
def fake_web() -> Iterator[FakeWeb]:
    web = start_fake_web()
    yield web
    web.server.shutdown()
    web.server.server_close()


@pytest.fixture
def private_targets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Lets the web tools reach loopback, where the fake servers are (metadata addresses stay refused)."""
    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "true")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def catalog_family(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Registers the many-tools test family for the test's duration."""
    monkeypatch.setattr(toolbox, "_FAMILY_MODULES", (*toolbox._FAMILY_MODULES, "tests.citations.fakes"))
    toolbox.families.cache_clear()
    yield
    toolbox.families.cache_clear()
