"""Identifiers: a one-letter kind, then a time-ordered random part (sortable, unguessable)."""

from __future__ import annotations

import re
import secrets
import time

KINDS = {"p": "project", "s": "session", "t": "turn", "r": "run", "m": "message"}
_ID = re.compile(r"^([pstrm])_[0-9a-f]{28}$")


def new_id(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown id kind {kind!r}")
    return f"{kind}_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def is_id(value: str, kind: str) -> bool:
    m = _ID.match(value or "")
    return bool(m) and m.group(1) == kind  # type: ignore[union-attr]
