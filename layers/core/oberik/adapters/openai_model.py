"""The `Model` port over any OpenAI-compatible chat-completions endpoint, using the official `openai` client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import OpenAI

from oberik.domain.errors import ModelError
from oberik.domain.llm import Completion, Delta, ModelRequest, ToolCall

# The client refuses to start without some key; local servers (vLLM, Ollama, ...) often need none.
_PLACEHOLDER_KEY = "no-key-configured"
# Providers disagree on where streamed thinking goes; these are the delta fields seen in the wild.
_REASONING_FIELDS = ("reasoning_content", "reasoning")
_MAX_DETAIL = 300


@dataclass
class _PendingCall:
    id: str | None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """Everything a stream has produced so far."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[_PendingCall] = field(default_factory=list)
    slot_by_index: dict[int, int] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None

    def add_tool_delta(self, index: int, call_id: str | None, name: str | None, arguments: str | None) -> None:
        slot = self.slot_by_index.get(index)
        # A different id on a known index means a provider that reuses one index for every call: start a new one.
        if slot is None or (call_id and self.calls[slot].id and self.calls[slot].id != call_id):
            self.calls.append(_PendingCall(id=call_id))
            slot = self.slot_by_index[index] = len(self.calls) - 1
        pending = self.calls[slot]
        if call_id and not pending.id:
            pending.id = call_id
        # Most providers send the name once; some repeat it whole on every delta, which must not double it.
        if name and name != pending.name:
            pending.name += name
        if arguments:
            pending.arguments.append(arguments)

    def completion(self, finish_reason: str | None, warnings: list[str], *, with_tools: bool = True) -> Completion:
        calls = [
            ToolCall(id=c.id or f"call_{n}", name=c.name, arguments="".join(c.arguments))
            for n, c in enumerate(self.calls)
            if c.name
        ]
        return Completion(
            content="".join(self.content),
            reasoning="".join(self.reasoning),
            tool_calls=calls if with_tools else [],
            finish_reason=finish_reason,
            usage=self.usage,
            warnings=list(warnings),
        )


