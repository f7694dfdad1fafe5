"""Control plane: projects, their keys, settings and end-user tokens (X-API-Key)."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Query, status
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from oberik.adapters import http_delivery, web_fetch
from oberik.api.deps import AdminDep, ProjectDep, SettingsDep, StoreDep, forget_project
from oberik.domain.capabilities import unknown_capabilities
from oberik.domain.context import ContextSettings
from oberik.domain.deliveries import DeliveryAttemptPublic, new_webhook_secret
from oberik.domain.errors import Invalid
from oberik.domain.guardrails import GuardrailSettings
from oberik.domain.identity import TokenClaims, hash_key, mint_token, new_project_key, new_signing_secret
from oberik.domain.ids import new_id
from oberik.domain.llm import Effort
from oberik.domain.models import Project, ProjectSettings, ProviderSettings
from oberik.domain.web import WebSearchSettings
from oberik.engine import toolbox
from oberik.engine.models import resolver_for

router = APIRouter(prefix="/api/projects", tags=["projects"])


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)


class ProjectCreated(BaseModel):
    id: str
    name: str
    key: str = Field(description="the project key; shown once, stored only as a hash")
    created_at: float


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectCreated)
def create_project(body: ProjectCreate, _: AdminDep, store: StoreDep) -> ProjectCreated:
    project = Project(
        id=new_id("p"), name=body.name.strip(), created_at=time.time(), signing_secret=SecretStr(new_signing_secret())
    )
    key = new_project_key(project.id)
    store.create_project(project, hash_key(key))
    return ProjectCreated(id=project.id, name=project.name, key=key, created_at=project.created_at)


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=256, description="who the end-user is, in your own terms")
    scope: str | None = Field(default=None, max_length=256)
    roles: list[str] = Field(default_factory=list, max_length=50)
    groups: list[str] = Field(default_factory=list, max_length=100)
    capabilities: list[str] | None = Field(default=None, description="defaults to the project's whole ceiling")
    models: list[str] | None = Field(default=None, description="provider/model names this user may pick; null: any")
    max_effort: Effort | None = None
    ttl: int = Field(default=3600, ge=60, description="lifetime in seconds")
    user_ref: str | None = Field(default=None, max_length=200)
    tenant_id: str | None = Field(default=None, max_length=200)

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("subject is blank: name the end-user this token is for")
        return v


class TokenMinted(BaseModel):
    token: str
    expires_at: int
    subject: str
    capabilities: list[str]


@router.post("/{id}/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenMinted)
def mint(body: TokenCreate, project: ProjectDep, settings: SettingsDep) -> TokenMinted:
    if body.ttl > settings.max_token_ttl_seconds:
        raise Invalid(f"ttl may be at most {settings.max_token_ttl_seconds} seconds.", field="ttl")
    caps = list(project.settings.capabilities) if body.capabilities is None else body.capabilities
    unknown = unknown_capabilities(caps)
    if unknown:
        raise Invalid(f"capabilities names unknown capabilities: {', '.join(unknown)}.", field="capabilities")
    now = int(time.time())
    claims = TokenClaims(
        sub=body.subject,
        pid=project.id,
        tenant_id=body.tenant_id or project.id,
        scope=body.scope,
        roles=body.roles,
        groups=body.groups,
        capabilities=sorted(set(caps)),
        models=body.models,
        max_effort=body.max_effort,
        user_ref=body.user_ref,
        iat=now,
        exp=now + body.ttl,
        jti=uuid.uuid4().hex,
    )
    token = mint_token(claims, project.signing_secret.get_secret_value())
    return TokenMinted(token=token, expires_at=claims.exp, subject=claims.sub, capabilities=claims.capabilities)


class ProviderPublic(BaseModel):
    base_url: str | None
    api_key_set: bool


class SettingsPublic(BaseModel):
    capabilities: list[str]
    allowed_tools: list[str] | None
    system_prompt: str | None
    default_model: str
    providers: dict[str, ProviderPublic]
    webhook_url: str | None
    handoff_autodetect: bool
    handoff_check_model: str | None = None
    embedding_model: str | None
    citations: dict[str, str]
    web_search: dict[str, Any] | None = None
    pinned_tools: list[str] = Field(default_factory=list)
    context: ContextSettings
    guardrails: GuardrailSettings
    aside_deadline_seconds: float | None


def _public(ps: ProjectSettings, settings: Any) -> SettingsPublic:
    return SettingsPublic(
        capabilities=ps.capabilities,
        allowed_tools=ps.allowed_tools,
        system_prompt=ps.system_prompt,
        default_model=ps.default_model or settings.default_model,
        providers={
            n: ProviderPublic(base_url=p.base_url, api_key_set=p.api_key is not None) for n, p in ps.providers.items()
        },
        webhook_url=ps.webhook_url,
        handoff_autodetect=ps.handoff_autodetect,
        handoff_check_model=ps.handoff_check_model,
        embedding_model=ps.embedding_model,
        citations={"markers": ps.citations_markers},
        web_search=ps.web_search.public() if ps.web_search else None,
        pinned_tools=ps.pinned_tools,
        context=ps.context,
        guardrails=ps.guardrails,
        aside_deadline_seconds=ps.aside_deadline_seconds,
    )


@router.get("/{id}/settings", response_model=SettingsPublic)
def get_project_settings(project: ProjectDep, settings: SettingsDep) -> SettingsPublic:
    return _public(project.settings, settings)


class SettingsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    capabilities: list[str] | None = None
    allowed_tools: list[str] | None = None
    system_prompt: str | None = Field(default=None, max_length=50_000)
    default_model: str | None = None
    providers: dict[str, ProviderSettings | None] | None = None
    webhook_url: str | None = None
    handoff_autodetect: bool | None = None
    handoff_check_model: str | None = Field(
        default=None, description="provider/model of the small vision model that judges a hand-off finished"
    )
    embedding_model: str | None = None
    web_search: WebSearchSettings | None = Field(
        default=None, description="the search provider web_search sends queries to (null: none)"
    )
    pinned_tools: list[str] | None = Field(default=None, description="tools tool narrowing always binds")
    context: ContextSettings | None = Field(
        default=None, description="when and how a long conversation is compacted for the model"
    )
    guardrails: GuardrailSettings | None = Field(default=None, description="input and output checks on every turn")
    aside_deadline_seconds: float | None = Field(
        default=None, gt=0, le=300, description="follow-ups and recap answer empty after this long (null: 30 s)"
    )


@router.patch("/{id}/settings", response_model=SettingsPublic)
def patch_project_settings(
    body: SettingsPatch, project: ProjectDep, store: StoreDep, settings: SettingsDep
) -> SettingsPublic:
    sent = body.model_dump(exclude_unset=True)
    current = project.settings.model_copy(deep=True)
    if "capabilities" in sent:
        if body.capabilities is None:
            raise Invalid(
                "capabilities cannot be null; send the list of capabilities the project allows.", field="capabilities"
            )
        unknown = unknown_capabilities(body.capabilities)
        if unknown:
            raise Invalid(f"capabilities names unknown capabilities: {', '.join(unknown)}.", field="capabilities")
        current.capabilities = sorted(set(body.capabilities))
    if "allowed_tools" in sent:
        if body.allowed_tools is not None:
            unknown = sorted(set(body.allowed_tools) - {t.name for t in toolbox.catalog(project, store)})
            if unknown:
                raise Invalid(
                    f"allowed_tools names tools that do not exist: {', '.join(unknown)}.", field="allowed_tools"
                )
        current.allowed_tools = body.allowed_tools
    if "providers" in sent and body.providers is not None:
        for name, provider in body.providers.items():
            if name == "offline":
                raise Invalid("'offline' is the built-in model and cannot be configured.", field="providers")
            if provider is None:
                current.providers.pop(name, None)
            else:
                current.providers[name] = provider
    if sent.get("webhook_url") is not None:
        # Refused here with a sentence, and checked again before every delivery (the name may move).
        http_delivery.check(body.webhook_url or "", allow_private=settings.allow_private_webhooks, field="webhook_url")
    for simple in ("system_prompt", "webhook_url", "embedding_model", "default_model", "handoff_check_model"):
        if simple in sent:
            setattr(current, simple, sent[simple])
    if "web_search" in sent:
        if body.web_search is not None:  # checked again before every search (the name may move)
            web_fetch.check(body.web_search.url, allow_private=settings.allow_private_webhooks, field="web_search.url")
        current.web_search = body.web_search
    if "pinned_tools" in sent:
        pinned = body.pinned_tools or []
        unknown = sorted(set(pinned) - {t.name for t in toolbox.catalog(project, store)})
        if unknown:
            raise Invalid(f"pinned_tools names tools that do not exist: {', '.join(unknown)}.", field="pinned_tools")
        current.pinned_tools = list(dict.fromkeys(pinned))
    if "handoff_autodetect" in sent and body.handoff_autodetect is not None:
        current.handoff_autodetect = body.handoff_autodetect
    if "context" in sent:
        current.context = body.context or ContextSettings()
    if "aside_deadline_seconds" in sent:
        current.aside_deadline_seconds = body.aside_deadline_seconds
    if "guardrails" in sent:
        current.guardrails = body.guardrails or GuardrailSettings()
    if current.default_model:
        resolver_for(current.providers, settings)(current.default_model)
    if current.handoff_check_model:
        try:
            resolver_for(current.providers, settings)(current.handoff_check_model)
        except Invalid as e:
            raise Invalid(f"handoff_check_model: {e.detail}", field="handoff_check_model") from e
    if "embedding_model" in sent and current.embedding_model:
        from oberik.adapters.embeddings import check_embedding_model

        check_embedding_model(current)  # an unknown provider or model: 400 with what to change
    changed_model = current.embedding_model != project.settings.embedding_model
    store.save_project_settings(project.id, current)
    forget_project(project.id)
    if changed_model and current.embedding_model:
        # Passages made by another model cannot be searched with this one: the documents are indexed again, and
        # the memories, wiki pages and past messages embedded again.
        from oberik.engine.documents import Documents
        from oberik.engine.reembed import reembed_later

        documents = Documents(store)
        documents.reindex(project.model_copy(update={"settings": current}))
        reembed_later(documents, project.id)
    return _public(current, settings)


class CitationsSetting(BaseModel):
    model_config = ConfigDict(extra="forbid")
    markers: Literal["inline", "stripped"]


@router.put("/{id}/citations", response_model=CitationsSetting)
def put_citations(body: CitationsSetting, project: ProjectDep, store: StoreDep) -> CitationsSetting:
    current = project.settings.model_copy(update={"citations_markers": body.markers})
    store.save_project_settings(project.id, current)
    forget_project(project.id)
    return body


# --- deliveries we send (turn.stopped, scheduled_task.fired) ---------------------------------------------


class WebhookSecret(BaseModel):
    secret: str = Field(description="the key every delivery's X-Signature is an HMAC-SHA256 with")


@router.get("/{id}/webhook-secret", response_model=WebhookSecret)
def get_webhook_secret(project: ProjectDep, store: StoreDep) -> WebhookSecret:
    """The project's delivery signing key, made the first time it is asked for (or first needed)."""
    return WebhookSecret(
        secret=store.get_webhook_secret(project.id) or store.create_webhook_secret(project.id, new_webhook_secret())
    )


