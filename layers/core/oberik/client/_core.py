"""What the blocking and the asyncio clients share: building requests, reading frames, answering pauses.

None of it does I/O. Work that may call user code (handlers, tools) is expressed as `Call` values the two
clients execute in their own way: the blocking one calls, the asyncio one also awaits what comes back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import ValidationError

from oberik.client.errors import AgentStreamError, InvalidRequest
from oberik.client.sse import Frame
from oberik.client.tools import Tool, Ui
from oberik.domain.chat import ChatRequest, ChatResponse

DEFAULT_MAX_RETRIES = 10
DEFAULT_MAX_TOOL_ROUNDS = 10
# Waits between reconnects after a failure: doubling from the first, never above the last.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 3.0
# A server's `retry:` hint is honoured up to this many seconds.
RETRY_HINT_MAX = 5.0

TERMINAL = frozenset({"done", "cancelled", "error"})
# With a keepalive every 15 s, a minute without a byte means the connection is dead: reconnect.
STREAM_READ_TIMEOUT = 60.0
DISCONNECTED = "Stopped listening; the turn goes on. attach(run_id) follows it."


@dataclass
class Handlers:
    """The callbacks a stream takes. Each is optional; `on_event` sees every frame, whatever else handles it."""

    on_token: Callable[[str, str], Any] | None = None
    on_reasoning: Callable[[str, str], Any] | None = None
    on_tool_start: Callable[[str, Any], Any] | None = None
    on_tool_end: Callable[[str, Any], Any] | None = None
    on_todos: Callable[[list[dict[str, Any]]], Any] | None = None
    on_title: Callable[[str], Any] | None = None
    on_citations: Callable[[list[dict[str, Any]]], Any] | None = None
    on_attachments: Callable[[list[dict[str, Any]]], Any] | None = None
    on_ui: Callable[[dict[str, Any]], Any] | None = None
    on_questions: Callable[[list[dict[str, Any]]], Any] | None = None
    on_approval: Callable[[dict[str, Any]], Any] | None = None
    on_question: Callable[[dict[str, Any]], Any] | None = None
    on_browser_handoff: Callable[[dict[str, Any]], Any] | None = None
    on_event: Callable[[str, dict[str, Any]], Any] | None = None
    on_reconnect: Callable[[int], Any] | None = None


HANDLER_NAMES = frozenset(f.name for f in fields(Handlers))


def split_handlers(kwargs: dict[str, Any]) -> tuple[Handlers, dict[str, Any]]:
    """Separate `on_*` callbacks from request fields in one set of keyword arguments."""
    chosen = {k: v for k, v in kwargs.items() if k in HANDLER_NAMES}
    rest = {k: v for k, v in kwargs.items() if k not in HANDLER_NAMES}
    return Handlers(**chosen), rest


@dataclass(frozen=True)
class Call:
    """User code to run: `fn(*args, **kwargs)`. With `capture`, an exception comes back as a `Failed`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    capture: bool = False


@dataclass(frozen=True)
class Failed:
    error: BaseException


# --- requests -------------------------------------------------------------------------------------------------


def request_body(
    request: ChatRequest | Mapping[str, Any] | None,
    fields_: Mapping[str, Any],
    *,
    tools: Mapping[str, Tool] | None = None,
    ui: Mapping[str, Ui] | None = None,
) -> dict[str, Any]:
    """A chat request as JSON, checked with the API's own model before it is sent.

    Registered tools and UI components are declared after any the request names itself, skipping names it
    already declares, so a per-request declaration wins. Only fields that were given are sent.
    """
    if isinstance(request, ChatRequest):
        data: dict[str, Any] = request.model_dump(mode="json", exclude_unset=True)
    else:
        data = dict(request or {})
    data.update(fields_)
    for key, registry in (("client_tools", tools), ("ui_tools", ui)):
        if not registry:
            continue
        declared = list(data.get(key) or [])
        taken = {(d.get("function") or {}).get("name") for d in declared if isinstance(d, Mapping)}
        declared += [item.schema() for name, item in registry.items() if name not in taken]
        data[key] = declared
    try:
        checked = ChatRequest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise InvalidRequest(
            f"The chat request is not valid, so it was not sent: {problems}.", code="invalid_request"
        ) from exc
    return checked.model_dump(mode="json", exclude_unset=True)


def response_of(data: Any) -> ChatResponse:
    return ChatResponse.model_validate(data)


