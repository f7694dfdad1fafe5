"""Naming a conversation: free when given, generated once on request, never over a name somebody set."""

from __future__ import annotations

import time

import httpx

from oberik.engine.titles import TITLE_TASK
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, parse_sse

LONG = " ".join(f"w{i}" for i in range(30))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_title_from_the_message_arrives_mid_turn_before_done(live: str, token: str, provider: ScriptedProvider):
    # Given a slow answer, and a quick name for the conversation
    provider.script(Reply(text=LONG, token_delay=0.03))
    provider.script_when(TITLE_TASK, Reply(text='"Meal penalty reconciliation."'))

    # When a conversation is started with auto titles on
    r = httpx.post(
        f"{live}/chat/stream",
        json={"message": "reconcile the Q3 meal penalties", "enable_auto_title": True},
        headers=_auth(token),
        timeout=30,
    )
    events, _ = parse_sse(r.text)
    names = [e.event for e in events]

    # Then the title frame comes while the answer is still streaming, cleaned, and done carries it
    title_at = names.index("title")
    assert events[title_at].data == {"title": "Meal penalty reconciliation"}
    assert "token" in names[title_at + 1 :]
    assert events[-1].event == "done" and events[-1].data["title"] == "Meal penalty reconciliation"
    sid = events[-1].data["session_id"]
    assert httpx.get(f"{live}/chat/sessions", headers=_auth(token)).json()["items"][0]["title"] == (
        "Meal penalty reconciliation"
    )
    # And the title call saw the user's words
    title_call = next(req for req in provider.requests if TITLE_TASK in str(req["messages"]))
    assert "reconcile the Q3 meal penalties" in title_call["messages"][-1]["content"]

    # And it is generated once: the next message with the flag names nothing
    provider.script(Reply(text="ok"))
    again = httpx.post(
        f"{live}/chat/stream",
        json={"message": "and Q4?", "session_id": sid, "enable_auto_title": True},
        headers=_auth(token),
        timeout=30,
    )
    assert "title" not in [e.event for e in parse_sse(again.text)[0]]


def test_a_title_from_the_response_arrives_with_done(api: Api, token: str, provider: ScriptedProvider):
    provider.script(Reply(text="Here is the reconciliation."))
    provider.script_when(TITLE_TASK, Reply(text="Q3 meal penalties"))
    body = api.chat(token, message="reconcile", enable_auto_title=True, title_from="response").json()
    assert body["title"] == "Q3 meal penalties"
    title_call = next(req for req in provider.requests if TITLE_TASK in str(req["messages"]))
    assert "Here is the reconciliation." in title_call["messages"][-1]["content"]


def test_a_failed_first_turn_keeps_its_placeholder_until_the_next_message(api: Api, token: str, provider):
    provider.script(Fail(500, "down"))
    failed = api.chat(token, message="reconcile", enable_auto_title=True, title_from="response")
    assert failed.status_code == 502
    sid = api.get("/chat/sessions", token).json()["items"][0]["id"]
    assert api.get("/chat/sessions", token).json()["items"][0]["title"] is None
    provider.script(Reply(text="Done this time."))
    provider.script_when(TITLE_TASK, Reply(text="Reconciliation"))
    second = api.chat(token, message="try again", session_id=sid, enable_auto_title=True, title_from="response")
    assert second.json()["title"] == "Reconciliation"


def test_a_rename_while_the_name_is_generated_is_never_overwritten(api: Api, token: str, provider: ScriptedProvider):
    # Given a name that takes a while to generate
    provider.script(Reply(text=LONG, token_delay=0.05))
    provider.script_when(TITLE_TASK, Reply(text="Generated name", ttft=1.0))
    import threading

    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(r=api.chat(token, message="x", enable_auto_title=True)))
    worker.start()
    sid = None
    for _ in range(200):
        items = api.get("/chat/sessions", token).json()["items"]
        if items:
            sid = items[0]["id"]
            break
        time.sleep(0.01)

    # When the user names it meanwhile
    renamed = api.client.patch(f"/chat/sessions/{sid}", json={"title": "My name"}, headers=api.bearer(token))
    worker.join(20)

    # Then their name stands
    assert renamed.status_code == 200
    assert result["r"].json()["title"] == "My name"  # type: ignore[attr-defined]
    assert api.get("/chat/sessions", token).json()["items"][0]["title"] == "My name"


def test_a_title_given_on_the_request_costs_nothing_even_with_auto_title(api: Api, token: str, provider):
    provider.script(Reply(text="ok"))
    body = api.chat(token, message="x", title="Given", enable_auto_title=True).json()
    assert body["title"] == "Given" and len(provider.requests) == 1


def test_auto_title_needs_the_capability(api: Api, scripted_project: Project):
    token = api.token(scripted_project, capabilities=["chat"])
    r = api.chat(token, message="x", enable_auto_title=True)
    assert r.status_code == 403 and "auto_title" in r.json()["detail"]


def test_the_offline_model_names_a_conversation_from_its_first_words(api: Api, project: Project):
    token = api.token(project)
    body = api.chat(token, message="reconcile the Q3 meal penalties for EMEA please", enable_auto_title=True).json()
    assert body["title"] == "Reconcile the Q3 meal penalties for"
