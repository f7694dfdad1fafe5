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
    requires_approval: bool = False  # a person decides before the platform makes the call
    family_owner: str | None = None  # the registered family that runs it (engine.toolbox); None: built in

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
            "requires_approval": self.requires_approval,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "capability": self.capability,
            "description": self.description,
            "parameters": self.parameters,
            "source": self.source,
            "needs": self.needs,
            "requires_approval": self.requires_approval,
            "family_owner": self.family_owner,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ToolSpec:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


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

REQUEST_APPROVAL = ToolSpec(
    name="request_approval",
    family="approvals",
    capability="approvals",
    description=(
        "Stop and ask a person for permission before doing something that cannot be undone or that acts on "
        "their behalf (sending a message, moving money, deleting). Nothing happens until they answer. Describe "
        "exactly what you are about to do."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "description": "one line, with the specifics in it"},
            "detail": {"type": "string", "description": "exactly what would be done or sent"},
            "consequence": {"type": "string", "description": "what cannot be undone afterwards"},
        },
        "required": ["action"],
        "additionalProperties": False,
    },
)

ASK_USER = ToolSpec(
    name="ask_user",
    family="asking",
    capability="ask_user",
    description=(
        "Ask the user a question when the decision is genuinely theirs and guessing wrong would waste real "
        "work. The turn pauses until they answer. Offer options when you can; they may always answer in their "
        "own words or decline to answer."
    ),
    parameters={
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "minItems": 1,
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "header": {"type": "string", "description": "a short label, unique in this batch"},
                        "question": {"type": "string"},
                        "options": {"type": "array", "items": {"type": "string"}},
                        "multi_select": {"type": "boolean"},
                        "allow_other": {"type": "boolean"},
                    },
                    "required": ["header", "question"],
                },
            }
        },
        "required": ["questions"],
        "additionalProperties": False,
    },
)

_TODO_NOTE = "The plan is per conversation and shown to you every turn; never call a tool to read it back."
TODO_WRITE = ToolSpec(
    name="todo_write",
    family="todo",
    capability="todo",
    description=(
        "Add steps to your plan for this conversation. Keep a plan only for genuinely multi-step work; a "
        "question you can answer or a one-step change needs none. " + _TODO_NOTE
    ),
    parameters={
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 1, "items": {"type": "string"}}},
        "required": ["items"],
        "additionalProperties": False,
    },
)
TODO_UPDATE = ToolSpec(
    name="todo_update",
    family="todo",
    capability="todo",
    description="Change one step of your plan by its number: its status (pending, in_progress, done) or its text.",
    parameters={
        "type": "object",
        "properties": {
            "n": {"type": "integer", "description": "the step's number"},
            "status": {"type": "string", "enum": ["pending", "in_progress", "done"]},
            "text": {"type": "string"},
        },
        "required": ["n"],
        "additionalProperties": False,
    },
)
TODO_REMOVE = ToolSpec(
    name="todo_remove",
    family="todo",
    capability="todo",
    description="Remove one step from your plan by its number. Other steps keep their numbers.",
    parameters={
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
)
TODO_CLEAR = ToolSpec(
    name="todo_clear",
    family="todo",
    capability="todo",
    description="Remove every step of your plan, e.g. when the work is finished or abandoned.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)

TODO_TOOLS = frozenset({"todo_write", "todo_update", "todo_remove", "todo_clear"})
# Tools that stop the turn until somebody answers.
PAUSING_TOOLS = frozenset({"request_approval", "ask_user"})

CATALOG: tuple[ToolSpec, ...] = (
    CURRENT_TIME,
    WAIT,
    REQUEST_APPROVAL,
    ASK_USER,
    TODO_WRITE,
    TODO_UPDATE,
    TODO_REMOVE,
    TODO_CLEAR,
)
BY_NAME: dict[str, ToolSpec] = {t.name: t for t in CATALOG}
