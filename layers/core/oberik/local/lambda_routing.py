"""Run moto's Lambda invocations as Python callables in this process.

With `lambda.use_docker` switched off, moto sends every `Invoke` (from boto3 or from its Step Functions
engine) to `LambdaSimpleBackend.invoke`, which just echoes the payload. This module swaps that method for
a router that looks the function up in a table of callables, calls it with the decoded event and hands
the JSON result back. A callable that raises becomes what real Lambda returns for an unhandled error: the
`errorMessage / errorType / stackTrace` payload plus the `X-Amz-Function-Error: Unhandled` header, which
botocore turns into `FunctionError` and Step Functions into a catchable error named after `errorType`.

It is the only module in oberik that touches moto internals, which is why moto is pinned and checked below.
For the same reason it also closes one moto gap the platform depends on: moto's DynamoDB applies a
transaction's items one by one with no lock, so two threads can both pass their conditions (two turns
claiming one conversation). `serialize_dynamodb()` makes each DynamoDB operation atomic, as the real
service is. And it removes work moto repeats on every call that made the local stack slow in proportion to
what it stored or how busy it was, each with the same outcomes as before: `lighter_items`,
`plain_item_responses`, `partition_queries`, `lighter_executions`, `remembered_service_list`, and the
transaction in `serialize_dynamodb`.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import moto
from moto.awslambda_simple.models import LambdaSimpleBackend

from oberik.observability import logger

PINNED_MOTO_VERSION = "5.2.5"

if moto.__version__ != PINNED_MOTO_VERSION:
    raise RuntimeError(
        f"oberik.local.lambda_routing replaces moto's private LambdaSimpleBackend.invoke and is only known to work "
        f"with moto=={PINNED_MOTO_VERSION}, but moto {moto.__version__} is installed. "
        f'Install the pinned version (pip install "oberik[local]") or re-verify the router against this moto.'
    )

Route = Callable[[dict[str, Any]], Any]

_lock = threading.RLock()
_routes: dict[str, Route] = {}
_moto_invoke: Callable[..., Any] | None = None


def _once(install: Callable[[], None]) -> Callable[[], None]:
    """Make a patch of moto idempotent: the first call installs it, later calls do nothing."""
    done = False

    @functools.wraps(install)
    def once() -> None:
        nonlocal done
        with _lock:
            if not done:
                install()
                done = True

    return once


def function_name_of(name_or_arn: str) -> str:
    """The bare function name in any form Lambda accepts.

    `oberik-step`, `oberik-step:live`, `123456789012:function:oberik-step` and
    `arn:aws:lambda:us-east-1:123456789012:function:oberik-step[:live]` all give `oberik-step`.
    """
    parts = name_or_arn.split(":")
    if "function" in parts[:-1]:
        return parts[parts.index("function") + 1]
    return parts[0]


def install(routes: Mapping[str, Route]) -> None:
    """Route the given functions (names or ARNs) to their callables and switch the router on.

    Routes add to (or replace by name) those already installed, so a stack and a test can each install
    their own; calling it again with the same routes changes nothing.
    """
    global _moto_invoke
    with _lock:
        for name, target in routes.items():
            _routes[function_name_of(name)] = target
        if _moto_invoke is None:
            _moto_invoke = LambdaSimpleBackend.invoke
            LambdaSimpleBackend.invoke = _routed_invoke  # type: ignore[method-assign]


def uninstall() -> None:
    """Forget every route and give moto its own invoke back. Safe to call when nothing is installed."""
    global _moto_invoke
    with _lock:
        _routes.clear()
        if _moto_invoke is not None:
            LambdaSimpleBackend.invoke = _moto_invoke  # type: ignore[method-assign]
            _moto_invoke = None


def installed() -> dict[str, Route]:
    """A snapshot of the routes in force, by bare function name."""
    with _lock:
        return dict(_routes)


def error_payload(exc: BaseException) -> dict[str, Any]:
    """The body real Lambda returns when a Python handler raises."""
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


class UnroutedFunction(LookupError):
    """Raised (as a Lambda error) when a function is invoked that no route covers."""


def _routed_invoke(
    self: LambdaSimpleBackend,
    function_name: str,
    qualifier: str | None,
    body: Any,
    headers: Any,
    response_headers: Any,
) -> bytes:
    # Same signature as LambdaSimpleBackend.invoke; moto's response layer sends what we return as the
    # payload and copies response_headers onto the HTTP response.
    name = function_name_of(function_name)
    invocation_type = (headers or {}).get("X-Amz-Invocation-Type") or "RequestResponse"
    with _lock:
        target = _routes.get(name)
        known = sorted(_routes)
    if target is None:
        exc = UnroutedFunction(
            f"no in-process route for Lambda function {name!r} (routed: {', '.join(known) or 'none'})"
        )
        response_headers["x-amz-function-error"] = "Unhandled"
        return json.dumps(error_payload(exc)).encode()
    if invocation_type == "DryRun":
        return b""
    if invocation_type == "Event":
        # Asynchronous invocation: the caller gets its 202 at once and the function runs on its own.
        threading.Thread(target=_run, args=(name, target, body), name=f"lambda-{name}", daemon=True).start()
        return b""
    payload, failed = _run(name, target, body)
    if failed:
        response_headers["x-amz-function-error"] = "Unhandled"
    return payload


def _run(name: str, target: Route, body: Any) -> tuple[bytes, bool]:
    """Call one route; returns the payload and whether it is an error payload."""
    try:
        raw = body.decode() if isinstance(body, bytes) else body
        event = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return json.dumps(error_payload(exc) | {"errorType": "Runtime.InvalidPayload"}).encode(), True
    try:
        result = target(event)
    except Exception as exc:
        logger.exception("routed lambda raised", function=name)
        return json.dumps(error_payload(exc)).encode(), True
    try:
        return json.dumps(result).encode(), False
    except (TypeError, ValueError) as exc:
        return json.dumps(error_payload(exc) | {"errorType": "Runtime.MarshalError"}).encode(), True


# --- DynamoDB operations, one at a time ----------------------------------------------------------------

_DYNAMODB_OPERATIONS = (
    "put_item",
    "update_item",
    "delete_item",
    "get_item",
    "query",
    "scan",
    "transact_write_items",
    "transact_get_items",
    "batch_write_item",
    "batch_get_item",
)
_dynamodb_lock = threading.RLock()
_dynamodb_originals: dict[str, Callable[..., Any]] = {}


def serialize_dynamodb() -> None:
    """Run every moto DynamoDB operation under one lock, so conditional writes and transactions are atomic,
    and let a transaction set aside only the items it touches (`_transact_write_items`).

    Idempotent. Costs nothing measurable at the platform's local scale; real DynamoDB needs no such thing.
    """
    from moto.dynamodb.models import DynamoDBBackend

    with _lock:
        for name in _DYNAMODB_OPERATIONS:
            if name in _dynamodb_originals:
                continue
            original = _transact_write_items if name == "transact_write_items" else getattr(DynamoDBBackend, name)
            _dynamodb_originals[name] = original

            def locked(self: Any, *args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                with _dynamodb_lock:
                    return __original(self, *args, **kwargs)

            locked.__name__ = name
            setattr(DynamoDBBackend, name, locked)


def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's TransactWriteItems with the same outcomes, minus its cost: moto deep-copies every table a
    transaction names before applying it, so rolling back is free but every transaction costs time in
    proportion to the whole table (60-100 ms under the lock at a few thousand items, which every other
    DynamoDB call then waits for). Here conditions are all checked first, against the state before the
    transaction (the items are distinct, so that is what applying them in order would see); nothing is
    written unless every one holds; and only the touched items are copied, for the rare write that fails
    part-way.
    """
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models.dynamo_type import DynamoType

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    seen: set[tuple[str, str]] = set()
    planned: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = []  # (op type, op, table name, key)
    errors: list[Any] = []
    for entry in transact_items:
        if len(entry) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(entry.items()))
        original_item = None
        try:
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            if op_type == "Put":
                table = self.get_table(table_name)
                key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = op["Item"][table.range_key_attr]
            else:
                key = op["Key"]
            marker = (str(table_name), str(dict(sorted(key.items()))))
            if marker in seen:
                raise MultipleTransactionsException()
            seen.add(marker)
            current = self.get_item(table_name, key)
            condition = op.get("ConditionExpression")
            if condition is not None:
                check = _filter_expression(
                    condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                )
                if not check.expr(current):
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)
            planned.append((op_type, op, table_name, key))
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            raise
        except ConditionalCheckFailed as e:
            errors.append(("ConditionalCheckFailed", str(e.message), original_item))
        except Exception as e:
            errors.append((type(e).__name__, str(e), original_item))
    if any(code is not None for code, _, _ in errors):
        raise TransactionCanceledException(errors)

    touched: list[tuple[Any, Any, Any, Any]] = []  # (table, hash value, range value, copy of the item or None)
    for _op_type, _op, table_name, key in planned:
        table = self.get_table(table_name)
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr is not None else None
        touched.append((table, hash_value, range_value, copy.deepcopy(table.get_item(hash_value, range_value))))
    applied_errors: list[Any] = [(None, None, None)] * len(planned)
    failed = False
    for i, (op_type, op, table_name, key) in enumerate(planned):
        common = {
            "condition_expression": op.get("ConditionExpression"),
            "expression_attribute_names": op.get("ExpressionAttributeNames"),
            "expression_attribute_values": op.get("ExpressionAttributeValues"),
        }
        try:
            if op_type == "Put":
                self.put_item(table_name, op["Item"], **common)
            elif op_type == "Delete":
                self.delete_item(table_name, key, **common)
            elif op_type == "Update":
                self.update_item(table_name, key, update_expression=op["UpdateExpression"], **common)
        except (MultipleTransactionsException, MockValidationException):
            _restore(touched)
            raise
        except Exception as e:
            applied_errors[i] = (type(e).__name__, str(e), None)
            failed = True
    if failed:
        _restore(touched)
        raise TransactionCanceledException(applied_errors)


