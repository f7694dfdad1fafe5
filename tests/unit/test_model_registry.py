"""Resolving "provider/model" names to models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from oberik.adapters.model_registry import ProviderConfig, clear_model_cache, resolve_model
from oberik.adapters.openai_model import OpenAIModel
from oberik.domain.errors import Invalid
from oberik.domain.llm import Completion, ModelRequest
from oberik.local.offline_model import OfflineModel
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.settings import Settings


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_model_cache()
    yield
    clear_model_cache()


def settings(base_url: str | None = None, api_key: str | None = None) -> Settings:
    return Settings(
        openai_base_url=base_url,
        openai_api_key=SecretStr(api_key) if api_key else None,
        model_timeout_seconds=7.0,
    )


def test_offline_names_resolve_to_the_offline_model() -> None:
    # Given the built-in offline model's name
    # When it is resolved
    model, model_id = resolve_model("offline/oberik-offline", {}, settings())

    # Then it is the offline model with the id after the slash
    assert isinstance(model, OfflineModel)
    assert model_id == "oberik-offline"


def test_openai_falls_back_to_the_deployment_settings() -> None:
    # Given no project provider for openai, and deployment settings for it
    # When an openai model is resolved
    model, model_id = resolve_model("openai/gpt-4o-mini", {}, settings("http://gateway.local/v1", "sk-deploy"))

    # Then the client talks to the configured endpoint with the configured timeout
    assert isinstance(model, OpenAIModel)
    assert model.base_url == "http://gateway.local/v1"
    assert model.timeout == 7.0
    assert model_id == "gpt-4o-mini"


def test_a_project_openai_entry_wins_over_the_settings() -> None:
    # Given both a project "openai" provider and deployment settings, pointing at a live scripted provider
    with ScriptedProvider() as provider:
        provider.script(Reply(text="hi"))
        providers = {"openai": ProviderConfig(base_url=provider.base_url, api_key=SecretStr("sk-project"))}

        # When the model is resolved and used
        model, model_id = resolve_model("openai/gpt-4o", providers, settings("http://elsewhere/v1", "sk-deploy"))
        items = list(model.stream(ModelRequest(model=model_id, messages=[{"role": "user", "content": "hello"}])))

        # Then the project's endpoint and key were used
        assert isinstance(items[-1], Completion)
        assert items[-1].content == "hi"
        assert provider.request_headers[0]["authorization"] == "Bearer sk-project"
        assert provider.requests[0]["model"] == "gpt-4o"


def test_model_ids_may_contain_slashes() -> None:
    # Given a provider whose model ids are namespaced
    providers = {"together": ProviderConfig(base_url="http://together.local/v1", api_key=SecretStr("k"))}

    # When the name is resolved
    _, model_id = resolve_model("together/meta-llama/Llama-3-8b", providers, settings())

    # Then only the first segment is the provider
    assert model_id == "meta-llama/Llama-3-8b"


@pytest.mark.parametrize("name", ["gpt-4o", "/gpt-4o", "openai/", "ollama/llama3"])
def test_unusable_names_are_invalid_and_list_the_configured_providers(name: str) -> None:
    # Given a project with one extra provider
    providers = {"vllm": ProviderConfig(base_url="http://vllm.local/v1")}

    # When a name without a provider, without a model, or with an unknown provider is resolved
    with pytest.raises(Invalid) as caught:
        resolve_model(name, providers, settings())

    # Then the error is about the model field and says which providers exist
    assert caught.value.field == "model"
    assert "offline, openai, vllm" in caught.value.detail


def test_a_non_openai_provider_needs_a_base_url() -> None:
    # Given a provider configured with a key but no endpoint
    providers = {"acme": ProviderConfig(api_key=SecretStr("k"))}

    # When it is resolved
    with pytest.raises(Invalid) as caught:
        resolve_model("acme/model-1", providers, settings())

    # Then the error says what is missing
    assert "base_url" in caught.value.detail


def test_clients_are_reused_per_endpoint_and_key() -> None:
    # Given two providers on the same endpoint and key, and one with a different key
    providers = {
        "a": ProviderConfig(base_url="http://same.local/v1", api_key=SecretStr("k1")),
        "b": ProviderConfig(base_url="http://same.local/v1", api_key=SecretStr("k1")),
        "c": ProviderConfig(base_url="http://same.local/v1", api_key=SecretStr("k2")),
    }

    # When models are resolved through each
    first, _ = resolve_model("a/m1", providers, settings())
    again, _ = resolve_model("b/m2", providers, settings())
    other, _ = resolve_model("c/m1", providers, settings())

    # Then the same endpoint and key share one client, and a different key gets its own
    assert first is again
    assert first is not other
