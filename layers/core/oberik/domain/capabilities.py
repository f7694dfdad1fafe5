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

# Tools that need more than their own capability: every entry must also be held ("output:*" = any output kind).
ALSO_REQUIRES: dict[str, tuple[str, ...]] = {"screenshot_url": ("output:*",)}
# Tools another capability replaces: when the turn holds that capability the tool is withheld, with the reason.
SUPERSEDED_BY: dict[str, tuple[str, str]] = {
    "screenshot_url": (
        "browser",
        "this token holds the browser capability, and browser_goto followed by browser_screenshot does everything "
        "screenshot_url did; two ways to capture a page is one more choice than the agent needs.",
    )
}


def is_capability(name: str) -> bool:
    return name in KNOWN_CAPABILITIES or bool(_OUTPUT.match(name))


def unknown_capabilities(names: Iterable[str]) -> list[str]:
    return sorted({n for n in names if not is_capability(n)})


@dataclass(frozen=True)
class Infrastructure:
    """What this deployment and project can actually run, independent of permissions."""

    embedding_model: bool = False
    search_provider: bool = False  # the project configured a search provider (settings: web_search)

    def provides(self, need: str) -> bool:
        if need == "embeddings":
            return self.embedding_model
        if need == "search_provider":
            return self.search_provider
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

    def holds(self, capability: str) -> bool:
        """Granted and switched on; "output:*" is held when any output kind is."""
        if capability == "output:*":
            return any(_OUTPUT.match(c) and c in self.token for c in self.ceiling)
        return self.granted(capability) and self.switched_on(capability)


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
        lost = {
            "memory": "Nothing can be remembered, recalled, written to or read from the wiki, or found in earlier "
            "conversations",
            "retrieval": "The project's documents cannot be searched",
        }.get(tool.family, "Nothing that searches by meaning can run")
        return (
            "this project has no embedding model configured, and searching by meaning needs one. "
            f"{lost}: set embedding_model in the project settings (PATCH /api/projects/{{id}}/settings, e.g. "
            '"offline/all-minilm-l6-v2") to make it available.'
        )
    if tool.needs == "search_provider":
        return (
            "this project has no search provider configured, so there is nothing to send a web search to. Set one "
            "in the project settings (web_search: the provider's url, key header and where its results are)."
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
        if not all(gate.holds(c) for c in ALSO_REQUIRES.get(tool.name, ())):
            continue
        if tool.name in SUPERSEDED_BY and gate.holds(SUPERSEDED_BY[tool.name][0]):
            withheld.append(Withheld(tool.name, tool.source, SUPERSEDED_BY[tool.name][1]))
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
