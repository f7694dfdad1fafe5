"""oberik's built-in offline model: no network, no randomness, and no pretence of being a real model.

It exists so a fresh deployment, `oberik dev` and the tests can run whole turns (including tool calls) before any
provider is configured. It understands exactly two requests in the latest user message, each only when the
matching tool is offered:

* asking for the time or date -> a `current_time` call (with `timezone` when an IANA zone is named);
* "wait N seconds" / "pause for N seconds" -> a `wait` call with `seconds`.

Intents run one tool call per model call, in the order they were mentioned. Once every intent has a tool result it
reports the results in plain words; with nothing to do it says what it is and how to configure a real provider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from oberik.domain.llm import Completion, Delta, ModelRequest, ToolCall

_TIME_RE = re.compile(
    r"what\s+time|(?:tell|give|show)\s+me\s+the\s+(?:time|date)|time\s+is\s+it|current\s+time|what(?:'s|\s+is)\s+the\s+(?:time|date)|date\s+today|today'?s\s+date"
    r"|what\s+day",
    re.IGNORECASE,
)
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
# "... but ask me first", "with my approval", "ask for my approval before ..."
_APPROVAL_RE = re.compile(
    r"ask\s+(?:me|for\s+(?:my\s+)?(?:approval|permission))(?:\s+(?:first|before))?|with\s+my\s+(?:approval|ok)",
    re.IGNORECASE,
)
_WAIT_RE = re.compile(
    r"\b(?:wait|pause|sleep)\s+(?:for\s+)?(?:about\s+)?(\d+(?:\.\d+)?|" + "|".join(_NUMBER_WORDS) + r")\s*"
    r"(?:seconds?|secs?|s)\b",
    re.IGNORECASE,
)
_TIMEZONE_RE = re.compile(
    r"\b(?:(?:Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc)"
    r"(?:/[A-Za-z0-9_+\-]+)+|UTC)\b"
)
_WORD_RE = re.compile(r"\S+\s*")
_QUOTE_CHARS = 80

_CONFIGURE = (
    "To get real answers, set OPENAI_API_KEY (and OPENAI_BASE_URL for any other OpenAI-compatible server), "
    "or configure a model provider in the project's settings."
)


_TITLE_TASK = "[oberik:title]"  # the marker engine.titles puts first in its system prompt


@dataclass(frozen=True)
class _Intent:
    position: int
    tool: str
    arguments: dict[str, Any]


class OfflineModel:
    """A deterministic stand-in for a chat model; see the module docstring for what it understands."""

    name = "oberik-offline"

    def stream(
        self,
        request: ModelRequest,
        should_stop: Callable[[], bool] | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[Delta | Completion]:
        if on_open is not None:
            on_open()  # nothing to send: it answers from here
        messages = request.messages
        if messages and _text(messages[0].get("content")).startswith("[oberik:judge]"):
            # It cannot judge anything, so it never claims an answer is ungrounded.
            yield Completion(content="GROUNDED", finish_reason="stop", usage=_usage(1, 1))
            return
        aside = _aside(messages)
        if aside is not None:
            yield Delta("content", aside)
            yield Completion(content=aside, finish_reason="stop", usage=_usage(len(aside.split()), len(aside.split())))
            return
        if _is_compact_task(messages):
            notes = _compact_notes(_text(messages[-1].get("content")))
            yield Delta("content", notes)
            yield Completion(content=notes, finish_reason="stop", usage=_usage(len(notes.split()), len(notes.split())))
            return
        if _is_title_task(messages):
            # Asked to name a conversation: its first words will do, deterministically.
            title = _title_from(_text(messages[-1].get("content")))
            yield Delta("content", title)
            yield Completion(content=title, finish_reason="stop", usage=_usage(len(title.split()), len(title.split())))
            return
        user_at = _latest_user_index(messages)
        user_text = _text(messages[user_at].get("content")) if user_at is not None else ""
        after = messages[user_at + 1 :] if user_at is not None else []
        results = [m for m in after if m.get("role") == "tool"]
        intents = _intents(user_text, _offered_tools(request.tools))
        prompt_words = sum(_word_count(_text(m.get("content"))) for m in messages)

        if len(results) < len(intents):
            intent = intents[len(results)]
            call_number = sum(1 for m in messages if m.get("role") == "tool") + 1
            arguments = json.dumps(intent.arguments)
            call = ToolCall(id=f"call_offline_{call_number}", name=intent.tool, arguments=arguments)
            completion_words = 1 + _word_count(arguments)
            yield Completion(
                content="",
                tool_calls=[call],
                finish_reason="tool_calls",
                usage=_usage(prompt_words, completion_words),
            )
            return

        answer = _report(results, _calls_by_id(after)) if results else _introduce(user_text)
        said: list[str] = []
        for word in _WORD_RE.findall(answer):
            if should_stop is not None and should_stop():
                yield Completion(
                    content="".join(said), finish_reason="cancelled", usage=_usage(prompt_words, len(said))
                )
                return
            said.append(word)
            yield Delta("content", word)
        yield Completion(content=answer, finish_reason="stop", usage=_usage(prompt_words, len(said)))


# -- reading the request -----------------------------------------------------------------------------------------


def _aside(messages: list[dict[str, Any]]) -> str | None:
    """Follow-up suggestions and the recap, without a model: plain, deterministic, and honest about it."""
    first = _text(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    conversation = _text(messages[-1].get("content")) if messages else ""
    asked = [line.split(":", 1)[1].strip() for line in conversation.splitlines() if line.lower().startswith("user:")]
    if first.startswith("[oberik:followups]"):
        return json.dumps(["What time is it?", "Wait 2 seconds, then tell me the time", "Tell me more"])
    if first.startswith("[oberik:recap]"):
        topic = " ".join(asked[-1].split()[:12]) if asked else "nothing yet"
        return f"You last asked: {topic}."
    return None


def _is_compact_task(messages: list[dict[str, Any]]) -> bool:
    first = messages[0] if messages else {}
    return first.get("role") == "system" and _text(first.get("content")).startswith("[oberik:compact]")


def _compact_notes(conversation: str) -> str:
    """A plain, deterministic summary: what the user asked, in order, each cut short."""
    asked = [line[len("user: ") :] for line in conversation.splitlines() if line.startswith("user: ")]
    points = [" ".join(a.split())[:120] for a in asked if a.strip()]
    return "The user asked, in order: " + "; ".join(points) + "." if points else "Nothing of note yet."


def _is_title_task(messages: list[dict[str, Any]]) -> bool:
    first = messages[0] if messages else {}
    return first.get("role") == "system" and _text(first.get("content")).startswith(_TITLE_TASK)


def _title_from(exchange: str) -> str:
    """Up to six words of what the user wrote (the exchange starts with 'The user wrote:')."""
    body = exchange.split("\n", 1)[1] if exchange.startswith("The user wrote:") else exchange
    body = body.split("\n\nThe assistant answered:", 1)[0]
    words = re.findall(r"[\w'’./:-]+", body)[:6]
    title = " ".join(words).strip(" .:-") or "New conversation"
    return title[0].upper() + title[1:]


def _latest_user_index(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def _text(content: Any) -> str:
    """Message content as plain text, whether a string or a list of OpenAI content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return " ".join(part for part in parts if isinstance(part, str))
    return ""


