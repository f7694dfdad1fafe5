"""template.yaml: it lints, it validates, and it agrees with the code, the state machine and the sample events."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from oberik.local.stack import FAKE_CREDENTIALS, REGION

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM = ROOT / ".venv-sam" / "bin" / "sam"
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
RUN_SH = ROOT / "functions" / "stream" / "run.sh"

# The routes that stream: served by StreamFunction (Lambda Web Adapter, response streaming); every other route,
# POST /chat/stream/{run_id}/cancel included, is ApiFunction's (mangum).
STREAM_ROUTES = {("POST", "/chat/stream"), ("GET", "/chat/stream/{run_id}")}
WEB_ADAPTER_LAYER = "arn:aws:lambda:${AWS::Region}:753240598075:layer:LambdaAdapterLayerArm64:${WebAdapterLayerVersion}"


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


def test_every_function_code_uri_holds_its_handler() -> None:
    # Given every function in the template
    functions = _resources("AWS::Serverless::Function")
    assert functions
    for name, function in functions.items():
        props = function["Properties"]
        if name == "StreamFunction":
            # Then the Lambda Web Adapter function's handler is an executable start-up script
            assert props["Handler"] == "run.sh"
            script = ROOT / props["CodeUri"] / "run.sh"
            assert script.is_file() and os.access(script, os.X_OK), f"{name}: {script} is missing or not executable"
            continue
        # And every other CodeUri is a folder holding the app.py its Handler names
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
    # Then the API, the stream, the continue and the scheduled functions are told, by name (a !Ref would be a
    # circular dependency)
    assert set(told) == {"ApiFunction", "StreamFunction", "ContinueFunction", "ScheduledFunction"}
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
    # Then each turn task and the delivery consumer have an event, and the API has at least one
    assert {"step", "park", "finish", "fail", "continue", "deliver"} <= names
    assert any(name.startswith("api_") for name in names)


# --- the streaming routes on AWS ---


def _api_events(function: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    events = function["Properties"].get("Events", {})
    return {
        (e["Properties"]["Method"].upper(), e["Properties"]["Path"]): e["Properties"]
        for e in events.values()
        if e["Type"] == "Api"
    }


def test_stream_routes_are_the_stream_functions_with_response_streaming() -> None:
    # Given the functions behind the REST API
    functions = _resources("AWS::Serverless::Function")
    stream = _api_events(functions["StreamFunction"])
    # Then StreamFunction answers exactly the two SSE routes, on the one API, streamed for up to 15 minutes
    assert set(stream) == STREAM_ROUTES
    for route, props in stream.items():
        assert props["RestApiId"] == {"Ref": "Api"}, route
        assert props["ResponseTransferMode"] == "RESPONSE_STREAM", route
        assert props["TimeoutInMillis"] == 900_000, route
    # And the mangum function keeps the root and the greedy proxy, which catches every other route (cancel too)
    assert set(_api_events(functions["ApiFunction"])) == {("ANY", "/"), ("ANY", "/{proxy+}")}
    others = {
        name for name, fn in functions.items() if name not in ("StreamFunction", "ApiFunction") and _api_events(fn)
    }
    assert not others


# Run by the SAM CLI's python: SAM's own translator, on the template with its local paths replaced by S3 ones
# (as `sam validate` does) and no managed policies to look up.
_SAM_TRANSLATE = """
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

class NoManagedPolicies:
    def load(self):
        return {}

template = yaml_parse(sys.stdin.read())
for resource in template["Resources"].values():
    for key in ("CodeUri", "ContentUri", "DefinitionUri"):
        if isinstance(resource.get("Properties", {}).get(key), str):
            resource["Properties"][key] = "s3://bucket/key"