class OpenAIModel:
    """Streams a chat completion from an OpenAI-compatible provider and maps its failures to `ModelError`.

    The client never retries by itself (max_retries=0): whether a failed call is tried again is the engine's
    decision, made from the `ModelError.code`.
    """

    def __init__(self, base_url: str | None, api_key: str | None, timeout: float = 120.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self._client = OpenAI(
            base_url=base_url or None, api_key=api_key or _PLACEHOLDER_KEY, timeout=timeout, max_retries=0
        )

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def stream(
        self,
        request: ModelRequest,
        should_stop: Callable[[], bool] | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[Delta | Completion]:
        warnings: list[str] = []
        if should_stop is not None and should_stop():
            yield Completion(content="", finish_reason="cancelled")
            return
        response = self._open(request, warnings)
        if on_open is not None:
            on_open()
        got = _Assembly()
        try:
            for chunk in self._chunks(response):
                if chunk.usage is not None:
                    got.usage = _usage_dict(chunk.usage)
                for choice in chunk.choices or []:
                    if choice.index != 0:
                        continue
                    if choice.finish_reason:
                        got.finish_reason = choice.finish_reason
                    yield from _take_delta(choice.delta, got)
                if should_stop is not None and should_stop():
                    response.close()  # stops the provider generating (and billing) the rest
                    # Tool calls may be half-written at this point; a cancelled turn must not run them.
                    yield got.completion("cancelled", warnings, with_tools=False)
                    return
        finally:
            response.close()
        yield got.completion(got.finish_reason, warnings)

    # -- opening the stream ----------------------------------------------------------------------------------

    def _open(self, request: ModelRequest, warnings: list[str]) -> openai.Stream[Any]:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = request.tools
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
        # At most one retry per parameter a provider may refuse: stream_options and reasoning_effort.
        for _ in range(3):
            try:
                stream: openai.Stream[Any] = self._client.chat.completions.create(**kwargs)
                return stream
            except openai.BadRequestError as exc:
                refused = _refused_param(exc, kwargs)
                if refused is None:
                    raise self._error(exc) from exc
                kwargs.pop(refused)
                if refused == "reasoning_effort":
                    warnings.append(
                        f"The model refused reasoning_effort={request.reasoning_effort}, "
                        "so this turn was answered without it."
                    )
            except openai.APIError as exc:
                raise self._error(exc) from exc
        raise ModelError(
            "The model provider kept refusing the request's parameters (HTTP 400).", code="bad_request", status=400
        )

    def _chunks(self, response: openai.Stream[Any]) -> Iterator[Any]:
        """Iterate the provider's chunks, turning client exceptions into `ModelError`."""
        iterator = iter(response)
        while True:
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            except openai.APIError as exc:
                raise self._error(exc, mid_stream=True) from exc
            yield chunk

    # -- errors ----------------------------------------------------------------------------------------------

    def _error(self, exc: openai.APIError, *, mid_stream: bool = False) -> ModelError:
        where = self.base_url or "api.openai.com"
        if isinstance(exc, openai.APITimeoutError):
            return ModelError(
                f"The model provider at {where} sent nothing for {self.timeout:g} seconds, so the call timed out "
                "(no HTTP status). Try again, or raise model_timeout_seconds if this model is slow to start.",
                code="timeout",
            )
        if isinstance(exc, openai.APIConnectionError):
            what = (
                "The connection to the model provider broke mid-answer"
                if mid_stream
                else "Could not reach the model provider"
            )
            cause = exc.__cause__
            why = f"{exc.message.rstrip('.')}: {cause}" if cause is not None and str(cause) else exc.message
            return ModelError(
                f"{what} at {where} (no HTTP status; {why.rstrip('.')}). "
                "Check that the provider's base URL is right and that it is up, then try again.",
                code="provider_error",
            )
        if isinstance(exc, openai.APIStatusError):
            return _status_error(exc)
        return ModelError(
            f"The model provider reported an error while streaming (HTTP 200, then an error event): {_message(exc)}. "
            "This is on the provider's side; try again shortly.",
            code="provider_error",
        )


def _take_delta(delta: Any, got: _Assembly) -> Iterator[Delta]:
    if delta is None:
        return
    reasoning = _reasoning_text(delta)
    if reasoning:
        got.reasoning.append(reasoning)
        yield Delta("reasoning", reasoning)
    for text in (delta.content, getattr(delta, "refusal", None)):
        if text:
            got.content.append(text)
            yield Delta("content", text)
    for call in delta.tool_calls or []:
        function = call.function
        got.add_tool_delta(
            call.index if call.index is not None else 0,
            call.id,
            function.name if function is not None else None,
            function.arguments if function is not None else None,
        )


def _reasoning_text(delta: Any) -> str:
    extra: dict[str, Any] = getattr(delta, "model_extra", None) or {}
    for name in _REASONING_FIELDS:
        value = extra.get(name, getattr(delta, name, None))
        if isinstance(value, str) and value:
            return value
    return ""


def _usage_dict(usage: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, name, None)
        if isinstance(value, int):
            out[name] = value
    details = getattr(usage, "completion_tokens_details", None)
    reasoning_tokens = getattr(details, "reasoning_tokens", None) if details is not None else None
    if isinstance(reasoning_tokens, int):
        out["reasoning_tokens"] = reasoning_tokens
    return out


def _message(exc: openai.APIError) -> str:
    """The provider's own words about the failure, short enough to show a person."""
    body = exc.body
    text: Any = None
    if isinstance(body, dict):
        text = body.get("message")
        if text is None and isinstance(body.get("error"), dict):
            text = body["error"].get("message")
        if text is None and isinstance(body.get("error"), str):
            text = body["error"]
    elif isinstance(body, str) and body.strip():
        text = body
    text = str(text or exc.message).strip().rstrip(".")
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def _refused_param(exc: openai.BadRequestError, kwargs: dict[str, Any]) -> str | None:
    """Which optional parameter a 400 complains about, if it is one we can drop and retry without."""
    text = f"{exc.param or ''} {_message(exc)} {exc.message}".lower()
    if "stream_options" in kwargs and "stream_options" in text:
        return "stream_options"
    if "reasoning_effort" in kwargs and ("reasoning" in text or "effort" in text):
        return "reasoning_effort"
    return None


def _status_error(exc: openai.APIStatusError) -> ModelError:
    status = exc.status_code
    said = _message(exc)
    if status == 429:
        retry_after = exc.response.headers.get("retry-after")
        wait = f"wait {retry_after} seconds" if retry_after else "wait a moment"
        return ModelError(
            f"The model provider is rate limiting this key (HTTP 429): {said}. "
            f"{wait[0].upper() + wait[1:]} and try again, or raise the provider account's limits.",
            code="rate_limited",
            status=status,
        )
    if status in (401, 403):
        return ModelError(
            f"The model provider refused the credentials (HTTP {status}): {said}. Check the API key configured "
            "for this provider (OPENAI_API_KEY, or the project's provider settings) and that it may use this model.",
            code="auth",
            status=status,
        )
    if status >= 500:
        return ModelError(
            f"The model provider failed (HTTP {status}): {said}. This is on the provider's side; try again shortly.",
            code="provider_error",
            status=status,
        )
    return ModelError(
        f"The model provider rejected the request (HTTP {status}): {said}. "
        "Check the model name and the parameters sent with it.",
        code="bad_request",
        status=status,
    )
