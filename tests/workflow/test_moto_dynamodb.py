"""The local stack's changes to moto's DynamoDB (oberik.local.lambda_routing): TransactWriteItems keeps
DynamoDB's all-or-nothing outcomes while copying only the items it touches (its cost no longer grows with
the table), items are measured once when built, with the same size limit, and item results are written out
as JSON directly, reading back exactly what was written."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from oberik.local import lambda_routing

TABLE = "tx-test"


@pytest.fixture
def ddb(mocked_aws: None) -> Iterator[Any]:
    lambda_routing.serialize_dynamodb()
    lambda_routing.lighter_items()
    lambda_routing.plain_item_responses()
    lambda_routing.partition_queries()
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-owner",
                "KeySchema": [
                    {"AttributeName": "owner", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    yield client


def key(pk: str, sk: str = "A") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def item(pk: str, sk: str = "A", **attrs: Any) -> dict[str, Any]:
    return key(pk, sk) | {k: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for k, v in attrs.items()}


def get(ddb: Any, pk: str, sk: str = "A") -> dict[str, Any] | None:
    return ddb.get_item(TableName=TABLE, Key=key(pk, sk)).get("Item")


def put(pk: str, sk: str = "A", condition: str | None = None, **attrs: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"TableName": TABLE, "Item": item(pk, sk, **attrs)}
    if condition:
        op["ConditionExpression"] = condition
    return {"Put": op}


def reasons(error: ClientError) -> list[str]:
    return [r["Code"] for r in error.response["CancellationReasons"]]


def test_every_item_is_written_when_every_condition_holds(ddb: Any) -> None:
    ddb.put_item(TableName=TABLE, Item=item("session", v=1))
    ddb.transact_write_items(
        TransactItems=[
            put("message", condition="attribute_not_exists(pk)", text="hello"),
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": key("session"),
                    "UpdateExpression": "SET v = :new",
                    "ConditionExpression": "v = :old",
                    "ExpressionAttributeValues": {":new": {"N": "2"}, ":old": {"N": "1"}},
                }
            },
            {"Delete": {"TableName": TABLE, "Key": key("gone")}},
        ]
    )
    assert get(ddb, "message") == item("message", text="hello")
    assert get(ddb, "session") == item("session", v=2)


def test_one_failed_condition_writes_nothing_and_says_which(ddb: Any) -> None:
    ddb.put_item(TableName=TABLE, Item=item("session", v=5))
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(
            TransactItems=[
                put("message", condition="attribute_not_exists(pk)", text="hello"),
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": key("session"),
                        "ConditionExpression": "v = :expected",
                        "ExpressionAttributeValues": {":expected": {"N": "1"}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ]
        )
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert reasons(caught.value) == ["None", "ConditionalCheckFailed"]
    assert caught.value.response["CancellationReasons"][1]["Item"] == item("session", v=5)
    assert get(ddb, "message") is None  # the put before the failed check did not happen


def test_a_condition_sees_the_state_before_the_transaction(ddb: Any) -> None:
    # Two different items: the second's condition is about itself, unaffected by the first's write.
    ddb.transact_write_items(
        TransactItems=[put("a", condition="attribute_not_exists(pk)"), put("b", condition="attribute_not_exists(pk)")]
    )
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(
            TransactItems=[
                put("c", condition="attribute_not_exists(pk)"),
                put("b", condition="attribute_not_exists(pk)"),
            ]
        )
    assert reasons(caught.value) == ["None", "ConditionalCheckFailed"]
    assert get(ddb, "c") is None


def test_the_same_item_twice_is_refused_whole(ddb: Any) -> None:
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=[put("x", text="one"), put("x", text="two")])
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert get(ddb, "x") is None


def test_a_write_failing_part_way_puts_back_what_went_before(ddb: Any) -> None:
    ddb.put_item(TableName=TABLE, Item=item("kept", v=1, note="before"))
    ddb.put_item(TableName=TABLE, Item=item("counter", text="not a number"))
    with pytest.raises(ClientError):
        ddb.transact_write_items(
            TransactItems=[
                put("new", text="should vanish"),
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": key("kept"),
                        "UpdateExpression": "SET v = :v REMOVE note",
                        "ExpressionAttributeValues": {":v": {"N": "9"}},
                    }
                },
                {  # ADD of a number to a string fails only when it is applied
                    "Update": {
                        "TableName": TABLE,
                        "Key": key("counter"),
                        "UpdateExpression": "ADD #t :one",
                        "ExpressionAttributeNames": {"#t": "text"},
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
            ]
        )
    assert get(ddb, "new") is None
    assert get(ddb, "kept") == item("kept", v=1, note="before")
    assert get(ddb, "counter") == item("counter", text="not a number")


def test_a_transaction_copies_the_items_it_touches_not_the_table(ddb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ddb.batch_write_item(
        RequestItems={TABLE: [{"PutRequest": {"Item": item("bulk", f"{i:04}", text="x" * 50)}} for i in range(25)]}
    )
    copied: list[Any] = []
    real = copy.deepcopy

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        copied.append(type(obj).__name__)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(lambda_routing.copy, "deepcopy", counting)
    ddb.transact_write_items(TransactItems=[put("one", text="a"), put("two", text="b")])
    assert "Table" not in copied
    assert len(copied) == 2  # one per touched item (absent ones copy None)


def test_an_item_over_the_size_limit_is_still_refused(ddb: Any) -> None:
    with pytest.raises(ClientError) as caught:
        ddb.put_item(TableName=TABLE, Item=item("big", a="x" * 300_000, b="y" * 120_000))
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "size" in caught.value.response["Error"]["Message"]
    assert get(ddb, "big") is None
    ddb.put_item(TableName=TABLE, Item=item("fits", a="x" * 300_000, b="y" * 90_000))
    assert get(ddb, "fits") is not None


def test_a_nested_item_measures_as_moto_measured_it(ddb: Any) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.utilities import bytesize

    value = {
        "M": {
            "plan": {"M": {"tools": {"L": [{"S": "clock"}, {"M": {"n": {"N": "12.5"}, "ok": {"BOOL": True}}}]}}},
            "tags": {"SS": ["a", "bé"]},
            "blob": {"B": b"\x00\x01"},
            "none": {"NULL": True},
        }
    }

    def reference(v: Any) -> int:  # moto's own rule, written out: a map is its keys plus its members
        t = DynamoType(v) if not isinstance(v, DynamoType) else v
        if t.is_map():
            return sum(bytesize(k) + reference(m) for k, m in t.value.items())
        if t.is_list():
            return sum(reference(m) for m in t.value)
        if t.is_number():
            return len(str(t.value))
        if t.is_set():
            return sum(bytesize(m) for m in t.value)
        if isinstance(t.value, bool):
            return 1
        return bytesize(t.value)

    assert DynamoType(value).size() == reference(value) > 0


EVERY_KIND = {
    "pk": {"S": "every"},
    "sk": {"S": "A"},
    "text": {"S": 'Grüße, ç€ \u2028 "quoted"'},
    "blob": {"B": b"\x00\xff raw"},
    "blobs": {"BS": [b"x", b"\x01"]},
    "n": {"N": "1.50"},
    "big": {"N": "12345678901234567890"},
    "ns": {"NS": ["1", "2.5"]},
    "ss": {"SS": ["a", "b"]},
    "map": {"M": {"none": {"NULL": True}, "empty": {"L": []}, "deep": {"M": {"l": {"L": [{"N": "1"}, {"S": "x"}]}}}}},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def norm(v: Any) -> Any:  # sets come back in any order
        if isinstance(v, dict):
            return {k: (sorted(m) if k in ("SS", "NS", "BS") else norm(m)) for k, m in v.items()}
        if isinstance(v, list):
            return [norm(m) for m in v]
        return v

    return bool(norm(a) == norm(b))


def test_items_read_back_exactly_as_written(ddb: Any) -> None:
    ddb.put_item(TableName=TABLE, Item=EVERY_KIND)
    plain = item("plain", text="just text", count=3)
    ddb.put_item(TableName=TABLE, Item=plain)
    assert same(ddb.get_item(TableName=TABLE, Key=key("every"))["Item"], EVERY_KIND)
    assert ddb.get_item(TableName=TABLE, Key=key("plain"))["Item"] == plain
    assert "Item" not in ddb.get_item(TableName=TABLE, Key=key("missing"))

    for i in range(3):
        ddb.put_item(TableName=TABLE, Item=item("log", f"{i:02}", text=f"line {i}"))
    page = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "log"}},
        Limit=2,
    )
    assert [i["sk"]["S"] for i in page["Items"]] == ["00", "01"] and page["Count"] == 2
    assert page["LastEvaluatedKey"] == key("log", "01")
    rest = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "log"}},
        ExclusiveStartKey=page["LastEvaluatedKey"],
    )
    assert [i["text"]["S"] for i in rest["Items"]] == ["line 2"] and "LastEvaluatedKey" not in rest

    got = ddb.batch_get_item(RequestItems={TABLE: {"Keys": [key("plain"), key("every")]}})
    assert len(got["Responses"][TABLE]) == 2 and got["UnprocessedKeys"] == {}
    updated = ddb.update_item(
        TableName=TABLE,
        Key=key("plain"),
        UpdateExpression="SET #c = #c + :one",
        ExpressionAttributeNames={"#c": "count"},
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    assert updated["Attributes"]["count"] == {"N": "4"}
    assert len(ddb.scan(TableName=TABLE)["Items"]) == 5


def test_only_plain_json_takes_the_direct_way() -> None:
    assert lambda_routing._plain({"Items": [{"a": {"S": "x"}, "n": {"N": "1"}, "b": {"BOOL": True}}], "Count": 1})
    assert not lambda_routing._plain({"Item": {"b": {"B": b"raw"}}})
    assert not lambda_routing._plain({"LastEvaluatedKey": None})
    assert not lambda_routing._plain({"Items": [{"s": {"SS": {"a"}}}]})


def test_a_query_reads_its_partition_in_order_whatever_else_is_stored(ddb: Any) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    ddb.batch_write_item(
        RequestItems={TABLE: [{"PutRequest": {"Item": item(f"other{i}", "A", owner="bo")}} for i in range(25)]}
    )
    for sk in ("03", "01", "02"):
        ddb.put_item(TableName=TABLE, Item=item("run", sk, owner="ana"))

    def query(**extra: Any) -> list[str]:
        r = ddb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk AND sk > :after",
            ExpressionAttributeValues={":pk": {"S": "run"}, ":after": {"S": "01"}},
            **extra,
        )
        return [i["sk"]["S"] for i in r["Items"]]

    assert query() == ["02", "03"]
    assert query(ScanIndexForward=False, Limit=1) == ["03"]
    assert (
        ddb.query(
            TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "nothing"}}
        )["Items"]
        == []
    )
    # an index still sees every partition
    by_owner = ddb.query(
        TableName=TABLE,
        IndexName="by-owner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "bo"}},
    )
    assert by_owner["Count"] == 25
    assert len(ddb.scan(TableName=TABLE)["Items"]) == 28

    # and the partition query compares its own few items, not the table's
    compared = 0
    real_lt = DynamoType.__lt__

    def counting(self: Any, other: Any) -> bool:
        nonlocal compared
        compared += 1
        return bool(real_lt(self, other))

    DynamoType.__lt__ = counting  # type: ignore[method-assign]
    try:
        assert query() == ["02", "03"]
    finally:
        DynamoType.__lt__ = real_lt  # type: ignore[method-assign]
    assert compared < 10
