"""DynamoDB storage of scheduled tasks: one item per task (`TASK#<id>`), listed per subject through GSI1."""

from __future__ import annotations

from typing import Any

from oberik.adapters import keys
from oberik.domain.tasks import Task


class TaskStore:
    """Mixed into `DynamoStore`: uses its table, client and helpers."""

    table: str
    db: Any
    _get: Any
    _applied: Any

    def put_task(self, task: Task) -> bool:
        """Store a new task; False (and nothing written) when a task with its id already exists."""
        from oberik.adapters.dynamodb import serialize

        item = {
            **keys.task_key(task.id),
            **task.model_dump(mode="json"),
            "gsi1pk": keys.tasks_index(task.project_id, task.owner),
            "gsi1sk": keys.tasks_sort(task.created_at, task.id),
        }
        return bool(
            self._applied(
                lambda: self.db.put_item(
                    TableName=self.table, Item=serialize(item), ConditionExpression="attribute_not_exists(pk)"
                )
            )
        )

    def get_task(self, task_id: str) -> Task | None:
        from oberik.adapters.dynamodb import _strip_keys

        item = self._get(keys.task_key(task_id))
        return Task.model_validate(_strip_keys(item)) if item else None

    def list_tasks(self, project_id: str, owner: str) -> list[Task]:
        """One subject's tasks in one project, oldest first."""
        from oberik.adapters.dynamodb import _strip_keys, _values, deserialize

        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "GSI1",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": _values({":pk": keys.tasks_index(project_id, owner)}),
        }
        found: list[Task] = []
        while True:
            r = self.db.query(**kwargs)
            found.extend(Task.model_validate(_strip_keys(deserialize(i))) for i in r.get("Items", []))
            if "LastEvaluatedKey" not in r:
                return found
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]

    def delete_task(self, task_id: str) -> bool:
        """Remove a task; False when it was already gone."""
        from oberik.adapters.dynamodb import serialize

        return bool(
            self._applied(
                lambda: self.db.delete_item(
                    TableName=self.table,
                    Key=serialize(keys.task_key(task_id)),
                    ConditionExpression="attribute_exists(pk)",
                )
            )
        )

    def note_task_fired(self, task_id: str, at: float) -> bool:
        """Count one firing of a recurring task; False when the task is gone (cancelled meanwhile)."""
        from oberik.adapters.dynamodb import _values, serialize

        return bool(
            self._applied(
                lambda: self.db.update_item(
                    TableName=self.table,
                    Key=serialize(keys.task_key(task_id)),
                    UpdateExpression="SET #last = :at ADD #fired :one",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeNames={"#last": "last_fired_at", "#fired": "fired"},
                    ExpressionAttributeValues=_values({":at": at, ":one": 1}),
                )
            )
        )
