"""The shapes the SDK returns.

The chat request and response, sessions and messages are the API's own models (`oberik.domain`). The few
answers that only a route module defines are restated here, field for field, so importing the SDK does not
import the server; a test checks they have not drifted apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from oberik.domain.chat import ChatRequest, ChatResponse
from oberik.domain.models import MessagePublic, SessionPublic

__all__ = [
    "ActiveRun",
    "CancelResult",
    "ChatRequest",
    "ChatResponse",
    "MessagePublic",
    "SessionPage",
    "SessionPublic",
    "ToolsListing",
    "Transcript",
    "Waiting",
]


class SessionPage(BaseModel):
    """One page of conversations. Page on with `next_offset` (None on the last page), not your own arithmetic."""

    items: list[SessionPublic]
    has_more: bool
    next_offset: int | None


class Transcript(BaseModel):
    session_id: str
    messages: list[MessagePublic]


class Waiting(BaseModel):
    """What a paused turn waits on."""

    run_id: str
    requires_action: bool = True
    tool_calls: list[dict[str, Any]]
    approvals: list[dict[str, Any]]
    questions: list[dict[str, Any]]
    handoff: dict[str, Any] | None = None  # a blocking browser hand-off: answer with handoff_done: true


class ActiveRun(BaseModel):
    """What is running on a conversation: `run_id` with status `running`, or None with `idle` / `lost`."""

    run_id: str | None
    last_event_id: int | None
    status: str
    authoritative: bool = True
    waiting: Waiting | None = None


class CancelResult(BaseModel):
    run_id: str
    session_id: str
    status: str


class ToolsListing(BaseModel):
    """The tools a turn would be handed, and those held back for lack of infrastructure."""

    tools: list[dict[str, Any]]
    withheld: list[dict[str, Any]]
