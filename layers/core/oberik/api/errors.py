"""The one place domain errors become HTTP answers. Every error body is {"detail": sentence, "code": ...}."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from oberik.domain.errors import Conflict, Forbidden, Invalid, ModelError, NotFound, OberikError, Unauthorized
from oberik.observability import logger

STATUS: dict[type[OberikError], int] = {
    Invalid: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    ModelError: 502,
}


def status_of(exc: OberikError) -> int:
    if isinstance(exc, ModelError) and exc.code == "timeout":
        return 504
    for kind, status in STATUS.items():
        if isinstance(exc, kind):
            return status
    return 500


def error_body(detail: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"detail": detail, "code": code, **extra}


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def _sentence(err: dict[str, Any]) -> str:
    field = _field(tuple(err.get("loc", ())))
    kind = err.get("type", "")
    msg = str(err.get("msg", "is not valid"))
    if kind == "extra_forbidden":
        return f"{field} is not a field this endpoint accepts; remove it"
    if kind == "missing":
        return f"{field} is required"
    if kind == "json_invalid":
        return "the request body is not valid JSON"
    if kind in ("model_attributes_type", "dict_type") and field == "body":
        return "the request body must be a JSON object"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        return msg if field == "body" or msg.startswith(field.split(".")[0]) else f"{field}: {msg}"
    return f"{field}: {msg[0].lower() + msg[1:] if msg else msg}"


def install(app: FastAPI) -> None:
    @app.exception_handler(OberikError)
    async def _domain(_: Request, exc: OberikError) -> JSONResponse:
        extra: dict[str, Any] = {}
        if isinstance(exc, Invalid) and exc.field:
            extra["field"] = exc.field
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse(error_body(exc.detail, exc.code, **extra), status_code=status_of(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"field": _field(tuple(e.get("loc", ()))), "message": _sentence(e)} for e in exc.errors()]
        detail = "; ".join(dict.fromkeys(e["message"] for e in errors)) or "the request is not valid"
        return JSONResponse(error_body(detail + ".", "invalid_request", errors=errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            detail = f"There is no route {request.method} {request.url.path}. See /openapi.json for the API."
            code = "no_route"
        elif exc.status_code == 405:
            detail = (
                f"{request.method} is not allowed on {request.url.path}. See /openapi.json for the methods it takes."
            )
            code = "method_not_allowed"
        else:
            detail, code = str(exc.detail), "http_error"
        return JSONResponse(
            error_body(detail, code), status_code=exc.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error", path=request.url.path)
        return JSONResponse(
            error_body("Something went wrong inside the platform; this is a bug on our side.", "internal"),
            status_code=500,
        )
