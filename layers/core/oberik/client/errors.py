"""What the SDK raises. Every error is an `OberikError`, so one `except` clause catches them all."""

from __future__ import annotations

from typing import Any


class OberikError(Exception):
    """An answer the caller has to deal with.

    `status` is the HTTP status (None when no answer arrived), `code` the machine-readable code from the
    body (`{"detail": ..., "code": ...}`), `detail` the sentence, and `body` the whole decoded error body.
    """

    def __init__(
        self, detail: str, *, status: int | None = None, code: str = "error", body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code
        self.body = body or {}

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.detail}"


class InvalidRequest(OberikError):
    """400 / 422: the request is malformed; `detail` says what to change (and `body["field"]` where)."""


class Unauthorized(OberikError):
    """401: no token, or one that is expired, forged or malformed."""


class Forbidden(OberikError):
    """403: the token is known but lacks what this request needs (a capability, a model)."""


class NotFound(OberikError):
    """404: nothing by that id that this token may read, whether it exists or not."""


class Conflict(OberikError):
    """409: valid, but it collides with the current state, e.g. a turn already running on the conversation."""


class RateLimited(OberikError):
    """429."""


class ServerError(OberikError):
    """5xx: the platform or the model provider behind it failed (`code` says which, e.g. provider_error)."""


class OberikConnectionError(OberikError):
    """No answer at all: the server could not be reached, or the connection broke before it answered."""


class AgentStreamError(OberikError):
    """A streamed turn ended without a `done` frame.

    `code` is the server's (stream_expired, stream_lost, stream_cancelled, stream_failed, stream_elsewhere,
    provider_error, ...) or the SDK's own: `stream_unreachable` (every reconnect failed) and `disconnected`
    (you called `disconnect()`; generation goes on and `attach(run_id)` picks it up again).
    `session_id` names the conversation as soon as the `start` frame has arrived, `run_id` the run, and
    `content` is the text that had streamed, which the user has already watched arrive.
    """

    def __init__(
        self,
        detail: str,
        *,
        code: str,
        session_id: str | None = None,
        run_id: str | None = None,
        content: str = "",
        status: int | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        self.session_id = session_id
        self.run_id = run_id
        self.content = content


_BY_STATUS: dict[int, type[OberikError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
    429: RateLimited,
}


def error_for(status: int, body: Any, fallback: str = "") -> OberikError:
    """The exception for an HTTP error answer with this status and decoded body."""
    data = body if isinstance(body, dict) else {}
    detail = str(data.get("detail") or fallback or f"The server answered {status}.")
    code = str(data.get("code") or "http_error")
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else OberikError)
    return kind(detail, status=status, code=code, body=data)
