"""Calling webhook tools from real turns (the turn loop on moto, the scripted model through the real `openai`
client) against an endpoint on loopback: what the endpoint receives and how it is signed, what the model reads
back, which calls the gate lets through, and the deliveries lists."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oberik.adapters.dynamodb import DynamoStore
from oberik.engine import webhook_tools
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.integration.test_pauses import call, offered, tool_messages
from tests.webhook_tools.conftest import Answer, Endpoint, closed_port_url, create_tool, signed

pytestmark = pytest.mark.usefixtures("allow_private")

IDENTITY = {
    "scope": "acme:fin",
    "roles": ["member"],
    "groups": ["finance"],
    "tenant_id": "acme",
}


def cancel(order_id: str = "o_1029", call_id: str = "c1", **extra: Any) -> dict[str, Any]:
    return call("cancel_order", call_id, order_id=order_id, **extra)


def run_call(api: Api, token: str, provider: ScriptedProvider, *, final: str = "Done.", **chat: Any) -> dict[str, Any]:
    """One turn in which the model calls cancel_order once, then answers `final`."""
    provider.script(Reply(tool_calls=[cancel()]), Reply(text=final))
    r = api.chat(token, message="Cancel order o_1029", **chat)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def told(provider: ScriptedProvider, call_id: str = "c1") -> str:
    return tool_messages(provider.requests[-1])[call_id]


def turn_of(run_id: str) -> Any:
    store = DynamoStore()
    run = store.get_run(run_id)
    assert run is not None
    return store.get_turn(run.turn_id)


# --- what the endpoint receives -----------------------------------------------------------------------------


def test_the_call_is_signed_with_the_tools_secret_and_carries_the_callers_identity(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given a webhook tool, and a user's token carrying their identity
    tool = create_tool(api, scripted_project, endpoint.url)
    token = api.token(scripted_project, subject="acme:fin:ana", **IDENTITY)

    # When the model calls the tool, slipping someone else's identity into its arguments
    provider.script(
        Reply(tool_calls=[cancel(subject="acme:ceo", tenant_id="other", roles=["admin"])]), Reply(text="Done.")
    )
    r = api.chat(token, message="Cancel order o_1029")
    assert r.status_code == 200, r.text

    # Then the endpoint got exactly one POST, signed over its raw bytes with this tool's own secret
    assert len(endpoint.calls) == 1
    received = endpoint.calls[0]
    assert received.path == "/agent/orders"
    assert received.header("X-Oberik-Signature") == signed(tool["secret"], received.raw)
    assert received.header("Content-Type") == "application/json"
    assert "X-Signature" not in received.headers  # the other scheme's header is not used here

    # And who is asking comes from the token, whatever the model wrote
    body = received.body
    assert body["tool"] == "cancel_order"
    assert body["subject"] == "acme:fin:ana"
    assert (body["scope"], body["roles"], body["groups"], body["tenant_id"]) == (
        "acme:fin",
        ["member"],
        ["finance"],
        "acme",
    )
    assert body["session_id"] == r.json()["session_id"]
    assert body["arguments"]["order_id"] == "o_1029"
    assert set(body) == {"tool", "arguments", "subject", "scope", "roles", "groups", "tenant_id", "session_id"}


def test_a_tampered_body_or_another_tools_secret_does_not_verify(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    create_tool(api, scripted_project, endpoint.url)
    other = create_tool(api, scripted_project, endpoint.url, name="refund_order")
    run_call(api, api.token(scripted_project), provider)
    received = endpoint.calls[0]
    assert received.header("X-Oberik-Signature") != signed(other["secret"], received.raw)
    tampered = received.raw.replace(b"o_1029", b"o_1030")
    assert received.header("X-Oberik-Signature") != signed(other["secret"], tampered)


def test_after_a_rotation_calls_carry_both_signatures_until_the_old_secret_expires(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given a tool whose secret was rotated
    tool = create_tool(api, scripted_project, endpoint.url)
    r = api.client.post(
        f"/api/projects/{scripted_project.id}/webhook-tools/{tool['id']}/rotate", headers=scripted_project.headers
    )
    new = r.json()["secret"]
    token = api.token(scripted_project)

    # When it is called
    run_call(api, token, provider)

    # Then the header carries two signatures, comma-separated: the new secret's, then the old one's
    received = endpoint.calls[-1]
    sigs = received.header("X-Oberik-Signature").split(",")
    assert sigs == [signed(new, received.raw), signed(tool["secret"], received.raw)]

    # And a verifier written the spec's way accepts it holding either secret alone
    for secret in (new, tool["secret"]):
        assert signed(secret, received.raw) in sigs

    # When the 24 hours are over (moved into the past here)
    store = DynamoStore()
    current = store.get_webhook_tool(scripted_project.id, tool["id"])
    assert current is not None
    assert store.save_webhook_tool(current.model_copy(update={"previous_secret_until": 1.0}), previous=current)
    run_call(api, token, provider)

    # Then only the new secret signs
    received = endpoint.calls[-1]
    assert received.header("X-Oberik-Signature") == signed(new, received.raw)


# --- what the model reads back ------------------------------------------------------------------------------


def test_the_answer_becomes_the_result_with_a_citation_marker(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    endpoint.script(Answer(body='{"cancelled": true, "refund": "12.40 EUR"}'))
    create_tool(api, scripted_project, endpoint.url)
    body = run_call(api, api.token(scripted_project), provider, final="Cancelled; 12.40 EUR is on its way [1].")

    assert body["content"] == "Cancelled; 12.40 EUR is on its way [1]."
    assert body["tool_calls"] == [] and body["requires_action"] is False
    assert told(provider) == '[1] {"cancelled": true, "refund": "12.40 EUR"}'
    turn = turn_of(body["run_id"])
    assert len(turn.citations) == 1
    cited = turn.citations[0]
    assert (cited["marker"], cited["kind"], cited["title"]) == (1, "tool", "cancel_order")
    assert cited["quote"] == '{"cancelled": true, "refund": "12.40 EUR"}'


def test_a_text_answer_is_passed_on_as_text(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    endpoint.script(Answer(body="Order o_1029 is cancelled.", content_type="text/plain; charset=utf-8"))
    create_tool(api, scripted_project, endpoint.url)
    run_call(api, api.token(scripted_project), provider)
    assert told(provider) == "[1] Order o_1029 is cancelled."


def test_a_long_answer_is_capped_at_20000_characters(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    long = "".join(f"line {i:05d} é\n" for i in range(3000))  # 42,000 characters, some of them two bytes
    endpoint.script(Answer(body=long, content_type="text/plain; charset=utf-8"))
    create_tool(api, scripted_project, endpoint.url)
    run_call(api, api.token(scripted_project), provider)
    result = told(provider)
    assert len(result) <= 20_000
    assert result.startswith("[1] line 00000 é\nline 00001")
    assert long[:19_000] in result
    assert "cut at 20,000 characters" in result


def test_a_non_2xx_answer_is_a_result_the_model_reads(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    endpoint.script(Answer(status=409, body="order already shipped", content_type="text/plain"))
    create_tool(api, scripted_project, endpoint.url)
    body = run_call(api, api.token(scripted_project), provider, final="It had already shipped.")
    assert told(provider) == "'cancel_order' returned 409: order already shipped"
    assert body["content"] == "It had already shipped."
    assert turn_of(body["run_id"]).citations == []  # a refusal is not a source


def test_a_timeout_is_a_result(
    api: Api,
    scripted_project: Project,
    provider: ScriptedProvider,
    endpoint: Endpoint,
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(webhook_tools, "CALL_TIMEOUT_SECONDS", 0.5)
    endpoint.script(Answer(sleep=3.0))
    create_tool(api, scripted_project, endpoint.url)
    body = run_call(api, api.token(scripted_project), provider, final="It did not answer.")
    assert told(provider).startswith("'cancel_order' could not be reached: no answer from 127.0.0.1 within 0.5 s")
    assert body["content"] == "It did not answer."


def test_a_refused_connection_is_a_result(api: Api, scripted_project: Project, provider: ScriptedProvider):
    create_tool(api, scripted_project, closed_port_url())
    body = run_call(api, api.token(scripted_project), provider, final="Unreachable.")
    assert told(provider).startswith("'cancel_order' could not be reached: could not connect to 127.0.0.1")
    assert body["content"] == "Unreachable."


def test_the_target_is_checked_again_at_call_time(
    api: Api,
    scripted_project: Project,
    provider: ScriptedProvider,
    endpoint: Endpoint,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a tool accepted while private targets were allowed, on a deployment that no longer allows them
    create_tool(api, scripted_project, endpoint.url)
    from oberik.settings import get_settings

    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "0")
    get_settings.cache_clear()

    # When the model calls it, the guard refuses the loopback address and nothing is sent
    run_call(api, api.token(scripted_project), provider)
    assert endpoint.calls == []
    assert told(provider).startswith("'cancel_order' was not called: url is refused: 127.0.0.1 is a loopback address")


def test_a_tool_deleted_after_the_turn_was_planned_is_not_called(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    from oberik.domain.models import Turn
    from oberik.engine import toolbox
    from oberik.engine.tools import ToolOutcome

    tool = create_tool(api, scripted_project, endpoint.url)
    store = DynamoStore()
    stored = store.get_webhook_tool(scripted_project.id, tool["id"])
    assert stored is not None and store.delete_webhook_tool(stored)
    turn = Turn.model_validate(
        {
            "id": "t_x",
            "session_id": "s_x",
            "project_id": scripted_project.id,
            "owner": "ana",
            "run_id": "r_x",
            "created_at": 0,
            "plan": {"model": "scripted/x", "tools": ["cancel_order"], "caller": {"subject": "ana"}},
        }
    )
    ctx = toolbox.ToolContext(turn, cancel_call(), {"order_id": "o_1"}, store, None, 0.0)
    outcome = webhook_tools.call(ctx)
    assert outcome == ToolOutcome(
        "'cancel_order' was not called: the project no longer has a webhook tool of that name.", ok=False
    )
    assert endpoint.calls == []


def test_a_gate_switched_on_after_the_turn_was_planned_applies_at_once(
    api: Api, scripted_project: Project, endpoint: Endpoint
):
    from oberik.domain.models import Turn
    from oberik.engine import toolbox

    # Given a turn planned while the tool was ungated, and the gate switched on since
    tool = create_tool(api, scripted_project, endpoint.url)
    r = api.client.patch(
        f"/api/projects/{scripted_project.id}/webhook-tools/{tool['id']}",
        json={"requiresApproval": True},
        headers=scripted_project.headers,
    )
    assert r.status_code == 200, r.text
    raw = {
        "id": "t_x",
        "session_id": "s_x",
        "project_id": scripted_project.id,
        "owner": "ana",
        "run_id": "r_x",
        "created_at": 0,
        "plan": {"model": "scripted/x", "tools": ["cancel_order"], "caller": {"subject": "ana"}},
    }
    store = DynamoStore()

    # When the model's call reaches the family, it is not made
    ctx = toolbox.ToolContext(Turn.model_validate(raw), cancel_call(), {"order_id": "o_1"}, store, None, 0.0)
    outcome = webhook_tools.call(ctx)
    assert not outcome.ok and "now needs a person's approval" in outcome.content
    assert endpoint.calls == []

    # But the same call, once approved, is
    approved = {**raw, "pending": {"approved": [{"id": "c1", "name": "cancel_order", "args": {"order_id": "o_1"}}]}}
    turn = Turn.model_validate(approved)
    writer = type("W", (), {"emit": lambda *a, **k: None})()
    ctx = toolbox.ToolContext(turn, cancel_call(), {"order_id": "o_1"}, store, writer, 0.0)
    assert webhook_tools.call(ctx).ok
    assert len(endpoint.calls) == 1


def cancel_call() -> Any:
    from oberik.domain.llm import ToolCall

    return ToolCall(id="c1", name="cancel_order", arguments='{"order_id": "o_1"}')


# --- the gate ------------------------------------------------------------------------------------------------


def tools_listed(api: Api, token: str, **params: Any) -> dict[str, dict[str, Any]]:
    r = api.get("/tools", token, **params)
    assert r.status_code == 200, r.text
    return {t["name"]: t for t in r.json()["tools"]}


def test_the_catalog_follows_every_change_at_once_though_plans_keep_the_list_briefly(
    api: Api, scripted_project: Project
):
    # The list is kept for a few seconds for planning turns; a change made here must not wait for that.
    token = api.token(scripted_project)
    created = create_tool(api, scripted_project, "http://127.0.0.1:9/a", name="cancel_order")
    assert tools_listed(api, token)["cancel_order"]["requires_approval"] is False  # read, and kept
    path = f"/api/projects/{scripted_project.id}/webhook-tools/{created['id']}"
    r = api.client.patch(path, json={"requiresApproval": True}, headers=scripted_project.headers)
    assert r.status_code == 200, r.text
    assert tools_listed(api, token)["cancel_order"]["requires_approval"] is True
    r = api.client.patch(path, json={"name": "void_order"}, headers=scripted_project.headers)
    assert r.status_code == 200, r.text
    assert "void_order" in tools_listed(api, token) and "cancel_order" not in tools_listed(api, token)
    assert api.client.delete(path, headers=scripted_project.headers).status_code == 204
    assert "void_order" not in tools_listed(api, token)


def test_get_tools_reports_each_webhook_tool_with_its_gate(api: Api, scripted_project: Project):
    create_tool(api, scripted_project, "http://127.0.0.1:9/a", name="cancel_order", requiresApproval=True)
    create_tool(api, scripted_project, "http://127.0.0.1:9/b", name="order_status")
    tools = tools_listed(api, api.token(scripted_project))
    assert tools["cancel_order"]["requires_approval"] is True
    assert tools["order_status"]["requires_approval"] is False
    assert tools["cancel_order"]["source"] == "webhook"
    assert tools["cancel_order"]["capability"] == "webhook_tools"
    assert tools["cancel_order"]["parameters"]["required"] == ["order_id"]


def test_the_capability_the_flag_and_allowed_tools_gate_webhook_tools(
    api: Api, scripted_project: Project, provider: ScriptedProvider
):
    create_tool(api, scripted_project, "http://127.0.0.1:9/a", name="cancel_order")
    create_tool(api, scripted_project, "http://127.0.0.1:9/b", name="order_status")
    granted = api.token(scripted_project)
    without = api.token(scripted_project, capabilities=["chat", "tasks:write"])

    # The listing
    assert {"cancel_order", "order_status"} <= set(tools_listed(api, granted))
    assert not {"cancel_order", "order_status"} & set(tools_listed(api, without))
    assert not {"cancel_order", "order_status"} & set(tools_listed(api, granted, enable_webhook_tools="false"))
    assert set(tools_listed(api, granted, allowed_tools="order_status")) == {"order_status"}

    # And what turns are handed, the same
    provider.script(*(Reply(text="ok") for _ in range(4)))
    api.chat(granted, message="a")
    api.chat(without, message="b")
    api.chat(granted, message="c", enable_webhook_tools=False)
    api.chat(granted, message="d", allowed_tools=["order_status"])
    handed = [offered(r) for r in provider.requests]
    assert {"cancel_order", "order_status"} <= set(handed[0])
    assert not {"cancel_order", "order_status"} & set(handed[1])
    assert not {"cancel_order", "order_status"} & set(handed[2])
    assert handed[3] == ["order_status"]


def test_the_project_ceiling_bounds_webhook_tools(api: Api, scripted_project: Project):
    create_tool(api, scripted_project, "http://127.0.0.1:9/a")
    api.configure(scripted_project, capabilities=["chat"])
    token = api.token(scripted_project, capabilities=["chat", "webhook_tools"])
    assert "cancel_order" not in tools_listed(api, token)


def test_a_call_to_a_tool_the_turn_was_not_handed_is_not_made(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    create_tool(api, scripted_project, endpoint.url)
    run_call(api, api.token(scripted_project), provider, enable_webhook_tools=False)
    assert endpoint.calls == []
    assert "no tool named 'cancel_order'" in told(provider)


# --- the deliveries lists -----------------------------------------------------------------------------------


def test_recent_calls_are_listed_with_tool_status_duration_and_error(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given three calls: one answered, one refused by the endpoint, one to a tool nobody serves
    endpoint.script(Answer(body='{"ok": true}'), Answer(status=500, body="database down", content_type="text/plain"))
    create_tool(api, scripted_project, endpoint.url)
    create_tool(api, scripted_project, closed_port_url(), name="order_status")
    token = api.token(scripted_project, subject="ana")
    provider.script(
        Reply(tool_calls=[cancel(call_id="c1")]),
        Reply(tool_calls=[cancel(call_id="c2")]),
        Reply(tool_calls=[call("order_status", "c3", order_id="o_1")]),
        Reply(text="done"),
    )
    assert api.chat(token, message="go").status_code == 200

    # Then the control plane lists them newest first
    r = api.client.get(
        f"/api/projects/{scripted_project.id}/webhook-tools/deliveries", headers=scripted_project.headers
    )
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [(i["tool"], i["status"], i["ok"]) for i in items] == [
        ("order_status", None, False),
        ("cancel_order", 500, False),
        ("cancel_order", 200, True),
    ]
    assert all(isinstance(i["duration_ms"], int) and i["duration_ms"] >= 0 for i in items)
    assert "could not connect" in items[0]["error"]
    assert items[1]["error"] == "'cancel_order' returned 500: database down"
    assert items[2]["error"] is None
    assert {i["subject"] for i in items} == {"ana"}
    assert [i["tool_call_id"] for i in items] == ["c3", "c2", "c1"]

    # And filtered by tool, and limited
    by_tool = api.client.get(
        f"/api/projects/{scripted_project.id}/webhook-tools/deliveries",
        params={"tool": "order_status"},
        headers=scripted_project.headers,
    ).json()["items"]
    assert [i["tool_call_id"] for i in by_tool] == ["c3"]
    one = api.client.get(
        f"/api/projects/{scripted_project.id}/webhook-tools/deliveries",
        params={"limit": 1},
        headers=scripted_project.headers,
    ).json()["items"]
    assert [i["tool_call_id"] for i in one] == ["c3"]

    # And the data plane gives the same list to an admin token, and a 404 to anyone else
    admin = api.token(scripted_project, subject="ops", roles=["admin"])
    r = api.get("/tools/deliveries", admin)
    assert r.status_code == 200, r.text
    assert r.json()["items"] == items
    for other in (token, api.token(scripted_project, subject="bob", roles=["member", "administrator"])):
        r = api.get("/tools/deliveries", other)
        assert r.status_code == 404, r.text
        assert 'roles: ["admin"]' in r.json()["detail"]
    assert api.client.get("/tools/deliveries").status_code == 401


def test_one_projects_deliveries_are_not_anothers(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    create_tool(api, scripted_project, endpoint.url)
    run_call(api, api.token(scripted_project), provider)
    other = api.create_project("other")
    admin = api.token(other, subject="ops", roles=["admin"])
    assert api.get("/tools/deliveries", admin).json()["items"] == []
    r = api.client.get(f"/api/projects/{scripted_project.id}/webhook-tools/deliveries", headers=other.headers)
    assert r.status_code == 404
    assert (
        json.loads(api.client.get(f"/api/projects/{other.id}/webhook-tools/deliveries", headers=other.headers).text)[
            "items"
        ]
        == []
    )


@pytest.mark.parametrize("name", ["cancel_order", "browser_goto", "current_time"])
def test_a_declared_tool_may_not_shadow_a_tool_the_platform_runs(
    api: Api, scripted_project: Project, provider: ScriptedProvider, name: str
):
    # Given a project with a webhook tool, and the platform's own tools
    create_tool(api, scripted_project, "http://127.0.0.1:9/a", name="cancel_order")
    declared = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}]

    # When a request declares a client tool or a UI component by one of their names
    for field in ("client_tools", "ui_tools"):
        r = api.chat(api.token(scripted_project, "ana"), message="hi", **{field: declared})

        # Then it is refused before anything runs: which of the two would a call to that name reach?
        assert r.status_code == 400, r.text
        assert name in r.json()["detail"] and field in r.json()["detail"]
    assert provider.requests == []
