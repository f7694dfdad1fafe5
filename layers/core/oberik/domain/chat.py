"""The chat request and response: field names come from the spec."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from oberik.domain.llm import Effort

_CONTENT_PART_TYPES = {"text", "image_url"}


def _check_content(value: str | list[dict[str, Any]], field: str) -> str | list[dict[str, Any]]:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{field} is empty: send the words the user typed")
        return value
    if not value:
        raise ValueError(f"{field} is an empty list of parts: send at least one text or image part")
    has_text = False
    for i, part in enumerate(value):
        kind = part.get("type")
        if kind not in _CONTENT_PART_TYPES:
            raise ValueError(f"{field}[{i}].type must be 'text' or 'image_url', not {kind!r}")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{field}[{i}].text must be a string")
            has_text = has_text or bool(part["text"].strip())
        else:
            url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
            if not isinstance(url, str) or not url.startswith(("https://", "data:image/")):
                raise ValueError(f"{field}[{i}].image_url.url must be an https:// URL or a data:image/... URL")
    if not has_text and all(p.get("type") == "text" for p in value):
        raise ValueError(f"{field} has no text: send the words the user typed")
    return value


class ChatRequest(BaseModel):
    """A new turn (`message`), or the resumption of a paused one (`tool_results`, `approval_decisions`, ...)."""

    model_config = ConfigDict(extra="forbid")

    message: str | list[dict[str, Any]] | None = None
    messages: list[str] = Field(default_factory=list)
    session_id: str | None = None
    title: str | None = Field(default=None, max_length=200)
    user_ref: str | None = Field(default=None, max_length=200)
    enable_auto_title: StrictBool = False
    title_from: Literal["message", "response"] = "message"
    tags: list[str] = Field(default_factory=list)
    document_ids: list[str] = Field(default_factory=list)
    model: str | None = None
    reasoning_effort: Effort | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    system_prompt: str | None = Field(default=None, max_length=20_000)

    enable_rag: StrictBool = True
    enable_memory: StrictBool = True
    enable_web_search: StrictBool = True
    enable_browser: StrictBool = True
    enable_todo: StrictBool = True
    enable_computer: StrictBool = True
    enable_subagents: StrictBool = True
    enable_scheduling: StrictBool = True
    enable_ask_user: StrictBool = True
    enable_approvals: StrictBool = True
    enable_plugins: StrictBool = True
    enable_action_space: StrictBool = True
    enable_webhook_tools: StrictBool = True

    allowed_tools: list[str] | None = None
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    ui_tools: list[dict[str, Any]] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)

    tool_results: list[dict[str, Any]] | None = None
    approval_decisions: list[dict[str, Any]] | None = None
    answers: dict[str, Any] | None = None
    handoff_done: StrictBool | None = None

    @field_validator("message")
    @classmethod
    def _message(cls, v: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        return None if v is None else _check_content(v, "message")

    @field_validator("messages")
    @classmethod
    def _messages(cls, v: list[str]) -> list[str]:
        for i, m in enumerate(v):
            if not m.strip():
                raise ValueError(f"messages[{i}] is empty: drop it or send its text")
        return v

    @model_validator(mode="after")
    def _turn_or_resume(self) -> ChatRequest:
        resuming = any(
            x is not None for x in (self.tool_results, self.approval_decisions, self.answers, self.handoff_done)
        )
        if self.message is None and not resuming:
            raise ValueError("message is required: send the user's message (or, to resume a paused turn, its results)")
        if self.messages and self.message is None:
            raise ValueError("messages adds to message: send message as well")
        return self

    def flags(self) -> dict[str, bool]:
        return {k: bool(getattr(self, k)) for k in type(self).model_fields if k.startswith("enable_")}

    @property
    def resuming(self) -> bool:
        return self.message is None


class ChatResponse(BaseModel):
    """The terminal payload of a turn: the blocking response and the `done` frame carry the same shape."""

    session_id: str
    run_id: str
    content: str = ""
    citations: list[dict[str, Any]] = Field(default_factory=list)
    claims: list[dict[str, Any]] = Field(default_factory=list)
    attribution: Literal["per-claim", "retrieval-only", "none"] = "none"
    attachments: list[dict[str, Any]] = Field(default_factory=list)
    guard_flags: list[dict[str, Any]] = Field(default_factory=list)
    requires_action: bool = False
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    approvals: list[dict[str, Any]] = Field(default_factory=list)
    questions: list[dict[str, Any]] = Field(default_factory=list)
    handoff: dict[str, Any] | None = None
    ui: list[dict[str, Any]] = Field(default_factory=list)
    todos: list[dict[str, Any]] = Field(default_factory=list)
    title: str | None = None
    steered: list[str] = Field(default_factory=list)
    context: dict[str, Any] | None = None
    reasoning: str = ""
    warnings: list[str] = Field(default_factory=list)
    finish_reason: str | None = None
