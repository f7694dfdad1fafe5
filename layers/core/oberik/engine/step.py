"""One step of a turn: take in any steering, call the model (streamed into frames), then deal with every
tool call it made: run server tools, draw UI components, and collect what must wait for somebody."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from oberik.domain import guardrails, pauses
from oberik.domain.context import size_of
from oberik.domain.errors import ModelError
from oberik.domain.ids import new_id
from oberik.domain.llm import Completion, Delta, ModelRequest, ToolCall
from oberik.domain.models import Message, Run, Turn
from oberik.domain.tools import BY_NAME, PAUSING_TOOLS, TODO_TOOLS
from oberik.engine import action_space, citations, gated_calls, toolbox
from oberik.engine.context import compact_if_needed, summary_block
from oberik.engine.frames import FrameWriter
from oberik.engine.prompt import history, system_messages
from oberik.engine.titles import generate_title, text_of
from oberik.engine.tools import ToolOutcome, parse_arguments, run_server_tool
from oberik.observability import logger
from oberik.ports import Model

UI_MAX_PAYLOAD_BYTES = 16_000
TITLE_WAIT_SECONDS = 30.0
UI_MAX_PER_TURN = 40


@dataclass
class StepResult:
    verdict: str  # "step" | "wait" | "finish" | "continue" | "pause"
    wait_seconds: int = 0
    tool_names: list[str] = field(default_factory=list)


def _message(turn: Turn, role: str, content: Any, **extra: Any) -> Message:
    return Message(
        id=new_id("m"),
        session_id=turn.session_id,
        seq=0,
        role=role,  # type: ignore[arg-type]
        content=content,
        turn_id=turn.id,
        created_at=time.time(),
        **extra,
    )


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


class StepEngine:
    """Runs one step against the ports it is given; knows nothing of Lambda or Step Functions."""

    # The fields a step owns; anything else on the turn (its execution, its task token) is written by others.
    _PROGRESS = (
        "steps",
        "usage",
        "warnings",
        "content",
        "reasoning",
        "answer",
        "finish_reason",
        "status",
        "error",
        "pending",
        "ui",
        "steered",
        "todos_changed",
        "context",
        "guard_flags",
        "citations",
        "found_tools",
    )

    def __init__(
        self,
        store: Any,
        model_for: Any,
        *,
        max_steps: int,
        max_wait_seconds: int,
        cancel_poll_seconds: float = 0.25,
        lease: Any = None,
    ) -> None:
        self.lease = lease  # engine.inline.Lease when this is a first step run where the turn was requested
        self._fresh: list[Message] | None = None
        self.store = store
        self.model_for = model_for  # (plan.model) -> (Model, provider model id)
        self.max_steps = max_steps
        self.max_wait_seconds = max_wait_seconds
        self.cancel_poll_seconds = cancel_poll_seconds

    def _save(self, turn: Turn) -> None:
        if self.lease is not None:
            self.lease.check()  # taken over: the state machine's step owns the turn now
        self.store.update_turn(turn.id, **turn.model_dump(mode="json", include=set(self._PROGRESS)))

    def _opened(self) -> None:
        if self.lease is not None:
            self.lease.opened.set()

    def _cancel_check(self, run_id: str) -> Any:
        last = [time.monotonic(), False]  # the run was read just before the step began

        def should_stop() -> bool:
            if self.lease is not None:
                self.lease.check()
            if not last[1] and time.monotonic() - last[0] >= self.cancel_poll_seconds:
                run = self.store.get_run(run_id)
                last[1] = bool(run is None or run.cancel_requested or run.status != "running")
                # Timed from the end of the read: a slow read must not make every chunk read again.
                last[0] = time.monotonic()
            return bool(last[1])

        return should_stop

    def run(self, turn: Turn, run: Run | None = None, *, fresh: list[Message] | None = None) -> StepResult:
        """One step. `fresh`: the turn's conversation was created with it and holds exactly these messages
        (the caller just wrote them), so nothing stored needs reading back before the model is called."""
        self._fresh = fresh
        # A fresh run holds just its two opening frames; a wrong guess only costs a retried write.
        writer = FrameWriter(self.store, turn.run_id, start_seq=2 if fresh is not None else None)
        namer: threading.Thread | None = None
        try:
            if turn.plan.auto_title == "message" and turn.steps == 0:
                # Named from the user's message alongside the turn: the title frame lands mid-answer.
                namer = threading.Thread(target=self._name, args=(turn, writer, None), daemon=True)
                namer.start()
            return self._run(turn, run or self.store.get_run(turn.run_id), writer)
        finally:
            if namer is not None:
                namer.join(TITLE_WAIT_SECONDS)
            writer.close()

    def _name(self, turn: Turn, writer: FrameWriter, answer: str | None) -> None:
        """Generate the conversation's name once; a failure costs the name, never the turn."""
        try:
            session = self.store.get_session(turn.session_id)
            if session is None or session.title is not None or session.title_generated:
                return
            asked = next(
                (m for m in self.store.list_messages(turn.session_id) if m.turn_id == turn.id and m.role == "user"),
                None,
            )
            if asked is None:
                return
            model, model_id = self.model_for(turn.plan.model)
            title = generate_title(model, model_id, text_of(asked.content), answer)
            if title and self.store.set_generated_title(turn.session_id, title):
                writer.emit("title", {"title": title})
        except Exception:
            logger.exception("could not name the conversation", session_id=turn.session_id)

    # --- steering -----------------------------------------------------------------------------------

    def take_steers(self, turn: Turn, run: Run | None) -> list[str]:
        """Messages steered into the run since the last step become user messages the model now reads."""
        if run is None or run.steer_count <= run.steer_taken:
            return []
        fresh = run.steers[run.steer_taken : run.steer_count]
        if not self.store.mark_steers_taken(run.id, run.steer_taken, run.steer_count):
            return []  # another step took them
        rows = [_message(turn, "user", text, extra={"steered": True}) for text in fresh]
        if turn.answer:
            # The answer the steer interrupted is kept in the transcript, before the correction.
            rows.insert(0, _message(turn, "assistant", turn.answer))
            turn.answer = ""
        self.store.append_messages(turn.session_id, rows)
        turn.steered.extend(fresh)
        self._save(turn)
        return fresh

    # --- the step -----------------------------------------------------------------------------------

    def _run(self, turn: Turn, run: Run | None, writer: FrameWriter) -> StepResult:
        if writer.seq == 0:
            writer.emit("run", {"run_id": turn.run_id})
            writer.emit("start", {"session_id": turn.session_id, "run_id": turn.run_id})
        if self.take_steers(turn, run):
            self._fresh = None  # the conversation grew: read it back
        if gated_calls.run_approved(self.store, turn, writer):  # calls a person approved: the platform makes them
            self._fresh = None
            self._save(turn)

        if turn.steps >= self.max_steps:
            turn.finish_reason = "hit_tool_limit"
            turn.warnings.append(
                f"The turn stopped after {turn.steps} model calls, the most one turn may take; "
                "the answer may be incomplete. Ask again to continue."
            )
            self._save(turn)
            return StepResult("finish")

        plan = turn.plan
        declared = self._declared(turn)
        model, model_id = self.model_for(plan.model)
        guard = plan.guardrails
        if turn.steps == 0 and (verdict := self._input_stage(turn, writer)) is not None:
            turn.content = turn.answer = verdict["content"]
            turn.finish_reason = "guardrail"
            self._save(turn)
            return StepResult("finish")
        fresh, self._fresh = self._fresh, None
        wants_todos = fresh is None and any(n in TODO_TOOLS for n in plan.tools)
        todos = self.store.list_todos(turn.session_id) if wants_todos else []
        system = system_messages(plan, todos=todos, ui=bool(plan.ui_tools))
        stored = list(fresh) if fresh is not None else self.store.list_messages(turn.session_id)
        if fresh is not None:
            summary = None  # a new conversation has nothing to fold and no summary yet
        elif turn.steps == 0:  # before the turn produces anything
            summary = compact_if_needed(self.store, model, model_id, turn, plan.context, system, stored, writer)
            if turn.context:
                self._save(turn)
        else:
            summary = self.store.get_summary(turn.session_id)
        after = int(summary["up_to_seq"]) if summary else 0
        messages = system + summary_block(summary) + history([m for m in stored if m.seq > after])
        if guard.mask_personal_data:
            messages = self._masked(messages, turn, writer)
        bound, narrowing_failed = action_space.bind(self.store, turn, stored, todos)
        if narrowing_failed and narrowing_failed not in turn.warnings:
            turn.warnings.append(narrowing_failed)
        tools = [spec.openai_schema() for name in bound if (spec := toolbox.spec_for(name, turn)) is not None]
        tools += [tool.openai_schema() for tool in declared.values()]
        request = ModelRequest(
            model=model_id,
            messages=messages,
            tools=tools,
            temperature=plan.temperature,
            reasoning_effort=plan.reasoning_effort,
        )
        completion = self._call(model, request, writer, turn)
        if not completion.content.strip() and not completion.tool_calls and completion.finish_reason != "cancelled":
            # Nothing at all came back (a provider dropping a message on a filter of its own is the usual
            # cause): ask once more before reporting the turn as having no answer.
            logger.warning("model returned nothing; asking once more", turn_id=turn.id)
            retried = self._call(model, request, writer, turn)
            if retried.usage is not None and completion.usage is not None:
                for k, v in completion.usage.items():
                    retried.usage[k] = retried.usage.get(k, 0) + v
            completion = retried

        turn.steps += 1
        prompt_tokens = (completion.usage or {}).get("prompt_tokens")
        if isinstance(prompt_tokens, int) and prompt_tokens > 0:
            self.store.note_prompt_size(turn.session_id, size_of(messages), prompt_tokens)
        for k, v in (completion.usage or {}).items():
            if isinstance(v, int):
                turn.usage[k] = turn.usage.get(k, 0) + v
        for w in completion.warnings:
            if w not in turn.warnings:
                turn.warnings.append(w)
        turn.content += completion.content
        turn.reasoning += completion.reasoning

        if completion.finish_reason == "cancelled":
            turn.status = "cancelled"
            self._save(turn)
            return StepResult("finish")

        if not completion.tool_calls:
            turn.answer = completion.content
            if not completion.content.strip() and not turn.content.strip():
                turn.finish_reason = "no_answer"
                turn.warnings.append(
                    "The model returned no answer, twice: nothing was said, made or asked. This is usually the "
                    "provider dropping the reply; send the message again."
                )
            self._save(turn)
            if plan.auto_title == "response":
                self._name(turn, writer, turn.content)  # named from the first exchange: it arrives with done
            if guard.groundedness:
                self._judge(turn, model, model_id, writer)
            return StepResult("finish")
        return self._tools(turn, completion, declared, writer)

    # --- guardrails ---------------------------------------------------------------------------------

    def _flag(self, turn: Turn, flag: dict[str, Any], writer: FrameWriter) -> None:
        turn.guard_flags.append(flag)
        writer.emit("guardrail", flag)

    def _input_stage(self, turn: Turn, writer: FrameWriter) -> dict[str, Any] | None:
        """Refuse a message the project blocks, before the model sees anything of it."""
        guard = turn.plan.guardrails
        if not (guard.blocked_topics or guard.blocked_patterns):
            return None
        asked = [m for m in self.store.list_messages(turn.session_id) if m.turn_id == turn.id and m.role == "user"]
        for m in asked:
            verdict = guardrails.blocked(guard, text_of(m.content))
            if verdict is not None:
                # The refused message is kept in the transcript but never shown to the model, now or later.
                self.store.mark_turn_abandoned(turn.session_id, turn.id, flag="guardrail_blocked")
                self._flag(turn, verdict, writer)
                writer.delta("token", verdict["content"])
                return verdict
        return None

    def _masked(self, messages: list[dict[str, Any]], turn: Turn, writer: FrameWriter) -> list[dict[str, Any]]:
        """Personal data in what the users wrote is replaced before the model sees it (the transcript keeps it)."""
        found: set[str] = set()
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                text, kinds = guardrails.mask(m["content"])
                found.update(kinds)
                m = {**m, "content": text}
            elif m.get("role") == "user" and isinstance(m.get("content"), list):
                parts = []
                for part in m["content"]:
                    if part.get("type") == "text":
                        text, kinds = guardrails.mask(part.get("text", ""))
                        found.update(kinds)
                        part = {**part, "text": text}
                    parts.append(part)
                m = {**m, "content": parts}
            out.append(m)
        if found and turn.steps == 0:
            self._flag(
                turn,
                {
                    "stage": "input",
                    "flags": ["personal_data_masked"],
                    "reason": "masked before the model saw it: " + ", ".join(sorted(found)),
                    "content": text_of(next((m["content"] for m in reversed(out) if m.get("role") == "user"), "")),
                },
                writer,
            )
        return out

    def _judge(self, turn: Turn, model: Model, model_id: str, writer: FrameWriter) -> None:
        """A separate call judges the answer against what the turn's tools returned; a failure flags nothing."""
        evidence = [
            str(m.content)
            for m in self.store.list_messages(turn.session_id)
            if m.turn_id == turn.id and m.role == "tool"
        ]
        if not evidence or not turn.content.strip():
            return
        try:
            completion: Completion | None = None
            ask = ModelRequest(
                model=model_id, messages=guardrails.judge_prompt(turn.content, evidence), temperature=0.0
            )
            for item in model.stream(ask):
                if isinstance(item, Completion):
                    completion = item
            flag = guardrails.read_verdict(completion.content if completion else "")
        except ModelError:
            logger.warning("the groundedness judge failed", turn_id=turn.id)
            return
        if flag is not None:
            self._flag(turn, flag, writer)
        self._save(turn)

    def _declared(self, turn: Turn) -> dict[str, pauses.DeclaredTool]:
        reserved = set(BY_NAME)
        client = pauses.parse_declared(turn.plan.client_tools, "client_tools", reserved=reserved)
        ui = pauses.parse_declared(turn.plan.ui_tools, "ui_tools", reserved=reserved | {t.name for t in client})
        return {t.name: t for t in client} | {f"ui:{t.name}": t for t in ui}

    def _tools(
        self, turn: Turn, completion: Completion, declared: dict[str, pauses.DeclaredTool], writer: FrameWriter
    ) -> StepResult:
        plan = turn.plan
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ]
        self.store.append_messages(turn.session_id, [_message(turn, "assistant", completion.content, tool_calls=calls)])
        pending = pauses.empty()
        # so a repeated answer is still a 409, not an unknown id
        pending["answered"] = list(turn.pending.get("answered", [])) + list(turn.pending.get("decided", []))
        results: list[Message] = []
        wait_seconds = 0
        for call in completion.tool_calls:
            args = parse_arguments(call.arguments)
            outcome: ToolOutcome | None
            if call.name in declared:  # the client's own tool: handed back, maybe behind a person's decision
                tool = declared[call.name]
                if args is None:
                    outcome = _error(f"the arguments for {call.name} are not a JSON object")
                elif tool.requires_approval:
                    pending["approvals"].append(pauses.gated_call(call.id, tool, args))
                    outcome = None
                else:
                    pending["deferred"].append({"id": call.id, "name": call.name, "args": args})
                    outcome = None
            elif f"ui:{call.name}" in declared:
                outcome = self._draw(turn, call, args, writer)
            elif gated_calls.is_gated(call.name, turn):  # a hosted tool behind a decision: it waits in approvals
                outcome = gated_calls.hold(turn, call, args, pending)
            elif call.name in plan.tools and call.name in PAUSING_TOOLS:
                outcome = self._pause_tool(call, args, pending)
            elif call.name in plan.tools:
                writer.emit("tool_start", {"name": call.name, "input": args if args is not None else call.arguments})
                if call.name in TODO_TOOLS:
                    outcome = self._todo(turn, call.name, args or {}, writer)
                elif call.name not in BY_NAME:
                    ctx = toolbox.ToolContext(turn, call, args or {}, self.store, writer, time.time())
                    if args is None:
                        outcome = _error(f"the arguments for {call.name} are not a JSON object")
                    else:
                        outcome = toolbox.run_family_tool(ctx) or _error(
                            f"no tool named {call.name!r} is available on this turn"
                        )
                        if isinstance(ctx.extras.get("pause"), dict):  # it waits on a person (a blocking hand-off)
                            if pending["handoff"]:
                                outcome = _error("one hand-off at a time: this one was not started")
                            else:
                                pending["handoff"] = ctx.extras["pause"]
                else:
                    outcome = run_server_tool(
                        call.name, call.arguments, now=time.time(), max_wait_seconds=self.max_wait_seconds
                    )
                writer.emit("tool_end", {"name": call.name, "output": outcome.content})
                wait_seconds = max(wait_seconds, outcome.wait_seconds)
                if (pending.get("handoff") or {}).get("tool_call_id") == call.id:
                    outcome = None  # its result is the person finishing (handoff_done on resume)
            else:
                outcome = _error(f"no tool named {call.name!r} is available on this turn")
            if outcome is not None:
                results.append(_message(turn, "tool", outcome.content, tool_call_id=call.id, name=call.name))
        self.store.append_messages(turn.session_id, results)
        names = [c.name for c in completion.tool_calls]
        if pauses.outstanding(pending):
            turn.pending = pauses.announce(pending)
            self._save(turn)
            logger.info("step pauses the turn", turn_id=turn.id, tools=names)
            return StepResult("pause", 0, names)
        self._save(turn)
        logger.info("step ran tools", turn_id=turn.id, tools=names)
        return StepResult("wait" if wait_seconds else "step", wait_seconds, names)

    @staticmethod
    def _pause_tool(call: ToolCall, args: dict[str, Any] | None, pending: dict[str, Any]) -> ToolOutcome | None:
        if args is None:
            return _error(f"the arguments for {call.name} are not a JSON object")
        try:
            if call.name == "request_approval":
                pending["approvals"].append(pauses.approval_request(call.id, args))
            else:
                pending["questions"].append(pauses.question_batch(call.id, args))
        except ValueError as e:
            return _error(str(e))
        return None

    def _draw(self, turn: Turn, call: ToolCall, args: dict[str, Any] | None, writer: FrameWriter) -> ToolOutcome:
        if args is None:
            return _error(f"the arguments for {call.name} are not a JSON object")
        if len(turn.ui) >= UI_MAX_PER_TURN:
            return _error(f"nothing was drawn: a turn may draw at most {UI_MAX_PER_TURN} components")
        size = len(json.dumps(args).encode())
        if size > UI_MAX_PAYLOAD_BYTES:
            return _error(
                f"nothing was drawn: the payload is {size} bytes and a component takes at most "
                f"{UI_MAX_PAYLOAD_BYTES}. Pass an id and let the application fetch the rest."
            )
        entry = {"tool_call_id": call.id, "name": call.name, "props": args}
        turn.ui.append(entry)
        writer.emit("ui", entry)
        return ToolOutcome(pauses.UI_DRAWN.format(name=call.name))

    def _todo(self, turn: Turn, name: str, args: dict[str, Any], writer: FrameWriter) -> ToolOutcome:
        sid = turn.session_id
        if name == "todo_write":
            items = args.get("items")
            if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
                return _error("todo_write needs `items`: a list of step texts")
            self.store.add_todos(sid, [i.strip() for i in items])
        elif name in ("todo_update", "todo_remove"):
            n = args.get("n")
            if isinstance(n, bool) or not isinstance(n, int):
                return _error(f"{name} needs `n`: the number of a step")
            if name == "todo_remove":
                if not self.store.remove_todo(sid, n):
                    return _error(f"the plan has no step {n}")
            else:
                fields: dict[str, Any] = {}
                if "status" in args:
                    if args["status"] not in ("pending", "in_progress", "done"):
                        return _error("status must be pending, in_progress or done")
                    fields["status"] = args["status"]
                if isinstance(args.get("text"), str) and args["text"].strip():
                    fields["text"] = args["text"].strip()
                if not fields:
                    return _error("todo_update needs a status or a text to change")
                if not self.store.update_todo(sid, n, **fields):
                    return _error(f"the plan has no step {n}")
        else:
            self.store.clear_todos(sid)
        todos = self.store.list_todos(sid)
        turn.todos_changed = True
        writer.emit("todos", {"todos": todos})
        return ToolOutcome(json.dumps({"todos": todos}))

    def _call(self, model: Model, request: ModelRequest, writer: FrameWriter, turn: Turn) -> Completion:
        completion: Completion | None = None
        markers = citations.StreamedMarkers(turn)  # the streamed text reads as `content` will
        try:
            for item in model.stream(request, should_stop=self._cancel_check(turn.run_id), on_open=self._opened):
                if isinstance(item, Delta):
                    if item.channel == "content":
                        writer.delta("token", markers.feed(item.text))
                    else:
                        writer.delta("reasoning", item.text)
                else:
                    completion = item
        except ModelError as e:
            writer.flush()
            turn.error = {"code": e.code, "detail": e.detail, "status": e.status}
            self._save(turn)
            raise
        writer.delta("token", markers.close())
        writer.flush()
        if completion is None:
            raise ModelError("The model's stream ended without a final result.", code="provider_error")
        return completion
