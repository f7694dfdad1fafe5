"""The retrieval resources of template.yaml on the local stack: its S3 buckets, and its DynamoDB stream event
sources run as poller threads (moto keeps a table's stream but, like SQS, delivers it to no function).

- `create_buckets` makes each `AWS::S3::Bucket` and `bucket_variables` names the environment variables that
  `!Ref` one, so the functions find the bucket here as they do on AWS.
- `StreamPoller` reads the table's stream with the real `dynamodbstreams` API from where the stack started
  (StartingPosition LATEST), keeps the records the event's FilterCriteria admit, and hands them to the function's
  handler in the shape Lambda does. `drain()` lets a test wait until everything written so far was handled.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from oberik.local.event_sources import PollingThread
from oberik.local.template import function_name, properties_of_type

_pollers: list[StreamPoller] = []
_pollers_lock = threading.Lock()


def create_buckets(s3: Any, template: dict[str, Any]) -> dict[str, str]:
    """Create the template's S3 buckets; logical id -> bucket name."""
    made: dict[str, str] = {}
    for logical_id, props in properties_of_type(template, "AWS::S3::Bucket").items():
        name = str(props.get("BucketName") or function_name(logical_id).lower())
        s3.create_bucket(Bucket=name)
        made[logical_id] = name
    return made


