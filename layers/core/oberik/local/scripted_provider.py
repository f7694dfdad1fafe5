"""A scripted, OpenAI-compatible chat-completions server for tests and benchmarks.

It is a real HTTP server on 127.0.0.1 (ephemeral port), so whatever talks to it goes through the real
`openai` client, its SSE parsing, its error classes and its connection pool. Each incoming
`POST /v1/chat/completions` takes the next step from a FIFO queue filled with `script(...)`:

    with ScriptedProvider() as provider:
        provider.script(Reply(reasoning="Let me think.", text="Hello there"), Fail(429))
        model = OpenAIModel(provider.base_url, "test-key")

Steps: `Reply` streams (or returns) an answer, `Fail` answers an HTTP error in OpenAI's error shape, `Drop`
breaks the connection mid-stream, `RejectParam` refuses a request carrying a given parameter, and `Hang`
stalls before answering. An empty queue answers 500 so a test that under-scripted notices.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

_TOKEN_RE = re.compile(r"\s*\S+\s*|\s+")


def split_tokens(text: str) -> list[str]:
    """Split text into word-ish pieces that keep their spaces, so joining them gives the text back."""
    if not text:
        return []
    pieces: list[str] = []
    for match in _TOKEN_RE.finditer(text):
        piece = match.group(0)
        # A leading run of whitespace belongs to the word after it; only trailing space stays attached.
        if pieces and piece.strip() == "":
            pieces[-1] += piece
        else:
            pieces.append(piece)
    return pieces


@dataclass
class Reply:
    """A successful answer. Reasoning streams first, then the text, then any tool calls.

    `tool_calls` items are `{"name": str, "arguments": dict | str, "id": str (optional)}`. `chunks` overrides how
    `text` is split. `ttft` delays the first chunk, `token_delay` every later one. `usage` replaces the rough
    counts the server makes up; `finish_reason` defaults to "tool_calls" or "stop". `reasoning_field` names the
    delta field the thinking travels in ("reasoning_content" like DeepSeek/vLLM, or "reasoning" like OpenRouter).
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[str] | None = None
    ttft: float = 0.0
    token_delay: float = 0.0
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    reasoning_field: str = "reasoning_content"


@dataclass
class Fail:
    """Answer an HTTP error with a JSON body shaped like OpenAI's (`{"error": {...}}`)."""

    status: int
    message: str = "The scripted provider was told to fail this request."
    retry_after: float | None = None


@dataclass
class Drop:
    """Stream `after_chunks` chunks of `text`, then break the connection without finishing the response."""

    after_chunks: int
    text: str = "This answer will be cut off before it is finished, somewhere in the middle of a sentence."


@dataclass
class RejectParam:
    """Answer 400 to a request that carries `param`; a request without it skips this step.

    This mimics a model that refuses a parameter: the client is expected to retry without it, and that retry is
    served by the next queued step.
    """

    param: str = "reasoning_effort"


@dataclass
class Hang:
    """Say nothing for `seconds` before answering 500, to exercise the client's timeout."""

    seconds: float


Step = Reply | Fail | Drop | RejectParam | Hang


class _ClientGone(Exception):
    """The client closed its end while we were writing."""


