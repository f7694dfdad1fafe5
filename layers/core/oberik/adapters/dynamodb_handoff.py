"""DynamoDB methods for browser hand-offs: one record per conversation, beside its messages (so deleting the
conversation deletes it). Counting finished-checks is a conditional update, so two checks racing cannot both
claim the last one."""

from __future__ import annotations

from typing import Any

from oberik.adapters import keys


class HandoffStoreMixin:
    """Mixed into DynamoStore; uses its helpers (`_get`, `_update`, `_applied`, `db`, `table`)."""

    def put_handoff(self, handoff: dict[str, Any]) -> None:
        from oberik.adapters.dynamodb import serialize

        item = {**keys.handoff_key(handoff["session_id"]), **handoff}
        self.db.put_item(TableName=self.table, Item=serialize(item))  # type: ignore[attr-defined]

    def get_handoff(self, session_id: str) -> dict[str, Any] | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.handoff_key(session_id))  # type: ignore[attr-defined]
        return _strip_keys(item) if item else None

    def active_handoff(self, session_id: str) -> dict[str, Any] | None:
        h = self.get_handoff(session_id)
        return h if h and h.get("active") else None

    def end_handoff(self, session_id: str, handoff_id: str | None = None) -> dict[str, Any] | None:
        """Close the active hand-off (only `handoff_id`, when given); returns it as it was, or None."""
        h = self.active_handoff(session_id)
        if h is None or (handoff_id is not None and h["id"] != handoff_id):
            return None
        applied = self._applied(  # type: ignore[attr-defined]
            lambda: self._update(  # type: ignore[attr-defined]
                keys.handoff_key(session_id),
                {"active": False},
                condition="#id = :id AND #active = :yes",
                cond_values={":id": h["id"], ":yes": True},
            )
        )
        return h if applied else None

    def update_handoff(self, session_id: str, handoff_id: str, **fields: Any) -> bool:
        """Set fields on the hand-off if it is still `handoff_id` (a newer one is left alone)."""
        return bool(
            self._applied(  # type: ignore[attr-defined]
                lambda: self._update(  # type: ignore[attr-defined]
                    keys.handoff_key(session_id), fields, condition="#id = :id", cond_values={":id": handoff_id}
                )
            )
        )

    def claim_handoff_check(
        self, session_id: str, handoff_id: str, *, now: float, spacing: float, max_checks: int
    ) -> int | None:
        """Count one model check against the hand-off; the number it is, or None when the hand-off changed,
        ran out of checks or was checked within `spacing` seconds (the caller re-reads to say which)."""
        from oberik.adapters.dynamodb import _values, serialize

        try:
            r = self.db.update_item(  # type: ignore[attr-defined]
                TableName=self.table,  # type: ignore[attr-defined]
                Key=serialize(keys.handoff_key(session_id)),
                UpdateExpression="SET #checks = #checks + :one, #last = :now",
                ConditionExpression="#id = :id AND #active = :yes AND #checks < :max AND #last <= :before",
                ExpressionAttributeNames={
                    "#checks": "checks",
                    "#last": "last_check_at",
                    "#id": "id",
                    "#active": "active",
                },
                ExpressionAttributeValues=_values(
                    {
                        ":one": 1,
                        ":now": now,
                        ":id": handoff_id,
                        ":yes": True,
                        ":max": max_checks,
                        ":before": now - spacing,
                    }
                ),
                ReturnValues="UPDATED_NEW",
            )
        except Exception as e:
            from oberik.adapters.dynamodb import _failed_condition

            if getattr(e, "response", None) is not None and _failed_condition(e):  # type: ignore[arg-type]
                return None
            raise
        return int(r["Attributes"]["checks"]["N"])
