"""The blocking client. Streams are read on a background thread, so handlers run there, not on yours."""

from __future__ import annotations

import builtins
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any

import httpx

from oberik.client import _endpoints as ep
from oberik.client import handoff as handoff_api
from oberik.client._core import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_TOOL_ROUNDS,
    DISCONNECTED,
    STREAM_READ_TIMEOUT,
    Call,
    Failed,
    Handlers,
    StreamState,
    backoff,
    decode_json,
    request_body,
    resolve_pause,
    resume_body,
    retry_delay,
    split_handlers,
)
from oberik.client.errors import AgentStreamError, OberikConnectionError, OberikError, error_for
from oberik.client.handoff import BrowserStream, HandoffController
from oberik.client.models import (
    ActiveRun,
    CancelResult,
    ChatRequest,
    ChatResponse,
    MessagePublic,
    SessionPage,
    SessionPublic,
    ToolsListing,
)
from oberik.client.sse import SseDecoder
from oberik.client.tools import Tool, Ui, by_name

# How long cancel() and steer() wait for the run id of a stream that has only just been started.
RUN_ID_WAIT = 30.0
WAIT_SLICE = 0.2


def _call(call: Call) -> Any:
    if not call.capture:
        return call.fn(*call.args, **call.kwargs)
    try:
        return call.fn(*call.args, **call.kwargs)
    except Exception as exc:  # a tool's failure is reported to the model, not raised here
        return Failed(exc)


def _drive(steps: Generator[Call, Any, Any]) -> Any:
    """Run a generator of `Call`s to its return value, feeding each call's result back in."""
    try:
        call = next(steps)
        while True:
            call = steps.send(_call(call))
    except StopIteration as stop:
        return stop.value


