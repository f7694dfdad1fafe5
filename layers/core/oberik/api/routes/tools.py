"""Data plane: what a turn could be handed, computed by the same function every turn uses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from oberik.api.deps import CallerDep
from oberik.domain.capabilities import FLAGS, capability_report, resolve_toolset
from oberik.domain.errors import Invalid
from oberik.engine import toolbox
from oberik.engine.turns import gate_for

router = APIRouter(tags=["tools"])


def _allowed(allowed_tools: str | None, known: set[str]) -> list[str] | None:
    if allowed_tools is None:
        return None
    names = [n.strip() for n in allowed_tools.split(",") if n.strip()]
    unknown = sorted(set(names) - known)
    if unknown:
        raise Invalid(f"allowed_tools names tools that do not exist: {', '.join(unknown)}.", field="allowed_tools")
    return names


def _flags(params: dict[str, Any]) -> dict[str, bool]:
    return {k: v for k, v in params.items() if k in FLAGS and v is not None}


class ToolsListing(BaseModel):
    tools: list[dict[str, Any]]
    withheld: list[dict[str, Any]]


FlagQuery = Annotated[bool | None, Query(description="the same switch a chat request takes")]


@router.get("/tools", response_model=ToolsListing)
def list_tools(
    caller: CallerDep,
    allowed_tools: Annotated[str | None, Query(description="comma-separated, as a request's allowed_tools")] = None,
    enable_rag: FlagQuery = None,
    enable_memory: FlagQuery = None,
    enable_web_search: FlagQuery = None,
    enable_browser: FlagQuery = None,
    enable_todo: FlagQuery = None,
    enable_computer: FlagQuery = None,
    enable_subagents: FlagQuery = None,
    enable_scheduling: FlagQuery = None,
    enable_ask_user: FlagQuery = None,
    enable_approvals: FlagQuery = None,
    enable_plugins: FlagQuery = None,
    enable_action_space: FlagQuery = None,
    enable_webhook_tools: FlagQuery = None,
) -> ToolsListing:
    """The tools a turn sent with these switches would be handed, and those held back for lack of infrastructure."""
    flags = _flags(locals())
    catalog = toolbox.catalog(caller.project, caller.store)
    allowed = _allowed(allowed_tools, {t.name for t in catalog})
    gate = gate_for(caller.project, caller.claims, flags=flags, request_allowed=allowed)
    toolset = resolve_toolset(gate, catalog)
    return ToolsListing(
        tools=[t.public() for t in toolset.tools],
        withheld=[{"name": w.name, "source": w.source, "unavailable": w.unavailable} for w in toolset.withheld],
    )


class CapabilitiesListing(BaseModel):
    flags: dict[str, dict[str, Any]]
    capabilities: dict[str, dict[str, Any]]
    allowed_tools: list[str] | None


@router.get("/capabilities", response_model=CapabilitiesListing)
def capabilities(caller: CallerDep) -> CapabilitiesListing:
    """Every switch and capability with whether this token's turns get it, and what blocks it if not."""
    catalog = toolbox.catalog(caller.project, caller.store)
    report = capability_report(gate_for(caller.project, caller.claims), catalog)
    flags = {
        s.flag: {"capability": s.capability, "effective": s.effective, "blocked": s.blocked} for s in report if s.flag
    }
    caps = {s.capability: {"flag": s.flag, "effective": s.effective, "blocked": s.blocked} for s in report}
    return CapabilitiesListing(flags=flags, capabilities=caps, allowed_tools=caller.project.settings.allowed_tools)