class ScriptedProvider:
    """An OpenAI-compatible server that answers from a script. Use as a context manager or start()/stop()."""

    def __init__(self, model_ids: tuple[str, ...] = ("scripted",)) -> None:
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self._routed: dict[str, deque[Step]] = {}
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._emit_log: list[tuple[int, int, str, float]] = []
        self._tokens_sent = 0
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.model_ids = model_ids
        # POST /v1/embeddings bodies, in order. Embeddings are not scripted: each text gets the deterministic
        # vector of oberik's HashingEmbedder (`dimensions` of the request, else 64).
        self.embedding_requests: list[dict[str, Any]] = []

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> ScriptedProvider:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _make_handler(self))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-provider", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes any step that is sleeping
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedProvider:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedProvider is not running; call start() first.")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script and observations -----------------------------------------------------------------------------

    def script(self, *steps: Step) -> ScriptedProvider:
        """Queue steps; each chat-completions request consumes the next one."""
        with self._lock:
            self._steps.extend(steps)
        return self

    def script_when(self, marker: str, *steps: Step) -> ScriptedProvider:
        """Queue steps for requests whose messages contain `marker` (e.g. a side task's system prompt), so
        concurrent requests of different kinds each get their own script whatever order they arrive in."""
        with self._lock:
            self._routed.setdefault(marker, deque()).extend(steps)
        return self

    def reset(self) -> None:
        """Forget the queued steps and everything recorded so far."""
        with self._lock:
            self._steps.clear()
            self._routed.clear()
            self._requests.clear()
            self._headers.clear()
            self._emit_log.clear()
            self._tokens_sent = 0

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The HTTP headers of each request in `requests` (names lower-cased), in the same order."""
        with self._lock:
            return [dict(h) for h in self._headers]

    @property
    def pending(self) -> int:
        """How many scripted steps have not been used yet."""
        with self._lock:
            return len(self._steps)

    @property
    def tokens_sent(self) -> int:
        """Content and reasoning chunks actually written to a socket."""
        with self._lock:
            return self._tokens_sent

    @property
    def emit_log(self) -> list[tuple[int, int, str, float]]:
        """(request_index, chunk_index, text, time.perf_counter()) for every content/reasoning chunk written."""
        with self._lock:
            return list(self._emit_log)

    # -- used by the handler ---------------------------------------------------------------------------------

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            return len(self._requests) - 1

    def _next_step(self, body: dict[str, Any]) -> Step | None:
        with self._lock:
            if self._routed:
                text = json.dumps(body.get("messages", []))
                for marker, queue in self._routed.items():
                    if marker in text:
                        return queue.popleft() if queue else None
            while self._steps:
                step = self._steps[0]
                if isinstance(step, RejectParam) and body.get(step.param) is None:
                    self._steps.popleft()  # this request does not carry the parameter, so it is not refused
                    continue
                return self._steps.popleft()
            return None

    def _note_token(self, request_index: int, chunk_index: int, text: str) -> None:
        with self._lock:
            self._tokens_sent += 1
            self._emit_log.append((request_index, chunk_index, text, time.perf_counter()))

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; True when it is."""
        return seconds > 0 and self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (closed pools, cancelled streams, timeouts) are expected here, not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def _make_handler(provider: ScriptedProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = provider

    return Handler


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedProvider
    protocol_version = "HTTP/1.1"
    timeout = 60  # idle keep-alive connections give up eventually

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    # -- routing ---------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "oberik-scripted"} for m in self.owner.model_ids
            ]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_error(404, f"No route for GET {self.path}.", "not_found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") == "/v1/embeddings":
            self._embeddings(raw)
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_error(404, f"No route for POST {self.path}.", "not_found")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_error(400, "The request body is not valid JSON.", "invalid_json")
            return
        if not isinstance(body, dict):
            self._send_error(400, "The request body must be a JSON object.", "invalid_json")
            return
        index = self.owner._record(body, {k.lower(): v for k, v in self.headers.items()})
        step = self.owner._next_step(body)
        try:
            self._serve(index, body, step)
        except _ClientGone:
            self.close_connection = True

    def _serve(self, index: int, body: dict[str, Any], step: Step | None) -> None:
        if step is None:
            self._send_error(
                500,
                f"ScriptedProvider: the script is exhausted; request #{index} arrived with no step queued for it.",
                "script_exhausted",
            )
        elif isinstance(step, Fail):
            headers = {"Retry-After": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            self._send_error(step.status, step.message, _error_type(step.status), headers=headers)
        elif isinstance(step, RejectParam):
            value = body.get(step.param)
            self._send_error(
                400,
                f"Unsupported value: '{step.param}' does not support {value!r} with this model.",
                "unsupported_parameter",
                param=step.param,
            )
        elif isinstance(step, Hang):
            if self.owner._sleep(step.seconds):
                self.close_connection = True
                return
            self._send_error(500, f"ScriptedProvider hung for {step.seconds:g} seconds as scripted.", "hang")
        elif isinstance(step, Drop):
            self._stream_drop(index, body, step)
        elif body.get("stream"):
            self._stream_reply(index, body, step)
        else:
            self._send_json(200, _completion(index, body, step))

    # -- plain responses -------------------------------------------------------------------------------------

    def _embeddings(self, raw: bytes) -> None:
        from oberik.adapters.embeddings import HashingEmbedder

        try:
            body = json.loads(raw or b"{}")
            texts = body["input"]
            texts = [texts] if isinstance(texts, str) else list(texts)
            if not texts or not all(isinstance(t, str) for t in texts):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self._send_error(400, "input must be a string or a non-empty list of strings.", "invalid_request_error")
            return
        with self.owner._lock:
            self.owner.embedding_requests.append(body)
        vectors = HashingEmbedder(int(body.get("dimensions") or 64)).embed(texts)
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        usage = {
            "prompt_tokens": sum(len(t.split()) for t in texts),
            "total_tokens": sum(len(t.split()) for t in texts),
        }
        self._send_json(200, {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage})

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError as exc:
            raise _ClientGone() from exc

    def _send_error(
        self,
        status: int,
        message: str,
        code: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        error = {"message": message, "type": _error_type(status), "param": param, "code": code}
        self._send_json(status, {"error": error}, headers)

    # -- streaming -------------------------------------------------------------------------------------------

    def _start_stream(self) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        except OSError as exc:
            raise _ClientGone() from exc

    def _write_raw(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone() from exc

    def _event(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_raw(f"data: {text}\n\n".encode())

    def _end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone() from exc

    def _stream_reply(self, index: int, body: dict[str, Any], step: Reply) -> None:
        chunk = _ChunkMaker(index, body)
        self._start_stream()
        if self.owner._sleep(step.ttft):
            raise _ClientGone()
        self._event(chunk.make({"role": "assistant", "content": ""}))
        token_index = 0

        def token(channel: str, text: str) -> None:
            nonlocal token_index
            if token_index and self.owner._sleep(step.token_delay):
                raise _ClientGone()
            self._event(chunk.make({channel: text}))
            self.owner._note_token(index, token_index, text)
            token_index += 1

        for piece in split_tokens(step.reasoning):
            token(step.reasoning_field, piece)
        for piece in step.chunks if step.chunks is not None else split_tokens(step.text):
            token("content", piece)
        for position, call in enumerate(step.tool_calls):
            call_id, name, arguments = _tool_call(index, position, call)
            first = {"index": position, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            self._event(chunk.make({"tool_calls": [first]}))
            for piece in _halves(arguments):
                self._event(chunk.make({"tool_calls": [{"index": position, "function": {"arguments": piece}}]}))
        self._event(chunk.make({}, finish_reason=_finish_reason(step)))
        options = body.get("stream_options") or {}
        if isinstance(options, dict) and options.get("include_usage"):
            self._event(chunk.make_usage(_usage(body, step, token_index)))
        self._event("[DONE]")
        self._end_stream()

    def _stream_drop(self, index: int, body: dict[str, Any], step: Drop) -> None:
        chunk = _ChunkMaker(index, body)
        self._start_stream()
        self._event(chunk.make({"role": "assistant", "content": ""}))
        for token_index, piece in enumerate(split_tokens(step.text)[: step.after_chunks]):
            self._event(chunk.make({"content": piece}))
            self.owner._note_token(index, token_index, piece)
        # Break the connection without the chunked terminator, as a crashed upstream would.
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class _ChunkMaker:
    def __init__(self, index: int, body: dict[str, Any]) -> None:
        self.id = f"chatcmpl-scripted-{index}"
        self.model = str(body.get("model") or "scripted")
        self.created = int(time.time())

    def _base(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    def make(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**self._base(), "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    def make_usage(self, usage: dict[str, int]) -> dict[str, Any]:
        return {**self._base(), "choices": [], "usage": usage}


def _error_type(status: int) -> str:
    if status in (401, 403):
        return "authentication_error" if status == 401 else "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _tool_call(request_index: int, position: int, call: dict[str, Any]) -> tuple[str, str, str]:
    arguments = call.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call_id = str(call.get("id") or f"call_scripted_{request_index}_{position}")
    return call_id, str(call["name"]), text


def _halves(text: str) -> list[str]:
    """Split arguments into at least two pieces (the second may be empty for very short text)."""
    middle = max(1, len(text) // 2)
    return [text[:middle], text[middle:]]


def _finish_reason(step: Reply) -> str:
    return step.finish_reason or ("tool_calls" if step.tool_calls else "stop")


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(item) for item in value)
    if isinstance(value, dict):
        return sum(_words(item) for item in value.values())
    return 0


def _usage(body: dict[str, Any], step: Reply, completion_chunks: int) -> dict[str, int]:
    if step.usage is not None:
        return dict(step.usage)
    prompt = _words(body.get("messages", []))
    completion = completion_chunks + len(step.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(index: int, body: dict[str, Any], step: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if step.reasoning:
        message[step.reasoning_field] = step.reasoning
    if step.tool_calls:
        calls = [_tool_call(index, position, call) for position, call in enumerate(step.tool_calls)]
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
        ]
    chunks = len(split_tokens(step.reasoning)) + len(step.chunks or split_tokens(step.text))
    return {
        "id": f"chatcmpl-scripted-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(step), "logprobs": None}],
        "usage": _usage(body, step, chunks),
    }
