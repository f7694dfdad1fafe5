"""DynamoDB methods for the browser mailbox: how the step talks to the Lambda that hosts a conversation's page.

A command is an item the caller writes and the host deletes when it writes the answer (one transaction, so an
answered command is never run twice). The `HOST` item is a lease with a heartbeat: a caller that finds it
missing or stale takes it for a host it is about to start (`starting`), so two callers never start two hosts,
and the host it starts takes it over. Commands and answers expire on their own after an hour (TTL).

While a hand-off is watched, the host also writes the page's screencast here: `CAST#<slot>` items, a ring of
the newest few frames (see `browser_cast_put`), which the stream route reads the way the chat stream reads a
run's frame log: a poll, or a wake-up when the writer is in the same process.
"""

from __future__ import annotations

import json
import time
from typing import Any

from oberik.adapters import keys

MAILBOX_TTL_SECONDS = 3600
STARTING = "starting"
# A hand-off's screencast frames are only worth anything for a few seconds; the ring is cleared by TTL.
CAST_TTL_SECONDS = 120
CAST_PART = "CAST#"


def cast_channel(session_id: str) -> str:
    """The in-process wake-up channel (engine.notify) of a conversation's screencast ring."""
    return f"browser-cast#{session_id}"


class BrowserMailboxStore:
    """Mixed into DynamoStore; uses its helpers (`_get`, `_query`, `_applied`, `db`, `table`)."""

    # --- commands and answers -----------------------------------------------------------------------------

    def browser_post(self, session_id: str, command_id: str, op: str, args: dict[str, Any]) -> bool:
        """Leave a command for the host; False when one with this id was already posted (a retry)."""
        from oberik.adapters.dynamodb import serialize

        now = time.time()
        item = {
            **keys.browser_key(session_id, f"CMD#{command_id}"),
            "id": command_id,
            "op": op,
            "args": json.dumps(args),
            "posted_at": now,
            "expires_at": int(now) + MAILBOX_TTL_SECONDS,
        }
        return self._applied(  # type: ignore[attr-defined]
            lambda: self.db.put_item(  # type: ignore[attr-defined]
                TableName=self.table,  # type: ignore[attr-defined]
                Item=serialize(item),
                ConditionExpression="attribute_not_exists(pk)",
            )
        )

    def browser_commands(self, session_id: str) -> list[dict[str, Any]]:
        """Commands waiting, oldest first (ids sort by time)."""
        pk = keys.browser_key(session_id, "")["pk"]
        return [
            {"id": i["id"], "op": i["op"], "args": json.loads(i["args"]), "posted_at": float(i["posted_at"])}
            for i in self._query(pk, keys.BROWSER_COMMAND_PREFIX)  # type: ignore[attr-defined]
        ]

    def browser_answer(self, session_id: str, command_id: str, result: dict[str, Any]) -> None:
        """Write the answer and remove the command, together."""
        from oberik.adapters.dynamodb import serialize

        now = int(time.time())
        self.db.transact_write_items(  # type: ignore[attr-defined]
            TransactItems=[
                {
                    "Put": {
                        "TableName": self.table,  # type: ignore[attr-defined]
                        "Item": serialize(
                            {
                                **keys.browser_key(session_id, f"RES#{command_id}"),
                                "result": json.dumps(result),
                                "expires_at": now + MAILBOX_TTL_SECONDS,
                            }
                        ),
                    }
                },
                {
                    "Delete": {
                        "TableName": self.table,  # type: ignore[attr-defined]
                        "Key": serialize(keys.browser_key(session_id, f"CMD#{command_id}")),
                    }
                },
            ]
        )

    def browser_result(self, session_id: str, command_id: str) -> dict[str, Any] | None:
        item = self._get(keys.browser_key(session_id, f"RES#{command_id}"))  # type: ignore[attr-defined]
        return json.loads(item["result"]) if item else None

    # --- the host lease -----------------------------------------------------------------------------------

    def browser_host(self, session_id: str) -> dict[str, Any] | None:
        item = self._get(keys.browser_key(session_id, "HOST"))  # type: ignore[attr-defined]
        return {"host_id": item["host_id"], "heartbeat_at": float(item["heartbeat_at"])} if item else None

    def browser_take_lease(
        self, session_id: str, host_id: str, now: float, stale_after: float, *, over: str | None = None
    ) -> bool:
        """Hold the lease as `host_id` when nobody does, the holder went quiet, or it is held as `over`."""
        from oberik.adapters.dynamodb import _values, serialize

        condition = "attribute_not_exists(pk) OR heartbeat_at < :stale"
        vals: dict[str, Any] = {":stale": now - stale_after}
        if over is not None:
            condition += " OR host_id = :over"
            vals[":over"] = over
        item = {
            **keys.browser_key(session_id, "HOST"),
            "host_id": host_id,
            "heartbeat_at": now,
            "expires_at": int(now) + MAILBOX_TTL_SECONDS,
        }
        return self._applied(  # type: ignore[attr-defined]
            lambda: self.db.put_item(  # type: ignore[attr-defined]
                TableName=self.table,  # type: ignore[attr-defined]
                Item=serialize(item),
                ConditionExpression=condition,
                ExpressionAttributeValues=_values(vals),
            )
        )

    def browser_heartbeat(self, session_id: str, host_id: str, now: float) -> bool:
        """Renew the lease; False when another host holds it now (this one must stop)."""
        return self._applied(  # type: ignore[attr-defined]
            lambda: self._update(  # type: ignore[attr-defined]
                keys.browser_key(session_id, "HOST"),
                {"heartbeat_at": now, "expires_at": int(now) + MAILBOX_TTL_SECONDS},
                condition="#host_id = :me",
                cond_values={":me": host_id},
            )
        )

    def browser_release(self, session_id: str, host_id: str) -> None:
        from oberik.adapters.dynamodb import _values, serialize

        self._applied(  # type: ignore[attr-defined]
            lambda: self.db.delete_item(  # type: ignore[attr-defined]
                TableName=self.table,  # type: ignore[attr-defined]
                Key=serialize(keys.browser_key(session_id, "HOST")),
                ConditionExpression="host_id = :me",
                ExpressionAttributeValues=_values({":me": host_id}),
            )
        )

    # --- a page saved between hosts -----------------------------------------------------------------------

    def browser_save_state(self, session_id: str, state: dict[str, Any]) -> None:
        from oberik.adapters.dynamodb import serialize

        item = {**keys.browser_key(session_id, "STATE"), "state": json.dumps(state), "saved_at": time.time()}
        self.db.put_item(TableName=self.table, Item=serialize(item))  # type: ignore[attr-defined]

    def browser_load_state(self, session_id: str) -> dict[str, Any] | None:
        item = self._get(keys.browser_key(session_id, "STATE"))  # type: ignore[attr-defined]
        return json.loads(item["state"]) if item else None

    def browser_clear_state(self, session_id: str) -> None:
        from oberik.adapters.dynamodb import serialize

        self.db.delete_item(  # type: ignore[attr-defined]
            TableName=self.table,  # type: ignore[attr-defined]
            Key=serialize(keys.browser_key(session_id, "STATE")),
        )

    # --- a hand-off's screencast: a small ring of the newest frames ---------------------------------------

    def browser_cast_put(
        self, session_id: str, seq: int, frame: dict[str, Any], *, keep: int, ttl_seconds: int = CAST_TTL_SECONDS
    ) -> bool:
        """Write frame `seq` into ring slot `seq % keep`, unless the slot already holds a later frame (a slow or
        retried writer never puts an old picture over a new one). The ring keeps the newest `keep` frames with
        one write each and no deletes; the TTL clears what a stopped screencast leaves behind."""
        from oberik.adapters.dynamodb import _values, serialize
        from oberik.engine import notify

        now = time.time()
        item = {
            **keys.browser_key(session_id, f"{CAST_PART}{seq % max(1, keep)}"),
            "seq": seq,
            "frame": json.dumps(frame, separators=(",", ":")),
            "at": now,
            "expires_at": int(now) + ttl_seconds,
        }
        written = self._applied(  # type: ignore[attr-defined]
            lambda: self.db.put_item(  # type: ignore[attr-defined]
                TableName=self.table,  # type: ignore[attr-defined]
                Item=serialize(item),
                ConditionExpression="attribute_not_exists(pk) OR seq < :seq",
                ExpressionAttributeValues=_values({":seq": seq}),
            )
        )
        if written:  # a reader in this process need not wait for its next poll
            notify.notify(cast_channel(session_id))
        return written

    def browser_cast_latest(self, session_id: str) -> dict[str, Any] | None:
        """The newest frame in the ring: `{seq, at, ...frame}`, or None when nothing was cast lately."""
        pk = keys.browser_key(session_id, "")["pk"]
        best: dict[str, Any] | None = None
        for item in self._query(pk, f"BROWSER#{CAST_PART}"):  # type: ignore[attr-defined]
            if best is None or int(item["seq"]) > int(best["seq"]):
                best = item
        if best is None or int(best.get("expires_at", 0)) < time.time():
            return None
        return {**json.loads(best["frame"]), "seq": int(best["seq"]), "at": float(best["at"])}