# --- pauses ---------------------------------------------------------------------------------------------------


def _answers_for(batch: Mapping[str, Any], reply: Any) -> dict[str, Any]:
    """What `on_question` returned, as the `answers` field of a resume.

    Accepted: None (decline the picker and keep chatting), a list of answers, a dict with `answers` and/or
    `chat_instead`, or a shorthand dict of question id -> an option label, several labels, or free text.
    """
    call_id = batch.get("tool_call_id")
    if reply is None:
        return {"tool_call_id": call_id, "chat_instead": True}
    if isinstance(reply, list):
        return {"tool_call_id": call_id, "answers": reply}
    if isinstance(reply, Mapping):
        if "answers" in reply or "chat_instead" in reply:
            return {"tool_call_id": call_id, **{k: v for k, v in reply.items() if k != "tool_call_id"}}
        labels = {q.get("id"): {o.get("label") for o in q.get("options") or []} for q in batch.get("questions") or []}
        answers = []
        for question_id, value in reply.items():
            if isinstance(value, list):
                answers.append({"question_id": question_id, "selected": [str(v) for v in value]})
            elif isinstance(value, str) and value in labels.get(question_id, set()):
                answers.append({"question_id": question_id, "selected": [value]})
            else:
                answers.append({"question_id": question_id, "text": str(value)})
        return {"tool_call_id": call_id, "answers": answers}
    raise TypeError(
        "on_question must return None (just chat), a list of answers, {'answers': [...]} / {'chat_instead': True}, "
        f"or {{question_id: answer}}; it returned {type(reply).__name__}."
    )


def _decision_for(approval: Mapping[str, Any], verdict: Any) -> dict[str, Any] | None:
    """What `on_approval` returned, as one approval decision; None leaves the approval outstanding."""
    if verdict is None:
        return None
    if isinstance(verdict, bool):
        return {"approved": verdict, "tool_call_id": approval.get("tool_call_id")}
    if isinstance(verdict, Mapping) and isinstance(verdict.get("approved"), bool):
        decision = {"approved": verdict["approved"], "tool_call_id": approval.get("tool_call_id")}
        if verdict.get("note"):
            decision["note"] = str(verdict["note"])
        return decision
    raise TypeError(
        f"on_approval must return True, False or {{'approved': bool, 'note': str}}; it returned {verdict!r}."
    )


def _tool_content(outcome: Any) -> Any:
    if isinstance(outcome, Failed):
        error = outcome.error
        return json.dumps({"error": f"{type(error).__name__}: {error}"})
    if outcome is None:
        return ""
    if isinstance(outcome, str):
        return outcome
    try:
        return json.dumps(outcome)
    except (TypeError, ValueError):
        return str(outcome)


def resolve_pause(
    response: ChatResponse, handlers: Handlers, tools: Mapping[str, Tool] | None
) -> Generator[Call, Any, dict[str, Any] | None]:
    """The resume fields for a paused turn, from the handlers and tools at hand; None when nothing can answer.

    A question goes to `on_question` (one batch a round, as the API takes them), approvals to `on_approval`,
    and client tool calls to their registered handlers, but only when every call of the round has one, since
    the API wants the whole round's results at once. Approvals never reach a tool handler: a call held for a
    decision is not in `tool_calls` until someone has said yes.
    """
    if not response.requires_action:
        return None
    body: dict[str, Any] = {}
    if response.questions and handlers.on_question is not None:
        batch = response.questions[0]
        reply = yield Call(handlers.on_question, (batch,))
        body["answers"] = _answers_for(batch, reply)
    if response.approvals and handlers.on_approval is not None:
        decisions = []
        for approval in response.approvals:
            verdict = yield Call(handlers.on_approval, (approval,))
            decision = _decision_for(approval, verdict)
            if decision is not None:
                decisions.append(decision)
        if decisions:
            body["approval_decisions"] = decisions
    calls = response.tool_calls
    if not body and calls and tools and all(c.get("name") in tools and tools[c["name"]].handler for c in calls):
        results = []
        for c in calls:
            handler = tools[c["name"]].handler
            assert handler is not None
            raw = c.get("args")
            arguments: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            outcome = yield Call(handler, (), arguments, capture=True)
            results.append({"tool_call_id": c["id"], "content": _tool_content(outcome)})
        body["tool_results"] = results
    return body or None


