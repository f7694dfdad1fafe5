"""Webhook tools: defined with the project key (control plane); their recent calls listed with the project key
or, on the data plane, with an end-user token carrying the admin role."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response, status
from pydantic import BaseModel, Field

from oberik.adapters import http_delivery
from oberik.api.deps import CallerDep, ProjectDep, SettingsDep, StoreDep
from oberik.domain import webhook_tools as wt
from oberik.domain.errors import Conflict, NotFound
from oberik.domain.models import Project
from oberik.engine import toolbox

router = APIRouter(prefix="/api/projects", tags=["webhook tools"])
data_router = APIRouter(tags=["tools"])

JsonBody = Annotated[Any, Body(description="the tool's fields: name, description, url, parameters, requiresApproval")]


class WebhookToolCreated(wt.WebhookToolPublic):
    secret: str = Field(description="this tool's signing secret: shown now and never again")


class WebhookToolList(BaseModel):
    items: list[wt.WebhookToolPublic]


class RotatedSecret(BaseModel):
    secret: str = Field(description="the new signing secret, shown once")
    previousSecretUntil: int = Field(  # the spec spells it so
        description="until then (unix seconds) calls carry a second signature made with the replaced secret"
    )


class WebhookToolCalls(BaseModel):
    items: list[wt.WebhookToolCallPublic]


def _taken(project: Project, store: Any) -> set[str]:
    """Names other tools of a turn use (built-ins and every other family's)."""
    return {t.name for t in toolbox.catalog(project, store) if t.family_owner != wt.FAMILY}


def _tool(store: Any, project: Project, tool_id: str) -> wt.WebhookTool:
    tool = store.get_webhook_tool(project.id, tool_id) if tool_id.startswith("wht_") else None
    if tool is None:
        raise NotFound(f"No webhook tool {tool_id} exists in this project.", code="webhook_tool_not_found")
    return tool


def _check_target(url: str, allow_private: bool) -> None:
    # Refused here with a sentence, and checked again before every call (the name may be re-pointed).
    http_delivery.check(url, allow_private=allow_private, field="url")


def _name_taken(name: str) -> Conflict:
    return Conflict(
        f"This project already has a webhook tool named {name!r}. Change that one (PATCH) or pick another name; "
        "if you lost its secret, rotate it (POST .../rotate) rather than creating the tool again.",
        code="webhook_tool_exists",
    )


@router.post("/{id}/webhook-tools", status_code=status.HTTP_201_CREATED, response_model=WebhookToolCreated)
def create_webhook_tool(
    body: JsonBody, project: ProjectDep, store: StoreDep, settings: SettingsDep
) -> WebhookToolCreated:
    """A tool the agent can call at your endpoint. Its signing secret is in this answer only."""
    fields = wt.read_fields(body, creating=True, taken=_taken(project, store))
    _check_target(fields["url"], settings.allow_private_webhooks)
    existing = store.list_webhook_tools(project.id)
    if any(t.name == fields["name"] for t in existing):
        raise _name_taken(fields["name"])
    if len(existing) >= wt.MAX_TOOLS_PER_PROJECT:
        raise Conflict(
            f"This project has {len(existing)} webhook tools, the most it may have; delete one first.",
            code="webhook_tools_full",
        )
    now = time.time()
    tool = wt.WebhookTool(
        id=wt.new_tool_id(),
        project_id=project.id,
        secret=wt.new_tool_secret(),
        created_at=now,
        updated_at=now,
        **fields,
    )
    if not store.create_webhook_tool(tool):
        raise _name_taken(tool.name)
    return WebhookToolCreated(**wt.WebhookToolPublic.of(tool, now).model_dump(), secret=tool.secret)


@router.get("/{id}/webhook-tools", response_model=WebhookToolList)
def list_webhook_tools(project: ProjectDep, store: StoreDep) -> WebhookToolList:
    """The project's webhook tools, oldest first, without their secrets."""
    now = time.time()
    tools = sorted(store.list_webhook_tools(project.id), key=lambda t: t.created_at)
    return WebhookToolList(items=[wt.WebhookToolPublic.of(t, now) for t in tools])


@router.get("/{id}/webhook-tools/deliveries", response_model=WebhookToolCalls)
def list_webhook_tool_deliveries(
    project: ProjectDep,
    store: StoreDep,
    limit: int = Query(default=50, ge=1, le=500),
    tool: str | None = Query(default=None, max_length=64, description="only the calls to the tool of this name"),
) -> WebhookToolCalls:
    """Recent calls to the project's webhook tools, newest first: tool, status, duration and error."""
    return WebhookToolCalls(items=_calls(store, project.id, limit, tool))


@router.get("/{id}/webhook-tools/{tool_id}", response_model=wt.WebhookToolPublic)
def get_webhook_tool(tool_id: str, project: ProjectDep, store: StoreDep) -> wt.WebhookToolPublic:
    return wt.WebhookToolPublic.of(_tool(store, project, tool_id), time.time())


@router.patch("/{id}/webhook-tools/{tool_id}", response_model=wt.WebhookToolPublic)
def patch_webhook_tool(
    tool_id: str, body: JsonBody, project: ProjectDep, store: StoreDep, settings: SettingsDep
) -> wt.WebhookToolPublic:
    """Change the fields sent and nothing else. requiresApproval takes true or false; null is refused."""
    current = _tool(store, project, tool_id)
    fields = wt.read_fields(body, creating=False, taken=_taken(project, store))
    if "url" in fields:
        _check_target(fields["url"], settings.allow_private_webhooks)
    new_name = fields.get("name", current.name)
    if new_name != current.name and any(t.name == new_name for t in store.list_webhook_tools(project.id)):
        raise _name_taken(new_name)
    now = max(time.time(), current.updated_at + 1e-6)
    changed = current.model_copy(update={**fields, "updated_at": now})
    if not store.save_webhook_tool(changed, previous=current):
        if new_name != current.name and store.get_webhook_tool(project.id, tool_id) == current:
            raise _name_taken(new_name)
        raise Conflict(
            "This webhook tool was changed or deleted by another request meanwhile; nothing was changed. "
            "Read it again (GET) and resend.",
            code="webhook_tool_changed",
        )
    return wt.WebhookToolPublic.of(changed, now)


@router.delete("/{id}/webhook-tools/{tool_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook_tool(tool_id: str, project: ProjectDep, store: StoreDep) -> Response:
    """Remove the tool; turns started from now on are not offered it, and calls already planned are refused."""
    tool = _tool(store, project, tool_id)
    store.delete_webhook_tool(tool)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{id}/webhook-tools/{tool_id}/rotate", response_model=RotatedSecret)
def rotate_webhook_tool_secret(tool_id: str, project: ProjectDep, store: StoreDep) -> RotatedSecret:
    """A new secret for the tool. For 24 hours each call carries two signatures (new, then old)."""
    for _attempt in range(3):
        current = _tool(store, project, tool_id)
        now = max(time.time(), current.updated_at + 1e-6)
        until = now + wt.ROTATION_GRACE_SECONDS
        rotated = current.model_copy(
            update={
                "secret": wt.new_tool_secret(),
                "previous_secret": current.secret,
                "previous_secret_until": until,
                "updated_at": now,
            }
        )
        if store.save_webhook_tool(rotated, previous=current):
            return RotatedSecret(secret=rotated.secret, previousSecretUntil=int(until))
    raise Conflict(
        "This webhook tool kept changing while its secret was being rotated; nothing was rotated. Send it again.",
        code="webhook_tool_changed",
    )


# --- the data plane -----------------------------------------------------------------------------------------


@data_router.get("/tools/deliveries", response_model=WebhookToolCalls)
def list_tool_deliveries(
    caller: CallerDep,
    limit: int = Query(default=50, ge=1, le=500),
    tool: str | None = Query(default=None, max_length=64, description="only the calls to the tool of this name"),
) -> WebhookToolCalls:
    """The same list as the control plane's, for a token minted with roles: ["admin"]."""
    if "admin" not in caller.claims.roles:
        raise NotFound(
            "There is nothing at /tools/deliveries for this token: webhook-tool deliveries are listed for tokens "
            'minted with roles: ["admin"], or with the project key at GET /api/projects/{id}/webhook-tools/deliveries.'
        )
    return WebhookToolCalls(items=_calls(caller.store, caller.project.id, limit, tool))


def _calls(store: Any, project_id: str, limit: int, tool: str | None) -> list[wt.WebhookToolCallPublic]:
    calls = store.list_webhook_tool_calls(project_id, limit=limit if tool is None else 500)
    if tool is not None:
        calls = [c for c in calls if c.tool == tool][:limit]
    return [wt.WebhookToolCallPublic.model_validate(c.model_dump()) for c in calls]