def _filter_expression(condition: str, names: Any, values: Any) -> Any:
    from moto.dynamodb.comparisons import get_filter_expression

    return get_filter_expression(condition, names, values)


def _restore(touched: list[tuple[Any, Any, Any, Any]]) -> None:
    """Put the items a failed transaction touched back as they were (no stream records, as moto's own rollback)."""
    for table, hash_value, range_value, before in touched:
        if range_value is None:
            if before is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = before
        elif before is None:
            table.items.get(hash_value, {}).pop(range_value, None)
        else:
            table.items[hash_value][range_value] = before


@_once
def lighter_items() -> None:
    """Build moto's DynamoDB items in time linear in their size, with the same 400 KB check.

    moto re-measures the whole item on every attribute it sets while building one (and measuring a map copies
    it, recursively), so writing a turn, whose plan is a deep map, took 5-10 ms of CPU under the lock: that is
    most of what starting a turn costs on the local stack. Here an item is measured once, after it is built,
    and a map's members are measured where they are. Idempotent.
    """
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    original_size = DynamoType.size

    def size(self: Any) -> int:
        if self.is_map():
            return sum(
                bytesize(k) + (v.size() if type(v) is DynamoType else DynamoType(v).size())
                for k, v in self.value.items()
            )
        return int(original_size(self))

    def init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        self.hash_key = hash_key
        self.range_key = range_key
        built = LimitedSizeDict.__new__(LimitedSizeDict)
        dict.__init__(built)
        total = 0
        for key, value in attrs.items():
            typed = DynamoType(value)
            total += bytesize(key) + typed.size()
            dict.__setitem__(built, key, typed)
        if total > _MOTO_ITEM_LIMIT:  # moto's own figure, between the documented 400 KB and the real 409-410
            raise ItemSizeTooLarge
        self.attrs = built

    DynamoType.size = size  # type: ignore[method-assign]
    Item.__init__ = init  # type: ignore[method-assign]


