"""The webhook-tools family: a project's webhook tools offered to its turns, and each call made to them.

A call POSTs the signed body to the tool's URL through the egress guard (resolve, check, connect to the checked
address, at call time as at set time), reads at most what the model may be shown of the answer, records the
call for the deliveries lists, and hands the model the answer with its citation marker. Every failure (a
non-2xx answer, a timeout, a refused or unreachable target, a tool deleted mid-turn) is a result the model
reads, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from oberik.adapters import http_delivery
from oberik.domain import webhook_tools as wt
from oberik.domain.models import Project
from oberik.domain.tools import ToolSpec
from oberik.engine.toolbox import ToolContext
from oberik.engine.tools import ToolOutcome
from oberik.observability import logger
from oberik.settings import get_settings

# One call's budget for connecting and for each read of the answer.
CALL_TIMEOUT_SECONDS = 15.0
# Bytes of an answer read at most: enough for RESULT_MAX_CHARS characters of any UTF-8 text.
READ_LIMIT_BYTES = wt.RESULT_MAX_CHARS * 4


def spec_of(tool: wt.WebhookTool) -> ToolSpec:
    return ToolSpec(
        name=tool.name,
        family=wt.FAMILY,
        capability=wt.CAPABILITY,
        description=tool.description or f"Call {tool.name}, a tool this application hosts.",
        parameters=tool.parameters,
        source=wt.SOURCE,
        requires_approval=tool.requires_approval,
        family_owner=wt.FAMILY,
    )


class WebhookToolsFamily:
    name = wt.FAMILY

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        if store is None or project is None:
            return []
        return [spec_of(t) for t in sorted(store.recent_webhook_tools(project.id), key=lambda t: t.created_at)]

    def run(self, ctx: ToolContext) -> ToolOutcome:
        return call(ctx)


FAMILY = WebhookToolsFamily()


def _find(store: Any, project_id: str, name: str) -> wt.WebhookTool | None:
    return next((t for t in store.list_webhook_tools(project_id) if t.name == name), None)


def call(ctx: ToolContext) -> ToolOutcome:
    """Make one call to the webhook tool `ctx.call.name` for the turn's caller, and say what came of it."""
    turn, name = ctx.turn, ctx.call.name
    tool = _find(ctx.store, turn.project_id, name)
    if tool is None:
        return ToolOutcome(f"'{name}' was not called: the project no longer has a webhook tool of that name.", ok=False)
    approved = {a.get("id") for a in turn.pending.get("approved") or []}
    if tool.requires_approval and ctx.call.id not in approved:
        # The gate was switched on after this turn was planned: it applies at once, never to the next turn only.
        return ToolOutcome(
            f"'{name}' was not called: it now needs a person's approval, which this turn did not ask for. "
            "Tell the user; their next message can ask for it again.",
            ok=False,
        )
    raw = wt.encode(wt.call_body(name, ctx.args, turn.plan.caller, turn.session_id))
    now = time.time()
    result = http_delivery.post(
        tool.url,
        raw,
        {
            "Content-Type": "application/json",
            "User-Agent": "oberik-webhook-tools/1",
            wt.SIGNATURE_HEADER: wt.signature_header(tool.live_secrets(now), raw),
        },
        timeout=CALL_TIMEOUT_SECONDS,
        allow_private=get_settings().allow_private_webhooks,
        field="url",
        read_limit=READ_LIMIT_BYTES,
    )
    text = result.body.decode("utf-8", errors="replace")
    error = result.error
    if result.ok:
        marker = (
            ctx.cite({"kind": "tool", "title": name, "tool": name, "quote": wt.quote_of(text)})
            if text.strip()
            else None
        )
        outcome = ToolOutcome(wt.answer_text(name, text, marker))
    elif result.status_code is not None:
        outcome = ToolOutcome(wt.status_text(name, result.status_code, text), ok=False)
        error = outcome.content[:500]
    elif result.refused:
        outcome = ToolOutcome(f"'{name}' was not called: {result.error}", ok=False)
    else:
        outcome = ToolOutcome(f"'{name}' could not be reached: {result.error}", ok=False)
    _record(ctx, tool, result, now, error)
    return outcome


def _record(
    ctx: ToolContext, tool: wt.WebhookTool, result: http_delivery.PostResult, at: float, error: str | None
) -> None:
    """Log the call for the deliveries lists; a log that cannot be written costs the entry, not the result."""
    try:
        ctx.store.record_webhook_tool_call(
            wt.WebhookToolCall(
                id=wt.new_call_id(),
                project_id=tool.project_id,
                tool=tool.name,
                tool_id=tool.id,
                url=tool.url,
                status=result.status_code,
                ok=result.ok,
                duration_ms=result.duration_ms,
                error=error,
                called_at=at,
                session_id=ctx.turn.session_id,
                turn_id=ctx.turn.id,
                tool_call_id=ctx.call.id,
                subject=ctx.turn.plan.caller.get("subject"),
            )
        )
    except Exception:
        logger.exception("could not log a webhook-tool call", tool=tool.name, turn_id=ctx.turn.id)
    logger.info(
        "webhook tool called",
        tool=tool.name,
        status=result.status_code,
        duration_ms=result.duration_ms,
        turn_id=ctx.turn.id,
    )
