"""The embedded stack: the resources of template.yaml on moto, with Lambda tasks run in this process.

The same builder serves the tests (inside `mock_aws(config=MOTO_CONFIG)`, see `LocalStack.in_process`) and
`oberik dev` (a `ThreadedMotoServer` on loopback, see `LocalStack.server`). Either way it

- creates the DynamoDB table from the template's `Table` (TTL on),
- creates a moto Lambda function per template function and routes it to the real adapter in
  `functions/<name>/app.py` (the HTTP API function is left out: uvicorn or TestClient serve it),
- creates `statemachines/turn.asl.json` with its DefinitionSubstitutions filled in,
- creates the template's SQS queues (with their redrive policies) and SNS topics, tells the functions where
  they are as the template does (environment variables that `!Ref` them), and runs each function's SQS event
  source as a poller thread (`oberik.local.event_sources`), since moto runs none by itself,
- creates the template's schedule groups and Scheduler role and runs a clock that fires due schedules
  through their Lambda targets (`oberik.local.scheduler_clock`), since moto never fires one,
- points this process's environment (and so `get_settings()` and the client factory) at all of it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Final

import boto3
from moto.core.config import DefaultConfig, default_user_config
from moto.core.models import botocore_stubber
from moto.server import ThreadedMotoServer

from oberik.adapters import aws
from oberik.local import event_sources, lambda_routing, retrieval_sources, scheduler_clock
from oberik.local.template import FunctionSpec, Template, functions, load_template, state_machine, table_definition
from oberik.local.template import ttl_attribute as template_ttl_attribute
from oberik.observability import logger
from oberik.settings import get_settings

# What moto needs to run the turn loop: Step Functions executing definitions, Lambda without Docker.
MOTO_CONFIG: Final[DefaultConfig] = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
}

REGION: Final = "us-east-1"
ACCOUNT_ID: Final = "123456789012"  # moto's default account, whatever the (fake) access key
STATE_MACHINE_NAME: Final = "oberik-turn"  # ${AWS::StackName}-turn with the stack named oberik
ROLE_NAME: Final = "oberik-local"
FAKE_CREDENTIALS: Final = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
}
# Anything that could point boto3 at a real account or another endpoint.
_UNSET: Final = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "OBERIK_ENDPOINT_URL", "MOTO_PORT")

_TRUST_POLICY: Final = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
            "Action": "sts:AssumeRole",
        }
    ],
}
# moto stores the code but never runs it: the router below answers every invoke.
_DUMMY_ZIP: Final = (
    b"PK\x05\x06" + b"\x00" * 18  # an empty zip archive
)

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class FakeLambdaContext:
    """Enough of the Lambda context object for Powertools and the handlers."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_seconds: int
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = "local"
    identity: Any = None
    client_context: Any = None
    tenant_id: str | None = None
    _deadline: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class LambdaAdapter:
    """A routed function: calls a `handler(event, context)` with a fresh context per invocation."""

    def __init__(self, handler: Handler, spec: FunctionSpec, arn: str) -> None:
        self.handler = handler
        self.spec = spec
        self.arn = arn

    def __call__(self, event: dict[str, Any]) -> Any:
        context = FakeLambdaContext(
            function_name=self.spec["name"],
            invoked_function_arn=self.arn,
            memory_limit_in_mb=self.spec["memory_size"],
            timeout_seconds=self.spec["timeout"],
        )
        return self.handler(event, context)


class _Environment:
    """Sets and unsets variables, remembering what was there so `restore` puts it all back."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, key: str, value: str) -> None:
        self._saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def unset(self, key: str) -> None:
        self._saved.setdefault(key, os.environ.get(key))
        os.environ.pop(key, None)

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()


_modules: dict[Path, ModuleType] = {}
_session_lock = threading.Lock()
_session: boto3.session.Session | None = None


def _setup_client(service: str, endpoint_url: str | None) -> Any:
    """A client for building the stack. One shared session: each new one re-reads botocore's endpoint data."""
    global _session
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            service,  # type: ignore[call-overload]
            region_name=REGION,
            endpoint_url=endpoint_url,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )


def load_handler(path: Path, module_name: str, attribute: str = "handler") -> Handler:
    """Import a function's `app.py` by path (once per process) and return its handler."""
    path = path.resolve()
    module = _modules.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        _modules[path] = module
    handler: Handler = getattr(module, attribute)
    return handler


def _failing_route(name: str, error: BaseException) -> lambda_routing.Route:
    def route(event: dict[str, Any]) -> Any:
        raise RuntimeError(f"Lambda function {name} could not be imported: {error!r}")

    return route