def resume_body(response: ChatResponse, resolution: dict[str, Any], tools: Mapping[str, Tool] | None) -> dict[str, Any]:
    body = {"session_id": response.session_id, **resolution}
    if tools:
        body["client_tools"] = [t.schema() for t in tools.values()]
    return body


# --- a stream's frames ----------------------------------------------------------------------------------------


class StreamState:
    """Everything a stream has seen, across reconnects and the runs of a resumed turn.

    `accept(frame)` returns the handler calls the frame asks for and, on a terminal frame, the outcome: a
    `ChatResponse` for `done`, an `AgentStreamError` for `cancelled` / `error`.
    """

    def __init__(self, handlers: Handlers, ui: Mapping[str, Ui] | None = None) -> None:
        self.handlers = handlers
        self.ui = dict(ui or {})
        self.run_id: str | None = None  # from the run frame
        self.current_run: str | None = None  # from the response header, for cancel / steer / reconnect
        self.session_id: str | None = None
        self.last_id = 0
        self.content = ""
        self.reasoning = ""

    def follow(self, run_id: str | None, last_id: int = 0) -> None:
        """A new run to follow (a fresh turn, a resume, or an attach from `last_id`)."""
        if run_id is not None and run_id != self.current_run:
            self.current_run = run_id
            self.last_id = last_id

    def seen(self, frame: Frame) -> bool:
        return frame.id is not None and frame.id <= self.last_id

    def error(self, code: str, detail: str, body: dict[str, Any] | None = None) -> AgentStreamError:
        return AgentStreamError(
            detail,
            code=code,
            session_id=(body or {}).get("session_id") or self.session_id,
            run_id=(body or {}).get("run_id") or self.current_run or self.run_id,
            content=self.content,
            body=body,
        )

    def accept(self, frame: Frame) -> tuple[list[Call], ChatResponse | AgentStreamError | None]:
        if frame.id is not None:
            self.last_id = frame.id
        h, data, calls = self.handlers, frame.data, []
        event = frame.event

        def call(fn: Callable[..., Any] | None, *args: Any) -> None:
            if fn is not None:
                calls.append(Call(fn, args))

        if event == "run":
            self.run_id = data.get("run_id") or self.run_id
            self.current_run = self.current_run or self.run_id
        elif event == "start":
            self.session_id = data.get("session_id") or self.session_id
        elif event == "token":
            delta = str(data.get("delta") or "")
            self.content += delta
            call(h.on_token, delta, self.content)
        elif event == "reasoning":
            delta = str(data.get("delta") or "")
            self.reasoning += delta
            call(h.on_reasoning, delta, self.reasoning)
        elif event == "tool_start":
            call(h.on_tool_start, data.get("name"), data.get("input"))
        elif event == "tool_end":
            call(h.on_tool_end, data.get("name"), data.get("output"))
        elif event == "todos":
            call(h.on_todos, data.get("todos") or [])
        elif event == "title":
            call(h.on_title, data.get("title"))
        elif event == "citations":
            call(h.on_citations, data.get("citations") or [])
        elif event == "attachments":
            call(h.on_attachments, data.get("attachments") or [])
        elif event == "ui":
            call(h.on_ui, data)
            component = self.ui.get(str(data.get("name")))
            if component is not None:
                call(component.render, data.get("props") or {})
        elif event == "questions":
            call(h.on_questions, data.get("questions") or [])
        elif event == "browser_handoff":
            call(h.on_browser_handoff, data)
        call(h.on_event, event, data)

        outcome: ChatResponse | AgentStreamError | None = None
        if event == "done":
            outcome = response_of(data)
            self.session_id = outcome.session_id or self.session_id
        elif event == "cancelled":
            outcome = self.error("stream_cancelled", "The turn was cancelled before it finished.", data)
        elif event == "error":
            outcome = self.error(
                str(data.get("code") or "stream_failed"), str(data.get("detail") or "The turn failed."), data
            )
        return calls, outcome


def decode_json(response: Any) -> Any:
    """An httpx response's JSON body, or None when it has none."""
    try:
        return response.json()
    except ValueError:
        return None


def backoff(failures: int) -> float:
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * (2 ** max(0, failures - 1))))


def retry_delay(hint_ms: int | None) -> float:
    return 0.0 if hint_ms is None else min(RETRY_HINT_MAX, max(0.0, hint_ms / 1000))
