"""DynamoDB storage of webhook tools (one item per tool beside the project, plus one holding its name so a name
is unique in its project) and of the calls made to them (a per-project partition, newest last, kept 14 days)."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from oberik.adapters import keys
from oberik.adapters.brief_cache import BriefCache
from oberik.domain.webhook_tools import WebhookTool, WebhookToolCall

CALL_KEEP_SECONDS = 14 * 24 * 3600
# Every turn's plan offers the project's webhook tools, so their list is kept as briefly as projects are
# (engine.projects); a change made through this process forgets it at once, one made elsewhere shows within it.
RECENT_SECONDS = 5.0
_recent: BriefCache[list[WebhookTool]] = BriefCache(RECENT_SECONDS, name="webhook-tools")


def _forgets_tools(method: Any) -> Any:
    def changing(self: Any, tool: WebhookTool, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, tool, *args, **kwargs)
        finally:
            _recent.forget(tool.project_id)

    changing.__name__, changing.__doc__ = method.__name__, method.__doc__
    return changing


class WebhookToolsStore:
    """Mixed into `DynamoStore`: uses its table, client and helpers."""

    table: str
    db: Any
    _get: Any
    _query: Any
    _put_new: Any
    _applied: Any

    # --- tools -------------------------------------------------------------------------------------------

    def _tool_item(self, tool: WebhookTool) -> dict[str, Any]:
        from oberik.adapters.dynamodb import serialize

        return serialize({**keys.webhook_tool_key(tool.project_id, tool.id), **tool.model_dump(mode="json")})

    def _name_item(self, tool: WebhookTool) -> dict[str, Any]:
        from oberik.adapters.dynamodb import serialize

        return serialize({**keys.webhook_tool_name_key(tool.project_id, tool.name), "tool_id": tool.id})

    @_forgets_tools
    def create_webhook_tool(self, tool: WebhookTool) -> bool:
        """Store a new tool; False (nothing written) when the project already has a tool of that name."""
        return bool(
            self._applied(
                lambda: self.db.transact_write_items(
                    TransactItems=[self._put_new(self._tool_item(tool)), self._put_new(self._name_item(tool))]
                )
            )
        )

    def get_webhook_tool(self, project_id: str, tool_id: str) -> WebhookTool | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.webhook_tool_key(project_id, tool_id))
        return WebhookTool.model_validate(_strip_keys(item)) if item else None

    def list_webhook_tools(self, project_id: str) -> list[WebhookTool]:
        from oberik.adapters.dynamodb import _strip_keys

        items = self._query(f"PROJECT#{project_id}", keys.WEBHOOK_TOOL_PREFIX)
        return [WebhookTool.model_validate(_strip_keys(item)) for item in items]

    def recent_webhook_tools(self, project_id: str) -> list[WebhookTool]:
        """`list_webhook_tools`, read at most every few seconds per project (for planning turns)."""
        return list(_recent.get(project_id, lambda: self.list_webhook_tools(project_id)) or [])

    @_forgets_tools
    def save_webhook_tool(self, tool: WebhookTool, *, previous: WebhookTool) -> bool:
        """Replace `previous` with `tool` (the same id). False, with nothing written, when the tool changed or was
        deleted meanwhile, or when a rename's new name is taken."""
        from oberik.adapters.dynamodb import _values, serialize

        put = {
            "Put": {
                "TableName": self.table,
                "Item": self._tool_item(tool),
                "ConditionExpression": "attribute_exists(pk) AND updated_at = :was",
                "ExpressionAttributeValues": _values({":was": previous.updated_at}),
            }
        }
        items: list[dict[str, Any]] = [put]
        if tool.name != previous.name:
            items.append(self._put_new(self._name_item(tool)))
            items.append(
                {
                    "Delete": {
                        "TableName": self.table,
                        "Key": serialize(keys.webhook_tool_name_key(previous.project_id, previous.name)),
                    }
                }
            )
        return bool(self._applied(lambda: self.db.transact_write_items(TransactItems=items)))

    @_forgets_tools
    def delete_webhook_tool(self, tool: WebhookTool) -> bool:
        """Remove the tool and its name; False when it was already gone."""
        from oberik.adapters.dynamodb import serialize

        try:
            self.db.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": serialize(keys.webhook_tool_key(tool.project_id, tool.id)),
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": serialize(keys.webhook_tool_name_key(tool.project_id, tool.name)),
                        }
                    },
                ]
            )
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("TransactionCanceledException",):
                return False
            raise

    # --- calls -------------------------------------------------------------------------------------------

    def record_webhook_tool_call(self, call: WebhookToolCall) -> None:
        from oberik.adapters.dynamodb import serialize

        self.db.put_item(
            TableName=self.table,
            Item=serialize(
                {
                    **keys.webhook_tool_call_key(call.project_id, call.called_at, call.id),
                    **call.model_dump(mode="json"),
                    "expires_at": int(call.called_at) + CALL_KEEP_SECONDS,
                }
            ),
        )

    def list_webhook_tool_calls(self, project_id: str, *, limit: int) -> list[WebhookToolCall]:
        """The project's most recent webhook-tool calls, newest first."""
        from oberik.adapters.dynamodb import _strip_keys

        now = time.time()
        found: list[WebhookToolCall] = []
        for item in self._query(keys.webhook_tool_calls_pk(project_id), forward=False, limit=limit):
            if int(item.get("expires_at", now + 1)) > now:
                found.append(WebhookToolCall.model_validate(_strip_keys(item)))
            if len(found) >= limit:
                break
        return found