def _abort(response: httpx.Response) -> None:
    """Break a streaming response from another thread: shut the socket down so a blocked read returns now."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


class Client:
    """A blocking client for the data plane.

    `token` is an end-user token; pass `get_token` instead to be asked for one on every request (so a
    refreshed token is picked up). `tools` and `ui` are declared to the agent on every turn this client
    starts; `chat.run()` and `chat.stream()` run the tools' handlers when the agent calls them.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        get_token: Callable[[], str] | None = None,
        tools: Iterable[Tool] = (),
        ui: Iterable[Ui] = (),
        timeout: float = 30.0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        if (token is None) == (get_token is None):
            raise ValueError("Pass exactly one of token= (a string) or get_token= (a function returning one).")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._get_token = get_token
        self._tools: dict[str, Tool] = by_name(tools)
        self._ui: dict[str, Ui] = by_name(ui)
        self.timeout = timeout
        self.max_retries = max_retries
        self._headers = dict(headers or {})
        self._own_http = http is None
        self._http = http or httpx.Client(timeout=timeout)
        self.chat = Chat(self)
        self.sessions = Sessions(self)
        self.chat.sessions = self.sessions
        self.tools = ToolsApi(self)

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- transport ----------------------------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        token = self._token if self._get_token is None else self._get_token()
        return {**self._headers, "Authorization": f"Bearer {token}"}

    def _timeout(self, read: float | None) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=read if read is not None else self.timeout)

    def _do(self, req: ep.Req) -> Any:
        try:
            response = self._http.request(
                req.method,
                self.base_url + req.path,
                json=req.json,
                params=req.params or None,
                headers=self._auth(),
                timeout=self._timeout(req.read_timeout),
            )
        except httpx.TransportError as exc:
            raise OberikConnectionError(
                f"{req.method} {req.path} got no answer from {self.base_url}: {exc}", code="connection_error"
            ) from exc
        if response.status_code >= 400:
            raise error_for(response.status_code, decode_json(response), response.text)
        return req.parse(decode_json(response) if response.content else None)

    def _open_stream(self, method: str, path: str, *, json: Any = None, last_event_id: int = 0) -> httpx.Response:
        headers = {**self._auth(), "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = str(last_event_id)
        request = self._http.build_request(
            method, self.base_url + path, json=json, headers=headers, timeout=self._timeout(STREAM_READ_TIMEOUT)
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise OberikConnectionError(
                f"{method} {path} got no answer from {self.base_url}: {exc}", code="connection_error"
            ) from exc
        if response.status_code >= 400:
            response.read()
            response.close()
            raise error_for(response.status_code, decode_json(response), response.text)
        return response


class Chat:
    """Turns: `send` (blocking), `stream`, `run` (with tool auto-dispatch), `attach`, and answering pauses."""

    sessions: Sessions

    def __init__(self, client: Client) -> None:
        self._client = client

    def _registries(
        self, tools: Iterable[Tool] | None, ui: Iterable[Ui] | None
    ) -> tuple[dict[str, Tool], dict[str, Ui]]:
        return {**self._client._tools, **by_name(tools or ())}, {**self._client._ui, **by_name(ui or ())}

    def send(self, request: ChatRequest | Mapping[str, Any] | None = None, /, **fields: Any) -> ChatResponse:
        """One blocking turn (POST /chat): answers when the turn has finished or paused.

        Takes the fields of a chat request as keyword arguments (or a `ChatRequest`). The client's registered
        tools are declared, but not run: a call to one comes back in `tool_calls`. `run()` runs them.
        """
        tools, ui = self._registries(None, None)
        result: ChatResponse = self._client._do(ep.chat(request_body(request, fields, tools=tools, ui=ui)))
        return result

    def run(
        self,
        request: ChatRequest | Mapping[str, Any] | None = None,
        /,
        *,
        tools: Iterable[Tool] | None = None,
        ui: Iterable[Ui] | None = None,
        on_approval: Callable[[dict[str, Any]], Any] | None = None,
        on_question: Callable[[dict[str, Any]], Any] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
        **fields: Any,
    ) -> ChatResponse:
        """A blocking turn that runs your tools whenever the agent calls them, until it is done.

        Every request declares the tools (with `requires_approval`). A call waiting for approval is never run:
        it is decided by `on_approval` when given; otherwise the response comes back with `requires_action`
        and `approvals` for you to decide with `decide()`. Questions go to `on_question` the same way. After
        `max_tool_rounds` automatic resumes the response is returned as it stands.
        """
        registry, components = self._registries(tools, ui)
        handlers = Handlers(on_approval=on_approval, on_question=on_question)
        response: ChatResponse = self._client._do(ep.chat(request_body(request, fields, tools=registry, ui=components)))
        _render(response, components)
        for _ in range(max_tool_rounds):
            resolution = _drive(resolve_pause(response, handlers, registry))
            if resolution is None:
                break
            response = self._client._do(ep.chat(resume_body(response, resolution, registry)))
            _render(response, components)
        return response

    def stream(
        self,
        request: ChatRequest | Mapping[str, Any] | None = None,
        /,
        *,
        tools: Iterable[Tool] | None = None,
        ui: Iterable[Ui] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
        max_retries: int | None = None,
        **fields_and_handlers: Any,
    ) -> StreamHandle:
        """Start a turn as a stream and return its handle at once; `handle.done()` gives the terminal payload.

        Keyword arguments are the request's fields plus any `on_*` handlers (see `Handlers`). Handlers run on
        the handle's reader thread. With `on_question` / `on_approval` (and for registered tools) a pause is
        answered and the turn resumed for you, and `done()` resolves when the turn has really finished.
        """
        handlers, fields = split_handlers(fields_and_handlers)
        registry, components = self._registries(tools, ui)
        body = request_body(request, fields, tools=registry, ui=components)
        return StreamHandle(
            self._client,
            lambda: self._client._open_stream("POST", "/chat/stream", json=body),
            handlers,
            tools=registry,
            ui=components,
            max_tool_rounds=max_tool_rounds,
            max_retries=self._client.max_retries if max_retries is None else max_retries,
        )

    def attach(
        self,
        run_id: str,
        last_event_id: int | None = None,
        *,
        max_retries: int | None = None,
        **handlers: Any,
    ) -> StreamHandle:
        """Follow a run this client did not start (a reload, another device): the same handle as `stream()`.

        Replays from the beginning unless `last_event_id` says what you already have. Client tools are not
        run on an attached stream (this client did not start the turn), so such a pause ends `done()` with
        `requires_action`; `on_question` and `on_approval` still answer theirs.
        """
        chosen, rest = split_handlers(handlers)
        if rest:
            raise TypeError(f"attach() takes handlers only; unexpected: {', '.join(sorted(rest))}")
        after = last_event_id or 0
        return StreamHandle(
            self._client,
            lambda: self._client._open_stream("GET", f"/chat/stream/{ep._id(run_id)}", last_event_id=after),
            chosen,
            tools={},
            ui=self._client._ui,
            max_tool_rounds=DEFAULT_MAX_TOOL_ROUNDS,
            max_retries=self._client.max_retries if max_retries is None else max_retries,
            run_id=run_id,
            last_event_id=after,
        )

    def answer(
        self,
        session_id: str,
        *,
        tool_call_id: str,
        answers: list[dict[str, Any]] | None = None,
        chat_instead: bool = False,
    ) -> ChatResponse:
        """Answer a question batch the agent asked, and let the turn go on (blocking)."""
        payload: dict[str, Any] = {"tool_call_id": tool_call_id}
        if chat_instead:
            payload["chat_instead"] = True
        if answers is not None:
            payload["answers"] = answers
        result: ChatResponse = self._client._do(ep.chat({"session_id": session_id, "answers": payload}))
        return result

    def decide(
        self, session_id: str, approved: bool, *, tool_call_id: str | None = None, note: str | None = None
    ) -> ChatResponse:
        """Approve or refuse what the agent asked permission for (blocking). `tool_call_id` is needed only when
        more than one approval is outstanding; `note` is the difference between "no" and "no, do X instead"."""
        decision: dict[str, Any] = {"approved": approved}
        if tool_call_id is not None:
            decision["tool_call_id"] = tool_call_id
        if note:
            decision["note"] = note
        result: ChatResponse = self._client._do(ep.chat({"session_id": session_id, "approval_decisions": [decision]}))
        return result

    def handoff_done(self, session_id: str) -> ChatResponse:
        """The person is finished with the page a blocking hand-off gave them: the turn carries on (blocking)."""
        result: ChatResponse = self._client._do(ep.chat({"session_id": session_id, "handoff_done": True}))
        return result

    def cancel(self, run_id: str) -> CancelResult:
        """Stop a streamed run's generation; a run that already ended reports how it ended."""
        result: CancelResult = self._client._do(ep.cancel(run_id))
        return result

    def steer(self, run_id: str, message: str) -> bool:
        """Send a message into a running turn: True when the agent will read it before the turn ends."""
        return bool(self._client._do(ep.steer(run_id, message)))


def _render(response: ChatResponse, components: Mapping[str, Ui]) -> None:
    for entry in response.ui:
        component = components.get(str(entry.get("name")))
        if component is not None and component.render is not None:
            component.render(entry.get("props") or {})


class StreamHandle:
    """A streamed turn in progress. Handlers run on its reader thread.

    `done()` waits for the terminal payload; `run_id()` is None until the run frame, `session_id()` until the
    start frame. `disconnect()` stops listening (generation goes on), `cancel()` stops generation, and
    `steer()` sends a message into the turn. A dropped connection is re-attached by itself from the last
    frame seen, up to `max_retries` failed attempts in a row, with `on_reconnect(attempt)` each time.
    """

    def __init__(
        self,
        client: Client,
        opener: Callable[[], httpx.Response],
        handlers: Handlers,
        *,
        tools: Mapping[str, Tool],
        ui: Mapping[str, Ui],
        max_tool_rounds: int,
        max_retries: int,
        run_id: str | None = None,
        last_event_id: int = 0,
    ) -> None:
        self._client = client
        self._opener = opener
        self._handlers = handlers
        self._tools = dict(tools)
        self._max_tool_rounds = max_tool_rounds
        self._max_retries = max_retries
        self._state = StreamState(handlers, ui)
        self._state.follow(run_id, last_event_id)
        self._run_known = threading.Event()
        if run_id is not None:
            self._run_known.set()
        self._finished = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None
        self._result: ChatResponse | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="oberik-stream", daemon=True)
        self._thread.start()

    # --- what the caller uses -------------------------------------------------------------------------------------

    def done(self, timeout: float | None = None) -> ChatResponse:
        """The terminal payload. Raises `AgentStreamError` when the turn was cancelled or failed, or the
        stream could not be followed; `TimeoutError` when `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Waiting in short slices keeps Ctrl-C (KeyboardInterrupt) working on every platform.
        while not self._finished.wait(
            WAIT_SLICE if deadline is None else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
        ):
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"The turn had not finished within {timeout} seconds; it is still running.")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def run_id(self) -> str | None:
        return self._state.run_id

    def session_id(self) -> str | None:
        return self._state.session_id

    @property
    def content(self) -> str:
        """The text streamed so far."""
        return self._state.content

    def disconnect(self) -> None:
        """Stop listening. Generation goes on; `done()` raises AgentStreamError with code `disconnected`."""
        self._stopping.set()
        with self._lock:
            response = self._response
        if response is not None:
            _abort(response)

    def cancel(self) -> str:
        """Stop generation (and model spend). `done()` then raises AgentStreamError `stream_cancelled`.

        Returns the run's status: `cancelled`, or how it ended if it had already finished.
        """
        return self._client.chat.cancel(self._wait_run()).status

    def steer(self, message: str) -> bool:
        """Send `message` into the turn. True: the agent reads it before this turn ends; False: the turn was
        already over, so send it as a normal message."""
        return self._client.chat.steer(self._wait_run(), message)

    def _wait_run(self) -> str:
        if not self._run_known.wait(RUN_ID_WAIT) or self._state.current_run is None:
            if self._error is not None:
                raise self._error
            raise TimeoutError("The stream has not started, so there is no run to act on yet.")
        assert self._state.current_run is not None
        return self._state.current_run

    # --- the reader thread ----------------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            response = self._open(self._opener)
            rounds = 0
            while True:
                outcome = self._follow(response)
                resolution = _drive(resolve_pause(outcome, self._handlers, self._tools))
                if resolution is None or rounds >= self._max_tool_rounds or self._stopping.is_set():
                    self._result = outcome
                    return
                rounds += 1
                body = resume_body(outcome, resolution, self._tools)
                response = self._open_resume(body)
        except BaseException as exc:
            self._error = exc
        finally:
            self._finished.set()
            self._run_known.set()  # nobody waits for a run id that will never come

    def _open(self, opener: Callable[[], httpx.Response]) -> httpx.Response:
        response = opener()
        self._state.follow(response.headers.get("x-run-id"))
        self._run_known.set()
        return response

    def _open_resume(self, body: dict[str, Any]) -> httpx.Response:
        """A resume may be sent again safely (the server applies the same one once), so a lost answer is retried."""
        failures = 0
        while True:
            try:
                return self._open(lambda: self._client._open_stream("POST", "/chat/stream", json=body))
            except OberikConnectionError:
                failures += 1
                if failures > self._max_retries or self._stopping.wait(backoff(failures)):
                    raise

    def _follow(self, response: httpx.Response | None) -> ChatResponse:
        """Read the current run to its terminal frame, re-attaching whenever the connection ends early."""
        state, failures, attempt = self._state, 0, 0
        while True:
            ended, hint = "error", None
            if response is not None:
                with self._lock:
                    self._response = response
                if self._stopping.is_set():
                    _abort(response)  # disconnect() came before this response could be aborted by it
                decoder = SseDecoder()
                try:
                    for line in response.iter_lines():
                        if self._stopping.is_set():
                            break
                        frame = decoder.feed(line)
                        if frame is None or state.seen(frame):
                            continue
                        failures = attempt = 0
                        calls, outcome = state.accept(frame)
                        for call in calls:
                            _call(call)
                        if isinstance(outcome, AgentStreamError):
                            raise outcome
                        if outcome is not None:
                            return outcome
                    else:
                        ended, hint = ("retry" if decoder.retry is not None else "eof"), decoder.retry
                except (httpx.TransportError, httpx.StreamError):
                    ended = "error"
                finally:
                    with self._lock:
                        self._response = None
                    response.close()
            if self._stopping.is_set():
                raise state.error("disconnected", DISCONNECTED)
            if ended != "retry":
                failures += 1
                if failures > self._max_retries:
                    raise state.error(
                        "stream_unreachable",
                        f"The connection to run {state.current_run} kept failing ({self._max_retries} reconnects). "
                        "The turn may still be running: attach to it later, or read the conversation.",
                    )
            attempt += 1
            if self._stopping.wait(retry_delay(hint) if ended == "retry" else backoff(failures)):
                raise state.error("disconnected", DISCONNECTED)
            if self._handlers.on_reconnect is not None:
                self._handlers.on_reconnect(attempt)
            response = self._reattach()

    def _reattach(self) -> httpx.Response | None:
        state = self._state
        run_id = state.current_run
        if run_id is None:
            raise state.error("stream_unreachable", "The stream broke before the server named its run.")
        try:
            return self._client._open_stream("GET", f"/chat/stream/{ep._id(run_id)}", last_event_id=state.last_id)
        except OberikConnectionError:
            return None
        except OberikError as exc:
            if exc.status is not None and exc.status >= 500:
                return None
            raise AgentStreamError(
                exc.detail,
                code=exc.code,
                session_id=state.session_id,
                run_id=run_id,
                content=state.content,
                status=exc.status,
                body=exc.body,
            ) from exc


class Sessions:
    """A subject's conversations."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, user_ref: str | None = None, limit: int | None = None, offset: int | None = None) -> SessionPage:
        """One page, newest first. Read `has_more` and page on with `next_offset`."""
        page: SessionPage = self._client._do(ep.list_sessions(user_ref, limit, offset))
        return page

    def messages(self, session_id: str) -> builtins.list[MessagePublic]:
        """The whole transcript, with `extra` (steered, turn_abandoned) on the rows that have it."""
        rows: builtins.list[MessagePublic] = self._client._do(ep.messages(session_id))
        return rows

    def fork(self, session_id: str, up_to_message_id: str) -> SessionPublic:
        """A new conversation holding this one's messages up to and including `up_to_message_id`."""
        forked: SessionPublic = self._client._do(ep.fork(session_id, up_to_message_id))
        return forked

    def delete(self, session_id: str) -> None:
        self._client._do(ep.delete(session_id))

    def rename(self, session_id: str, title: str | None) -> SessionPublic:
        """Set the conversation's name; None clears it."""
        renamed: SessionPublic = self._client._do(ep.rename(session_id, title))
        return renamed

    def todos(self, session_id: str) -> builtins.list[dict[str, Any]]:
        """The agent's plan for the conversation."""
        items: builtins.list[dict[str, Any]] = self._client._do(ep.todos(session_id))
        return items

    def active_run(self, session_id: str) -> ActiveRun:
        """What is running on the conversation, to `chat.attach()` to after a reload."""
        run: ActiveRun = self._client._do(ep.active_run(session_id))
        return run

    def followups(self, session_id: str, n: int = 3) -> builtins.list[str]:
        """Up to `n` next messages in the user's voice, for buttons; [] when there is none (or no time)."""
        suggestions: builtins.list[str] = self._client._do(ep.followups(session_id, n))
        return suggestions

    def browser_frame(self, session_id: str, selector: str | None = None) -> dict[str, Any]:
        """One still of a handed-over page (slow next to `browser_stream`): image, clip, origin, region."""
        return dict(self._client._do(handoff_api.browser_frame(session_id, selector)))

    def browser_input(self, session_id: str, event: Mapping[str, Any]) -> dict[str, Any]:
        """Relay one gesture or key: coordinates in the picture's pixels plus the frame's `origin`."""
        return dict(self._client._do(handoff_api.browser_input(session_id, event)))

    def handoff_check(self, session_id: str) -> dict[str, Any]:
        """Whether the person has finished: {checked, done, state, reason, will_check_again}."""
        return dict(self._client._do(handoff_api.handoff_check(session_id)))

    def browser_stream(self, session_id: str, selector: str | None = None, **callbacks: Any) -> BrowserStream:
        """Live frames of a handed-over page: on_frame, on_clip, on_end, on_error. `close()` it when done."""
        return BrowserStream(self._client, session_id, selector=selector, **callbacks)

    def handoff(
        self,
        session_id: str,
        handoff: Mapping[str, Any],
        *,
        on_view: Callable[[dict[str, Any]], Any] | None = None,
        on_ended: Callable[[dict[str, Any]], Any] | None = None,
    ) -> HandoffController:
        """Watch and work a hand-off: the stream, the gestures with their origin, and the finished-check."""
        return HandoffController(self._client, session_id, handoff, on_view=on_view, on_ended=on_ended)

    def recap(self, session_id: str) -> str:
        """One line for someone coming back to the conversation; "" when there is none (or no time)."""
        line: str = self._client._do(ep.recap(session_id))
        return line


class ToolsApi:
    """What a turn could be handed."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, allowed_tools: list[str] | None = None, **flags: bool) -> ToolsListing:
        """The tools a turn sent with these switches (`enable_*=False`, `allowed_tools`) would get."""
        listing: ToolsListing = self._client._do(ep.list_tools(ep.tool_params(allowed_tools, flags)))
        return listing
