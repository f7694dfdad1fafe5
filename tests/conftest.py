"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from oberik.adapters.aws import reset_clients
from oberik.local import lambda_routing
from oberik.local.stack import FAKE_CREDENTIALS, MOTO_CONFIG, REGION, LocalStack
from oberik.settings import get_settings

pytest_plugins = ["tests.api_fixtures"]

# --- AWS (moto) fixtures ---

# Variables that could send a test to a real account or a stray endpoint.
_AWS_ESCAPES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "OBERIK_ENDPOINT_URL", "MOTO_PORT")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and the local region, and no way out to real AWS; undone after the test."""
    for name in _AWS_ESCAPES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "OBERIK_REGION"):
        monkeypatch.setenv(name, REGION)
    monkeypatch.setenv("OBERIK_ENVIRONMENT", "local")
    get_settings.cache_clear()
    reset_clients()
    yield
    get_settings.cache_clear()
    reset_clients()


@pytest.fixture
def mocked_aws(aws_env: None) -> Iterator[None]:
    """An empty moto (Step Functions executing, Lambda without Docker); no resources, no routes."""
    with mock_aws(config=MOTO_CONFIG):
        try:
            yield
        finally:
            lambda_routing.uninstall()
            reset_clients()


@pytest.fixture
def aws(mocked_aws: None) -> Iterator[LocalStack]:
    """The embedded stack from template.yaml (table, routed Lambdas, the turn state machine) on moto."""
    stack = LocalStack.in_process()
    try:
        yield stack
    finally:
        stack.stop()