def _offered_tools(tools: list[dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _intents(text: str, offered: set[str]) -> list[_Intent]:
    found: list[_Intent] = []
    if "request_approval" in offered and (approval := _APPROVAL_RE.search(text)):
        # Asking comes before anything else the message wants done.
        action = " ".join(_APPROVAL_RE.sub("", text).split()).strip(" ,.;:-")
        action = re.sub(r"[\s,;]+(?:but|and|then)$", "", action, flags=re.IGNORECASE).strip(" ,.;:-") or "Go ahead"
        found.append(
            _Intent(
                -1,
                "request_approval",
                {
                    "action": action[:1].upper() + action[1:],
                    "detail": "Asked by the built-in offline model, which will not actually do it.",
                    "consequence": "None here: the offline model only pretends.",
                },
            )
        )
        del approval
    if "current_time" in offered and (match := _TIME_RE.search(text)):
        zone = _TIMEZONE_RE.search(text)
        found.append(_Intent(match.start(), "current_time", {"timezone": zone.group(0)} if zone else {}))
    if "wait" in offered:
        for match in _WAIT_RE.finditer(text):
            amount = match.group(1).lower()
            seconds = float(_NUMBER_WORDS.get(amount, 0) or amount)
            value: int | float = int(seconds) if seconds.is_integer() else seconds
            found.append(_Intent(match.start(), "wait", {"seconds": value}))
    return sorted(found, key=lambda intent: intent.position)


def _calls_by_id(messages: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Tool calls the assistant made in these messages: id -> (name, parsed arguments)."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = _json(function.get("arguments"))
            calls[str(call.get("id"))] = (
                str(function.get("name") or "a tool"),
                arguments if isinstance(arguments, dict) else {},
            )
    return calls


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


# -- writing the answer ------------------------------------------------------------------------------------------


def _introduce(user_text: str) -> str:
    lead = (
        "I'm oberik's built-in offline model: no model provider is configured for this conversation, "
        "so I can't really answer."
    )
    quote = " ".join(user_text.split())
    if len(quote) > _QUOTE_CHARS:
        quote = quote[: _QUOTE_CHARS - 1].rstrip() + "…"
    heard = f' You said: "{quote}".' if quote else " I didn't find a message from you to reply to."
    return f"{lead}{heard} {_CONFIGURE}"


def _report(results: list[dict[str, Any]], calls: dict[str, tuple[str, dict[str, Any]]]) -> str:
    sentences = []
    for result in results:
        name, arguments = calls.get(str(result.get("tool_call_id")), ("a tool", {}))
        sentences.append(_describe(name, arguments, _json(_text(result.get("content")))))
    return " ".join(sentences)


def _describe(name: str, arguments: dict[str, Any], result: Any) -> str:
    if isinstance(result, dict) and result.get("error"):
        return f"The {name} tool failed: {_short(result['error'])}."
    if name == "current_time":
        if isinstance(result, dict):
            moment = _first(result, "iso", "datetime", "now", "time", "current_time", "local_time", "utc")
            zone = _first(result, "timezone", "tz", "zone")
            if moment:
                return f"It is {moment} ({zone})." if zone else f"It is {moment}."
        if isinstance(result, str) and result.strip():
            return f"It is {_short(result)}."
    if name == "request_approval":
        text = result if isinstance(result, str) else ""
        if text.startswith("The user approved"):
            return (
                f"You approved: {arguments.get('action', 'that')}. (I'm the offline model, so nothing was really done.)"
            )
        return "You said no, so I stopped there. What would you like me to do instead?"
    if name == "wait":
        waited = _first(result, "waited_seconds", "waited", "seconds") if isinstance(result, dict) else None
        seconds = waited if waited is not None else arguments.get("seconds")
        if seconds is not None:
            unit = "second" if str(seconds) in ("1", "1.0") else "seconds"
            return f"I waited {seconds} {unit}."
    return f"The {name} tool returned: {_short(result)}."


def _first(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = data.get(key)
        if value is not None and value != "":
            return value
    return None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:199] + "…"


def _word_count(text: str) -> int:
    return len(text.split())


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
