"""One step of a turn: a model call, streamed into frames, then the server-side tools it asked for."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from oberik.domain.errors import ModelError
from oberik.domain.llm import Completion, Delta, ModelRequest
from oberik.domain.models import Message, Turn
from oberik.domain.tools import BY_NAME
from oberik.engine.frames import FrameWriter
from oberik.engine.prompt import history, system_messages
from oberik.engine.tools import ToolOutcome, parse_arguments, run_server_tool
from oberik.observability import logger
from oberik.ports import Model


@dataclass
class StepResult:
    verdict: str  # "step" | "wait" | "finish" | "continue" | "pause"
    wait_seconds: int = 0
    tool_names: list[str] = field(default_factory=list)


def _message(turn: Turn, role: str, content: Any, **extra: Any) -> Message:
    return Message(
        id=f"m_{uuid.uuid4().hex[:28]}",
        session_id=turn.session_id,
        seq=0,
        role=role,  # type: ignore[arg-type]
        content=content,
        turn_id=turn.id,
        created_at=time.time(),
        **extra,
    )


class StepEngine:
    """Runs one step against the ports it is given; knows nothing of Lambda or Step Functions."""

    def __init__(
        self, store: Any, model_for: Any, *, max_steps: int, max_wait_seconds: int, cancel_poll_seconds: float = 0.25
    ) -> None:
        self.store = store
        self.model_for = model_for  # (plan.model) -> (Model, provider model id)
        self.max_steps = max_steps
        self.max_wait_seconds = max_wait_seconds
        self.cancel_poll_seconds = cancel_poll_seconds

    def _cancel_check(self, run_id: str) -> Any:
        last = [0.0, False]

        def should_stop() -> bool:
            now = time.monotonic()
            if not last[1] and now - last[0] >= self.cancel_poll_seconds:
                last[0] = now
                run = self.store.get_run(run_id)
                last[1] = bool(run is None or run.cancel_requested or run.status != "running")
            return bool(last[1])

        return should_stop

    # The fields a step owns; anything else on the turn (its execution, its task token) is written by others.
    _PROGRESS = ("steps", "usage", "warnings", "content", "reasoning", "answer", "finish_reason", "status", "error")

    def _save(self, turn: Turn) -> None:
        self.store.update_turn(turn.id, **turn.model_dump(mode="json", include=set(self._PROGRESS)))

    def run(self, turn: Turn) -> StepResult:
        writer = FrameWriter(self.store, turn.run_id)
        try:
            return self._run(turn, writer)
        finally:
            writer.close()

    def _run(self, turn: Turn, writer: FrameWriter) -> StepResult:
        if writer.seq == 0:
            writer.emit("run", {"run_id": turn.run_id})
            writer.emit("start", {"session_id": turn.session_id, "run_id": turn.run_id})

        if turn.steps >= self.max_steps:
            turn.finish_reason = "hit_tool_limit"
            turn.warnings.append(
                f"The turn stopped after {turn.steps} model calls, the most one turn may take; "
                "the answer may be incomplete. Ask again to continue."
            )
            self._save(turn)
            return StepResult("finish")

        plan = turn.plan
        model, model_id = self.model_for(plan.model)
        messages = system_messages(plan) + history(self.store.list_messages(turn.session_id))
        tools = [BY_NAME[name].openai_schema() for name in plan.tools if name in BY_NAME]
        request = ModelRequest(
            model=model_id,
            messages=messages,
            tools=tools,
            temperature=plan.temperature,
            reasoning_effort=plan.reasoning_effort,
        )
        completion = self._call(model, request, writer, turn)

        turn.steps += 1
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
            self._save(turn)
            return StepResult("finish")

        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls
        ]
        self.store.append_messages(turn.session_id, [_message(turn, "assistant", completion.content, tool_calls=calls)])
        results: list[Message] = []
        wait_seconds = 0
        for call in completion.tool_calls:
            args = parse_arguments(call.arguments)
            writer.emit("tool_start", {"name": call.name, "input": args if args is not None else call.arguments})
            if call.name in plan.tools:
                outcome = run_server_tool(
                    call.name, call.arguments, now=time.time(), max_wait_seconds=self.max_wait_seconds
                )
            else:
                outcome = ToolOutcome(
                    json.dumps({"error": f"no tool named {call.name!r} is available on this turn"}), ok=False
                )
            writer.emit("tool_end", {"name": call.name, "output": outcome.content})
            results.append(_message(turn, "tool", outcome.content, tool_call_id=call.id, name=call.name))
            wait_seconds = max(wait_seconds, outcome.wait_seconds)
        self.store.append_messages(turn.session_id, results)
        self._save(turn)
        writer.flush()
        logger.info("step ran tools", turn_id=turn.id, tools=[c.name for c in completion.tool_calls])
        return StepResult("wait" if wait_seconds else "step", wait_seconds, [c.name for c in completion.tool_calls])

    def _call(self, model: Model, request: ModelRequest, writer: FrameWriter, turn: Turn) -> Completion:
        completion: Completion | None = None
        try:
            for item in model.stream(request, should_stop=self._cancel_check(turn.run_id)):
                if isinstance(item, Delta):
                    writer.delta("token" if item.channel == "content" else "reasoning", item.text)
                else:
                    completion = item
        except ModelError as e:
            writer.flush()
            turn.error = {"code": e.code, "detail": e.detail, "status": e.status}
            self._save(turn)
            raise
        writer.flush()
        if completion is None:
            raise ModelError("The model's stream ended without a final result.", code="provider_error")
        return completion
