"""DynamoDB storage of web push subscriptions: one item per (project, endpoint), listed per subject through GSI1,
and a short-lived marker per (delivery, subscription) so a retried `turn.stopped` delivery is not pushed twice."""

from __future__ import annotations

import time
from typing import Any

from oberik.adapters import keys
from oberik.domain.push import MAX_SUBSCRIPTIONS_PER_SUBJECT, PushSubscription

# A "sent" marker outlives every retry of the delivery it belongs to (the delivery queue gives up well within this).
SENT_MARK_KEEP_SECONDS = 2 * 24 * 3600


class PushStore:
    """Mixed into `DynamoStore`: uses its table, client and helpers."""

    table: str
    db: Any
    _get: Any
    _applied: Any

    def save_push_subscription(self, sub: PushSubscription) -> bool:
        """Store a browser's subscription for its subject; a repeat for the same endpoint replaces the earlier one
        (keys and subject included), keeping its creation time. True when the endpoint was new in the project.
        Past MAX_SUBSCRIPTIONS_PER_SUBJECT, the subject's oldest subscriptions are forgotten."""
        from oberik.adapters.dynamodb import _values, serialize

        key = keys.push_subscription_key(sub.project_id, sub.endpoint_hash)
        doc = sub.model_dump(mode="json")
        sets = {k: v for k, v in doc.items() if k != "created_at"}
        sets["gsi1pk"] = keys.push_subscribers_index(sub.project_id, sub.owner)
        sets["gsi1sk"] = f"{sub.updated_at:017.6f}#{sub.endpoint_hash}"
        names = {f"#{k}": k for k in sets} | {"#created_at": "created_at"}
        response = self.db.update_item(
            TableName=self.table,
            Key=serialize(key),
            UpdateExpression="SET "
            + ", ".join(f"#{k} = :{k}" for k in sets)
            + ", #created_at = if_not_exists(#created_at, :created_at)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=_values({f":{k}": v for k, v in sets.items()} | {":created_at": sub.created_at}),
            ReturnValues="ALL_OLD",
        )
        created = not response.get("Attributes")
        self._forget_oldest(sub.project_id, sub.owner)
        return created

    def _forget_oldest(self, project_id: str, owner: str) -> None:
        subs = self.push_subscriptions(project_id, owner)
        for old in subs[: max(0, len(subs) - MAX_SUBSCRIPTIONS_PER_SUBJECT)]:
            self.delete_push_subscription(project_id, old.endpoint_hash, endpoint=old.endpoint)

    def push_subscriptions(self, project_id: str, owner: str) -> list[PushSubscription]:
        """One subject's subscriptions in one project, oldest first."""
        from oberik.adapters.dynamodb import _strip_keys, _values, deserialize

        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "GSI1",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": _values({":pk": keys.push_subscribers_index(project_id, owner)}),
        }
        found: list[PushSubscription] = []
        while True:
            r = self.db.query(**kwargs)
            found.extend(PushSubscription.model_validate(_strip_keys(deserialize(i))) for i in r.get("Items", []))
            if "LastEvaluatedKey" not in r:
                break
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]
        # The index is eventually consistent: a subscription moved to another subject may still be listed here.
        return [s for s in found if s.owner == owner and s.project_id == project_id]

    def get_push_subscription(self, project_id: str, endpoint_hash: str) -> PushSubscription | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.push_subscription_key(project_id, endpoint_hash))
        return PushSubscription.model_validate(_strip_keys(item)) if item else None

    def delete_push_subscription(self, project_id: str, endpoint_hash: str, *, endpoint: str | None = None) -> bool:
        """Forget a subscription. With `endpoint`, only while it still points there. True when one was deleted."""
        from oberik.adapters.dynamodb import _values, serialize

        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": serialize(keys.push_subscription_key(project_id, endpoint_hash)),
            "ConditionExpression": "attribute_exists(pk)",
        }
        if endpoint is not None:
            request["ConditionExpression"] += " AND #endpoint = :endpoint"
            request["ExpressionAttributeNames"] = {"#endpoint": "endpoint"}
            request["ExpressionAttributeValues"] = _values({":endpoint": endpoint})
        return bool(self._applied(lambda: self.db.delete_item(**request)))

    def push_not_before(self, project_id: str, endpoint_hash: str, when: float) -> None:
        """Remember that the push service asked for nothing to be sent to this endpoint before `when`."""
        from oberik.adapters.dynamodb import _values, serialize

        self._applied(
            lambda: self.db.update_item(
                TableName=self.table,
                Key=serialize(keys.push_subscription_key(project_id, endpoint_hash)),
                UpdateExpression="SET #nb = :nb",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#nb": "not_before"},
                ExpressionAttributeValues=_values({":nb": when}),
            )
        )

    def claim_push(self, delivery_id: str, endpoint_hash: str) -> bool:
        """Claim sending delivery `delivery_id` to one subscription: False when it was sent (or is being sent)."""
        from oberik.adapters.dynamodb import serialize

        now = time.time()
        item = {
            **keys.push_sent_key(delivery_id, endpoint_hash),
            "at": now,
            "expires_at": int(now) + SENT_MARK_KEEP_SECONDS,
        }
        return bool(
            self._applied(
                lambda: self.db.put_item(
                    TableName=self.table, Item=serialize(item), ConditionExpression="attribute_not_exists(pk)"
                )
            )
        )

    def release_push(self, delivery_id: str, endpoint_hash: str) -> None:
        """Give a claim back after a send that failed in a way worth retrying."""
        from oberik.adapters.dynamodb import serialize

        self.db.delete_item(TableName=self.table, Key=serialize(keys.push_sent_key(delivery_id, endpoint_hash)))
