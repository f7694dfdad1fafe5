"""The catalog of server-side tools: what each one is, which capability gates it, what it needs to run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolSpec:
    name: str
    family: str
    capability: str | None
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    source: str = "builtin"
    needs: str | None = None  # infrastructure the tool cannot run without, e.g. "embeddings"

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "family": self.family,
            "capability": self.capability,
            "description": self.description,
            "parameters": self.parameters,
            "requires_approval": False,
        }


CURRENT_TIME = ToolSpec(
    name="current_time",
    family="scheduling",
    capability="tasks:write",
    description=(
        "Get the current date and time. Use it whenever the answer depends on now: today's date, the time, "
        "how long until something. Optionally give an IANA timezone such as Europe/Paris."
    ),
    parameters={
        "type": "object",
        "properties": {
            "timezone": {"type": "string", "description": "IANA timezone name; UTC when omitted"},
        },
        "additionalProperties": False,
    },
)

WAIT = ToolSpec(
    name="wait",
    family="scheduling",
    capability="tasks:write",
    description=(
        "Pause this turn for a number of seconds before continuing, e.g. to give something time to finish. "
        "The pause happens between steps and costs no model calls."
    ),
    parameters={
        "type": "object",
        "properties": {"seconds": {"type": "integer", "minimum": 1, "description": "how long to wait"}},
        "required": ["seconds"],
        "additionalProperties": False,
    },
)

CATALOG: tuple[ToolSpec, ...] = (CURRENT_TIME, WAIT)
BY_NAME: dict[str, ToolSpec] = {t.name: t for t in CATALOG}
