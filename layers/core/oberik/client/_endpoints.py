"""Each plain (non-streaming) call as data: method, path, body and how to read the answer.

The blocking and the asyncio clients both execute these, so a route is described once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from oberik.client.models import (
    ActiveRun,
    CancelResult,
    ChatResponse,
    MessagePublic,
    SessionPage,
    SessionPublic,
    ToolsListing,
    Transcript,
)

# A blocking turn may run as long as the server lets it (10 minutes by default) before it answers.
BLOCKING_READ_TIMEOUT = 700.0
# Follow-ups and the recap answer within their own deadline (30 s by default) whatever the model does.
ASIDE_READ_TIMEOUT = 90.0


def _id(value: str) -> str:
    return quote(str(value), safe="")


@dataclass(frozen=True)
class Req:
    method: str
    path: str
    parse: Callable[[Any], Any]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    read_timeout: float | None = None  # None: the client's default


def _none(_: Any) -> None:
    return None


def chat(body: dict[str, Any]) -> Req:
    return Req("POST", "/chat", ChatResponse.model_validate, json=body, read_timeout=BLOCKING_READ_TIMEOUT)


def cancel(run_id: str) -> Req:
    return Req("POST", f"/chat/stream/{_id(run_id)}/cancel", CancelResult.model_validate)


def steer(run_id: str, message: str) -> Req:
    return Req("POST", f"/chat/stream/{_id(run_id)}/steer", lambda d: bool(d["landed"]), json={"message": message})


def list_sessions(user_ref: str | None, limit: int | None, offset: int | None) -> Req:
    params = {k: v for k, v in (("user_ref", user_ref), ("limit", limit), ("offset", offset)) if v is not None}
    return Req("GET", "/chat/sessions", SessionPage.model_validate, params=params)


def messages(session_id: str) -> Req:
    def parse(data: Any) -> list[MessagePublic]:
        return Transcript.model_validate(data).messages

    return Req("GET", f"/chat/sessions/{_id(session_id)}/messages", parse)


def fork(session_id: str, up_to_message_id: str) -> Req:
    return Req(
        "POST",
        f"/chat/sessions/{_id(session_id)}/fork",
        SessionPublic.model_validate,
        json={"up_to_message_id": up_to_message_id},
    )


def delete(session_id: str) -> Req:
    return Req("DELETE", f"/chat/sessions/{_id(session_id)}", _none)


def rename(session_id: str, title: str | None) -> Req:
    return Req("PATCH", f"/chat/sessions/{_id(session_id)}", SessionPublic.model_validate, json={"title": title})


def todos(session_id: str) -> Req:
    return Req("GET", f"/chat/sessions/{_id(session_id)}/todos", lambda d: list(d["todos"]))


def active_run(session_id: str) -> Req:
    return Req("GET", f"/chat/sessions/{_id(session_id)}/run", ActiveRun.model_validate)


def followups(session_id: str, n: int) -> Req:
    return Req(
        "POST",
        f"/chat/sessions/{_id(session_id)}/followups",
        lambda d: [str(s) for s in d.get("suggestions") or []],
        json={"n": n},
        read_timeout=ASIDE_READ_TIMEOUT,
    )


def recap(session_id: str) -> Req:
    return Req(
        "POST",
        f"/chat/sessions/{_id(session_id)}/recap",
        lambda d: str(d.get("recap") or ""),
        read_timeout=ASIDE_READ_TIMEOUT,
    )


def list_tools(params: dict[str, Any]) -> Req:
    return Req("GET", "/tools", ToolsListing.model_validate, params=params)


def tool_params(allowed_tools: list[str] | None, flags: dict[str, bool]) -> dict[str, Any]:
    params: dict[str, Any] = {k: "true" if v else "false" for k, v in flags.items()}
    if allowed_tools is not None:
        params["allowed_tools"] = ",".join(allowed_tools)
    return params
