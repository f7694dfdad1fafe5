"""Asides: suggested follow-ups and a one-line recap, generated beside a conversation for the UI.

Neither is stored and the agent never sees either. Each is one call to the project's default model, made on a
worker thread and abandoned at a deadline, so a slow or failing provider costs the caller an empty answer
(`[]` / `""`) at the deadline rather than an error or a hang. Everything that is not I/O (the transcript, the
prompts, reading the model's answer) is a pure function here so it can be tested on its own.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from oberik.domain.llm import Completion, ModelRequest
from oberik.domain.models import Message, Project
from oberik.engine.models import resolver_for
from oberik.observability import logger
from oberik.settings import Settings

# How long an aside may take before the caller gets an empty answer. Module-level so tests can shorten it.
ASIDE_DEADLINE_SECONDS = 30.0
# The tail of the conversation the model is shown, and how much of each message.
TRANSCRIPT_MESSAGES = 20
MESSAGE_CHARS = 1500
MAX_SUGGESTIONS = 10
# A suggestion is a button label; a recap is one line above the composer.
SUGGESTION_CHARS = 140
RECAP_CHARS = 280
TEMPERATURE = 0.4

# Markers the built-in offline model recognises, so asides work without a provider too.
FOLLOWUPS_TASK = "[oberik:followups]"
RECAP_TASK = "[oberik:recap]"

_FOLLOWUPS_SYSTEM = (
    FOLLOWUPS_TASK
    + " You suggest what the user might say next in a chat with an assistant. Each suggestion is written in the "
    "user's own voice, as if they typed it (for example 'show me a diff first', not 'Ask for a diff'), short "
    "enough for a button, and moves the conversation on. Do not repeat what has already been answered. "
    "Reply with a JSON array of strings and nothing else."
)
_RECAP_SYSTEM = (
    RECAP_TASK
    + " You write a one-line recap for someone returning to a conversation after a break: where they got to and "
    "what was still open, addressed to them as 'you' (for example 'You were migrating the forfaits-* fetchers "
    "and hadn't decided about archived ones.'). One sentence, no preamble, no quotes."
)

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_BULLET = re.compile(r"^\s*(?:[-*•·]|\(?\d{1,2}[.):]|[a-zA-Z][.)])\s+")
_LABEL = re.compile(r"^\s*(?:recap|summary)\s*[:\-–]\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’`"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


# --- the transcript ---------------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        text = " ".join(p for p in parts if isinstance(p, str) and p.strip())
        images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
        return (text + (" [image]" * images)).strip()
    return ""


def transcript(messages: list[Message], limit: int = TRANSCRIPT_MESSAGES) -> str:
    """The last `limit` things the user and the assistant said, as plain 'User: ...' / 'Assistant: ...' lines.

    Tool traffic is left out (it is not something either party said), and so is any turn that was abandoned,
    which the agent itself no longer sees either.
    """
    dropped = {m.turn_id for m in messages if m.abandoned or m.extra.get("turn_abandoned")}
    said: list[str] = []
    for m in messages:
        if m.abandoned or (m.turn_id is not None and m.turn_id in dropped) or m.role == "tool":
            continue
        text = " ".join(_text_of(m.content).split())
        if not text:
            continue
        if len(text) > MESSAGE_CHARS:
            text = text[: MESSAGE_CHARS - 1].rstrip() + "…"
        said.append(f"{'User' if m.role == 'user' else 'Assistant'}: {text}")
    return "\n".join(said[-limit:])


def followups_prompt(conversation: str, n: int) -> list[dict[str, Any]]:
    ask = (
        f"The conversation so far:\n\n{conversation}\n\n"
        f"Write {n} follow-up{'s' if n != 1 else ''} the user could send next, as a JSON array of {n} "
        f"string{'s' if n != 1 else ''}."
    )
    return [{"role": "system", "content": _FOLLOWUPS_SYSTEM}, {"role": "user", "content": ask}]


def recap_prompt(conversation: str) -> list[dict[str, Any]]:
    ask = f"The conversation so far:\n\n{conversation}\n\nWrite the one-line recap."
    return [{"role": "system", "content": _RECAP_SYSTEM}, {"role": "user", "content": ask}]


# --- reading the answer -----------------------------------------------------------------------------------------


def _unfence(text: str) -> str:
    return _FENCE.sub("", text.strip()).strip()


def _json_list(text: str) -> list[Any] | None:
    """A JSON array in the answer, whole or embedded in prose; `{"suggestions": [...]}` counts too."""
    candidates = [text]
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            value = next((v for v in value.values() if isinstance(v, list)), None)
        if isinstance(value, list):
            return value
    return None


def _clean(line: str) -> str:
    line = _BULLET.sub("", line.strip())
    line = " ".join(line.split()).strip()
    while len(line) >= 2 and _wrapped(line):
        line = line[1:-1].strip()
    return line


def _wrapped(line: str) -> bool:
    """The whole line is inside one pair of quotes (an apostrophe inside a word does not count as a quote)."""
    if line[0] not in _QUOTES or line[-1] not in _QUOTES:
        return False
    inner = line[1:-1]
    for i, ch in enumerate(inner):
        if ch in (line[0], line[-1]) and not (
            0 < i < len(inner) - 1 and inner[i - 1].isalpha() and inner[i + 1].isalpha()
        ):
            return False
    return True


def parse_suggestions(answer: str, n: int) -> list[str]:
    """Up to `n` button-sized suggestions from whatever the model wrote.

    Takes a JSON array when there is one (also fenced, or inside prose), else one suggestion per line with
    bullets, numbering and quotes removed. Headings ("Here are some ideas:"), blank lines, duplicates and
    anything too long to be a button are dropped, so prose that is not a list at all (such as the offline
    model's self-introduction) yields nothing rather than a paragraph on a button.
    """
    text = _unfence(answer)
    listed = _json_list(text)
    if listed is not None:
        raw = [
            item if isinstance(item, str) else next((str(v) for v in item.values() if isinstance(v, str)), "")
            for item in listed
            if isinstance(item, str | dict)
        ]
    else:
        raw = text.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    for item in raw:
        line = _clean(item)
        if not line or line.endswith(":") or len(line) > SUGGESTION_CHARS or line in ("[", "]"):
            continue
        key = line.casefold()
        if key not in seen:
            seen.add(key)
            out.append(line)
        if len(out) >= n:
            break
    return out


def parse_recap(answer: str) -> str:
    """One line from whatever the model wrote: its first line, without a 'Recap:' label or quotes, kept short."""
    text = _unfence(answer)
    first = next((line for line in (_clean(x) for x in text.splitlines()) if line), "")
    line = _clean(_LABEL.sub("", first))
    if len(line) <= RECAP_CHARS:
        return line
    sentence = _SENTENCE_END.split(line, maxsplit=1)[0]
    if len(sentence) <= RECAP_CHARS:
        return sentence
    return line[: RECAP_CHARS - 1].rstrip() + "…"


# --- one bounded model call ---------------------------------------------------------------------------------------


def ask_model(model: Any, request: ModelRequest, deadline: float) -> str | None:
    """The model's answer, or None when it failed or did not finish within `deadline` seconds.

    The call runs on a daemon thread. Past the deadline the thread is asked to stop (an adapter closes its
    provider stream at the next delta) and left behind: the caller does not wait for it.
    """
    stop = threading.Event()
    result: list[str] = []

    def call() -> None:
        try:
            for item in model.stream(request, should_stop=stop.is_set):
                if isinstance(item, Completion) and item.finish_reason != "cancelled":
                    result.append(item.content)
        except Exception as exc:  # any provider failure is an empty aside, never an error to the caller
            logger.info("aside model call failed", error=type(exc).__name__, detail=str(exc)[:200])

    worker = threading.Thread(target=call, name="aside", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        stop.set()
        logger.info("aside model call ran past its deadline", deadline=deadline)
        return None
    return result[0] if result else None


def _run(
    project: Project, settings: Settings, messages: list[dict[str, Any]], resolve: Callable[[str], Any] | None
) -> str | None:
    name = project.settings.default_model or settings.default_model
    try:
        model, model_id = (resolve or resolver_for(project.settings.providers, settings))(name)
    except Exception as exc:  # a provider nobody configured: nothing to ask
        logger.info("aside has no model", model=name, error=str(exc)[:200])
        return None
    request = ModelRequest(model=model_id, messages=messages, tools=[], temperature=TEMPERATURE)
    return ask_model(model, request, project.settings.aside_deadline_seconds or ASIDE_DEADLINE_SECONDS)


def followups(
    project: Project,
    settings: Settings,
    history: list[Message],
    n: int,
    *,
    resolve: Callable[[str], Any] | None = None,
) -> list[str]:
    """Up to `n` suggested next messages in the user's voice; [] when there is nothing to go on or no answer."""
    conversation = transcript(history)
    if not conversation or n < 1:
        return []
    answer = _run(project, settings, followups_prompt(conversation, min(n, MAX_SUGGESTIONS)), resolve)
    return parse_suggestions(answer, min(n, MAX_SUGGESTIONS)) if answer else []


def recap(
    project: Project, settings: Settings, history: list[Message], *, resolve: Callable[[str], Any] | None = None
) -> str:
    """One line for someone coming back to the conversation; "" when there is nothing to go on or no answer."""
    conversation = transcript(history)
    if not conversation:
        return ""
    answer = _run(project, settings, recap_prompt(conversation), resolve)
    return parse_recap(answer) if answer else ""
