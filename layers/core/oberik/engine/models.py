"""Turning a project's provider settings into a model lookup: `provider/model` -> (Model, provider's id)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oberik.adapters.model_registry import ProviderConfig, resolve_model
from oberik.domain.models import ProviderSettings
from oberik.settings import Settings


def resolver_for(providers: Mapping[str, ProviderSettings], settings: Settings) -> Callable[[str], tuple[Any, str]]:
    configs = {name: ProviderConfig(base_url=p.base_url, api_key=p.api_key) for name, p in providers.items()}
    return lambda name: resolve_model(name, configs, settings)
