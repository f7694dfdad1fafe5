"""oberik.local.template: reading template.yaml for the local stack and the tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oberik.local.template import (
    Template,
    find_template,
    function_name,
    functions,
    load_template,
    parse_template,
    state_machine,
    table_definition,
    ttl_attribute,
)

FIXTURE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Conditions:
  HasKey: !Not [!Equals [!Ref Key, ""]]
Globals:
  Function:
    Runtime: python3.12
    Handler: app.handler
    Timeout: 30
    MemorySize: 256
Resources:
  Web:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/web/
      Events:
        Proxy:
          Type: Api
          Properties: {Path: "/{proxy+}", Method: ANY}
  WorkFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/work
      Timeout: 900
  ContinueTurnFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/continue_turn
      Handler: main.run
      MemorySize: 1024
  Machine:
    Type: AWS::Serverless::StateMachine
    Properties:
      DefinitionUri: statemachines/machine.asl.json
      DefinitionSubstitutions:
        WorkArn: !GetAtt WorkFunction.Arn
        ContinueArn: !GetAtt [ContinueTurnFunction, Arn]
        TableName: !Ref Table
        Literal: plain
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      TableName: ignored-the-caller-names-it
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: sk, AttributeType: S}
        - {AttributeName: g1, AttributeType: S}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
        - {AttributeName: sk, KeyType: RANGE}
      GlobalSecondaryIndexes:
        - IndexName: G1
          KeySchema:
            - {AttributeName: g1, KeyType: HASH}
          Projection: {ProjectionType: KEYS_ONLY}
          ContributorInsightsSpecification: {Enabled: true}
      TimeToLiveSpecification: {AttributeName: ttl, Enabled: true}
      PointInTimeRecoverySpecification: {PointInTimeRecoveryEnabled: true}
      SSESpecification: {SSEEnabled: true}
      Tags:
        - {Key: team, Value: core}
"""


@pytest.fixture
def fixture_template(tmp_path: Path) -> Template:
    path = tmp_path / "template.yaml"
    path.write_text(FIXTURE)
    return load_template(path)


@pytest.fixture(scope="module")
def real_template() -> Template:
    return load_template()


def test_short_tags_load_as_long_form_intrinsics() -> None:
    # Given a document using every family of short tag, in scalar, sequence and mapping form
    text = """
    ref: !Ref Table
    sub: !Sub arn:${AWS::Partition}:states:::${Name}
    sub_list: !Sub ["${A}-x", {A: !Ref B}]
    getatt: !GetAtt Fn.Arn
    getatt_nested: !GetAtt Api.RootResource.Id
    getatt_list: !GetAtt [Fn, Arn]
    if: !If [Cond, !Ref A, !Ref AWS::NoValue]
    not: !Not [!Equals [!Ref A, ""]]
    select: !Select [0, !Split [",", !Join [",", [a, b]]]]
    others: [!FindInMap [M, k, v], !Base64 text, !GetAZs "", !ImportValue shared, !Condition IsProd]
    version: 2010-09-09
    """

    # When it is parsed
    doc = parse_template(text)

    # Then each tag is the long form CloudFormation would see, and dates stay strings
    assert doc["ref"] == {"Ref": "Table"}
    assert doc["sub"] == {"Fn::Sub": "arn:${AWS::Partition}:states:::${Name}"}
    assert doc["sub_list"] == {"Fn::Sub": ["${A}-x", {"A": {"Ref": "B"}}]}
    assert doc["getatt"] == {"Fn::GetAtt": ["Fn", "Arn"]}
    assert doc["getatt_nested"] == {"Fn::GetAtt": ["Api", "RootResource.Id"]}
    assert doc["getatt_list"] == {"Fn::GetAtt": ["Fn", "Arn"]}
    assert doc["if"] == {"Fn::If": ["Cond", {"Ref": "A"}, {"Ref": "AWS::NoValue"}]}
    assert doc["not"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "A"}, ""]}]}
    assert doc["select"] == {"Fn::Select": [0, {"Fn::Split": [",", {"Fn::Join": [",", ["a", "b"]]}]}]}
    assert doc["others"] == [
        {"Fn::FindInMap": ["M", "k", "v"]},
        {"Fn::Base64": "text"},
        {"Fn::GetAZs": ""},
        {"Fn::ImportValue": "shared"},
        {"Condition": "IsProd"},
    ]
    assert doc["version"] == "2010-09-09"


