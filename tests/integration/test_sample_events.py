"""The sample events in events/ drive the real Lambda adapters here, so they cannot go stale."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from oberik.adapters.dynamodb import DynamoStore
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.local.stack import FakeLambdaContext, load_handler
from tests.api_fixtures import Api

ROOT = Path(__file__).resolve().parents[2]


def _event(name: str, token: str) -> dict[str, Any]:
    event = json.loads((ROOT / "events" / name).read_text())
    event = copy.deepcopy(event)
    for headers in (event["headers"], event.get("multiValueHeaders") or {}):
        if "Authorization" in headers:
            value = f"Bearer {token}"
            headers["Authorization"] = [value] if isinstance(headers["Authorization"], list) else value
    return event


def _api_handler() -> Any:
    return load_handler(ROOT / "functions" / "api" / "app.py", "oberik_fn_api_sample")


def _context(name: str) -> FakeLambdaContext:
    return FakeLambdaContext(
        function_name=name,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
        memory_limit_in_mb=512,
        timeout_seconds=30,
    )


def test_the_sample_chat_event_runs_a_turn_through_the_mangum_adapter(api: Api, token: str, provider: ScriptedProvider):
    # Given the sample API Gateway event for POST /chat, carrying a real token
    provider.script(Reply(text="It is noon."))
    handler = _api_handler()

    # When the API function's real adapter handles it
    response = handler(_event("api_chat.json", token), _context("oberik-api"))

    # Then it answers like the HTTP route does
    assert response["statusCode"] == 200, response
    body = json.loads(response["body"])
    assert body["content"] == "It is noon."
    assert provider.requests[0]["messages"][-1]["content"] == "what time is it?"


def test_the_sample_tools_event_lists_tools(api: Api, token: str):
    response = _api_handler()(_event("api_tools.json", token), _context("oberik-api"))
    assert response["statusCode"] == 200
    assert "current_time" in [t["name"] for t in json.loads(response["body"])["tools"]]


def test_the_sample_turn_events_have_the_shape_the_handlers_read(api: Api, token: str, provider: ScriptedProvider):
    # Given a real turn, and the sample events re-pointed at it
    provider.script(Reply(text="done"))
    run_id = api.chat(token, message="hi").json()["run_id"]
    run = DynamoStore().get_run(run_id)
    assert run is not None
    for name in ("step", "finish", "fail", "park", "continue"):
        event = json.loads((ROOT / "events" / f"{name}.json").read_text())
        # Then every field a handler reads is present, and nothing else is needed
        assert {"turn_id", "run_id"} <= set(event), name
    # And the step handler accepts the sample shape for this (finished) turn, answering that it is done
    step = load_handler(ROOT / "functions" / "step" / "app.py", "oberik_fn_step_sample")
    sample = json.loads((ROOT / "events" / "step.json").read_text()) | {"turn_id": run.turn_id, "run_id": run.id}
    assert step(sample, _context("oberik-step"))["verdict"] == "finish"
