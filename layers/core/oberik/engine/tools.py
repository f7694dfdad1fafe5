"""Running the server-side tools a model asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    ok: bool = True
    wait_seconds: int = 0


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def current_time(args: dict[str, Any], now: float) -> ToolOutcome:
    tz_name = args.get("timezone") or "UTC"
    if not isinstance(tz_name, str):
        return _error("timezone must be a string such as 'Europe/Paris'")
    try:
        tz = ZoneInfo(tz_name) if tz_name != "UTC" else UTC
    except (ZoneInfoNotFoundError, ValueError):
        return _error(f"unknown timezone {tz_name!r}; use an IANA name such as 'Europe/Paris'")
    at = datetime.fromtimestamp(now, tz)
    return ToolOutcome(
        json.dumps(
            {
                "now": at.isoformat(timespec="seconds"),
                "timezone": tz_name,
                "weekday": at.strftime("%A"),
                "unix": int(now),
            }
        )
    )


def wait(args: dict[str, Any], max_seconds: int) -> ToolOutcome:
    seconds = args.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 1:
        return _error("seconds must be a whole number of at least 1")
    granted = min(int(seconds), max_seconds)
    note = f" (capped at {max_seconds})" if granted < seconds else ""
    return ToolOutcome(
        json.dumps({"waited_seconds": granted, "note": f"waited {granted} seconds{note}"}), wait_seconds=granted
    )


def run_server_tool(name: str, raw_arguments: str, *, now: float, max_wait_seconds: int) -> ToolOutcome:
    args = parse_arguments(raw_arguments)
    if args is None:
        return _error(f"the arguments for {name} are not a JSON object: {raw_arguments[:200]!r}")
    if name == "current_time":
        return current_time(args, now)
    if name == "wait":
        return wait(args, max_wait_seconds)
    return _error(f"no tool named {name!r} is available on this turn")
