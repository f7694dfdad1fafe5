"""Guardrails: refused topics, masked personal data, and a separate judge flagging an ungrounded answer."""

from __future__ import annotations

import httpx

from oberik.domain.guardrails import JUDGE_TASK
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, parse_sse


def test_a_blocked_topic_is_refused_before_the_model_sees_it(
    api: Api, live: str, token: str, scripted_project: Project, provider: ScriptedProvider
):
    # Given a project that refuses questions about salaries
    api.configure(scripted_project, guardrails={"blocked_topics": ["salary of"], "refusal": "Not something I discuss."})
    provider.script(Reply(text="Hello again."))

    # When a user asks about one
    r = httpx.post(
        f"{live}/chat/stream",
        json={"message": "What is the salary of Ana?"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    events, _ = parse_sse(r.text)

    # Then a guardrail frame says why, the answer is the refusal, and the model was never called
    (flag,) = [e.data for e in events if e.event == "guardrail"]
    assert flag["stage"] == "input" and flag["flags"] == ["blocked_topic"]
    done = events[-1].data
    assert done["content"] == "Not something I discuss." and done["guard_flags"] == [flag]
    assert done["finish_reason"] == "guardrail"
    assert provider.requests == []

    # And the refused message never reaches the model later, though the transcript keeps it
    sid = done["session_id"]
    api.chat(token, message="hi", session_id=sid)
    assert [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "user"] == ["hi"]
    msgs = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    assert msgs[0]["extra"] == {"guardrail_blocked": True}


def test_personal_data_is_masked_for_the_model_and_kept_in_the_transcript(
    api: Api, token: str, scripted_project: Project, provider: ScriptedProvider
):
    api.configure(scripted_project, guardrails={"mask_personal_data": True})
    provider.script(Reply(text="Noted."))
    body = api.chat(token, message="Mail ana@acme.com or call +33 6 12 34 56 78").json()
    seen = provider.requests[0]["messages"][-1]["content"]
    assert seen == "Mail [email] or call [phone]"
    assert body["guard_flags"][0]["flags"] == ["personal_data_masked"]
    transcript = api.get(f"/chat/sessions/{body['session_id']}/messages", token).json()["messages"]
    assert transcript[0]["content"] == "Mail ana@acme.com or call +33 6 12 34 56 78"


def test_an_answer_the_tools_do_not_support_is_flagged_by_a_separate_judge(
    api: Api, token: str, scripted_project: Project, provider: ScriptedProvider
):
    # Given groundedness checking, and an answer that adds weather no tool returned
    api.configure(scripted_project, guardrails={"groundedness": True})
    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}]),
        Reply(text="It is 3pm in Tokyo and it is raining."),
    )
    provider.script_when(JUDGE_TASK, Reply(text="UNGROUNDED: nothing shown says it is raining"))

    # When the turn runs
    body = api.chat(token, message="time and weather in Tokyo?").json()

    # Then the answer stands, flagged, and the judge saw the tool's result
    assert body["content"] == "It is 3pm in Tokyo and it is raining."
    assert body["guard_flags"] == [
        {"stage": "output", "flags": ["ungrounded"], "reason": "nothing shown says it is raining"}
    ]
    judge = next(r for r in provider.requests if JUDGE_TASK in str(r["messages"]))
    assert "Asia/Tokyo" in judge["messages"][-1]["content"]


def test_a_grounded_answer_and_a_turn_without_guardrails_flag_nothing(
    api: Api, token: str, scripted_project: Project, provider: ScriptedProvider
):
    provider.script(Reply(text="plain"))
    assert api.chat(token, message="hi").json()["guard_flags"] == []
    api.configure(scripted_project, guardrails={"groundedness": True})
    provider.script(Reply(tool_calls=[{"id": "c1", "name": "current_time", "arguments": {}}]), Reply(text="Noon."))
    provider.script_when(JUDGE_TASK, Reply(text="GROUNDED"))
    assert api.chat(token, message="time?").json()["guard_flags"] == []


def test_an_invalid_pattern_is_a_clear_error(api: Api, project: Project):
    r = api.client.patch(
        f"/api/projects/{project.id}/settings",
        json={"guardrails": {"blocked_patterns": ["(unclosed"]}},
        headers=project.headers,
    )
    assert r.status_code == 422 and "blocked_patterns" in r.json()["detail"]


def test_a_capability_that_degrades_says_so_on_warnings(api: Api, token: str, provider: ScriptedProvider):
    # Given a project with no embedding model and a request that asks for tool narrowing
    provider.script(Reply(text="a"), Reply(text="b"))

    # When the request switches enable_action_space on, the turn says it could not narrow; otherwise it is quiet
    asked = api.chat(token, message="x", enable_action_space=True).json()
    quiet = api.chat(token, message="y").json()
    assert any("enable_action_space could not narrow" in w for w in asked["warnings"])
    assert quiet["warnings"] == []


def test_the_masking_frame_carries_what_the_model_saw(api: Api, token: str, scripted_project: Project, provider):
    api.configure(scripted_project, guardrails={"mask_personal_data": True})
    provider.script(Reply(text="ok"))
    body = api.chat(token, message="card 4111 1111 1111 1111").json()
    assert body["guard_flags"][0]["content"] == "card [card number]"
