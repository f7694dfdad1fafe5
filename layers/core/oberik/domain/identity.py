"""Project keys and end-user tokens.

A project key (`X-API-Key`) is shown once and stored only as a hash. An end-user token is a JWT signed
with the project's own signing secret; it carries who the user is and what they may do.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import jwt
from pydantic import BaseModel, Field

from oberik.domain.errors import Unauthorized
from oberik.domain.llm import Effort

ISSUER = "oberik"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_project_key(project_id: str) -> str:
    return f"obk_{project_id}_{secrets.token_urlsafe(32)}"


def project_of_key(key: str) -> str | None:
    """The project id a key belongs to, read from its shape; None when it cannot be one of ours."""
    parts = key.split("_")
    if len(parts) < 4 or parts[0] != "obk" or parts[1] != "p":
        return None
    return f"{parts[1]}_{parts[2]}"


def same_secret(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def new_signing_secret() -> str:
    return secrets.token_urlsafe(48)


class TokenClaims(BaseModel):
    """What an end-user token asserts. Everything here is set by whoever holds the project key."""

    sub: str = Field(description="the end-user subject")
    pid: str = Field(description="the project")
    tenant_id: str
    scope: str | None = None
    roles: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    capabilities: list[str] = Field(default_factory=list)
    models: list[str] | None = None  # None: any model the project can reach
    max_effort: Effort | None = None
    user_ref: str | None = None
    iat: int
    exp: int
    jti: str


def mint_token(claims: TokenClaims, secret: str) -> str:
    payload: dict[str, Any] = claims.model_dump()
    payload["iss"] = ISSUER
    return jwt.encode(payload, secret, algorithm="HS256")


def unverified_project(token: str) -> str:
    """The project a token claims to belong to, before its signature is checked (to find the key)."""
    try:
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as e:
        raise Unauthorized(
            "The bearer token is malformed: it is not a token this platform issued. "
            "Mint one with POST /api/projects/{id}/tokens.",
            code="token_malformed",
        ) from e
    pid = payload.get("pid") if isinstance(payload, dict) else None
    if not isinstance(pid, str):
        raise Unauthorized(
            "The bearer token names no project, so it was not issued here. Mint one with POST /api/projects/{id}/tokens.",
            code="token_malformed",
        )
    return pid


def read_token(token: str, secret: str, now: int) -> TokenClaims:
    try:
        payload = jwt.decode(
            token, secret, algorithms=["HS256"], issuer=ISSUER, options={"require": ["exp", "iat", "sub"]}, leeway=0
        )
    except jwt.ExpiredSignatureError as e:
        raise Unauthorized("The bearer token has expired. Mint a fresh one for this user.", code="token_expired") from e
    except jwt.InvalidSignatureError as e:
        raise Unauthorized(
            "The bearer token's signature does not match this project's signing key: it was altered or forged.",
            code="token_invalid",
        ) from e
    except jwt.PyJWTError as e:
        raise Unauthorized(f"The bearer token is not valid: {e}.", code="token_invalid") from e
    try:
        claims = TokenClaims.model_validate(payload)
    except ValueError as e:
        raise Unauthorized("The bearer token is missing claims this platform needs.", code="token_invalid") from e
    if claims.exp <= now:
        raise Unauthorized("The bearer token has expired. Mint a fresh one for this user.", code="token_expired")
    return claims