json.dump(transform(template, {"AdminKey": "x" * 24}, NoManagedPolicies()), sys.stdout, default=str)
"""


def _translated() -> dict[str, Any]:
    """The CloudFormation SAM makes of the template."""
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"}
    result = subprocess.run(
        [str(SAM_PYTHON), "-c", _SAM_TRANSLATE],
        input=TEMPLATE.read_text(),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    translated: dict[str, Any] = json.loads(result.stdout)
    return translated


@pytest.mark.skipif(not SAM_PYTHON.exists(), reason=f"SAM CLI not installed at {SAM_PYTHON}; `make setup` installs it")
def test_deployed_api_streams_the_sse_routes_from_the_stream_function() -> None:
    # Given the REST API SAM generates from the template
    (api,) = [r for r in _translated()["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    paths = api["Properties"]["Body"]["paths"]
    streaming_uri = (
        "arn:aws:apigateway:${AWS::Region}:lambda:path/2021-11-15/functions/${StreamFunction.Arn}"
        "/response-streaming-invocations"
    )
    buffered_uri = "arn:aws:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/${ApiFunction.Arn}/invocations"
    # Then each SSE route is a Lambda proxy integration that StreamFunction answers through
    # InvokeWithResponseStream, with API Gateway streaming the response
    for method, path in STREAM_ROUTES:
        integration = paths[path][method.lower()]["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy", path
        assert integration["responseTransferMode"] == "STREAM", path
        assert integration["uri"] == {"Fn::Sub": streaming_uri}, path
        assert integration["timeoutInMillis"] == 900_000, path
    # And everything else (cancel included) is ApiFunction's buffered proxy
    assert set(paths) == {"/", "/{proxy+}", "/chat/stream", "/chat/stream/{run_id}"}
    for path in ("/", "/{proxy+}"):
        integration = paths[path]["x-amazon-apigateway-any-method"]["x-amazon-apigateway-integration"]
        assert integration["uri"] == {"Fn::Sub": buffered_uri}, path
        assert "responseTransferMode" not in integration, path


def test_stream_function_runs_behind_the_lambda_web_adapter() -> None:
    # Given StreamFunction and the template's Globals
    template = _template()
    props = template["Resources"]["StreamFunction"]["Properties"]
    globals_ = template["Globals"]["Function"]
    variables = props["Environment"]["Variables"]
    # Then the adapter's bootstrap wraps the runtime and streams responses, once GET /healthz answers on port 8080
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert variables["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert variables["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"
    assert variables["PORT"] == "8080"
    # And the reader streams until the run ends (no long-poll window)
    assert 0 < float(variables["OBERIK_SSE_WINDOW_SECONDS"]) < 900  # ends before Lambda's 15-minute cut
    # And the layers are the core layer (from Globals; SAM appends the function's own) and the arm64 adapter
    assert globals_["Architectures"] == ["arm64"]
    assert globals_["Layers"] == [{"Ref": "CoreLayer"}]
    assert props["Layers"] == [{"Fn::Sub": WEB_ADAPTER_LAYER}]
    version = template["Parameters"]["WebAdapterLayerVersion"]
    assert version["Type"] == "Number"
    assert isinstance(version["Default"], int) and version["Default"] >= 1
    # And a stream may run as long as API Gateway lets it (15 minutes)
    assert props["Timeout"] == 900
    assert props["MemorySize"] == 1024


def test_stream_function_has_what_the_api_function_has_to_start_read_and_stop_turns() -> None:
    # Given the two functions that answer the chat routes
    resources = _template()["Resources"]
    api, stream = resources["ApiFunction"]["Properties"], resources["StreamFunction"]["Properties"]

    # Then StreamFunction may do to the table and the turn state machine what ApiFunction may
    def policies(props: dict) -> set[str]:
        return {json.dumps(p, sort_keys=True, default=str) for p in props["Policies"]}

    assert policies(stream) == policies(api)
    # And, since a streamed turn's first step runs in it, whatever the step function may reach
    step = resources["StepFunction"]["Properties"]
    assert policies(step) <= policies(stream)
    for name in ("OBERIK_BROWSER_BACKEND", "OBERIK_BROWSER_FUNCTION_NAME", "OBERIK_SCHEDULE_GROUP"):
        assert stream["Environment"]["Variables"].get(name) == step["Environment"]["Variables"][name], name
    # And it is told the same state machine and model endpoint, but not the admin key (no stream route needs it)
    api_vars, stream_vars = api["Environment"]["Variables"], stream["Environment"]["Variables"]
    for name in ("OBERIK_STATE_MACHINE_ARN", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        assert stream_vars[name] == api_vars[name], name
    assert "OBERIK_ADMIN_KEY" not in stream_vars


def test_api_function_answers_sse_as_long_poll() -> None:
    # Given the mangum function, whose responses API Gateway buffers
    variables = _template()["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"]
    # Then its SSE responses end after a window (with `retry:`) well inside the 29 s integration timeout
    window = float(variables["OBERIK_SSE_WINDOW_SECONDS"])
    assert 0 < window < 29


def test_run_sh_starts_uvicorn_with_the_app_factory() -> None:
    # Given the stream function's start-up script and its requirements
    script = RUN_SH.read_text()
    requirements = (RUN_SH.parent / "requirements.txt").read_text()
    # Then it is executable and replaces itself with uvicorn serving the app factory on the adapter's port
    assert os.access(RUN_SH, os.X_OK)
    assert script.startswith("#!/bin/sh\n")
    assert re.search(r"^exec python -m uvicorn --factory oberik\.api\.app:create_app\b", script, re.MULTILINE)
    assert '"${AWS_LWA_PORT:-${PORT:-8080}}"' in script
    # And sam build vendors uvicorn into the function (the core layer ships the app, not a server)
    assert re.search(r"^uvicorn\b", requirements, re.MULTILINE)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_run_sh_serves_the_app() -> None:
    # Given run.sh started as the adapter would start it: a free PORT, the local stack's environment, this
    # venv's python (with oberik and uvicorn) first on PATH
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(FAKE_CREDENTIALS)
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PORT": str(port),
            "AWS_DEFAULT_REGION": REGION,
            "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
            "OBERIK_ENVIRONMENT": "local",
            "OBERIK_SSE_WINDOW_SECONDS": "0",
        }
    )
    proc = subprocess.Popen(
        [str(RUN_SH)], cwd=RUN_SH.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        # When the adapter's readiness check polls GET /healthz
        status, body = None, b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    status, body = response.status, response.read()
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        # Then the app answers 200
        assert proc.poll() is None, f"run.sh exited with {proc.returncode}"
        assert status == 200
        assert json.loads(body) == {"ok": True}
        # And it is the whole app: the SSE routes are there
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=10) as response:
            paths = json.loads(response.read())["paths"]
        assert "post" in paths["/chat/stream"]
        assert "get" in paths["/chat/stream/{run_id}"]
    except AssertionError as failure:
        proc.kill()
        output, _ = proc.communicate(timeout=10)
        raise AssertionError(f"{failure}\nrun.sh output:\n{output}") from failure
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
