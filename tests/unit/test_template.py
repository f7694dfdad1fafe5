"""template.yaml: it lints, it validates, and it agrees with the code, the state machine and the sample events."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM = ROOT / ".venv-sam" / "bin" / "sam"


class _CfnLoader(yaml.SafeLoader):
    """A YAML loader that keeps CloudFormation short-form tags (!Ref, !Sub, ...) as {"Fn::X": value}."""


def _intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if tag_suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node for !{tag_suffix}", node.start_mark)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def _template() -> dict[str, Any]:
    return yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)


def _resources(kind: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in _template()["Resources"].items() if res["Type"] == kind}


def _state_machine() -> dict[str, Any]:
    (machine,) = _resources("AWS::Serverless::StateMachine").values()
    return machine["Properties"]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed; run `make setup`"
    return found


def test_template_passes_cfn_lint() -> None:
    # Given the template
    # When cfn-lint checks it
    result = subprocess.run([_tool("cfn-lint"), str(TEMPLATE)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    # Then it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not SAM.exists(), reason=f"SAM CLI not installed at {SAM}; `make setup` installs it")
def test_template_passes_sam_validate_lint() -> None:
    # Given the template and the SAM CLI (sam validate runs offline, but wants a region)
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"}
    # When `sam validate --lint` checks it
    result = subprocess.run(
        [str(SAM), "validate", "--lint", "--template-file", str(TEMPLATE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Then it calls the template valid
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def test_every_function_code_uri_has_an_app_module() -> None:
    # Given every function in the template
    functions = _resources("AWS::Serverless::Function")
    assert functions
    for name, function in functions.items():
        props = function["Properties"]
        # Then its CodeUri is a folder holding the app.py its Handler names
        assert props["Handler"] == "app.handler", name
        assert (ROOT / props["CodeUri"] / "app.py").is_file(), f"{name}: {props['CodeUri']}/app.py is missing"


def test_every_definition_substitution_is_used_in_the_asl() -> None:
    # Given the state machine's substitutions and its definition file
    machine = _state_machine()
    asl = (ROOT / machine["DefinitionUri"]).read_text()
    # Then each substitution appears in the definition as ${Key}
    for key in machine["DefinitionSubstitutions"]:
        assert "${" + key + "}" in asl, f"DefinitionSubstitutions.{key} is never used in {machine['DefinitionUri']}"


def test_every_placeholder_in_the_asl_is_substituted() -> None:
    # Given the state machine's definition file
    machine = _state_machine()
    asl = (ROOT / machine["DefinitionUri"]).read_text()
    # When its ${...} placeholders are collected
    placeholders = set(re.findall(r"\$\{([^}]*)\}", asl))
    # Then the template substitutes every one of them
    assert placeholders
    assert placeholders <= set(machine["DefinitionSubstitutions"]), placeholders - set(
        machine["DefinitionSubstitutions"]
    )


def test_substitutions_point_at_functions_in_the_template() -> None:
    # Given the state machine's substitutions
    functions = _resources("AWS::Serverless::Function")
    for key, value in _state_machine()["DefinitionSubstitutions"].items():
        # Then each is the ARN of a function defined here
        target, attribute = value["Fn::GetAtt"]
        assert target in functions, key
        assert attribute == "Arn", key


def test_state_machine_arn_is_built_from_the_state_machine_name() -> None:
    # Given the state machine's name and the functions told its ARN
    name = _state_machine()["Name"]["Fn::Sub"]
    told = {
        fn: res["Properties"]["Environment"]["Variables"]["OBERIK_STATE_MACHINE_ARN"]
        for fn, res in _resources("AWS::Serverless::Function").items()
        if "OBERIK_STATE_MACHINE_ARN" in res["Properties"].get("Environment", {}).get("Variables", {})
    }
    # Then the API and the continue function are told, by name (a !Ref would be a circular dependency)
    assert set(told) == {"ApiFunction", "ContinueFunction"}
    for fn, arn in told.items():
        assert arn == {
            "Fn::Sub": f"arn:${{AWS::Partition}}:states:${{AWS::Region}}:${{AWS::AccountId}}:stateMachine:{name}"
        }, fn


def test_table_has_the_keys_ttl_and_index_the_platform_uses() -> None:
    # Given the one table
    props = _template()["Resources"]["Table"]["Properties"]
    # Then it is keyed pk/sk, has GSI1 on gsi1pk/gsi1sk projecting everything, and expires items on expires_at
    assert {k["AttributeName"]: k["KeyType"] for k in props["KeySchema"]} == {"pk": "HASH", "sk": "RANGE"}
    (gsi,) = props["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == "GSI1"
    assert {k["AttributeName"]: k["KeyType"] for k in gsi["KeySchema"]} == {"gsi1pk": "HASH", "gsi1sk": "RANGE"}
    assert gsi["Projection"] == {"ProjectionType": "ALL"}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"


@pytest.mark.parametrize("event", sorted((ROOT / "events").glob("*.json")), ids=lambda p: p.name)
def test_sample_event_parses(event: Path) -> None:
    # Given a sample event
    # When it is parsed as JSON
    parsed = json.loads(event.read_text())
    # Then it is an object, as `sam local invoke -e` needs
    assert isinstance(parsed, dict)


def test_sample_events_cover_every_function() -> None:
    # Given the sample events folder
    names = {p.stem for p in (ROOT / "events").glob("*.json")}
    # Then each turn task has an event, and the API has at least one
    assert {"step", "park", "finish", "fail", "continue"} <= names
    assert any(name.startswith("api_") for name in names)
