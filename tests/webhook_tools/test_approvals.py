"""A gated webhook tool (requiresApproval) through real turns: the call waits in approvals, the platform makes
it once approved (nothing reaches tool_calls), a refusal is told to the model, and an unattended turn waits the
same way until somebody decides with approval_decisions."""

from __future__ import annotations

import time
from typing import Any

import pytest

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
from oberik.api.deps import load_project
from oberik.domain import pauses
from oberik.domain.chat import ChatRequest
from oberik.domain.identity import read_token
from oberik.domain.models import Run
from oberik.engine.models import resolver_for
from oberik.engine.turns import TurnStarter, wait_for_run
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.settings import get_settings
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import Receiver
from tests.integration.test_pauses import call, tool_messages
from tests.webhook_tools.conftest import Answer, Endpoint, create_tool, signed

pytestmark = pytest.mark.usefixtures("allow_private")


def cancel(call_id: str = "c1", order_id: str = "o_1029") -> dict[str, Any]:
    return call("cancel_order", call_id, order_id=order_id)


def decide(api: Api, token: str, session_id: str, *decisions: dict[str, Any]) -> dict[str, Any]:
    r = api.chat(token, session_id=session_id, approval_decisions=list(decisions))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def deliveries(api: Api, project: Project) -> list[dict[str, Any]]:
    r = api.client.get(f"/api/projects/{project.id}/webhook-tools/deliveries", headers=project.headers)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def test_an_approved_call_is_made_by_the_platform_and_the_turn_carries_on(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given a gated webhook tool, and a model that calls it, then answers from its result
    tool = create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    endpoint.script(Answer(body='{"cancelled": true}'))
    token = api.token(scripted_project, subject="acme:fin:ana", scope="acme:fin")
    provider.script(Reply(tool_calls=[cancel()]), Reply(text="Order o_1029 is cancelled [1]."))

    # When the turn runs
    paused = api.chat(token, message="Cancel order o_1029")

    # Then it pauses with the call in approvals (tool and arguments), nothing in tool_calls, nothing sent yet
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["requires_action"] is True and body["tool_calls"] == []
    assert body["approvals"] == [
        {
            "tool_call_id": "c1",
            "action": "Cancel an order belonging to the signed-in customer.",
            "detail": "order_id: o_1029",
            "tool": "cancel_order",
            "arguments": {"order_id": "o_1029"},
        }
    ]
    assert endpoint.calls == []
    assert len(provider.requests) == 1

    # When somebody approves it
    done = decide(api, token, body["session_id"], {"tool_call_id": "c1", "approved": True})

    # Then the platform made the call (signed, for the token's subject) and the turn finished without handing
    # the client anything to run
    assert len(endpoint.calls) == 1
    received = endpoint.calls[0]
    assert received.header("X-Oberik-Signature") == signed(tool["secret"], received.raw)
    assert received.body["subject"] == "acme:fin:ana" and received.body["arguments"] == {"order_id": "o_1029"}
    assert done["requires_action"] is False
    assert done["tool_calls"] == [] and done["approvals"] == []
    assert done["content"] == "Order o_1029 is cancelled [1]."
    assert tool_messages(provider.requests[-1])["c1"] == '[1] {"cancelled": true}'
    assert [d["tool_call_id"] for d in deliveries(api, scripted_project)] == ["c1"]

    # And the same decision sent again is the same resume, not a second call
    again = api.chat(
        token, session_id=body["session_id"], approval_decisions=[{"tool_call_id": "c1", "approved": True}]
    )
    assert again.status_code == 200, again.text
    assert again.json()["run_id"] == done["run_id"]
    assert len(endpoint.calls) == 1


def test_a_refused_call_is_never_made_and_the_model_is_told_so(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    token = api.token(scripted_project)
    provider.script(Reply(tool_calls=[cancel()]), Reply(text="Understood, I left it alone."))
    sid = api.chat(token, message="Cancel order o_1029").json()["session_id"]

    done = decide(api, token, sid, {"tool_call_id": "c1", "approved": False, "note": "keep it, it shipped"})

    assert endpoint.calls == []
    told = tool_messages(provider.requests[-1])["c1"]
    assert told.startswith(pauses.REFUSAL) and "keep it, it shipped" in told
    assert done["content"] == "Understood, I left it alone." and done["tool_calls"] == []
    assert deliveries(api, scripted_project) == []


def test_an_ungated_call_in_the_same_step_is_made_at_once_and_the_gated_one_waits(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    create_tool(api, scripted_project, endpoint.url, name="order_status")
    token = api.token(scripted_project)
    endpoint.script(Answer(body='{"status": "packed"}'), Answer(body='{"cancelled": true}'))
    provider.script(
        Reply(tool_calls=[call("order_status", "s1", order_id="o_1029"), cancel("c1")]),
        Reply(text="Cancelled while it was still packed."),
    )

    paused = api.chat(token, message="If it has not shipped, cancel o_1029").json()
    assert [c.body["tool"] for c in endpoint.calls] == ["order_status"]
    assert [a["tool"] for a in paused["approvals"]] == ["cancel_order"]

    done = decide(api, token, paused["session_id"], {"approved": True})  # the only approval: no id needed
    assert [c.body["tool"] for c in endpoint.calls] == ["order_status", "cancel_order"]
    told = tool_messages(provider.requests[-1])
    assert told["s1"] == '[1] {"status": "packed"}' and told["c1"] == '[2] {"cancelled": true}'
    assert done["content"] == "Cancelled while it was still packed."


def test_an_approval_waits_for_every_decision_of_its_round(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given two gated calls in one step
    create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    token = api.token(scripted_project)
    provider.script(Reply(tool_calls=[cancel("c1", "o_1"), cancel("c2", "o_2")]), Reply(text="One cancelled."))
    sid = api.chat(token, message="Cancel o_1 and o_2").json()["session_id"]

    # When only the first is approved, the turn stays paused on the second, and nothing is sent yet
    half = decide(api, token, sid, {"tool_call_id": "c1", "approved": True})
    assert half["requires_action"] is True
    assert [a["tool_call_id"] for a in half["approvals"]] == ["c2"]
    assert endpoint.calls == []

    # When the second is refused, the first call is made, the second never
    done = decide(api, token, sid, {"tool_call_id": "c2", "approved": False})
    assert [c.body["arguments"]["order_id"] for c in endpoint.calls] == ["o_1"]
    told = tool_messages(provider.requests[-1])
    assert told["c1"].startswith("[1] ") and told["c2"].startswith(pauses.REFUSAL)
    assert done["content"] == "One cancelled." and done["tool_calls"] == []


# --- unattended --------------------------------------------------------------------------------------------


def start_unattended(project: Project, token: str, message: str) -> Run:
    """Start a turn nobody watches, the way a scheduled task does (TurnStarter.plan with unattended=True)."""
    settings = get_settings()
    store = DynamoStore(settings)
    stored = load_project(store, project.id, fresh=True)
    assert stored is not None
    claims = read_token(token, stored.signing_secret.get_secret_value(), int(time.time()))
    starter = TurnStarter(
        store,
        StepFunctionsOrchestrator(settings),
        resolver_for(stored.settings.providers, settings),
        settings.default_model,
    )
    req = ChatRequest(message=message)
    plan = starter.plan(req, stored, claims, unattended=True)
    assert plan.unattended and "cancel_order" in plan.tools
    session, created = starter.session_for(req, stored, claims)
    started = starter._begin(req, stored, claims, session, created, plan, blocking=False)
    return wait_for_run(store, started.run.id, timeout=60, poll=0.02)


def test_an_unattended_turn_pauses_on_a_gated_call_and_is_decided_later(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    # Given a gated tool and a turn nobody is watching (a nightly job acting for ana)
    tool = create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    token = api.token(scripted_project, subject="ana", tenant_id="acme")
    provider.script(Reply(tool_calls=[cancel()]), Reply(text="Cancelled overnight."))

    # When it calls the gated tool
    run = start_unattended(scripted_project, token, "Cancel every unpaid order")

    # Then it waits: paused with the call in approvals, nothing sent
    assert run.status == "paused", run
    assert run.result is not None
    assert [a["tool"] for a in run.result["approvals"]] == ["cancel_order"]
    assert run.result["tool_calls"] == []
    assert endpoint.calls == []
    turn = DynamoStore().get_turn(run.turn_id)
    assert turn is not None and turn.plan.unattended and turn.status == "paused"

    # When somebody decides later, out of band, with approval_decisions
    done = decide(api, token, run.session_id, {"tool_call_id": "c1", "approved": True})

    # Then the platform makes the call for the token's identity and the turn finishes
    assert len(endpoint.calls) == 1
    received = endpoint.calls[0]
    assert received.header("X-Oberik-Signature") == signed(tool["secret"], received.raw)
    assert (received.body["subject"], received.body["tenant_id"]) == ("ana", "acme")
    assert done["content"] == "Cancelled overnight." and done["tool_calls"] == []
    assert done["requires_action"] is False


def test_a_turn_stopped_handler_decides_an_unattended_gated_call(
    api: Api,
    scripted_project: Project,
    provider: ScriptedProvider,
    endpoint: Endpoint,
    receiver: Receiver,
    quick: None,
):
    # Given a project whose turn.stopped webhook reaches a handler, and a gated webhook tool
    api.configure(scripted_project, webhook_url=receiver.url)
    create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    token = api.token(scripted_project, subject="ana")
    provider.script(Reply(tool_calls=[cancel()]), Reply(text="Cancelled overnight."))

    # When an unattended turn calls it
    run = start_unattended(scripted_project, token, "Cancel every unpaid order")
    assert run.status == "paused" and endpoint.calls == []

    # Then the handler is told at once: scheduled, needs approval, with the call it would approve
    (stopped,) = receiver.wait_for(1)
    note = stopped.body
    assert (note["reason"], note["scheduled"], note["needs_input"]) == ("needs_approval", True, True)
    assert note["approvals"] == [
        {"tool_call_id": "c1", "action": "Cancel an order belonging to the signed-in customer."}
    ]

    # And its decision, sent with the session it names, has the platform make the call and finish the turn
    done = decide(
        api, token, note["session_id"], {"tool_call_id": note["approvals"][0]["tool_call_id"], "approved": True}
    )
    assert len(endpoint.calls) == 1 and endpoint.calls[0].body["subject"] == "ana"
    assert done["content"] == "Cancelled overnight."
    completed = receiver.wait_for(2)[1].body
    assert (completed["reason"], completed["complete"]) == ("completed", True)


def test_an_approval_sent_on_the_stream_shows_the_platforms_call_as_tool_frames(
    api: Api, scripted_project: Project, provider: ScriptedProvider, endpoint: Endpoint
):
    from tests.api_fixtures import parse_sse

    create_tool(api, scripted_project, endpoint.url, requiresApproval=True)
    endpoint.script(Answer(body='{"cancelled": true}'))
    token = api.token(scripted_project)
    provider.script(Reply(tool_calls=[cancel()]), Reply(text="Cancelled."))
    sid = api.chat(token, message="Cancel order o_1029").json()["session_id"]

    r = api.client.post(
        "/chat/stream",
        json={"session_id": sid, "approval_decisions": [{"tool_call_id": "c1", "approved": True}]},
        headers=api.bearer(token),
    )
    assert r.status_code == 200, r.text
    events, _ = parse_sse(r.text)
    kinds = [e.event for e in events]
    assert kinds.index("tool_start") < kinds.index("tool_end") < kinds.index("done")
    start = next(e for e in events if e.event == "tool_start")
    end = next(e for e in events if e.event == "tool_end")
    assert start.data == {"name": "cancel_order", "input": {"order_id": "o_1029"}}
    assert end.data["output"] == '[1] {"cancelled": true}'
    done = events[-1].data
    assert done["tool_calls"] == [] and done["content"] == "Cancelled." and done["requires_action"] is False
    assert len(endpoint.calls) == 1
