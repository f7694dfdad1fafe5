"""Tools your own code runs (`Tool`) and components your UI draws (`Ui`), declared to the agent per request."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """A client tool: the model may call it, and the SDK runs `handler(**arguments)` when it does.

    `description` is what the model reads to decide when to call it, and, for a tool with
    `requires_approval=True`, also the one line a person reads before saying yes: such a call comes back as
    an approval and the handler is unreachable until it is approved. The handler's return value is sent back
    as the result (text as is, anything else as JSON); an exception becomes `{"error": "..."}` for the model.
    The handler may be a coroutine function when used with `AsyncClient`.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(_EMPTY_OBJECT))
    handler: Callable[..., Any] | None = None
    requires_approval: bool = False

    def schema(self) -> dict[str, Any]:
        """The declaration for `client_tools`: an OpenAI function schema with `requires_approval` beside it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
            "requires_approval": self.requires_approval,
        }


@dataclass(frozen=True)
class Ui:
    """A UI component the agent may draw. `render(props)` is called with the arguments it filled in.

    Drawing never pauses the turn: the agent is told the component is on screen and carries on.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(_EMPTY_OBJECT))
    render: Callable[[dict[str, Any]], Any] | None = None

    def schema(self) -> dict[str, Any]:
        """The declaration for `ui_tools`."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


def by_name(items: Iterable[Tool | Ui]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        out[item.name] = item  # a later declaration of the same name replaces an earlier one
    return out
