"""Turns a "provider/model" name into a `Model` and the provider's own model id."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from pydantic import BaseModel, SecretStr

from oberik.adapters.openai_model import OpenAIModel
from oberik.domain.errors import Invalid
from oberik.local.offline_model import OfflineModel
from oberik.ports import Model
from oberik.settings import Settings

OFFLINE = "offline"
OPENAI = "openai"


class ProviderConfig(BaseModel):
    """How to reach one OpenAI-compatible provider. `base_url` None means OpenAI's own API."""

    base_url: str | None = None
    api_key: SecretStr | None = None


_offline = OfflineModel()
_clients: dict[tuple[str | None, str | None, float], OpenAIModel] = {}
_clients_lock = threading.Lock()


def resolve_model(name: str, providers: Mapping[str, ProviderConfig], settings: Settings) -> tuple[Model, str]:
    """Find the model for `name` ("provider/model"; the model id may itself contain slashes).

    "offline" is the built-in offline model; "openai" uses the project's own "openai" entry when it has one,
    else the deployment's OPENAI_* settings; any other provider must be configured in `providers`.
    Raises `Invalid` (field "model") for a name without a provider or with one nobody configured.
    """
    provider, _, model_id = name.strip().partition("/")
    provider, model_id = provider.strip(), model_id.strip()
    if not provider or not model_id:
        raise Invalid(
            f"The model name {name!r} must look like provider/model, e.g. openai/gpt-4o-mini. "
            f"Configured providers: {_known(providers)}.",
            field="model",
        )
    if provider == OFFLINE:
        return _offline, model_id
    config = providers.get(provider)
    if config is None and provider == OPENAI:
        config = ProviderConfig(base_url=settings.openai_base_url, api_key=settings.openai_api_key)
    if config is None:
        raise Invalid(
            f"No model provider named {provider!r} is configured for this project, so {name!r} cannot be used. "
            f"Configured providers: {_known(providers)}.",
            field="model",
        )
    if config.base_url is None and provider != OPENAI:
        raise Invalid(
            f"The model provider {provider!r} has no base_url; set one in the project's provider settings "
            "(only the 'openai' provider defaults to OpenAI's API).",
            field="model",
        )
    api_key = config.api_key.get_secret_value() if config.api_key is not None else None
    return _client(config.base_url, api_key, settings.model_timeout_seconds), model_id


def _known(providers: Mapping[str, ProviderConfig]) -> str:
    return ", ".join([OFFLINE, OPENAI, *sorted(p for p in providers if p not in (OFFLINE, OPENAI))])


def _client(base_url: str | None, api_key: str | None, timeout: float) -> OpenAIModel:
    """One OpenAIModel per endpoint and key, so its HTTP connection pool is shared by every turn."""
    key = (base_url, api_key, timeout)
    with _clients_lock:
        model = _clients.get(key)
        if model is None:
            model = _clients[key] = OpenAIModel(base_url, api_key, timeout=timeout)
        return model


def clear_model_cache() -> None:
    """Close and forget every cached provider client (tests, or after provider settings change)."""
    with _clients_lock:
        models = list(_clients.values())
        _clients.clear()
    for model in models:
        model.close()