# How often a stream reader of `oberik dev` looks at the table itself (see LocalStack.server).
SERVER_STREAM_POLL_SECONDS = 1.0


class LocalStack:
    """The template's resources on moto, and the environment that points this process at them."""

    def __init__(self, template: Template, endpoint_url: str | None = None) -> None:
        self.template = template
        self.endpoint_url = endpoint_url
        self.table_name = ""
        self.ttl_attribute: str | None = None
        self.state_machine_arn = ""
        self.function_arns: dict[str, str] = {}  # function name -> ARN
        self.queues: dict[str, tuple[str, str]] = {}  # queue logical id -> (URL, ARN)
        self.topics: dict[str, str] = {}  # topic logical id -> ARN
        self._pollers: list[Any] = []  # QueuePoller and retrieval_sources.StreamPoller: start() / stop()
        self.schedule_groups: dict[str, str] = {}  # schedule group logical id -> name
        self.clock: scheduler_clock.SchedulerClock | None = None  # fires due schedules (moto never does)
        self._env = _Environment()
        self._server: ThreadedMotoServer | None = None
        self._saved_moto_config: dict[str, Any] = {}  # moto config sections we replaced
        self._werkzeug_level: int | None = None
        self._stopped = False

    # ------------------------------------------------------------------ entry points

    @classmethod
    def in_process(
        cls, *, template_path: str | Path | None = None, overrides: Mapping[str, lambda_routing.Route] | None = None
    ) -> LocalStack:
        """Build the stack on the moto of an active `mock_aws(config=MOTO_CONFIG)` (the caller owns the mock).

        `overrides` replaces the handler of the functions it names (logical id or function name) with a
        plain `callable(event)`, so a test can run the real state machine against scripted steps.
        """
        if not botocore_stubber.enabled or not _moto_config_active():
            raise RuntimeError("LocalStack.in_process() needs an active mock_aws(config=MOTO_CONFIG)")
        stack = cls(load_template(template_path))
        try:
            stack._point_environment()
            stack._build(overrides or {})
        except BaseException:
            stack.stop()
            raise
        return stack

    @classmethod
    def server(
        cls,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        template_path: str | Path | None = None,
        overrides: Mapping[str, lambda_routing.Route] | None = None,
    ) -> LocalStack:
        """Start a `ThreadedMotoServer` on host:port (0: a free port) and build the stack on it.

        Step Functions calls Lambda back through `http://localhost:$MOTO_PORT`, so the server has to be
        reachable on localhost; keep the default loopback host.
        """
        if port:
            _check_port_free(host, port)
        stack = cls(load_template(template_path))
        try:
            stack._configure_moto()
            lambda_routing.remembered_service_list()
            server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
            server.start()
            stack._server = server
            bound_host, bound_port = server.get_host_and_port()
            reachable = "127.0.0.1" if bound_host in ("0.0.0.0", "::", "") else bound_host
            stack.endpoint_url = f"http://{reachable}:{bound_port}"
            # A server started earlier in this process shares moto's backends: start from nothing.
            urllib.request.urlopen(urllib.request.Request(f"{stack.endpoint_url}/moto-api/reset", method="POST"))
            stack._point_environment(moto_port=bound_port)
            # `oberik dev` is for trying webhooks against a receiver on this machine. Unsafe anywhere else.
            stack._env.set("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "1")
            if "OBERIK_STREAM_POLL_SECONDS" not in os.environ:
                # Every function of this stack runs in this process, so whatever writes a run's frames wakes
                # its readers at once (engine.notify); the table is read only as a safety net, less often.
                stack._env.set("OBERIK_STREAM_POLL_SECONDS", str(SERVER_STREAM_POLL_SECONDS))
            stack._build(overrides or {})
        except BaseException:
            stack.stop()
            raise
        return stack

    def stop(self) -> None:
        """Remove the routes, stop the server (if any) and put the environment back. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.clock is not None:  # before the routes it invokes go away
            self.clock.stop()
            self.clock = None
        for poller in self._pollers:  # before the routes they call go away
            poller.stop()
        self._pollers = []
        lambda_routing.uninstall()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._saved_moto_config:
            default_user_config["stepfunctions"] = self._saved_moto_config["stepfunctions"]
            default_user_config["lambda"] = self._saved_moto_config["lambda"]
            self._saved_moto_config = {}
        if self._werkzeug_level is not None:
            logging.getLogger("werkzeug").setLevel(self._werkzeug_level)
            self._werkzeug_level = None
        self._env.restore()
        get_settings.cache_clear()
        aws.reset_clients()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ building

    def _configure_moto(self) -> None:
        # The server's request threads read moto's config from this process-wide dict; swap in copies of
        # our sections (never mutate moto's own) and put the originals back in stop().
        self._saved_moto_config = {
            "stepfunctions": default_user_config["stepfunctions"],
            "lambda": default_user_config["lambda"],
        }
        default_user_config["stepfunctions"] = {**MOTO_CONFIG["stepfunctions"]}
        default_user_config["lambda"] = {**MOTO_CONFIG["lambda"]}
        werkzeug = logging.getLogger("werkzeug")
        self._werkzeug_level = werkzeug.level
        werkzeug.setLevel(logging.WARNING)  # one line per request would drown `oberik dev`

    def _point_environment(self, moto_port: int | None = None) -> None:
        get_settings.cache_clear()
        self.table_name = get_settings().table_name
        for key in _UNSET:
            self._env.unset(key)
        for key in [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL_")]:
            self._env.unset(key)
        for key, value in FAKE_CREDENTIALS.items():
            self._env.set(key, value)
        for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "OBERIK_REGION"):
            self._env.set(key, REGION)
        self._env.set("OBERIK_ENVIRONMENT", "local")
        self._env.set("OBERIK_TABLE_NAME", self.table_name)
        # There is no CloudWatch here: without this every handler warns that it published no metrics.
        self._env.set("POWERTOOLS_METRICS_DISABLED", "true")
        if self.endpoint_url is not None and moto_port is not None:
            self._env.set("AWS_ENDPOINT_URL", self.endpoint_url)
            self._env.set("OBERIK_ENDPOINT_URL", self.endpoint_url)
            # moto's Step Functions engine calls Lambda at http://localhost:$MOTO_PORT when not mocked.
            self._env.set("MOTO_PORT", str(moto_port))
        self._refresh()

    def _client(self, service: str) -> Any:
        return _setup_client(service, self.endpoint_url)

    def _refresh(self) -> None:
        get_settings.cache_clear()
        aws.reset_clients()

    def _build(self, overrides: Mapping[str, lambda_routing.Route]) -> None:
        self._create_table()
        self._create_queues_and_topics()
        role_arn = self._create_role()
        machine = state_machine(self.template)
        needed = set(machine["substitutions"].values())
        routes: dict[str, lambda_routing.Route] = {}
        arns_by_id: dict[str, str] = {}
        lambda_client = self._client("lambda")
        for logical_id, spec in functions(self.template).items():
            if spec["http"] and logical_id not in needed:
                continue  # the HTTP API runs under uvicorn / TestClient, not as a routed Lambda
            arn = lambda_client.create_function(
                FunctionName=spec["name"],
                Runtime=spec["runtime"],
                Role=role_arn,
                Handler=spec["handler"],
                Code={"ZipFile": _DUMMY_ZIP},
                Timeout=spec["timeout"],
                MemorySize=spec["memory_size"],
            )["FunctionArn"]
            self.function_arns[spec["name"]] = arns_by_id[logical_id] = arn
            routes[spec["name"]] = self._route_for(logical_id, spec, arn, overrides, required=logical_id in needed)
        lambda_routing.install(routes)
        lambda_routing.serialize_dynamodb()
        lambda_routing.lighter_items()
        lambda_routing.plain_item_responses()
        lambda_routing.partition_queries()
        lambda_routing.lighter_executions()
        lambda_routing.tolerate_early_stop()
        self._create_state_machine(machine["definition_path"], machine, arns_by_id, role_arn)
        self._env.set("OBERIK_STATE_MACHINE_ARN", self.state_machine_arn)
        self._refresh()
        self._start_pollers(routes)
        self._start_scheduler(arns_by_id)

    def _start_scheduler(self, function_arns: Mapping[str, str]) -> None:
        """The template's schedule groups and Scheduler role, the variables that name them, and the clock."""
        self.schedule_groups, variables = scheduler_clock.create_resources(
            self._client("scheduler"), self._client("iam"), self.template, function_arns
        )
        for variable, value in variables.items():
            self._env.set(variable, value)
        self._refresh()
        self.clock = scheduler_clock.SchedulerClock(
            self._client("scheduler"), self._client("lambda"), list(self.schedule_groups.values())
        )
        self.clock.start()

    def _create_queues_and_topics(self) -> None:
        self.queues = event_sources.create_queues(self._client("sqs"), self.template)
        self.topics = event_sources.create_topics(self._client("sns"), self.template)
        for variable, logical_id in event_sources.environment_references(self.template).items():
            self._env.set(
                variable, self.queues[logical_id][0] if logical_id in self.queues else self.topics[logical_id]
            )
        buckets = retrieval_sources.create_buckets(self._client("s3"), self.template)
        for variable, logical_id in retrieval_sources.bucket_variables(self.template).items():
            self._env.set(variable, buckets[logical_id])

    def _start_pollers(self, routes: Mapping[str, lambda_routing.Route]) -> None:
        specs = functions(self.template)
        for source in event_sources.sqs_event_sources(self.template):
            name = specs[source["function"]]["name"]
            url, arn = self.queues[source["queue"]]
            poller = event_sources.QueuePoller(
                self._client("sqs"),
                url,
                arn,
                routes[name],
                batch_size=source["batch_size"],
                report_failures=source["report_failures"],
                region=REGION,
                name=name,
            )
            self._pollers.append(poller)
            poller.start()
        lambda_routing.trim_table_stream(retrieval_sources.stream_admits(self.template))
        self._pollers.extend(
            retrieval_sources.start_stream_pollers(
                self.template,
                self._client("dynamodb"),
                _setup_client("dynamodbstreams", self.endpoint_url or retrieval_sources.streams_endpoint(REGION)),
                self.table_name,
                routes,
            )
        )

    def _route_for(
        self,
        logical_id: str,
        spec: FunctionSpec,
        arn: str,
        overrides: Mapping[str, lambda_routing.Route],
        *,
        required: bool,
    ) -> lambda_routing.Route:
        override = overrides.get(logical_id) or overrides.get(spec["name"])
        if override is not None:
            return override
        module_file, _, attribute = spec["handler"].rpartition(".")
        path = self.template.root / spec["code_uri"] / f"{module_file.replace('.', '/')}.py"
        module_name = "oberik_fn_" + re.sub(r"\W", "_", Path(spec["code_uri"]).name or logical_id)
        try:
            handler = load_handler(path, module_name, attribute)
        except Exception as exc:
            if required:
                raise RuntimeError(
                    f"the state machine needs {logical_id} but {path} failed to import: {exc!r}"
                ) from exc
            logger.warning("local function not importable", function=spec["name"], path=str(path), error=repr(exc))
            return _failing_route(spec["name"], exc)
        return LambdaAdapter(handler, spec, arn)

    def _create_table(self) -> None:
        dynamodb = self._client("dynamodb")
        dynamodb.create_table(TableName=self.table_name, **table_definition(self.template))
        self.ttl_attribute = template_ttl_attribute(self.template)
        if self.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=self.table_name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": self.ttl_attribute},
            )

    def _create_role(self) -> str:
        role = self._client("iam").create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_TRUST_POLICY))
        arn: str = role["Role"]["Arn"]
        return arn

    def _create_state_machine(
        self, definition_path: Path, machine: Mapping[str, Any], arns_by_id: Mapping[str, str], role_arn: str
    ) -> None:
        values = {key: arns_by_id[logical_id] for key, logical_id in machine["substitutions"].items()}
        for key, raw in machine["other_substitutions"].items():
            values[key] = self._resolve(key, raw)
        definition = definition_path.read_text(encoding="utf-8")
        missing = sorted(set(re.findall(r"\$\{([^}]+)\}", definition)) - set(values))
        if missing:
            raise LookupError(f"{definition_path.name} uses substitutions the template does not define: {missing}")
        definition = re.sub(r"\$\{([^}]+)\}", lambda match: values[match.group(1)], definition)
        self.state_machine_arn = self._client("stepfunctions").create_state_machine(
            name=STATE_MACHINE_NAME, definition=definition, roleArn=role_arn, type="STANDARD"
        )["stateMachineArn"]

    def _resolve(self, key: str, raw: Any) -> str:
        """The few non-function substitution values the local stack can stand in for."""
        table_arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{self.table_name}"
        known: dict[str, str] = {
            json.dumps({"Ref": "Table"}): self.table_name,
            json.dumps({"Fn::GetAtt": ["Table", "Arn"]}): table_arn,
            json.dumps({"Ref": "AWS::Region"}): REGION,
            json.dumps({"Ref": "AWS::AccountId"}): ACCOUNT_ID,
            json.dumps({"Ref": "AWS::Partition"}): "aws",
        }
        if isinstance(raw, str | int | float):
            return str(raw)
        resolved = known.get(json.dumps(raw))
        if resolved is None:
            raise LookupError(f"the local stack cannot resolve DefinitionSubstitutions {key}: {raw!r}")
        return resolved


def _moto_config_active() -> bool:
    return bool(
        default_user_config.get("stepfunctions", {}).get("execute_state_machine")
        and default_user_config.get("lambda", {}).get("use_docker") is False
    )


def _check_port_free(host: str, port: int) -> None:
    # ThreadedMotoServer waits forever when its thread cannot bind, so find out first.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise OSError(f"cannot start the local AWS endpoint on {host}:{port}: {exc.strerror}") from exc
