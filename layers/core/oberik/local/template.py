"""Read `template.yaml` so the local stack and the tests build exactly what `sam deploy` builds.

CloudFormation's short tags (`!Ref`, `!Sub`, `!GetAtt`, ...) load as the long-form dicts they stand for
(`{"Ref": ...}`, `{"Fn::Sub": ...}`, `{"Fn::GetAtt": [resource, attribute]}`), so the rest of the code sees
plain data. Nothing here resolves intrinsics; callers pick out what they need.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import yaml

TEMPLATE_FILE = "template.yaml"
TABLE_RESOURCE = "Table"

# Properties of AWS::DynamoDB::Table that dynamodb.create_table takes under the same name and shape.
_CREATE_TABLE_PROPERTIES = (
    "AttributeDefinitions",
    "KeySchema",
    "BillingMode",
    "ProvisionedThroughput",
    "LocalSecondaryIndexes",
    "GlobalSecondaryIndexes",
    "TableClass",
)
_INDEX_PROPERTIES = ("IndexName", "KeySchema", "Projection", "ProvisionedThroughput", "OnDemandThroughput")
_HTTP_EVENT_TYPES = {"Api", "HttpApi"}


class Template(dict[str, Any]):
    """A loaded template: the parsed document, plus the file it came from."""

    def __init__(self, document: dict[str, Any], path: Path) -> None:
        super().__init__(document)
        self.path = path

    @property
    def root(self) -> Path:
        """The directory the template's relative paths (CodeUri, DefinitionUri) start from."""
        return self.path.parent


class FunctionSpec(TypedDict):
    code_uri: str
    handler: str
    name: str
    runtime: str
    timeout: int
    memory_size: int
    http: bool


class StateMachineSpec(TypedDict):
    logical_id: str
    definition_path: Path
    substitutions: dict[str, str]
    other_substitutions: dict[str, Any]


class _CloudFormationLoader(yaml.SafeLoader):
    """SafeLoader that knows CloudFormation's short tags and keeps dates as strings."""


def _construct_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # pragma: no cover - yaml has no other node kinds
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node for !{tag_suffix}", node.start_mark)
    if tag_suffix in ("Ref", "Condition"):
        return {tag_suffix: value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {f"Fn::{tag_suffix}": value}


def _construct_timestamp_as_text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    # CloudFormation reads AWSTemplateFormatVersion: 2010-09-09 as a string, not a date.
    return str(node.value)


_CloudFormationLoader.add_multi_constructor("!", _construct_tag)
_CloudFormationLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp_as_text)


def parse_template(text: str) -> dict[str, Any]:
    """Parse template text with CloudFormation's short tags."""
    document = yaml.load(text, Loader=_CloudFormationLoader)
    if not isinstance(document, dict):
        raise ValueError("a CloudFormation template must be a mapping")
    return document


def find_template() -> Path:
    """The repository's template.yaml: above the oberik package (installed editable), else above the cwd."""
    import oberik

    starts = [Path(oberik.__file__).resolve().parent, Path.cwd().resolve()]
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / TEMPLATE_FILE
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        f"no {TEMPLATE_FILE} above {starts[0]} or {starts[1]}; run from the oberik repository (or pass a path)"
    )


def load_template(path: str | Path | None = None) -> Template:
    """Load template.yaml (default: the repository's) into a `Template`."""
    resolved = Path(path).resolve() if path is not None else find_template()
    return Template(parse_template(resolved.read_text(encoding="utf-8")), resolved)