_MOTO_ITEM_LIMIT = 405000


@_once
def remembered_service_list() -> None:
    """Have moto's server list its service modules, and each response class its methods, once, not on every
    request.

    The server picks the backend for each request under one lock, and to do so lists moto's package
    directory (an `isdir` for each of ~200 entries) every time: with a few turns at once, requests spent
    most of their time queued on that lock. The list cannot change while the process runs. Idempotent.
    """
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules

    # Likewise each request listed its response class's methods (inspect.getmembers) to find the action.
    from moto.core import responses

    names_of = responses.method_names_from_class
    known: dict[type, frozenset[str]] = {}

    def method_names(clazz: Any) -> frozenset[str]:
        found = known.get(clazz)
        if found is None:
            found = known[clazz] = frozenset(names_of(clazz))
        return found

    responses.method_names_from_class = method_names  # type: ignore[assignment]


@_once
def plain_item_responses() -> None:
    """Write moto's DynamoDB item results (GetItem, Query, Scan, BatchGetItem...) straight out as JSON.

    moto hands every result to a serializer that walks the operation's output shape member by member; items
    are already in DynamoDB's wire form, so for them that walk is pure cost: about 0.5 ms an item, most of
    the time it takes to read back a run's frames (5,000 frames: ~3 s). A result holding anything JSON
    cannot say as it is (bytes, which the wire form writes as base64; None, which the serializer leaves out)
    still goes through moto's serializer. Idempotent.
    """
    from moto.dynamodb.responses import DynamoResult

    original = DynamoResult.execute_result

    def execute_result(self: Any, context: Any) -> Any:
        if context.serializer_class.__name__ != "JSONSerializer" or not _plain(self._result):
            return original(self, context)
        body = json.dumps(self._result)
        kept, self._result = self._result, {}
        try:
            status, headers, _ = original(self, context)  # moto's status and headers for this operation
        finally:
            self._result = kept
        return status, headers, body

    DynamoResult.execute_result = execute_result  # type: ignore[method-assign]


