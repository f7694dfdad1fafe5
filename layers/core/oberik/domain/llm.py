"""What the engine exchanges with a model, independent of any provider's SDK."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Effort = Literal["minimal", "low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("minimal", "low", "medium", "high")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the model wrote; parse it where it is used


@dataclass(frozen=True)
class ModelRequest:
    model: str  # the provider's own model id, without our "provider/" prefix
    messages: list[dict[str, Any]]  # OpenAI chat format
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI tool schemas
    temperature: float = 0.2
    reasoning_effort: Effort | None = None


@dataclass(frozen=True)
class Delta:
    """A piece of streamed output: `content` is the answer, `reasoning` the model's thinking."""

    channel: Literal["content", "reasoning"]
    text: str


@dataclass(frozen=True)
class Completion:
    """The last item a model stream yields: everything the call produced, assembled."""

    content: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    # Sentences the caller should read, e.g. that reasoning_effort was dropped because the model refused it.
    warnings: list[str] = field(default_factory=list)
