"""The asyncio client: the same API as `Client`, with coroutines. Handlers and tool handlers may be async."""

from __future__ import annotations

import asyncio
import builtins
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
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
from oberik.client.handoff_aio import AsyncHandoffController
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


async def _call(call: Call) -> Any:
    try:
        result = call.fn(*call.args, **call.kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
    except Exception as exc:
        if call.capture:
            return Failed(exc)
        raise


async def _drive(steps: Generator[Call, Any, Any]) -> Any:
    try:
        call = next(steps)
        while True:
            call = steps.send(await _call(call))
    except StopIteration as stop:
        return stop.value


class AsyncClient:
    """`Client` for asyncio. `get_token` may be a coroutine function. Close it with `await aclose()` (or use
    `async with`)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        get_token: Callable[[], str | Awaitable[str]] | None = None,
        tools: Iterable[Tool] = (),
        ui: Iterable[Ui] = (),
        timeout: float = 30.0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
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
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self.chat = AsyncChat(self)
        self.sessions = AsyncSessions(self)
        self.chat.sessions = self.sessions
        self.tools = AsyncToolsApi(self)

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _auth(self) -> dict[str, str]:
        if self._get_token is None:
            token = self._token
        else:
            got = self._get_token()
            token = await got if inspect.isawaitable(got) else got
        return {**self._headers, "Authorization": f"Bearer {token}"}

    def _timeout(self, read: float | None) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=read if read is not None else self.timeout)

    async def _do(self, req: ep.Req) -> Any:
        try:
            response = await self._http.request(
                req.method,
                self.base_url + req.path,
                json=req.json,
                params=req.params or None,
                headers=await self._auth(),
                timeout=self._timeout(req.read_timeout),
            )
        except httpx.TransportError as exc:
            raise OberikConnectionError(
                f"{req.method} {req.path} got no answer from {self.base_url}: {exc}", code="connection_error"
            ) from exc
        if response.status_code >= 400:
            raise error_for(response.status_code, decode_json(response), response.text)
        return req.parse(decode_json(response) if response.content else None)

    async def _open_stream(self, method: str, path: str, *, json: Any = None, last_event_id: int = 0) -> httpx.Response:
        headers = {**await self._auth(), "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = str(last_event_id)
        request = self._http.build_request(
            method, self.base_url + path, json=json, headers=headers, timeout=self._timeout(STREAM_READ_TIMEOUT)
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise OberikConnectionError(
                f"{method} {path} got no answer from {self.base_url}: {exc}", code="connection_error"
            ) from exc
        if response.status_code >= 400:
            await response.aread()
            await response.aclose()
            raise error_for(response.status_code, decode_json(response), response.text)
        return response


class AsyncChat:
    """Turns, as coroutines. `stream()` and `attach()` return their handle at once (call them in a running loop)."""

    sessions: AsyncSessions

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _registries(
        self, tools: Iterable[Tool] | None, ui: Iterable[Ui] | None
    ) -> tuple[dict[str, Tool], dict[str, Ui]]:
        return {**self._client._tools, **by_name(tools or ())}, {**self._client._ui, **by_name(ui or ())}

    async def send(self, request: ChatRequest | Mapping[str, Any] | None = None, /, **fields: Any) -> ChatResponse:
        """One blocking turn (POST /chat); see `Client.chat.send`."""
        tools, ui = self._registries(None, None)
        result: ChatResponse = await self._client._do(ep.chat(request_body(request, fields, tools=tools, ui=ui)))
        return result

    async def run(
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
        """A turn that runs your tools until it is done; see `Client.chat.run`."""
        registry, components = self._registries(tools, ui)
        handlers = Handlers(on_approval=on_approval, on_question=on_question)
        response: ChatResponse = await self._client._do(
            ep.chat(request_body(request, fields, tools=registry, ui=components))
        )
        await _render(response, components)
        for _ in range(max_tool_rounds):
            resolution = await _drive(resolve_pause(response, handlers, registry))
            if resolution is None:
                break
            response = await self._client._do(ep.chat(resume_body(response, resolution, registry)))
            await _render(response, components)
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
    ) -> AsyncStreamHandle:
        """Start a streamed turn; `await handle` (or `await handle.done()`) for the terminal payload."""
        handlers, fields = split_handlers(fields_and_handlers)
        registry, components = self._registries(tools, ui)
        body = request_body(request, fields, tools=registry, ui=components)
        return AsyncStreamHandle(
            self._client,
            lambda: self._client._open_stream("POST", "/chat/stream", json=body),
            handlers,
            tools=registry,
            ui=components,
            max_tool_rounds=max_tool_rounds,
            max_retries=self._client.max_retries if max_retries is None else max_retries,
        )

    def attach(
        self, run_id: str, last_event_id: int | None = None, *, max_retries: int | None = None, **handlers: Any
    ) -> AsyncStreamHandle:
        """Follow a run this client did not start; see `Client.chat.attach`."""
        chosen, rest = split_handlers(handlers)
        if rest:
            raise TypeError(f"attach() takes handlers only; unexpected: {', '.join(sorted(rest))}")
        after = last_event_id or 0
        return AsyncStreamHandle(
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

    async def answer(
        self,
        session_id: str,
        *,
        tool_call_id: str,
        answers: list[dict[str, Any]] | None = None,
        chat_instead: bool = False,
    ) -> ChatResponse:
        payload: dict[str, Any] = {"tool_call_id": tool_call_id}
        if chat_instead:
            payload["chat_instead"] = True
        if answers is not None:
            payload["answers"] = answers
        result: ChatResponse = await self._client._do(ep.chat({"session_id": session_id, "answers": payload}))
        return result

    async def decide(
        self, session_id: str, approved: bool, *, tool_call_id: str | None = None, note: str | None = None
    ) -> ChatResponse:
        decision: dict[str, Any] = {"approved": approved}
        if tool_call_id is not None:
            decision["tool_call_id"] = tool_call_id
        if note:
            decision["note"] = note
        result: ChatResponse = await self._client._do(
            ep.chat({"session_id": session_id, "approval_decisions": [decision]})
        )
        return result

    async def handoff_done(self, session_id: str) -> ChatResponse:
        """The person is finished with a blocking hand-off's page: the turn carries on."""
        result: ChatResponse = await self._client._do(ep.chat({"session_id": session_id, "handoff_done": True}))
        return result

    async def cancel(self, run_id: str) -> CancelResult:
        result: CancelResult = await self._client._do(ep.cancel(run_id))
        return result

    async def steer(self, run_id: str, message: str) -> bool:
        return bool(await self._client._do(ep.steer(run_id, message)))


async def _render(response: ChatResponse, components: Mapping[str, Ui]) -> None:
    for entry in response.ui:
        component = components.get(str(entry.get("name")))
        if component is not None and component.render is not None:
            await _call(Call(component.render, (entry.get("props") or {},)))


class AsyncStreamHandle:
    """`StreamHandle` for asyncio: the reading runs as a task on the loop that created the handle."""

    def __init__(
        self,
        client: AsyncClient,
        opener: Callable[[], Awaitable[httpx.Response]],
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
        self._run_known = asyncio.Event()
        if run_id is not None:
            self._run_known.set()
        self._stopping = False
        self._task: asyncio.Task[ChatResponse] = asyncio.get_running_loop().create_task(self._main())

    async def done(self) -> ChatResponse:
        """The terminal payload; raises `AgentStreamError` as `StreamHandle.done()` does. Cancelling the
        caller does not stop the stream."""
        return await asyncio.shield(self._task)

    def __await__(self) -> Generator[Any, None, ChatResponse]:
        return self.done().__await__()

    def run_id(self) -> str | None:
        return self._state.run_id

    def session_id(self) -> str | None:
        return self._state.session_id

    @property
    def content(self) -> str:
        return self._state.content

    def disconnect(self) -> None:
        """Stop listening; generation goes on and `done()` raises AgentStreamError `disconnected`."""
        if not self._task.done():
            self._stopping = True
            self._task.cancel()

    async def cancel(self) -> str:
        return (await self._client.chat.cancel(await self._wait_run())).status

    async def steer(self, message: str) -> bool:
        return await self._client.chat.steer(await self._wait_run(), message)

    async def _wait_run(self) -> str:
        waiter = asyncio.ensure_future(self._run_known.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._state.current_run is None:
            if self._task.done() and self._task.exception() is not None:
                raise self._task.exception()  # type: ignore[misc]
            raise RuntimeError("The stream ended before the server named its run.")
        return self._state.current_run

    async def _main(self) -> ChatResponse:
        try:
            response = await self._open(self._opener)
            rounds = 0
            while True:
                outcome = await self._follow(response)
                resolution = await _drive(resolve_pause(outcome, self._handlers, self._tools))
                if resolution is None or rounds >= self._max_tool_rounds:
                    return outcome
                rounds += 1
                response = await self._open_resume(resume_body(outcome, resolution, self._tools))
        except asyncio.CancelledError:
            if self._stopping:
                raise self._state.error("disconnected", DISCONNECTED) from None
            raise

    async def _open(self, opener: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        response = await opener()
        self._state.follow(response.headers.get("x-run-id"))
        self._run_known.set()
        return response

    async def _open_resume(self, body: dict[str, Any]) -> httpx.Response:
        failures = 0
        while True:
            try:
                return await self._open(lambda: self._client._open_stream("POST", "/chat/stream", json=body))
            except OberikConnectionError:
                failures += 1
                if failures > self._max_retries:
                    raise
                await asyncio.sleep(backoff(failures))

    async def _follow(self, response: httpx.Response | None) -> ChatResponse:
        state, failures, attempt = self._state, 0, 0
        while True:
            ended, hint = "error", None
            if response is not None:
                decoder = SseDecoder()
                try:
                    async for line in response.aiter_lines():
                        frame = decoder.feed(line)
                        if frame is None or state.seen(frame):
                            continue
                        failures = attempt = 0
                        calls, outcome = state.accept(frame)
                        for call in calls:
                            await _call(call)
                        if isinstance(outcome, AgentStreamError):
                            raise outcome
                        if outcome is not None:
                            return outcome
                    ended, hint = ("retry" if decoder.retry is not None else "eof"), decoder.retry
                except (httpx.TransportError, httpx.StreamError):
                    ended = "error"
                finally:
                    await response.aclose()
            if ended != "retry":
                failures += 1
                if failures > self._max_retries:
                    raise state.error(
                        "stream_unreachable",
                        f"The connection to run {state.current_run} kept failing ({self._max_retries} reconnects). "
                        "The turn may still be running: attach to it later, or read the conversation.",
                    )
            attempt += 1
            await asyncio.sleep(retry_delay(hint) if ended == "retry" else backoff(failures))
            if self._handlers.on_reconnect is not None:
                await _call(Call(self._handlers.on_reconnect, (attempt,)))
            response = await self._reattach()

    async def _reattach(self) -> httpx.Response | None:
        state = self._state
        run_id = state.current_run
        if run_id is None:
            raise state.error("stream_unreachable", "The stream broke before the server named its run.")
        try:
            return await self._client._open_stream("GET", f"/chat/stream/{ep._id(run_id)}", last_event_id=state.last_id)
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


class AsyncSessions:
    """A subject's conversations; see `Sessions`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(
        self, user_ref: str | None = None, limit: int | None = None, offset: int | None = None
    ) -> SessionPage:
        page: SessionPage = await self._client._do(ep.list_sessions(user_ref, limit, offset))
        return page

    async def messages(self, session_id: str) -> builtins.list[MessagePublic]:
        rows: builtins.list[MessagePublic] = await self._client._do(ep.messages(session_id))
        return rows

    async def fork(self, session_id: str, up_to_message_id: str) -> SessionPublic:
        forked: SessionPublic = await self._client._do(ep.fork(session_id, up_to_message_id))
        return forked

    async def delete(self, session_id: str) -> None:
        await self._client._do(ep.delete(session_id))

    async def rename(self, session_id: str, title: str | None) -> SessionPublic:
        renamed: SessionPublic = await self._client._do(ep.rename(session_id, title))
        return renamed

    async def todos(self, session_id: str) -> builtins.list[dict[str, Any]]:
        items: builtins.list[dict[str, Any]] = await self._client._do(ep.todos(session_id))
        return items

    async def active_run(self, session_id: str) -> ActiveRun:
        run: ActiveRun = await self._client._do(ep.active_run(session_id))
        return run

    async def followups(self, session_id: str, n: int = 3) -> builtins.list[str]:
        suggestions: builtins.list[str] = await self._client._do(ep.followups(session_id, n))
        return suggestions

    async def recap(self, session_id: str) -> str:
        line: str = await self._client._do(ep.recap(session_id))
        return line

    async def browser_frame(self, session_id: str, selector: str | None = None) -> dict[str, Any]:
        return dict(await self._client._do(handoff_api.browser_frame(session_id, selector)))

    async def browser_input(self, session_id: str, event: Mapping[str, Any]) -> dict[str, Any]:
        return dict(await self._client._do(handoff_api.browser_input(session_id, event)))

    async def handoff_check(self, session_id: str) -> dict[str, Any]:
        return dict(await self._client._do(handoff_api.handoff_check(session_id)))

    async def handoff(
        self,
        session_id: str,
        handoff: Mapping[str, Any],
        *,
        on_view: Callable[[dict[str, Any]], Any] | None = None,
        on_ended: Callable[[dict[str, Any]], Any] | None = None,
    ) -> AsyncHandoffController:
        """Watch and work a hand-off (the stream as a task, the gestures with their origin, the finished-check);
        `await controller.close()` when the viewer goes away."""
        return await AsyncHandoffController(
            self._client, session_id, handoff, on_view=on_view, on_ended=on_ended
        ).start()

    async def browser_stream(
        self, session_id: str, selector: str | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The live page as `(event, data)` pairs: `clip`, `frame`, and a last `end`. Break out to stop."""
        response = await self._client._open_stream("GET", handoff_api.stream_path(session_id, selector))
        decoder = SseDecoder()
        try:
            async for line in response.aiter_lines():
                frame = decoder.feed(line)
                if frame is not None:
                    yield frame.event, frame.data
                    if frame.event == "end":
                        return
        finally:
            await response.aclose()


class AsyncToolsApi:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self, allowed_tools: list[str] | None = None, **flags: bool) -> ToolsListing:
        listing: ToolsListing = await self._client._do(ep.list_tools(ep.tool_params(allowed_tools, flags)))
        return listing