def bucket_variables(template: dict[str, Any]) -> dict[str, str]:
    """Environment variables (Globals or a function's) set to `!Ref` a bucket: name -> logical id."""
    buckets = set(properties_of_type(template, "AWS::S3::Bucket"))
    defaults = ((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {}
    found: dict[str, str] = {}
    environments = [
        defaults,
        *(p.get("Environment") or {} for p in properties_of_type(template, "AWS::Serverless::Function").values()),
    ]
    for environment in environments:
        for name, value in (environment.get("Variables") or {}).items():
            if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in buckets:
                found[name] = value["Ref"]
    return found


def stream_sources(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Every DynamoDB event of every function: function logical id, table logical id, batch size, filters."""
    found = []
    for logical_id, props in properties_of_type(template, "AWS::Serverless::Function").items():
        for event in (props.get("Events") or {}).values():
            if (event or {}).get("Type") != "DynamoDB":
                continue
            properties = event.get("Properties") or {}
            stream = properties.get("Stream") or {}
            target = stream.get("Fn::GetAtt") if isinstance(stream, dict) else None
            if isinstance(target, str):
                target = target.split(".", 1)
            if not target or len(target) != 2 or target[1] != "StreamArn":
                raise ValueError(
                    f"{logical_id}: a DynamoDB event must name a table of this template as !GetAtt <Table>.StreamArn"
                )
            patterns = [
                json.loads(f["Pattern"]) for f in ((properties.get("FilterCriteria") or {}).get("Filters") or [])
            ]
            found.append(
                {
                    "function": logical_id,
                    "table": target[0],
                    "batch_size": int(properties.get("BatchSize") or 100),
                    "patterns": patterns,
                }
            )
    return found


def matches_pattern(pattern: Any, value: Any) -> bool:
    """The part of Lambda's event filtering these templates use: nested objects, lists of accepted literals, and
    `{"prefix": ...}`. Anything else is refused rather than guessed at."""
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return False
        return all(matches_pattern(sub, value.get(key)) for key, sub in pattern.items())
    if isinstance(pattern, list):
        for accepted in pattern:
            if isinstance(accepted, dict):
                if list(accepted) != ["prefix"]:
                    raise ValueError(f"the local stream poller does not know the filter {accepted!r}")
                if isinstance(value, str) and value.startswith(accepted["prefix"]):
                    return True
            elif value == accepted:
                return True
        return False
    raise ValueError(f"the local stream poller does not know the filter {pattern!r}")


class StreamPoller(PollingThread):
    """One DynamoDB stream event source, run in a thread."""

    # History indexing is asynchronous anyway; every poll reads the table's whole change stream (frames included)
    # over HTTP, so polling often costs the local stack real CPU. Tests call drain() instead of waiting.
    idle_seconds = 0.5

    def __init__(
        self, streams: Any, stream_arn: str, handler: Any, *, batch_size: int, patterns: list[Any], name: str
    ) -> None:
        self.streams = streams
        self.stream_arn = stream_arn
        self.handler = handler
        self.batch_size = batch_size
        self.patterns = patterns
        self._iterators: dict[str, str] = {}
        for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"].get("Shards", []):
            self._iterators[shard["ShardId"]] = streams.get_shard_iterator(
                StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="LATEST"
            )["ShardIterator"]
        self._lock = threading.Lock()
        super().__init__(f"stream-poller-{name}")

    def start(self) -> None:
        super().start()
        with _pollers_lock:
            _pollers.append(self)

    def stop(self, timeout: float = 30.0) -> None:
        with _pollers_lock:
            if self in _pollers:
                _pollers.remove(self)
        super().stop(timeout)

    def _admitted(self, record: dict[str, Any]) -> bool:
        return not self.patterns or any(matches_pattern(p, record) for p in self.patterns)

    def poll_once(self) -> int:
        """Read what the stream has past each shard's position and hand the admitted records over; returns how
        many records were read. A handler that raises gets the same records again next time, as on Lambda."""
        with self._lock:
            read = 0
            for shard_id, iterator in list(self._iterators.items()):
                got = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                records = [
                    {**r, "eventSourceARN": self.stream_arn} for r in got.get("Records", []) if self._admitted(r)
                ]
                read += len(got.get("Records", []))
                for start in range(0, len(records), self.batch_size):
                    self.handler({"Records": records[start : start + self.batch_size]})
                if got.get("NextShardIterator"):
                    self._iterators[shard_id] = got["NextShardIterator"]
            return read


def streams_endpoint(region: str) -> str:
    """The classic DynamoDB Streams endpoint. Current botocore sends calls naming a stream ARN to an account-specific
    host (<account>.streams-ddb...), which moto's in-process mock does not recognise; this one it does."""
    return f"https://streams.dynamodb.{region}.amazonaws.com"


def drain(rounds: int = 50) -> None:
    """Handle everything the streams hold so far (tests wait on this instead of sleeping)."""
    with _pollers_lock:
        pollers = list(_pollers)
    for poller in pollers:
        for _ in range(rounds):
            if not poller.poll_once():
                break


def start_stream_pollers(
    template: dict[str, Any], dynamodb: Any, streams: Any, table_name: str, routes: Mapping[str, Any]
) -> list[StreamPoller]:
    """Start a poller for each DynamoDB event source of the template (its table is the stack's one table)."""
    from oberik.local.template import functions

    specs = functions(template)
    started = []
    for source in stream_sources(template):
        description = dynamodb.describe_table(TableName=table_name)["Table"]
        arn = description.get("LatestStreamArn")
        if not arn:
            raise ValueError(f"{source['function']} reads the table's stream, but the table has no StreamSpecification")
        name = specs[source["function"]]["name"]
        poller = StreamPoller(
            streams, arn, routes[name], batch_size=source["batch_size"], patterns=source["patterns"], name=name
        )
        poller.start()
        started.append(poller)
    return started


def stream_admits(template: dict[str, Any]) -> Any:
    """A predicate over (event name, key attributes) saying whether any stream event source of the template would
    take a change; None when one takes everything or filters on more than the event name and the keys (then
    every change must be kept). The local stack uses it so moto keeps only the changes something will read."""
    patterns: list[Any] = []
    for source in stream_sources(template):
        if not source["patterns"]:
            return None
        for pattern in source["patterns"]:
            if set(pattern) - {"eventName", "dynamodb"} or set(pattern.get("dynamodb") or {}) - {"Keys"}:
                return None
            patterns.append(pattern)
    if not patterns:
        return None

    def admits(event_name: str, keys: dict[str, Any]) -> bool:
        record = {"eventName": event_name, "dynamodb": {"Keys": keys}}
        return any(matches_pattern(p, record) for p in patterns)

    return admits
