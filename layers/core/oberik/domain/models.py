"""The platform's entities, a model family each: what is stored, what is created, what is shown."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from oberik.domain.capabilities import DEFAULT_CEILING
from oberik.domain.context import ContextSettings
from oberik.domain.guardrails import GuardrailSettings
from oberik.domain.llm import Effort
from oberik.domain.web import WebSearchSettings

# --- projects -------------------------------------------------------------------------------------


class ProviderSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    api_key: SecretStr | None = None


class ProjectSettings(BaseModel):
    """What a project's owner configures. Secrets inside (provider keys) are never shown back."""

    model_config = ConfigDict(extra="forbid")

    capabilities: list[str] = Field(default_factory=lambda: list(DEFAULT_CEILING))
    allowed_tools: list[str] | None = None
    system_prompt: str | None = None
    default_model: str | None = None
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    webhook_url: str | None = None
    handoff_autodetect: bool = True
    # The small vision model that judges whether a hand-off is finished ("provider/model"; None: the deployment's
    # OBERIK_HANDOFF_CHECK_MODEL, else default_model).
    handoff_check_model: str | None = None
    embedding_model: str | None = None
    citations_markers: Literal["inline", "stripped"] = "inline"
    web_search: WebSearchSettings | None = None  # the search provider web_search queries (None: not configured)
    pinned_tools: list[str] = Field(default_factory=list)  # tool narrowing (action_space) always binds these
    context: ContextSettings = Field(default_factory=ContextSettings)
    guardrails: GuardrailSettings = Field(default_factory=GuardrailSettings)
    # How long follow-ups and the recap may take before they answer empty (None: the platform's 30 s).
    aside_deadline_seconds: float | None = Field(default=None, gt=0, le=300)


class Project(BaseModel):
    id: str
    name: str
    created_at: float
    signing_secret: SecretStr
    settings: ProjectSettings = Field(default_factory=ProjectSettings)


# --- sessions and messages ------------------------------------------------------------------------


class Session(BaseModel):
    id: str
    project_id: str
    owner: str
    user_ref: str | None = None
    title: str | None = None
    created_at: float
    updated_at: float
    msg_seq: int = 0
    active_run: str | None = None
    active_turn: str | None = None
    last_run: str | None = None
    forked_from: str | None = None
    paused_turn: str | None = None  # a turn waiting on tool results, decisions or answers
    title_generated: bool = False  # a name was generated once; it is never generated again
    todo_seq: int = 0  # the last plan item number handed out; numbers are never reused


class SessionPublic(BaseModel):
    id: str
    title: str | None
    user_ref: str | None
    created_at: float
    updated_at: float
    forked_from: str | None = None


Role = Literal["user", "assistant", "tool"]


class Message(BaseModel):
    id: str
    session_id: str
    seq: int
    role: Role
    content: str | list[dict[str, Any]] | None
    turn_id: str | None = None
    created_at: float
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    # Internal: the message belongs to a turn that produced no answer; it is never replayed to the model.
    abandoned: bool = False


class MessagePublic(BaseModel):
    id: str
    role: Role
    content: str | list[dict[str, Any]] | None
    created_at: float
    turn_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


# --- turns and runs -------------------------------------------------------------------------------

TurnStatus = Literal["running", "paused", "completed", "failed", "cancelled"]