def _resources(template: Mapping[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    resources = template.get("Resources") or {}
    return {logical_id: r for logical_id, r in resources.items() if r.get("Type") == resource_type}


def properties_of_type(template: Mapping[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    """The properties of every resource of `resource_type`, by logical id."""
    return {k: dict(r.get("Properties") or {}) for k, r in _resources(template, resource_type).items()}


def _table_properties(template: dict[str, Any]) -> dict[str, Any]:
    tables = _resources(template, "AWS::DynamoDB::Table")
    if TABLE_RESOURCE in tables:
        resource = tables[TABLE_RESOURCE]
    elif len(tables) == 1:
        resource = next(iter(tables.values()))
    else:
        raise LookupError(f"expected a {TABLE_RESOURCE!r} AWS::DynamoDB::Table resource, found {sorted(tables)}")
    return dict(resource.get("Properties") or {})


def table_definition(template: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `dynamodb.create_table` (all but TableName) from the `Table` resource.

    Properties create_table does not take (TimeToLiveSpecification, PointInTimeRecoverySpecification, SSE,
    tags, ...) are left out; see `ttl_attribute` for the TTL.
    """
    properties = _table_properties(template)
    definition = {key: properties[key] for key in _CREATE_TABLE_PROPERTIES if key in properties}
    for index_key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if index_key in definition:
            definition[index_key] = [
                {key: index[key] for key in _INDEX_PROPERTIES if key in index} for index in definition[index_key]
            ]
    stream = properties.get("StreamSpecification")
    if stream and stream.get("StreamViewType"):
        definition["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
    return definition


def ttl_attribute(template: dict[str, Any]) -> str | None:
    """The `Table`'s TTL attribute when its TimeToLiveSpecification is enabled, else None."""
    spec = _table_properties(template).get("TimeToLiveSpecification") or {}
    enabled = spec.get("Enabled", True) in (True, "true", "True")
    return spec.get("AttributeName") if enabled else None


def function_name(logical_id: str, prefix: str = "oberik") -> str:
    """The local function name for a logical id: `StepFunction` -> `oberik-step`, `ContinueTurnFunction` ->
    `oberik-continue-turn`."""
    stem = logical_id.removesuffix("Function") or logical_id
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", stem)
    return "-".join([prefix, *(word.lower() for word in words)])


def functions(template: dict[str, Any]) -> dict[str, FunctionSpec]:
    """Every AWS::Serverless::Function by logical id, with the template's Globals applied."""
    defaults = (template.get("Globals") or {}).get("Function") or {}
    found: dict[str, FunctionSpec] = {}
    for logical_id, resource in _resources(template, "AWS::Serverless::Function").items():
        properties = {**defaults, **(resource.get("Properties") or {})}
        code_uri = properties.get("CodeUri") or (resource.get("Metadata") or {}).get("DockerContext") or ""
        if not isinstance(code_uri, str):
            raise ValueError(f"{logical_id}: only a local CodeUri path is supported, got {code_uri!r}")
        events = properties.get("Events") or {}
        found[logical_id] = {
            "code_uri": code_uri.rstrip("/"),
            "handler": str(properties.get("Handler") or "app.handler"),
            "name": function_name(logical_id),
            "runtime": str(properties.get("Runtime") or "python3.12"),
            "timeout": int(properties.get("Timeout") or 3),
            "memory_size": int(properties.get("MemorySize") or 128),
            "http": any((event or {}).get("Type") in _HTTP_EVENT_TYPES for event in events.values()),
        }
    return found


def arn_reference(value: Any) -> str | None:
    """The logical id when `value` is `!GetAtt <X>.Arn`, else None."""
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
        target = value["Fn::GetAtt"]
        if isinstance(target, str):
            target = target.split(".", 1)
        if len(target) == 2 and target[1] == "Arn":
            return str(target[0])
    return None


def _function_arn_reference(value: Any, function_ids: set[str]) -> str | None:
    """The logical id when `value` is `!GetAtt <Function>.Arn` of a function in the template."""
    found = arn_reference(value)
    return found if found in function_ids else None


def state_machine(template: Template | dict[str, Any]) -> StateMachineSpec:
    """The one AWS::Serverless::StateMachine: its definition file and DefinitionSubstitutions.

    `substitutions` maps each key whose value is `!GetAtt <Function>.Arn` to that function's logical id;
    anything else (literals, other intrinsics) is in `other_substitutions` as written.
    """
    machines = _resources(template, "AWS::Serverless::StateMachine")
    if len(machines) != 1:
        raise LookupError(f"expected one AWS::Serverless::StateMachine, found {sorted(machines)}")
    logical_id, resource = next(iter(machines.items()))
    properties = resource.get("Properties") or {}
    uri = properties.get("DefinitionUri")
    if not isinstance(uri, str):
        raise ValueError(f"{logical_id}: only a local DefinitionUri path is supported, got {uri!r}")
    root = template.root if isinstance(template, Template) else find_template().parent
    function_ids = set(_resources(template, "AWS::Serverless::Function"))
    substitutions: dict[str, str] = {}
    others: dict[str, Any] = {}
    for key, value in (properties.get("DefinitionSubstitutions") or {}).items():
        referenced = _function_arn_reference(value, function_ids)
        if referenced is None:
            others[key] = value
        else:
            substitutions[key] = referenced
    return {
        "logical_id": logical_id,
        "definition_path": root / uri,
        "substitutions": substitutions,
        "other_substitutions": others,
    }