def _plain(value: Any) -> bool:
    """Whether `value` is JSON exactly as the wire form has it: dicts with string keys, lists, strings,
    numbers and booleans; no None, no bytes, no sets."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            for k, member in v.items():
                if type(k) is not str:
                    return False
                stack.append(member)
        elif t is list:
            stack.extend(v)
        elif t not in (str, int, float, bool):
            return False
    return True


_partition = threading.local()  # (table, hash key) while a query on the table's own key is looking for items


@_once
def partition_queries() -> None:
    """Have a moto Query on a table's own key read that key's partition, not the whole table.

    moto answers every Query by listing and sorting every item of the table and then keeping those with the
    wanted hash key, so each read of a run's frames or a conversation's messages cost time in proportion to
    everything ever stored (and with it, under the lock, every other call's wait). For a Query without an
    index the listing now holds just the partition; moto still sorts, pages, filters and projects it as
    before. Queries on an index, and scans, are unchanged. Idempotent.
    """
    import inspect

    from moto.dynamodb.models.table import Table

    original_query, original_all_items = Table.query, Table.all_items
    signature = inspect.signature(original_query)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        hash_key = bound.arguments.get("hash_key")
        if bound.arguments.get("index_name") or hash_key is None:
            return original_query(self, *args, **kwargs)
        _partition.key = (self, hash_key)
        try:
            return original_query(self, *args, **kwargs)
        finally:
            _partition.key = None

    def all_items(self: Any) -> Any:
        wanted = getattr(_partition, "key", None)
        if wanted is None or wanted[0] is not self:
            return original_all_items(self)
        _partition.key = None  # once: anything else this query lists is the whole table again
        found = self.items.get(wanted[1])
        if found is None:
            return []
        return list(found.values()) if self.range_key_attr else [found]

    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


@_once
def lighter_executions() -> None:
    """Two per-execution costs of moto's Step Functions engine, paid once instead.

    Every execution parsed its state machine's definition again (~23 ms of CPU for turn.asl.json), and
    every Lambda task built a new boto3 client (and connection pool) to call Invoke. Parsed definitions are
    now kept by their text and each execution gets its own deep copy (~1.5 ms), so no state is shared
    between executions; Lambda clients are kept per region and endpoint. Idempotent.
    """
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    parsed: dict[str, Any] = {}
    parsed_lock = threading.Lock()

    def entrypoint(self: Any) -> Any:
        definition = self._evaluation_details.state_machine_details.definition
        with parsed_lock:
            program = parsed.get(definition)
        if program is None:
            program = AmazonStateLanguageParser.parse(definition)[0]
            with parsed_lock:
                parsed[definition] = program
        return copy.deepcopy(program)

    build_client = lambda_eval_utils.boto_client_for
    clients: dict[tuple[Any, ...], Any] = {}
    clients_lock = threading.Lock()

    def client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        if state_credentials is not None:
            return build_client(region, service, state_credentials)
        from moto.core.models import botocore_stubber
        from moto.settings import moto_server_port  # where moto's own client is pointed

        key = (region, service, botocore_stubber.enabled, moto_server_port())
        with clients_lock:
            found = clients.get(key)
            if found is None:
                found = clients[key] = build_client(region, service)
            return found

    ExecutionWorker._get_evaluation_entrypoint = entrypoint  # type: ignore[method-assign]
    lambda_eval_utils.boto_client_for = client_for


@_once
def tolerate_early_stop() -> None:
    """Let StopExecution reach an execution whose worker thread has not set itself up yet.

    moto builds an execution's evaluation environment on the worker thread, and `stop` dereferences it, so a
    stop that lands in the first milliseconds of an execution raises AttributeError inside moto (Step Functions
    itself accepts a stop at any time). The patched stop waits, briefly, for the environment. Idempotent.
    """
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker.stop

    def stop(self: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 5.0
        while getattr(self, "env", None) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return original(self, *args, **kwargs)

    ExecutionWorker.stop = stop  # type: ignore[method-assign]


_stream_filter: list[Any] = []


def trim_table_stream(admits: Callable[[str, dict[str, Any]], bool] | None) -> None:
    """Keep in moto's table streams only the changes an event source of the template would read.

    moto turns every write into a stream record, serialising the old and new item (a frame, a turn) and keeping it
    for the life of the process; with a stream on the one table that is most of the local stack's CPU and memory.
    Lambda filters events after the stream, so dropping the others before they are recorded changes nothing any
    handler sees. None: keep everything. Idempotent; the latest predicate applies.
    """
    from moto.dynamodb.models.table import StreamShard

    with _lock:
        _stream_filter[:] = [admits] if admits is not None else []
        if getattr(StreamShard.add, "_oberik_trimmed", False):
            return
        original = StreamShard.add

        def add(self: Any, old: Any, new: Any) -> Any:
            predicate = _stream_filter[0] if _stream_filter else None
            if predicate is not None:
                item = old if old is not None else new
                keys = {self.table.hash_key_attr: item.hash_key.to_json()}
                if self.table.range_key_attr is not None:
                    keys[self.table.range_key_attr] = item.range_key.to_json()
                event = "INSERT" if old is None else ("REMOVE" if new is None else "MODIFY")
                if not predicate(event, keys):
                    return None
            return original(self, old, new)

        add._oberik_trimmed = True  # type: ignore[attr-defined]
        StreamShard.add = add  # type: ignore[method-assign]
