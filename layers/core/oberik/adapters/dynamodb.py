"""The DynamoDB adapter: sessions, messages, turns, runs, projects and frames in one table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from oberik.adapters import keys
from oberik.adapters.aws import client
from oberik.adapters.dynamodb_browser import BrowserMailboxStore
from oberik.adapters.dynamodb_documents import DocumentsStore
from oberik.adapters.dynamodb_handoff import HandoffStoreMixin
from oberik.adapters.dynamodb_push import PushStore
from oberik.adapters.dynamodb_tasks import TaskStore
from oberik.adapters.dynamodb_webhook_tools import WebhookToolsStore
from oberik.adapters.frame_cache import FRAMES
from oberik.domain.deliveries import DeliveryAttempt
from oberik.domain.errors import Conflict, Contended, NotFound
from oberik.domain.models import FRAME_RETENTION_SECONDS, Message, Project, ProjectSettings, Run, Session, Turn
from oberik.settings import Settings, get_settings

_ser = TypeSerializer()
_de = TypeDeserializer()


def _to_ddb(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _to_ddb(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_ddb(v) for v in value]
    return value


def _from_ddb(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_ddb(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_ddb(v) for v in value]
    return value


def serialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(_to_ddb(v)) for k, v in item.items()}


def deserialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _from_ddb(_de.deserialize(v)) for k, v in item.items()}


def _values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(_to_ddb(v)) for k, v in values.items()}


def _strip_keys(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("pk", "sk", "gsi1pk", "gsi1sk", "expires_at")}


# A turn's plan (its tools' schemas, prompts, settings: hundreds of values) is written whole and read whole,
# never in part, so it is kept as one JSON string rather than a nested map: every read and write of the turn
# (each step, each progress save) then marshals one attribute instead of all of them.
def _plan_text(plan: Any) -> Any:
    return plan if isinstance(plan, str) else json.dumps(plan, separators=(",", ":"))


def _turn_item(turn: Turn) -> dict[str, Any]:
    doc = turn.model_dump(mode="json")
    doc["plan"] = _plan_text(doc["plan"])
    return serialize({**keys.turn_key(turn.id), **doc})


def _turn_sets(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "plan": _plan_text(fields["plan"])} if "plan" in fields else fields


def _turn_from(item: dict[str, Any]) -> Turn:
    doc = _strip_keys(item)
    if isinstance(doc.get("plan"), str):
        doc["plan"] = json.loads(doc["plan"])  # a turn written before plans were kept as text is a map already
    return Turn.model_validate(doc)


def _failed_condition(e: ClientError) -> bool:
    return e.response.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )


class DynamoStore(HandoffStoreMixin, WebhookToolsStore, PushStore, TaskStore, BrowserMailboxStore, DocumentsStore):
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self.table = self.settings.table_name

    @property
    def db(self) -> Any:
        return client("dynamodb", self.settings)

    # --- low-level helpers ------------------------------------------------------------------------

    def _get(self, key: dict[str, str], consistent: bool = True) -> dict[str, Any] | None:
        r = self.db.get_item(TableName=self.table, Key=serialize(key), ConsistentRead=consistent)
        return deserialize(r["Item"]) if "Item" in r else None

    def _query(
        self,
        pk: str,
        prefix: str | None = None,
        *,
        after: str | None = None,
        forward: bool = True,
        limit: int | None = None,
        consistent: bool = True,
    ) -> Iterator[dict[str, Any]]:
        expr = "pk = :pk"
        vals: dict[str, Any] = {":pk": pk}
        if after is not None:
            expr += " AND sk > :after"
            vals[":after"] = after
        elif prefix is not None:
            expr += " AND begins_with(sk, :prefix)"
            vals[":prefix"] = prefix
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": expr,
            "ExpressionAttributeValues": _values(vals),
            "ScanIndexForward": forward,
            "ConsistentRead": consistent,
        }
        if limit:
            kwargs["Limit"] = limit
        while True:
            r = self.db.query(**kwargs)
            for item in r.get("Items", []):
                yield deserialize(item)
            if "LastEvaluatedKey" not in r or (limit and len(r.get("Items", [])) >= limit):
                return
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]

    @staticmethod
    def _applied(write: Callable[[], object]) -> bool:
        """Run a conditional write: True when it was applied, False when its condition did not hold."""
        try:
            write()
            return True
        except ClientError as e:
            if _failed_condition(e):
                return False
            raise

    def _put_new(self, item: dict[str, Any]) -> dict[str, Any]:
        """A transaction's Put of an item that must not exist yet (a retry never overwrites)."""
        return {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}

    def _update_request(
        self,
        key: dict[str, str],
        sets: dict[str, Any],
        *,
        condition: str | None = None,
        cond_values: dict[str, Any] | None = None,
        removes: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The arguments of an UpdateItem (also usable as a transaction's Update)."""
        names = {f"#{k}": k for k in sets} | {f"#{k}": k for k in removes}
        expr_parts = []
        if sets:
            expr_parts.append("SET " + ", ".join(f"#{k} = :{k}" for k in sets))
        if removes:
            expr_parts.append("REMOVE " + ", ".join(f"#{k}" for k in removes))
        vals = {f":{k}": v for k, v in sets.items()} | (cond_values or {})
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": serialize(key),
            "UpdateExpression": " ".join(expr_parts),
            "ExpressionAttributeNames": names,
        }
        if vals:
            request["ExpressionAttributeValues"] = _values(vals)
        if condition:
            request["ConditionExpression"] = condition
            for token in condition.replace("(", " ").replace(")", " ").replace(",", " ").split():
                if token.startswith("#"):
                    names.setdefault(token, token[1:])
        return request

    def _update(
        self,
        key: dict[str, str],
        sets: dict[str, Any],
        *,
        condition: str | None = None,
        cond_values: dict[str, Any] | None = None,
        removes: tuple[str, ...] = (),
    ) -> None:
        self.db.update_item(
            **self._update_request(key, sets, condition=condition, cond_values=cond_values, removes=removes)
        )

    # --- projects ---------------------------------------------------------------------------------

    def create_project(self, project: Project, key_hash: str) -> None:
        doc = project.model_dump(mode="json")
        doc["signing_secret"] = project.signing_secret.get_secret_value()
        doc["settings"] = self._settings_doc(project.settings)
        self.db.transact_write_items(
            TransactItems=[
                self._put_new(serialize({**keys.project_key(project.id), **doc})),
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(
                            {
                                **keys.project_api_key(project.id, key_hash),
                                "project_id": project.id,
                                "created_at": project.created_at,
                            }
                        ),
                    }
                },
            ]
        )

    @staticmethod
    def _settings_doc(settings: ProjectSettings) -> dict[str, Any]:
        doc = settings.model_dump(mode="json")
        for name, provider in settings.providers.items():
            doc["providers"][name]["api_key"] = provider.api_key.get_secret_value() if provider.api_key else None
        if settings.web_search is not None and settings.web_search.api_key is not None:
            doc["web_search"]["api_key"] = settings.web_search.api_key.get_secret_value()
        return doc

    def get_project(self, project_id: str) -> Project | None:
        item = self._get(keys.project_key(project_id))
        return Project.model_validate(_strip_keys(item)) if item else None

    def project_key_matches(self, project_id: str, key_hash: str) -> bool:
        return self._get(keys.project_api_key(project_id, key_hash), consistent=False) is not None

    def save_project_settings(self, project_id: str, settings: ProjectSettings) -> None:
        self._update(
            keys.project_key(project_id), {"settings": self._settings_doc(settings)}, condition="attribute_exists(pk)"
        )

    # --- sessions ---------------------------------------------------------------------------------

    def _session_item(self, s: Session) -> dict[str, Any]:
        doc = s.model_dump(mode="json", exclude_none=True)
        return {
            **keys.session_key(s.id),
            **doc,
            "gsi1pk": keys.owner_index(s.project_id, s.owner),
            "gsi1sk": keys.owner_sort(s.updated_at, s.id),
        }

    def get_session(self, session_id: str) -> Session | None:
        item = self._get(keys.session_key(session_id))
        return Session.model_validate(_strip_keys(item)) if item else None

    def list_sessions(
        self, project_id: str, owner: str, *, user_ref: str | None, limit: int, offset: int
    ) -> tuple[list[Session], bool]:
        """A page of one subject's sessions, newest activity first, and whether another page follows."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "GSI1",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": _values({":pk": keys.owner_index(project_id, owner)}),
            "ScanIndexForward": False,
        }
        if user_ref is not None:
            kwargs["FilterExpression"] = "user_ref = :ref"
            kwargs["ExpressionAttributeValues"] = _values(
                {":pk": keys.owner_index(project_id, owner), ":ref": user_ref}
            )
        wanted = offset + limit + 1
        found: list[Session] = []
        while len(found) < wanted:
            r = self.db.query(**kwargs)
            found.extend(Session.model_validate(_strip_keys(deserialize(i))) for i in r.get("Items", []))
            if "LastEvaluatedKey" not in r:
                break
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]
        page = found[offset : offset + limit]
        return page, len(found) > offset + limit

    def set_title(self, session_id: str, title: str | None) -> None:
        if title is None:
            self._update(keys.session_key(session_id), {}, removes=("title",), condition="attribute_exists(pk)")
        else:
            self._update(keys.session_key(session_id), {"title": title}, condition="attribute_exists(pk)")

    def set_generated_title(self, session_id: str, title: str) -> bool:
        """Name the conversation unless somebody named it meanwhile (or a name was generated before)."""
        return self._applied(
            lambda: self._update(
                keys.session_key(session_id),
                {"title": title, "title_generated": True},
                condition="attribute_exists(pk) AND attribute_not_exists(title) AND "
                "(attribute_not_exists(title_generated) OR title_generated = :no)",
                cond_values={":no": False},
            )
        )

    def delete_session(self, session_id: str) -> None:
        """Delete the session and everything stored under it; refuses while a turn is running on it."""
        try:
            self.db.delete_item(
                TableName=self.table,
                Key=serialize(keys.session_key(session_id)),
                ConditionExpression="attribute_not_exists(active_run)",
            )
        except ClientError as e:
            if _failed_condition(e):
                current = self.get_session(session_id)
                if current and current.active_run:
                    raise Conflict(
                        f"A turn is running on this conversation (run {current.active_run}); cancel it or let it "
                        "finish before deleting the conversation.",
                        code="turn_running",
                    ) from e
                return
            raise
        items = [{"pk": i["pk"], "sk": i["sk"]} for i in self._query(keys.session_pk(session_id))]
        for start in range(0, len(items), 25):
            batch = [{"DeleteRequest": {"Key": serialize(k)}} for k in items[start : start + 25]]
            self.db.batch_write_item(RequestItems={self.table: batch})

    def create_session_with_messages(self, session: Session, messages: list[Message]) -> None:
        """Write a new session and its messages (used by fork); the session item goes last so a
        half-done copy is never listed."""
        for start in range(0, len(messages), 25):
            batch = [{"PutRequest": {"Item": serialize(self._message_item(m))}} for m in messages[start : start + 25]]
            self.db.batch_write_item(RequestItems={self.table: batch})
        self.db.put_item(
            TableName=self.table,
            Item=serialize(self._session_item(session)),
            ConditionExpression="attribute_not_exists(pk)",
        )

    # --- messages ---------------------------------------------------------------------------------

    @staticmethod
    def _message_item(m: Message) -> dict[str, Any]:
        doc = m.model_dump(mode="json", exclude_none=True)
        if not isinstance(m.content, str) and m.content is not None:
            doc["content_json"] = json.dumps(m.content)
            doc.pop("content", None)
        return {**keys.message_key(m.session_id, m.seq), **doc}

    @staticmethod
    def _message_from(item: dict[str, Any]) -> Message:
        doc = _strip_keys(item)
        if "content_json" in doc:
            doc["content"] = json.loads(doc.pop("content_json"))
        return Message.model_validate(doc)

    def list_messages(self, session_id: str) -> list[Message]:
        return [self._message_from(i) for i in self._query(keys.session_pk(session_id), keys.MESSAGE_PREFIX)]

    def append_messages(self, session_id: str, messages: list[Message]) -> list[Message]:
        """Give the messages the next sequence numbers of the session and store them."""
        if not messages:
            return []
        r = self.db.update_item(
            TableName=self.table,
            Key=serialize(keys.session_key(session_id)),
            UpdateExpression="ADD msg_seq :n SET updated_at = :now",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=_values({":n": len(messages), ":now": time.time()}),
            ReturnValues="UPDATED_NEW",
        )
        last = int(deserialize(r["Attributes"])["msg_seq"])
        first = last - len(messages) + 1
        stored = [m.model_copy(update={"seq": first + i, "session_id": session_id}) for i, m in enumerate(messages)]
        for start in range(0, len(stored), 25):
            batch = [{"PutRequest": {"Item": serialize(self._message_item(m))}} for m in stored[start : start + 25]]
            self.db.batch_write_item(RequestItems={self.table: batch})
        return stored

    def mark_turn_abandoned(self, session_id: str, turn_id: str, *, flag: str = "turn_abandoned") -> None:
        """The turn is not part of what the model sees again (it produced no answer, or its message was
        refused): its user messages stay visible with `extra[flag]`; nothing of it is replayed."""
        for m in self.list_messages(session_id):
            if m.turn_id != turn_id or m.abandoned:
                continue
            sets: dict[str, Any] = {"abandoned": True}
            if m.role == "user":
                sets["extra"] = {**m.extra, flag: True}
            self._update(keys.message_key(session_id, m.seq), sets)

    # --- turns, runs, the session claim -----------------------------------------------------------

    def begin_turn(
        self,
        session: Session,
        *,
        created: bool,
        expected_seq: int,
        messages: list[Message],
        turn: Turn,
        run: Run,
        idempotency_key: str | None = None,
        idempotency_seconds: int = 86400,
    ) -> None:
        """Claim the session for `run` and write the turn's opening records in one transaction.

        Raises Contended when a condition fails (another turn holds the session, or a message landed meanwhile,
        or the idempotency key is taken); the caller re-reads and decides what to tell the client.
        """
        now = session.updated_at
        items: list[dict[str, Any]] = []
        if created:
            items.append(self._put_new(serialize(self._session_item(session))))
        else:
            items.append(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": serialize(keys.session_key(session.id)),
                        "UpdateExpression": "SET active_run = :r, active_turn = :t, last_run = :r, msg_seq = :seq, "
                        "updated_at = :now, gsi1sk = :sort",
                        "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(active_run) AND msg_seq = :old",
                        "ExpressionAttributeValues": _values(
                            {
                                ":r": run.id,
                                ":t": turn.id,
                                ":seq": session.msg_seq,
                                ":now": now,
                                ":old": expected_seq,
                                ":sort": keys.owner_sort(now, session.id),
                            }
                        ),
                    }
                }
            )
        for m in messages:
            items.append(self._put_new(serialize(self._message_item(m))))
        items.append(
            {
                "Put": {
                    "TableName": self.table,
                    "Item": _turn_item(turn),
                }
            }
        )
        items.append(
            {
                "Put": {
                    "TableName": self.table,
                    "Item": serialize({**keys.run_key(run.id), **run.model_dump(mode="json")}),
                }
            }
        )
        items.extend(self.opening_frames(run, int(now) + FRAME_RETENTION_SECONDS))
        if idempotency_key is not None:
            idem = {
                **keys.idempotency_key(turn.project_id, turn.owner, idempotency_key),
                "run_id": run.id,
                "session_id": session.id,
                "expires_at": int(now) + idempotency_seconds,
            }
            items.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": serialize(idem),
                        "ConditionExpression": "attribute_not_exists(pk) OR expires_at < :now",
                        "ExpressionAttributeValues": _values({":now": int(now)}),
                    }
                }
            )
        try:
            self.db.transact_write_items(TransactItems=items)
        except ClientError as e:
            if _failed_condition(e):
                raise Contended("the conversation changed while the turn was being claimed") from e
            raise
        self._cache_opening(run, int(now) + FRAME_RETENTION_SECONDS)

    def get_idempotent(self, project_id: str, owner: str, key: str) -> dict[str, Any] | None:
        item = self._get(keys.idempotency_key(project_id, owner, key))
        if item and int(item.get("expires_at", 0)) > time.time():
            return item
        return None

    def release_session(self, session_id: str, run_id: str) -> None:
        try:
            self._update(
                keys.session_key(session_id),
                {"updated_at": time.time()},
                removes=("active_run", "active_turn"),
                condition="active_run = :r",
                cond_values={":r": run_id},
            )
        except ClientError as e:
            if not _failed_condition(e):
                raise

    def end_run(
        self,
        run_id: str,
        session_id: str,
        run_sets: dict[str, Any],
        *,
        from_status: str = "running",
        guard_steers: bool = False,
        park_turn: str | None = None,
    ) -> bool:
        """End a run and free (or park) its conversation in one transaction; False if the run had moved on.

        Both happen at once so that whoever sees the run ended can start the next turn at once, and a
        steered message that is still unread (`guard_steers`) makes the whole thing not happen.
        """
        condition = "#status = :from" + (" AND steer_count = steer_taken" if guard_steers else "")
        session_sets: dict[str, Any] = {"updated_at": time.time()}
        if park_turn is not None:
            session_sets["paused_turn"] = park_turn
        items = [
            {
                "Update": self._update_request(
                    keys.run_key(run_id), run_sets, condition=condition, cond_values={":from": from_status}
                )
            },
            {
                "Update": self._update_request(
                    keys.session_key(session_id),
                    session_sets,
                    removes=("active_run", "active_turn"),
                    condition="attribute_exists(pk) AND (active_run = :r OR attribute_not_exists(active_run))",
                    cond_values={":r": run_id},
                )
            },
        ]
        try:
            self.db.transact_write_items(TransactItems=items)
            return True
        except ClientError as e:
            if not _failed_condition(e):
                raise
        # Either the run moved on, or the conversation is gone (deleted) or held by another run.
        run = self.get_run(run_id)
        if run is None or run.status != from_status:
            return False
        if guard_steers and run.steer_count != run.steer_taken:
            return False
        return self.update_run(run_id, condition=condition, cond_values={":from": from_status}, **run_sets)

    def get_turn(self, turn_id: str) -> Turn | None:
        item = self._get(keys.turn_key(turn_id))
        return _turn_from(item) if item else None

    def get_turn_and_run(self, turn_id: str, run_id: str) -> tuple[Turn | None, Run | None]:
        """Both records in one round trip (strongly consistent), for a step that was told both ids."""
        wanted = [serialize(keys.turn_key(turn_id)), serialize(keys.run_key(run_id))]
        found: dict[str, dict[str, Any]] = {}
        request: dict[str, Any] = {self.table: {"Keys": wanted, "ConsistentRead": True}}
        while request:
            r = self.db.batch_get_item(RequestItems=request)
            for raw in r.get("Responses", {}).get(self.table, []):
                item = deserialize(raw)
                found[item["pk"]] = item
            request = r.get("UnprocessedKeys") or {}
        turn = found.get(keys.turn_key(turn_id)["pk"])
        run = found.get(keys.run_key(run_id)["pk"])
        return (
            _turn_from(turn) if turn else None,
            Run.model_validate(_strip_keys(run)) if run else None,
        )

    # --- the first step, run where the turn was requested (engine.inline) ---------------------------

    def move_inline_lease(self, turn_id: str, held: int, until: int) -> bool:
        return self._applied(
            lambda: self._update(
                keys.turn_key(turn_id),
                {"inline_until": until},
                condition="inline_until = :held",
                cond_values={":held": held},
            )
        )

    def finish_inline(self, turn_id: str, held: int, result: dict[str, Any]) -> bool:
        return self._applied(
            lambda: self._update(
                keys.turn_key(turn_id),
                {"inline_until": 0, "inline_result": result},
                condition="inline_until = :held",
                cond_values={":held": held},
            )
        )

    def take_inline(self, turn_id: str, held: int) -> bool:
        return self._applied(
            lambda: self._update(
                keys.turn_key(turn_id),
                {"inline_until": 0},
                condition="inline_until = :held",
                cond_values={":held": held},
            )
        )

    def save_turn(self, turn: Turn) -> None:
        self.db.put_item(TableName=self.table, Item=_turn_item(turn))

    def update_turn(self, turn_id: str, **fields: Any) -> None:
        self._update(keys.turn_key(turn_id), _turn_sets(fields), condition="attribute_exists(pk)")

    def get_run(self, run_id: str) -> Run | None:
        item = self._get(keys.run_key(run_id))
        return Run.model_validate(_strip_keys(item)) if item else None

    def update_run(
        self, run_id: str, *, condition: str | None = None, cond_values: dict[str, Any] | None = None, **fields: Any
    ) -> bool:
        return self._applied(
            lambda: self._update(
                keys.run_key(run_id), fields, condition=condition or "attribute_exists(pk)", cond_values=cond_values
            )
        )

    # --- frames -----------------------------------------------------------------------------------

    def last_frame_seq(self, run_id: str) -> int:
        for item in self._query(keys.run_pk(run_id), keys.FRAME_PREFIX, forward=False, limit=1):
            return int(item["seq"])
        return 0

    @staticmethod
    def _frame_item(run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None) -> dict[str, Any]:
        item: dict[str, Any] = {
            **keys.frame_key(run_id, seq),
            "seq": seq,
            "event": event,
            "data": json.dumps(data, separators=(",", ":")),
            "at": time.time(),
        }
        if expires_at is not None:
            item["expires_at"] = expires_at
        return item

    def opening_frames(self, run: Run, expires_at: int) -> list[dict[str, Any]]:
        """A transaction's Puts of a run's first two frames, `run` and `start`, written with the run itself so
        a streaming client has them before any Lambda has started."""
        return [
            self._put_new(serialize(self._frame_item(run.id, 1, "run", {"run_id": run.id}, expires_at))),
            self._put_new(
                serialize(
                    self._frame_item(run.id, 2, "start", {"session_id": run.session_id, "run_id": run.id}, expires_at)
                )
            ),
        ]

    @staticmethod
    def _cache_opening(run: Run, expires_at: int) -> None:
        FRAMES.add(run.id, {"seq": 1, "event": "run", "data": {"run_id": run.id}, "expires_at": expires_at})
        start = {"session_id": run.session_id, "run_id": run.id}
        FRAMES.add(run.id, {"seq": 2, "event": "start", "data": start, "expires_at": expires_at})

    def put_frame(self, run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None = None) -> bool:
        """Write one frame unless that sequence number is already taken (a retried writer never overwrites)."""
        item = self._frame_item(run_id, seq, event, data, expires_at)
        written = self._applied(
            lambda: self.db.put_item(
                TableName=self.table, Item=serialize(item), ConditionExpression="attribute_not_exists(pk)"
            )
        )
        if written:
            FRAMES.add(run_id, {"seq": seq, "event": event, "data": data, "expires_at": expires_at})
        return written

    def frames_after(
        self, run_id: str, after_seq: int, limit: int | None = None, *, cached: bool = True
    ) -> list[dict[str, Any]]:
        """The run's frames after `after_seq`, in order: from this process's memory while it has them without a
        gap (see adapters.frame_cache), else from the table."""
        if cached and (hit := FRAMES.after(run_id, after_seq, limit)):
            return hit
        out = []
        for item in self._query(keys.run_pk(run_id), after=keys.frame_sort(after_seq), limit=limit):
            if not item["sk"].startswith(keys.FRAME_PREFIX):
                break
            out.append(
                {
                    "seq": int(item["seq"]),
                    "event": item["event"],
                    "data": json.loads(item["data"]),
                    "expires_at": item.get("expires_at"),
                }
            )
        return out

    # --- context summaries ----------------------------------------------------------------------------

    def get_summary(self, session_id: str) -> dict[str, Any] | None:
        item = self._get(keys.summary_key(session_id))
        return _strip_keys(item) if item else None

    def note_prompt_size(self, session_id: str, chars: int, tokens: int) -> None:
        """Remember the provider's token count for a request of `chars` characters (it calibrates estimates)."""
        self._update(
            keys.session_key(session_id),
            {"prompt_chars": chars, "prompt_tokens": tokens},
            condition="attribute_exists(pk)",
        )

    def prompt_measure(self, session_id: str) -> tuple[int, int] | None:
        item = self._get(keys.session_key(session_id), consistent=False)
        if item and item.get("prompt_chars") and item.get("prompt_tokens"):
            return int(item["prompt_chars"]), int(item["prompt_tokens"])
        return None

    def save_summary(self, session_id: str, summary: dict[str, Any]) -> None:
        self.db.put_item(TableName=self.table, Item=serialize({**keys.summary_key(session_id), **summary}))

    # --- plans (todos) ------------------------------------------------------------------------------

    def list_todos(self, session_id: str) -> list[dict[str, Any]]:
        return [
            {"n": int(i["n"]), "text": i["text"], "status": i["status"]}
            for i in self._query(keys.session_pk(session_id), keys.TODO_PREFIX)
        ]

    def add_todos(self, session_id: str, texts: list[str]) -> list[dict[str, Any]]:
        """Append items with the session's next numbers; a number, once handed out, is never reused."""
        r = self.db.update_item(
            TableName=self.table,
            Key=serialize(keys.session_key(session_id)),
            UpdateExpression="ADD todo_seq :n",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=_values({":n": len(texts)}),
            ReturnValues="UPDATED_NEW",
        )
        last = int(deserialize(r["Attributes"])["todo_seq"])
        first = last - len(texts) + 1
        items: list[dict[str, Any]] = []
        for i, text in enumerate(texts):
            item = {"n": first + i, "text": text, "status": "pending"}
            self.db.put_item(TableName=self.table, Item=serialize({**keys.todo_key(session_id, first + i), **item}))
            items.append(item)
        return items

    def update_todo(self, session_id: str, n: int, **fields: Any) -> bool:
        return self._applied(
            lambda: self._update(keys.todo_key(session_id, n), fields, condition="attribute_exists(pk)")
        )

    def remove_todo(self, session_id: str, n: int) -> bool:
        return self._applied(
            lambda: self.db.delete_item(
                TableName=self.table,
                Key=serialize(keys.todo_key(session_id, n)),
                ConditionExpression="attribute_exists(pk)",
            )
        )

    def clear_todos(self, session_id: str) -> None:
        for item in self.list_todos(session_id):
            self.remove_todo(session_id, item["n"])

    # --- steering -----------------------------------------------------------------------------------

    def add_steer(self, run_id: str, text: str) -> bool:
        """Queue a message for a running run; False when the run is no longer running."""
        return self._applied(
            lambda: self.db.update_item(
                TableName=self.table,
                Key=serialize(keys.run_key(run_id)),
                UpdateExpression="SET steers = list_append(if_not_exists(steers, :none), :one) ADD steer_count :inc",
                ConditionExpression="#status = :running",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=_values({":none": [], ":one": [text], ":inc": 1, ":running": "running"}),
            )
        )

    def mark_steers_taken(self, run_id: str, taken_before: int, taken_now: int) -> bool:
        return self.update_run(
            run_id, steer_taken=taken_now, condition="steer_taken = :before", cond_values={":before": taken_before}
        )

    # --- pauses -------------------------------------------------------------------------------------

    def begin_resume(
        self,
        session: Session,
        *,
        expected_seq: int,
        turn_id: str,
        expected_pause: int,
        turn_sets: dict[str, Any],
        messages: list[Message],
        run: Run,
        generating: bool,
    ) -> None:
        """Apply a resume in one transaction: the conversation, the turn, the new run and any tool messages.

        `generating`: the turn goes back to the model, so the new run holds the conversation; otherwise the
        turn stays paused (it re-announces what is still outstanding) and the conversation stays parked.
        """
        now = time.time()
        session_sets: dict[str, Any] = {
            "msg_seq": expected_seq + len(messages),
            "updated_at": now,
            "last_run": run.id,
            "gsi1sk": keys.owner_sort(now, session.id),
        }
        removes: tuple[str, ...] = ()
        if generating:
            session_sets |= {"active_run": run.id, "active_turn": turn_id}
            removes = ("paused_turn",)
        items: list[dict[str, Any]] = [
            {
                "Update": self._update_request(
                    keys.session_key(session.id),
                    session_sets,
                    removes=removes,
                    condition="attribute_not_exists(active_run) AND paused_turn = :t AND msg_seq = :old",
                    cond_values={":t": turn_id, ":old": expected_seq},
                )
            },
            {
                "Update": self._update_request(
                    keys.turn_key(turn_id),
                    _turn_sets(turn_sets),
                    condition="pause_seq = :ps AND #status = :paused",
                    cond_values={":ps": expected_pause, ":paused": "paused"},
                )
            },
            self._put_new(serialize({**keys.run_key(run.id), **run.model_dump(mode="json")})),
            *(self.opening_frames(run, int(now) + FRAME_RETENTION_SECONDS) if generating else []),
        ]
        for m in messages:
            items.append(self._put_new(serialize(self._message_item(m))))
        try:
            self.db.transact_write_items(TransactItems=items)
        except ClientError as e:
            if _failed_condition(e):
                raise Contended("the paused turn changed while it was being resumed") from e
            raise
        if generating:
            self._cache_opening(run, int(now) + FRAME_RETENTION_SECONDS)

    def require_session(self, session_id: str) -> Session:
        s = self.get_session(session_id)
        if s is None:
            raise NotFound(f"No conversation {session_id} exists for this user.")
        return s

    # --- deliveries -----------------------------------------------------------------------------------

    def get_webhook_secret(self, project_id: str) -> str | None:
        item = self._get(keys.webhook_secret_key(project_id))
        return str(item["secret"]) if item else None

    def create_webhook_secret(self, project_id: str, secret: str) -> str:
        """Store `secret` unless the project has one already; returns the one in force either way."""
        try:
            self.db.put_item(
                TableName=self.table,
                Item=serialize({**keys.webhook_secret_key(project_id), "secret": secret, "created_at": time.time()}),
                ConditionExpression="attribute_not_exists(pk)",
            )
            return secret
        except ClientError as e:
            if not _failed_condition(e):
                raise
        existing = self.get_webhook_secret(project_id)
        if existing is None:  # deleted between the two calls: try once more
            return self.create_webhook_secret(project_id, secret)
        return existing

    def replace_webhook_secret(self, project_id: str, secret: str) -> None:
        self.db.put_item(
            TableName=self.table,
            Item=serialize({**keys.webhook_secret_key(project_id), "secret": secret, "created_at": time.time()}),
        )

    def record_delivery_attempt(self, attempt: DeliveryAttempt, nonce: str, *, keep_seconds: int) -> None:
        self.db.put_item(
            TableName=self.table,
            Item=serialize(
                {
                    **keys.delivery_attempt_key(attempt.delivery_id, attempt.attempt, nonce),
                    **attempt.model_dump(mode="json"),
                    "gsi1pk": keys.deliveries_index(attempt.project_id),
                    "gsi1sk": keys.deliveries_sort(attempt.delivered_at, attempt.delivery_id, attempt.attempt),
                    "expires_at": int(attempt.delivered_at) + keep_seconds,
                }
            ),
        )

    def delivery_attempts(self, delivery_id: str) -> list[DeliveryAttempt]:
        """Every recorded attempt at one delivery, first attempt first."""
        now = time.time()
        return [
            DeliveryAttempt.model_validate(_strip_keys(item))
            for item in self._query(keys.delivery_pk(delivery_id), keys.DELIVERY_ATTEMPT_PREFIX)
            if int(item.get("expires_at", now + 1)) > now
        ]

    def list_delivery_attempts(self, project_id: str, *, limit: int) -> list[DeliveryAttempt]:
        """A project's most recent delivery attempts, newest first."""
        now = time.time()
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "GSI1",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": _values({":pk": keys.deliveries_index(project_id)}),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        found: list[DeliveryAttempt] = []
        while len(found) < limit:
            r = self.db.query(**kwargs)
            for raw in r.get("Items", []):
                item = deserialize(raw)
                if int(item.get("expires_at", now + 1)) > now:
                    found.append(DeliveryAttempt.model_validate(_strip_keys(item)))
            if "LastEvaluatedKey" not in r:
                break
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]
        return found[:limit]
