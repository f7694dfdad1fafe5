"""The capability model: which tools a turn may be handed.

Effective tools = project ceiling ∩ token capabilities ∩ request `enable_*` flags ∩ project `allowed_tools`
∩ request `allowed_tools`. GET /tools, GET /capabilities and every turn call the functions here, so the
listing can never disagree with what a turn is actually given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from oberik.domain.tools import CATALOG, ToolSpec

# Every capability a token or a project ceiling may name. `output:<kind>` is a family of its own.
KNOWN_CAPABILITIES: frozenset[str] = frozenset(
    {
        "chat",
        "documents:read",
        "web_search",
        "browser",
        "browser_handoff",
        "memory",
        "tasks:write",
        "todo",
        "ask_user",
        "approvals",
        "subagents",
        "action_space",
        "computer",
        "plugins",
        "webhook_tools",
        "system_prompt",
        "steer",
        "auto_title",
        "mcp:manage",
    }
)
_OUTPUT = re.compile(r"^output:[a-z][a-z0-9_-]{0,31}$")

# The per-request switches the spec lists, each defaulting to true, and the capability each declines.
FLAGS: dict[str, str] = {
    "enable_rag": "documents:read",
    "enable_memory": "memory",
    "enable_web_search": "web_search",
    "enable_browser": "browser",
    "enable_todo": "todo",
    "enable_computer": "computer",
    "enable_subagents": "subagents",
    "enable_scheduling": "tasks:write",
    "enable_ask_user": "ask_user",
    "enable_approvals": "approvals",
    "enable_plugins": "plugins",
    "enable_action_space": "action_space",
    "enable_webhook_tools": "webhook_tools",
}
CAPABILITY_FLAG: dict[str, str] = {cap: flag for flag, cap in FLAGS.items()}

# What a new project allows until its owner narrows it. mcp:manage (user-supplied servers) stays off.
DEFAULT_CEILING: tuple[str, ...] = (*sorted(KNOWN_CAPABILITIES - {"mcp:manage"}), "output:file", "output:image")

# Capabilities whose behaviour lives outside the tool catalog (they gate request fields, not tools).
_BEHAVIOURAL: frozenset[str] = frozenset({"chat", "system_prompt", "steer", "auto_title", "mcp:manage"})

NEEDS_EMBEDDINGS = "needs an embedding model"


def is_capability(name: str) -> bool:
    return name in KNOWN_CAPABILITIES or bool(_OUTPUT.match(name))


def unknown_capabilities(names: Iterable[str]) -> list[str]:
    return sorted({n for n in names if not is_capability(n)})


@dataclass(frozen=True)
class Infrastructure:
    """What this deployment and project can actually run, independent of permissions."""

    embedding_model: bool = False

    def provides(self, need: str) -> bool:
        if need == "embeddings":
            return self.embedding_model
        return False


@dataclass(frozen=True)
class Gate:
    """Everything that narrows a turn's tools, gathered from the project, the token and the request."""

    ceiling: frozenset[str]
    token: frozenset[str]
    flags: Mapping[str, bool] = field(default_factory=dict)
    project_allowed: frozenset[str] | None = None
    request_allowed: frozenset[str] | None = None
    infra: Infrastructure = Infrastructure()

    def granted(self, capability: str) -> bool:
        return capability in self.ceiling and capability in self.token

    def switched_on(self, capability: str) -> bool:
        flag = CAPABILITY_FLAG.get(capability)
        return True if flag is None else bool(self.flags.get(flag, True))


@dataclass(frozen=True)
class Withheld:
    name: str
    source: str
    unavailable: str


@dataclass(frozen=True)
class Toolset:
    tools: list[ToolSpec]
    withheld: list[Withheld]

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]


def _unavailable_sentence(tool: ToolSpec) -> str:
    if tool.needs == "embeddings":
        return (
            "this project has no embedding model configured, so nothing that searches by meaning can run. "
            "Set one in the project settings (embedding_model) to make it available."
        )
    return f"this deployment cannot run {tool.name}: {tool.needs} is missing."


def resolve_toolset(gate: Gate, catalog: Iterable[ToolSpec] = CATALOG) -> Toolset:
    """The tools a turn under `gate` is handed, and the ones it would be handed but the project cannot run."""
    tools: list[ToolSpec] = []
    withheld: list[Withheld] = []
    for tool in catalog:
        if tool.capability is not None and not (gate.granted(tool.capability) and gate.switched_on(tool.capability)):
            continue
        if gate.project_allowed is not None and tool.name not in gate.project_allowed:
            continue
        if gate.request_allowed is not None and tool.name not in gate.request_allowed:
            continue
        if tool.needs and not gate.infra.provides(tool.needs):
            withheld.append(Withheld(tool.name, tool.source, _unavailable_sentence(tool)))
            continue
        tools.append(tool)
    return Toolset(tools, withheld)


@dataclass(frozen=True)
class CapabilityState:
    capability: str
    flag: str | None
    effective: bool
    blocked: str | None


def capability_report(gate: Gate, catalog: Iterable[ToolSpec] = CATALOG) -> list[CapabilityState]:
    """Every capability with whether a turn under `gate` gets it, and if not, the first reason why."""
    provided = {t.capability for t in catalog if t.capability}
    report: list[CapabilityState] = []
    names = sorted(KNOWN_CAPABILITIES | {c for c in gate.ceiling | gate.token if _OUTPUT.match(c)})
    for cap in names:
        flag = CAPABILITY_FLAG.get(cap)
        blocked: str | None = None
        if cap not in gate.ceiling:
            blocked = "not allowed by the project's capability ceiling"
        elif cap not in gate.token:
            blocked = "not granted to this token"
        elif not gate.switched_on(cap):
            blocked = f"switched off on this request ({flag}: false)"
        elif cap == "action_space" and not gate.infra.embedding_model:
            blocked = NEEDS_EMBEDDINGS
        elif cap not in _BEHAVIOURAL and cap not in provided:
            blocked = "nothing on this deployment provides it yet"
        report.append(CapabilityState(cap, flag, blocked is None, blocked))
    return report