@router.post("/{id}/webhook-secret/rotate", response_model=WebhookSecret)
def rotate_webhook_secret(project: ProjectDep, store: StoreDep) -> WebhookSecret:
    """A new key; the next delivery (retries of earlier ones included) is signed with it."""
    secret = new_webhook_secret()
    store.replace_webhook_secret(project.id, secret)
    return WebhookSecret(secret=secret)


class DeliveriesPage(BaseModel):
    items: list[DeliveryAttemptPublic]


@router.get("/{id}/webhook-deliveries", response_model=DeliveriesPage)
def list_webhook_deliveries(
    project: ProjectDep,
    store: StoreDep,
    limit: int = Query(default=50, ge=1, le=500),
    delivery_id: str | None = Query(default=None, max_length=100, description="only the attempts of this delivery"),
) -> DeliveriesPage:
    """Recent attempts at the project's deliveries, newest first: one item per attempt, so a retried delivery
    shows each try with its status code, duration and error."""
    if delivery_id is not None:
        attempts = [a for a in store.delivery_attempts(delivery_id) if a.project_id == project.id]
        attempts = sorted(attempts, key=lambda a: a.delivered_at, reverse=True)[:limit]
    else:
        attempts = store.list_delivery_attempts(project.id, limit=limit)
    return DeliveriesPage(items=[DeliveryAttemptPublic.model_validate(a.model_dump()) for a in attempts])
