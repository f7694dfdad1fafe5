"""A terminal chat on the SDK: what `oberik chat` runs.

Reading a line and writing text are injected, so a test can drive it with a script of inputs. Answers stream
as they are written (thinking dimmed), tools and plan changes get a line each, approvals and questions are
asked at the prompt, and Ctrl-C during a turn cancels it. Ctrl-C or Ctrl-D at the prompt leaves.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from oberik.client.errors import AgentStreamError, OberikError
from oberik.client.models import ChatResponse
from oberik.client.sync import Client

DIM = "\x1b[2m"
BOLD = "\x1b[1m"
RESET = "\x1b[0m"
PROMPT = "you> "
_SHORT = 160
_MARKS = {"done": "x", "in_progress": "~"}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def _input(prompt: str) -> str:
    return input(prompt)  # looked up at call time, so a replaced builtins.input is honoured


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class ChatRepl:
    """One conversation at the terminal. `run()` returns the exit status."""

    def __init__(
        self,
        client: Client,
        *,
        session_id: str | None = None,
        read: Callable[[str], str] | None = None,
        write: Callable[[str], None] = _stdout,
        color: bool = False,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.read = read or _input
        self.write = write
        self.color = color
        self._channel: str | None = None  # what the last streamed text was: "token", "reasoning" or None
        self._todos: list[dict[str, Any]] | None = None

    # --- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> int:
        where = f"conversation {self.session_id}" if self.session_id else "a new conversation"
        self.write(f"Chatting in {where}. Ctrl-C stops a turn; Ctrl-C or Ctrl-D at the prompt leaves.\n")
        while True:
            try:
                line = self.read(PROMPT)
            except (EOFError, KeyboardInterrupt):
                self.write("\n")
                return 0
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                return 0
            body: dict[str, Any] = {"message": text}
            if self.session_id:
                body["session_id"] = self.session_id
            self.turn(body)

    def turn(self, body: dict[str, Any]) -> ChatResponse | None:
        """Stream a turn; answer each pause at the prompt and stream the rest, until it ends."""
        next_body: dict[str, Any] | None = body
        response: ChatResponse | None = None
        while next_body is not None:
            response = self._stream(next_body)
            if response is None:
                return None
            self.session_id = response.session_id
            next_body = self._answer_pause(response)
        return response

    # --- one stream ---------------------------------------------------------------------------------------------

    def _stream(self, body: dict[str, Any]) -> ChatResponse | None:
        self._channel = None
        handle = self.client.chat.stream(
            **body,
            on_token=self._on_token,
            on_reasoning=self._on_reasoning,
            on_tool_start=self._on_tool_start,
            on_tool_end=self._on_tool_end,
            on_todos=self._on_todos,
            on_ui=self._on_ui,
        )
        try:
            response = handle.done()
        except KeyboardInterrupt:
            self._line_break()
            self.write("^C: cancelling the turn…\n")
            try:
                handle.cancel()
                handle.done(timeout=15)
            except AgentStreamError as exc:
                self._remember(exc)
                self.write("(cancelled)\n" if exc.code == "stream_cancelled" else f"({exc.code}: {exc.detail})\n")
            except (OberikError, TimeoutError) as exc:
                self.write(f"(could not cancel: {exc})\n")
            return None
        except AgentStreamError as exc:
            self._remember(exc)
            self._line_break()
            self.write(f"[{exc.code}] {exc.detail}\n")
            return None
        except OberikError as exc:
            self._line_break()
            self.write(f"[{exc.code}] {exc.detail}\n")
            return None
        self._line_break()
        for warning in response.warnings:
            self.write(self._dim(f"warning: {warning}") + "\n")
        return response

    def _remember(self, exc: AgentStreamError) -> None:
        if exc.session_id:
            self.session_id = exc.session_id

    # --- handlers (on the stream's reader thread) ---------------------------------------------------------------

    def _dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color else text

    def _line_break(self) -> None:
        if self._channel is not None:
            self.write("\n")
            self._channel = None

    def _switch(self, channel: str) -> None:
        if self._channel != channel:
            self._line_break()
            self._channel = channel
            if channel == "reasoning" and not self.color:
                self.write("(thinking) ")

    def _on_token(self, delta: str, _full: str) -> None:
        self._switch("token")
        self.write(delta)

    def _on_reasoning(self, delta: str, _full: str) -> None:
        self._switch("reasoning")
        self.write(self._dim(delta))

    def _on_tool_start(self, name: str, arguments: Any) -> None:
        self._line_break()
        self.write(self._dim(f"  -> {name} {_short(arguments)}") + "\n")

    def _on_tool_end(self, name: str, output: Any) -> None:
        self._line_break()
        self.write(self._dim(f"  <- {name}: {_short(output)}") + "\n")

    def _on_todos(self, todos: list[dict[str, Any]]) -> None:
        if todos == self._todos:
            return
        self._todos = todos
        self._line_break()
        lines = ["  Plan:"] + [
            f"    [{_MARKS.get(str(t.get('status')), ' ')}] {t.get('n')}. {t.get('text')}" for t in todos
        ]
        self.write("\n".join(lines) + "\n")

    def _on_ui(self, component: dict[str, Any]) -> None:
        self._line_break()
        self.write(self._dim(f"  [ui] {component.get('name')} {_short(component.get('props') or {})}") + "\n")

    # --- pauses, asked at the prompt ------------------------------------------------------------------------------

    def _answer_pause(self, response: ChatResponse) -> dict[str, Any] | None:
        if not response.requires_action:
            return None
        resume: dict[str, Any] = {}
        try:
            if response.questions:
                resume["answers"] = self._ask(response.questions[0])
            if response.approvals:
                resume["approval_decisions"] = [self._decide(a) for a in response.approvals]
        except (EOFError, KeyboardInterrupt):
            self.write("\nLeft the turn waiting; it resumes when it is answered.\n")
            return None
        if not resume:
            names = ", ".join(str(c.get("name")) for c in response.tool_calls) or "something this terminal cannot do"
            self.write(f"The turn is waiting on {names}.\n")
            return None
        return {"session_id": response.session_id, **resume}

    def _decide(self, approval: dict[str, Any]) -> dict[str, Any]:
        lines = [f"{BOLD}Approval needed:{RESET} " if self.color else "Approval needed: "]
        lines[0] += str(approval.get("action") or "")
        for row in str(approval.get("detail") or "").splitlines():
            lines.append(f"  {row}")
        if approval.get("consequence"):
            lines.append(f"  Cannot be undone: {approval['consequence']}")
        self.write("\n".join(lines) + "\n")
        while True:
            verdict = self.read("Approve? [y/n] ").strip().lower()
            if verdict in ("y", "yes", "n", "no"):
                break
            self.write("Answer y or n.\n")
        note = self.read("Note (optional, Enter to skip): ").strip()
        decision: dict[str, Any] = {"approved": verdict.startswith("y"), "tool_call_id": approval.get("tool_call_id")}
        if note:
            decision["note"] = note
        return decision

    def _ask(self, batch: dict[str, Any]) -> dict[str, Any]:
        answers: list[dict[str, Any]] = []
        for position, question in enumerate(batch.get("questions") or []):
            options = [str(o.get("label")) for o in question.get("options") or []]
            lines = [f"{question.get('header')}: {question.get('question')}"]
            for number, option in enumerate(question.get("options") or [], start=1):
                described = f" ({option['description']})" if option.get("description") else ""
                lines.append(f"  {number}. {option.get('label')}{described}")
            self.write("\n".join(lines) + "\n")
            several = " (several: 1,3)" if question.get("multi_select") else ""
            hint = "Enter to just chat" if position == 0 else "Enter to skip"
            while True:
                reply = self.read(f"Number{several}, your own answer, or {hint}: ").strip()
                if not reply:
                    if position == 0:
                        return {"tool_call_id": batch.get("tool_call_id"), "chat_instead": True}
                    break
                picked = _numbers(reply, len(options))
                if picked is None:
                    answers.append({"question_id": question.get("id"), "text": reply})
                    break
                if len(picked) > 1 and not question.get("multi_select"):
                    self.write("Pick one number for this question.\n")
                    continue
                answers.append({"question_id": question.get("id"), "selected": [options[i - 1] for i in picked]})
                break
        if not answers:
            return {"tool_call_id": batch.get("tool_call_id"), "chat_instead": True}
        return {"tool_call_id": batch.get("tool_call_id"), "answers": answers}


def _numbers(reply: str, count: int) -> list[int] | None:
    """`2` or `1, 3` as option numbers; None when the reply is not (only) valid numbers, i.e. free text."""
    parts = [p.strip() for p in reply.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    return numbers if all(1 <= n <= count for n in numbers) else None