class TurnPlan(BaseModel):
    """Everything decided when the turn was requested, so every step runs under the same rules."""

    model: str  # provider/model
    temperature: float = 0.2
    reasoning_effort: Effort | None = None
    system_prompt: str | None = None  # the project's, authoritative
    extra_system_prompt: str | None = None  # the request's, additional
    tools: list[str] = Field(default_factory=list)
    # Definitions of bound tools that are not built in (a project's webhook tools, ...), by name.
    dynamic_tools: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Who asked, from the verified token: what tools that act for the caller are told, never the model's say.
    caller: dict[str, Any] = Field(default_factory=dict)
    client_tools: list[dict[str, Any]] = Field(default_factory=list)  # OpenAI schemas, maybe requires_approval
    ui_tools: list[dict[str, Any]] = Field(default_factory=list)
    # Nobody is there to answer (a scheduled run): questions are never offered; approvals still pause.
    unattended: bool = False
    # The scheduled task that started this turn ({"task_id", "callback_url"}): its reply is that task's
    # scheduled_task.fired.
    scheduled_task: dict[str, Any] | None = None
    # Name the conversation: from the user's first message (alongside the turn) or from the first exchange.
    auto_title: Literal["message", "response"] | None = None
    context: ContextSettings = Field(default_factory=ContextSettings)  # the project's, when the turn began
    guardrails: GuardrailSettings = Field(default_factory=GuardrailSettings)
    # Sentences the turn starts with, e.g. a capability the request asked for that could not do its job.
    warnings: list[str] = Field(default_factory=list)
    # Whether the answer keeps its [n] citation markers (the project's setting when the turn began).
    citations_markers: Literal["inline", "stripped"] = "inline"
    # The request's retrieval scope ({"tags": [...], "document_ids": [...]}): rag_search searches only those.
    retrieval: dict[str, list[str]] = Field(default_factory=dict)


class Turn(BaseModel):
    id: str
    session_id: str
    project_id: str
    owner: str
    run_id: str
    status: TurnStatus = "running"
    plan: TurnPlan
    steps: int = 0
    executions: int = 1
    execution_arn: str | None = None
    task_token: str | None = None
    created_at: float
    content: str = ""  # everything the turn has said so far, across steps
    answer: str = ""  # the last step's text: the assistant message stored when the turn finishes
    reasoning: str = ""
    finish_reason: str | None = None
    warnings: list[str] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    # What the turn is waiting on while paused: tool_calls, approvals, questions (see domain.pauses).
    pending: dict[str, Any] = Field(default_factory=dict)
    pause_seq: int = 0  # how many times the turn has paused; a resume names the pause it answers
    last_resume: dict[str, Any] | None = None  # {"digest", "run_id"} of the last resume, so a retry attaches
    ui: list[dict[str, Any]] = Field(default_factory=list)
    steered: list[str] = Field(default_factory=list)
    todos_changed: bool = False
    context: dict[str, Any] | None = None  # the compaction report, when this turn compacted
    guard_flags: list[dict[str, Any]] = Field(default_factory=list)
    # The first step run where a streamed turn was requested (engine.inline): the runner's lease, in epoch
    # milliseconds (0: no runner), and the verdict it hands to the execution's first Step task.
    inline_until: int = 0
    inline_result: dict[str, Any] | None = None
    # The citations register: every checkable source the turn was shown, each with its `marker` number.
    citations: list[dict[str, Any]] = Field(default_factory=list)
    # Tools tool_search made callable: bound on every later step of this turn, whatever the message ranks.
    found_tools: list[str] = Field(default_factory=list)


# Frames are physically removed a day after they are written; a finished run's frames stop being served
# 10 minutes after it ended (readers check that themselves, since TTL deletion is lazy).
FRAME_RETENTION_SECONDS = 24 * 3600

RunStatus = Literal["running", "paused", "completed", "failed", "cancelled", "lost"]
# `lost`: the run was generating and whatever ran it went away without finishing it.
TERMINAL_RUN = frozenset({"paused", "completed", "failed", "cancelled", "lost"})


class Run(BaseModel):
    id: str
    turn_id: str
    session_id: str
    project_id: str
    owner: str
    status: RunStatus = "running"
    blocking: bool = False
    cancel_requested: bool = False
    last_seq: int = 0
    created_at: float
    ended_at: float | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # Steering: messages sent into the running turn, and how many of them the turn has taken in.
    steers: list[str] = Field(default_factory=list)
    steer_count: int = 0
    steer_taken: int = 0
