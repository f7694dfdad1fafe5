"""Domain exceptions. `oberik.api.errors` maps each to one HTTP status; nothing else does."""

from __future__ import annotations


class OberikError(Exception):
    """Base class. `code` is the machine-readable error code clients may branch on."""

    code = "error"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code


class Invalid(OberikError):
    """The request is malformed or names something impossible (400/422)."""

    code = "invalid_request"

    def __init__(self, detail: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(detail, code=code)
        self.field = field


class Unauthorized(OberikError):
    """No credential, or one that is expired, forged or malformed (401)."""

    code = "unauthorized"


class Forbidden(OberikError):
    """The caller is known and the thing exists for them, but this action is not granted (403).

    Never used for things the caller may not see: those are NotFound.
    """

    code = "forbidden"


class NotFound(OberikError):
    """Nothing by that id that this caller may read (404), whether it exists or not."""

    code = "not_found"


class Conflict(OberikError):
    """The request is valid but collides with current state, e.g. a turn already running (409)."""

    code = "conflict"


class ModelError(OberikError):
    """The model provider failed the call. `code` is one of rate_limited, provider_error, timeout, auth, bad_request."""

    code = "provider_error"

    def __init__(self, detail: str, *, code: str = "provider_error", status: int | None = None) -> None:
        super().__init__(detail, code=code)
        self.status = status


class Contended(OberikError):
    """A conditional write lost to a concurrent one; the caller re-reads and decides (never reaches a client)."""

    code = "contended"