def test_table_definition_keeps_only_what_create_table_takes(fixture_template: Template) -> None:
    # Given a Table with properties create_table has no parameter for

    # When its definition is taken
    definition = table_definition(fixture_template)

    # Then keys, attributes, indexes and billing come through; the rest (and the name) stay behind
    assert definition == {
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "g1", "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "BillingMode": "PAY_PER_REQUEST",
        "GlobalSecondaryIndexes": [
            {
                "IndexName": "G1",
                "KeySchema": [{"AttributeName": "g1", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    }
    # And the TTL attribute is handed out separately, for update_time_to_live
    assert ttl_attribute(fixture_template) == "ttl"


def test_ttl_attribute_is_none_when_ttl_is_disabled(tmp_path: Path) -> None:
    # Given a table whose TTL specification is switched off
    path = tmp_path / "template.yaml"
    path.write_text(FIXTURE.replace("{AttributeName: ttl, Enabled: true}", "{AttributeName: ttl, Enabled: false}"))

    # When / Then there is no TTL attribute to enable
    assert ttl_attribute(load_template(path)) is None


def test_functions_apply_globals_and_derive_local_names(fixture_template: Template) -> None:
    # Given functions that lean on Globals to different degrees

    # When they are listed
    found = functions(fixture_template)

    # Then each has its code directory, handler and a local name derived from its logical id
    assert found == {
        "Web": {
            "code_uri": "functions/web",
            "handler": "app.handler",
            "name": "oberik-web",
            "runtime": "python3.12",
            "timeout": 30,
            "memory_size": 256,
            "http": True,
        },
        "WorkFunction": {
            "code_uri": "functions/work",
            "handler": "app.handler",
            "name": "oberik-work",
            "runtime": "python3.12",
            "timeout": 900,
            "memory_size": 256,
            "http": False,
        },
        "ContinueTurnFunction": {
            "code_uri": "functions/continue_turn",
            "handler": "main.run",
            "name": "oberik-continue-turn",
            "runtime": "python3.12",
            "timeout": 30,
            "memory_size": 1024,
            "http": False,
        },
    }


@pytest.mark.parametrize(
    ("logical_id", "expected"),
    [
        ("StepFunction", "oberik-step"),
        ("ContinueTurnFunction", "oberik-continue-turn"),
        ("APIGatewayFunction", "oberik-api-gateway"),
        ("Function", "oberik-function"),
        ("Worker2", "oberik-worker2"),
    ],
)
def test_function_name_is_kebab_case_of_the_logical_id(logical_id: str, expected: str) -> None:
    # Given / When / Then
    assert function_name(logical_id) == expected


def test_state_machine_separates_function_arns_from_other_substitutions(fixture_template: Template) -> None:
    # Given a state machine whose substitutions mix function ARNs, a Ref and a literal

    # When it is read
    machine = state_machine(fixture_template)

    # Then function ARNs map to the functions' logical ids and the definition path is beside the template
    assert machine["logical_id"] == "Machine"
    assert machine["definition_path"] == fixture_template.root / "statemachines/machine.asl.json"
    assert machine["substitutions"] == {"WorkArn": "WorkFunction", "ContinueArn": "ContinueTurnFunction"}
    assert machine["other_substitutions"] == {"TableName": {"Ref": "Table"}, "Literal": "plain"}


# ---------------------------------------------------------------- the real template.yaml


def test_load_template_finds_the_repository_template(real_template: Template) -> None:
    # Given the repository checkout (the package is installed editable)

    # When the template is loaded without a path
    path = find_template()

    # Then it is the repository's template.yaml, with the serverless transform
    assert real_template.path == path
    assert (path.parent / "layers" / "core" / "oberik").is_dir()
    assert real_template["Transform"] == "AWS::Serverless-2016-10-31"


def test_real_table_definition_has_the_documented_keys(real_template: Template) -> None:
    # Given the real template

    # When the table definition is taken
    definition = table_definition(real_template)

    # Then it is the single table of ARCHITECTURE.md: pk/sk, GSI1 on gsi1pk/gsi1sk, TTL on expires_at
    assert definition["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert [
        (i["IndexName"], [k["AttributeName"] for k in i["KeySchema"]]) for i in definition["GlobalSecondaryIndexes"]
    ] == [("GSI1", ["gsi1pk", "gsi1sk"])]
    assert definition["BillingMode"] == "PAY_PER_REQUEST"
    assert "TimeToLiveSpecification" not in definition
    assert "PointInTimeRecoverySpecification" not in definition
    assert ttl_attribute(real_template) == "expires_at"


def test_real_template_lists_the_turn_functions_with_adapters_on_disk(real_template: Template) -> None:
    # Given the real template

    # When its functions are listed
    found = functions(real_template)

    # Then the turn's functions are there, each with an adapter file; the API and the stream are HTTP functions
    assert {"ApiFunction", "StepFunction", "ParkFunction", "FinishFunction", "FailFunction"} <= set(found)
    assert sorted(logical_id for logical_id, spec in found.items() if spec["http"]) == ["ApiFunction", "StreamFunction"]
    for spec in found.values():
        if spec["handler"] == "run.sh":  # the Lambda Web Adapter starts the web server itself
            assert (real_template.root / spec["code_uri"] / "run.sh").is_file(), spec
            continue
        module_file = spec["handler"].rpartition(".")[0]
        assert (real_template.root / spec["code_uri"] / f"{module_file}.py").is_file(), spec


def test_real_state_machine_substitutions_cover_its_definition(real_template: Template) -> None:
    # Given the real state machine resource and its definition file
    machine = state_machine(real_template)
    definition = machine["definition_path"].read_text()

    # When the placeholders in the definition are collected
    placeholders = set(re.findall(r"\$\{([^}]+)\}", definition))

    # Then each is a function ARN substitution of a function in the template
    assert placeholders == set(machine["substitutions"])
    assert set(machine["substitutions"].values()) <= set(functions(real_template))
    assert machine["other_substitutions"] == {}


def test_the_local_stream_keeps_only_what_an_event_source_reads() -> None:
    # Given the template's history function, which reads message inserts from the table's stream
    from oberik.local.retrieval_sources import stream_admits
    from oberik.local.template import load_template

    admits = stream_admits(load_template(Path(__file__).resolve().parents[2] / "template.yaml"))
    assert admits is not None

    # Then a new message is kept, while frames, turns and changes to a message are not recorded at all
    def keys(pk: str, sk: str) -> dict:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    assert admits("INSERT", keys("SESSION#s_1", "MSG#00000001"))
    assert not admits("MODIFY", keys("SESSION#s_1", "MSG#00000001"))
    assert not admits("INSERT", keys("RUN#r_1", "F#0000000001"))
    assert not admits("INSERT", keys("TURN#t_1", "TURN"))
