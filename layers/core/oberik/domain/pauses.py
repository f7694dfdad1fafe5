"""Pauses: what a turn waits on, how a resume is checked against it, and what the model is told after.

A paused turn's `pending` record holds three kinds of outstanding item:
- `tool_calls`: calls to the client's own tools, handed back for the client to run;
- `approvals`: calls nothing may run until a person decides (a gated client tool, or the model's own
  `request_approval`);
- `questions`: batches of questions the model asked with `ask_user`;
- `handoff`: a blocking browser hand-off: the person works the page, then presses Done (`handoff_done: true`).
Client tool calls are announced only once no approval or question is outstanding, so a client's tool
auto-dispatch can never act while a person is still deciding. Everything here is pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from oberik.domain.errors import Conflict, Invalid

REFUSAL = (
    "The user refused this. Their refusal is the decision, not a problem to work around: do not try "
    "another way, do not reach for a different tool that achieves the same thing, and do not carry on with "
    "any part of the plan that depended on it. Tell the user you stopped, and ask what they would like instead."
)
APPROVED = "The user approved this. Go ahead."
CHAT_INSTEAD = (
    "The user chose not to answer and would rather keep talking. Drop the question: do not ask it again. "
    "Carry on from what you already know, and say what you are assuming."
)
UI_DRAWN = (
    "{name} is now shown to the user. Refer to it (for example 'the chart above') instead of repeating what it "
    "shows in prose."
)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_QUESTIONS = 4


def empty() -> dict[str, Any]:
    return {
        "tool_calls": [],
        "deferred": [],
        "approvals": [],
        "questions": [],
        "handoff": None,
        "answered": [],
        "decided": [],
    }


def outstanding(pending: dict[str, Any]) -> bool:
    return any(pending.get(k) for k in ("tool_calls", "deferred", "approvals", "questions", "handoff"))


def announce(pending: dict[str, Any]) -> dict[str, Any]:
    """Move deferred client calls into view once nothing a person must decide is outstanding."""
    waiting = pending.get("approvals") or pending.get("questions") or pending.get("handoff")
    if pending.get("deferred") and not waiting:
        pending = {**pending, "tool_calls": [*pending.get("tool_calls", []), *pending["deferred"]], "deferred": []}
    return pending


def reason(pending: dict[str, Any]) -> str:
    """The turn-stopped reason a pause reports."""
    if pending.get("questions"):
        return "needs_answer"
    if pending.get("approvals"):
        return "needs_approval"
    if pending.get("handoff"):
        return "needs_browser"
    return "needs_client_tool"


# --- declared tools ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeclaredTool:
    name: str
    description: str
    parameters: dict[str, Any]
    requires_approval: bool = False

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def parse_declared(tools: list[dict[str, Any]], field: str, *, reserved: set[str]) -> list[DeclaredTool]:
    """Check tools a request declares (`client_tools` or `ui_tools`): OpenAI function schemas."""
    out: list[DeclaredTool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools):
        where = f"{field}[{i}]"
        if not isinstance(raw, dict):
            raise Invalid(f"{where} must be an object like {{'type': 'function', 'function': {{...}}}}.", field=field)
        fn = raw.get("function") if raw.get("type", "function") == "function" else None
        if not isinstance(fn, dict):
            raise Invalid(f"{where} must be {{'type': 'function', 'function': {{'name': ..., ...}}}}.", field=field)
        extra = set(raw) - {"type", "function", "requires_approval"}
        if extra:
            raise Invalid(
                f"{where} has fields a tool declaration does not take: {', '.join(sorted(extra))}.", field=field
            )
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise Invalid(f"{where}.function.name must be 1-64 letters, digits, '_' or '-'.", field=field)
        if name in reserved or name in seen:
            raise Invalid(f"{where}.function.name {name!r} is already taken by another tool on this turn.", field=field)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise Invalid(f"{where}.function.parameters must be a JSON schema object.", field=field)
        approval = raw.get("requires_approval", False)
        if not isinstance(approval, bool):
            raise Invalid(f"{where}.requires_approval must be true or false.", field=field)
        seen.add(name)
        out.append(DeclaredTool(name, str(fn.get("description") or ""), params, approval))
    return out


def detail_text(arguments: Any) -> str:
    """The arguments of a call as a person reads them: one `key: value` per line."""
    if not isinstance(arguments, dict):
        return json.dumps(arguments)
    lines = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


# --- what the model asked for ------------------------------------------------------------------------


def approval_request(call_id: str, args: dict[str, Any]) -> dict[str, Any]:
    action = args.get("action")
    if not isinstance(action, str) or not action.strip():
        raise ValueError("request_approval needs `action`: one line saying what you are about to do")
    return {
        "tool_call_id": call_id,
        "action": action.strip(),
        "detail": str(args.get("detail") or ""),
        "consequence": str(args.get("consequence") or ""),
        "tool": None,
        "arguments": None,
    }


def gated_call(call_id: str, tool: DeclaredTool, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "tool_call_id": call_id,
        "action": tool.description or f"Call {tool.name}",
        "detail": detail_text(args),
        "tool": tool.name,
        "arguments": args,
    }


def question_batch(call_id: str, args: dict[str, Any]) -> dict[str, Any]:
    raw = args.get("questions")
    if not isinstance(raw, list) or not raw:
        raise ValueError("ask_user needs `questions`: a list of one to four questions")
    if len(raw) > MAX_QUESTIONS:
        raise ValueError(f"ask_user takes at most {MAX_QUESTIONS} questions at once")
    questions = []
    headers: set[str] = set()
    for i, q in enumerate(raw):
        if not isinstance(q, dict) or not isinstance(q.get("question"), str) or not q["question"].strip():
            raise ValueError(f"question {i + 1} needs a `question` text")
        header = str(q.get("header") or f"Question {i + 1}").strip()[:40]
        if header in headers:
            raise ValueError(f"two questions share the header {header!r}; headers must differ")
        headers.add(header)
        options = []
        for opt in q.get("options") or []:
            label = opt.get("label") if isinstance(opt, dict) else opt
            if isinstance(label, str) and label.strip():
                entry = {"label": label.strip()}
                if isinstance(opt, dict) and isinstance(opt.get("description"), str):
                    entry["description"] = opt["description"]
                options.append(entry)
        questions.append(
            {
                "id": header,
                "header": header,
                "question": q["question"].strip(),
                "options": options,
                "multi_select": bool(q.get("multi_select", False)),
                "allow_other": bool(q.get("allow_other", True)),
            }
        )
    return {"tool_call_id": call_id, "questions": questions}


# --- a resume ----------------------------------------------------------------------------------------


@dataclass
class ToolMessage:
    tool_call_id: str
    name: str
    content: str


@dataclass
class Resolution:
    messages: list[ToolMessage] = field(default_factory=list)
    pending: dict[str, Any] = field(default_factory=empty)
    notes: list[str] = field(default_factory=list)

    @property
    def needs_model(self) -> bool:
        return not outstanding(self.pending)


def digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def waiting_on(pending: dict[str, Any]) -> str:
    parts = []
    if pending.get("tool_calls"):
        parts.append("tool_results for " + ", ".join(c["id"] for c in pending["tool_calls"]))
    if pending.get("approvals"):
        parts.append("approval_decisions for " + ", ".join(a["tool_call_id"] for a in pending["approvals"]))
    if pending.get("questions"):
        parts.append("answers for " + ", ".join(q["tool_call_id"] for q in pending["questions"]))
    if pending.get("handoff"):
        parts.append("handoff_done: true once the user has finished with the browser page")
    return "; ".join(parts) or "nothing"


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _apply_tool_results(pending: dict[str, Any], results: list[Any], out: Resolution) -> None:
    announced = {c["id"]: c for c in pending.get("tool_calls", [])}
    answered = set(pending.get("answered", []))
    deferred = {c["id"] for c in pending.get("deferred", [])}
    given: dict[str, Any] = {}
    for i, item in enumerate(results):
        if not isinstance(item, dict) or not isinstance(item.get("tool_call_id"), str) or "content" not in item:
            raise Invalid(f"tool_results[{i}] must be {{'tool_call_id': ..., 'content': ...}}.", field="tool_results")
        extra = set(item) - {"tool_call_id", "content"}
        if extra:
            raise Invalid(
                f"tool_results[{i}] has fields it does not take: {', '.join(sorted(extra))}.", field="tool_results"
            )
        cid = item["tool_call_id"]
        if cid in given:
            raise Invalid(f"tool_results names {cid} twice.", field="tool_results")
        if cid in answered:
            raise Conflict(f"The result for {cid} was already applied; nothing was changed.", code="already_applied")
        if cid in deferred:
            raise Conflict(
                f"{cid} is waiting on a person's decision and has not been handed to you yet; "
                "send approval_decisions first.",
                code="awaiting_decision",
            )
        if cid not in announced:
            raise Invalid(
                f"tool_results names {cid}, which is not a tool call this turn is waiting on "
                f"(it waits on {waiting_on(pending)}).",
                field="tool_results",
            )
        given[cid] = item["content"]
    missing = [cid for cid in announced if cid not in given]
    if missing:
        raise Invalid(
            f"tool_results is missing results for {', '.join(missing)}: send every result of the round together.",
            field="tool_results",
        )
    for cid, call in announced.items():
        out.messages.append(ToolMessage(cid, call["name"], _content(given[cid])))
    out.pending["tool_calls"] = []
    out.pending["answered"] = [*out.pending.get("answered", []), *given]


def _apply_decisions(pending: dict[str, Any], decisions: list[Any], out: Resolution) -> None:
    outstanding_ids = [a["tool_call_id"] for a in pending.get("approvals", [])]
    by_id = {a["tool_call_id"]: a for a in pending.get("approvals", [])}
    answered = set(pending.get("answered", [])) | set(pending.get("decided", []))
    decided: dict[str, dict[str, Any]] = {}
    for i, d in enumerate(decisions):
        if not isinstance(d, dict) or not isinstance(d.get("approved"), bool):
            raise Invalid(f"approval_decisions[{i}].approved must be true or false.", field="approval_decisions")
        extra = set(d) - {"approved", "tool_call_id", "note"}
        if extra:
            raise Invalid(
                f"approval_decisions[{i}] has fields it does not take: {', '.join(sorted(extra))}.",
                field="approval_decisions",
            )
        if d.get("note") is not None and not isinstance(d["note"], str):
            raise Invalid(f"approval_decisions[{i}].note must be text.", field="approval_decisions")
        cid = d.get("tool_call_id")
        if cid is None:
            if len(outstanding_ids) != 1 or len(decisions) != 1:
                raise Invalid(
                    "approval_decisions must name tool_call_id when more than one approval is outstanding "
                    f"({', '.join(outstanding_ids) or 'none is'}).",
                    field="approval_decisions",
                )
            cid = outstanding_ids[0]
        if cid in answered:
            raise Conflict(f"The decision for {cid} was already applied; nothing was changed.", code="already_applied")
        if cid not in by_id:
            raise Invalid(
                f"approval_decisions names {cid}, which is not an approval this turn is waiting on "
                f"(it waits on {waiting_on(pending)}).",
                field="approval_decisions",
            )
        if cid in decided:
            raise Invalid(f"approval_decisions decides {cid} twice.", field="approval_decisions")
        decided[cid] = d
    remaining = []
    for approval in pending.get("approvals", []):
        cid = approval["tool_call_id"]
        d = decided.get(cid)
        if d is None:
            remaining.append(approval)  # silence is neither yes nor no: it stays outstanding
            continue
        note = (d.get("note") or "").strip()
        suffix = f"\n\nTheir note: {note}" if note else ""
        if not d["approved"]:
            out.messages.append(ToolMessage(cid, approval["tool"] or "request_approval", REFUSAL + suffix))
        elif approval["tool"] is None:
            out.messages.append(ToolMessage(cid, "request_approval", APPROVED + suffix))
        elif cid in pending.get("hosted", ()):
            # A tool the platform runs itself (a webhook tool): it makes the approved call on the next step.
            call = {"id": cid, "name": approval["tool"], "args": approval["arguments"], "note": note}
            out.pending["approved"] = [*out.pending.get("approved", []), call]
        else:
            # The identical call is handed to the client on the next round.
            out.pending["deferred"] = [
                *out.pending.get("deferred", []),
                {"id": cid, "name": approval["tool"], "args": approval["arguments"]},
            ]
            if note:
                out.notes.append(note)
            out.pending["decided"] = [*out.pending.get("decided", []), cid]  # its result is still to come
            continue
        out.pending["answered"] = [*out.pending.get("answered", []), cid]
    out.pending["approvals"] = remaining


def _apply_answers(pending: dict[str, Any], answers: Any, out: Resolution) -> None:
    if not isinstance(answers, dict) or not isinstance(answers.get("tool_call_id"), str):
        raise Invalid(
            "answers must be {'tool_call_id': ..., 'answers': [...]} (or with chat_instead: true).", field="answers"
        )
    extra = set(answers) - {"tool_call_id", "answers", "chat_instead"}
    if extra:
        raise Invalid(f"answers has fields it does not take: {', '.join(sorted(extra))}.", field="answers")
    cid = answers["tool_call_id"]
    batches = {b["tool_call_id"]: b for b in pending.get("questions", [])}
    if cid in set(pending.get("answered", [])):
        raise Conflict(f"The answers for {cid} were already applied; nothing was changed.", code="already_applied")
    if cid not in batches:
        raise Invalid(
            f"answers names {cid}, which is not a question this turn is waiting on "
            f"(it waits on {waiting_on(pending)}).",
            field="answers",
        )
    batch = batches[cid]
    chat_instead = answers.get("chat_instead", False)
    if not isinstance(chat_instead, bool):
        raise Invalid("answers.chat_instead must be true or false.", field="answers")
    if chat_instead:
        content = CHAT_INSTEAD
    else:
        given = answers.get("answers")
        if not isinstance(given, list) or not given:
            raise Invalid("answers.answers must list at least one answer, or send chat_instead: true.", field="answers")
        questions = {q["id"]: q for q in batch["questions"]}
        replies: dict[str, dict[str, Any]] = {}
        for i, a in enumerate(given):
            where = f"answers.answers[{i}]"
            if not isinstance(a, dict) or not isinstance(a.get("question_id"), str):
                raise Invalid(f"{where} must name question_id.", field="answers")
            q = questions.get(a["question_id"])
            if q is None:
                raise Invalid(
                    f"{where}.question_id {a['question_id']!r} is not one of this batch's questions "
                    f"({', '.join(questions)}).",
                    field="answers",
                )
            selected = a.get("selected") or []
            if isinstance(selected, str):
                selected = [selected]
            if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
                raise Invalid(f"{where}.selected must be a list of option labels.", field="answers")
            labels = {o["label"] for o in q["options"]}
            unknown = [s for s in selected if s not in labels]
            if unknown:
                raise Invalid(
                    f"{where}.selected names options the question does not offer: {', '.join(unknown)}. "
                    "Put anything else in text.",
                    field="answers",
                )
            if len(selected) > 1 and not q["multi_select"]:
                raise Invalid(f"{where} selects several options, but {q['id']!r} takes one.", field="answers")
            text = a.get("text")
            if text is not None and not isinstance(text, str):
                raise Invalid(f"{where}.text must be text.", field="answers")
            if not selected and not (text or "").strip():
                raise Invalid(f"{where} answers nothing: send selected options, text, or both.", field="answers")
            replies[q["id"]] = {"question": q["question"], "selected": selected, "text": text or ""}
        content = json.dumps(
            {
                "answers": [
                    replies.get(qid, {"question": q["question"], "selected": [], "text": "", "skipped": True})
                    for qid, q in questions.items()
                ]
            }
        )
    out.messages.append(ToolMessage(cid, "ask_user", content))
    out.pending["questions"] = [b for b in pending.get("questions", []) if b["tool_call_id"] != cid]
    out.pending["answered"] = [*out.pending.get("answered", []), cid]


def _apply_handoff_done(pending: dict[str, Any], out: Resolution, result: str) -> None:
    handoff = pending.get("handoff")
    if not handoff:
        raise Invalid(f"handoff_done was sent, but the turn waits on {waiting_on(pending)}.", field="handoff_done")
    cid = handoff["tool_call_id"]
    out.messages.append(ToolMessage(cid, "browser_handoff", result or "The user has finished with the page."))
    out.pending["handoff"] = None
    out.pending["answered"] = [*out.pending.get("answered", []), cid]


def resolve(
    pending: dict[str, Any],
    *,
    tool_results: list[Any] | None,
    approval_decisions: list[Any] | None,
    answers: Any | None,
    handoff_done: Any | None = None,
    handoff_result: str = "",
) -> Resolution:
    """Check a resume against what the turn waits on. Raises (changing nothing) or says what follows."""
    if not outstanding(pending):
        raise Conflict(
            "Nothing on this conversation is waiting for tool results, decisions or answers.", code="nothing_to_resume"
        )
    if handoff_done is not None and handoff_done is not True:
        raise Invalid(
            "handoff_done only takes true (the user is finished with the page); leave it out otherwise.",
            field="handoff_done",
        )
    out = Resolution(pending={**empty(), **json.loads(json.dumps(pending))})
    touched = False
    if tool_results is not None:
        if not pending.get("tool_calls") and pending.get("deferred"):
            raise Conflict(
                "The turn is waiting on a person's decision before any tool call is handed over; "
                f"send {waiting_on(pending)}.",
                code="awaiting_decision",
            )
        if not pending.get("tool_calls"):
            raise Invalid(f"tool_results were sent, but the turn waits on {waiting_on(pending)}.", field="tool_results")
        _apply_tool_results(pending, tool_results, out)
        touched = True
    if approval_decisions is not None:
        if not pending.get("approvals"):
            raise Invalid(
                f"approval_decisions were sent, but the turn waits on {waiting_on(pending)}.",
                field="approval_decisions",
            )
        _apply_decisions(out.pending, approval_decisions, out)
        touched = True
    if answers is not None:
        if not pending.get("questions"):
            raise Invalid(f"answers were sent, but the turn waits on {waiting_on(pending)}.", field="answers")
        _apply_answers(out.pending, answers, out)
        touched = True
    if handoff_done:
        _apply_handoff_done(out.pending, out, handoff_result)
        touched = True
    if not touched:
        raise Invalid(f"This turn is paused; send {waiting_on(pending)}.", field="body")
    out.pending = announce(out.pending)
    return out
