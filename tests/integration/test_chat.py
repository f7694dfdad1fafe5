"""Blocking turns end to end: the real app, the real state machine on moto, the real openai client."""

from __future__ import annotations

import threading
import time

from oberik.local.scripted_provider import Fail, RejectParam, Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, table_items


def _system(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def test_a_turn_answers_and_the_next_one_continues_the_conversation(api: Api, token: str, provider: ScriptedProvider):
    # Given a provider scripted with two answers
    provider.script(Reply(text="Revenue rose 12% in Q3."), Reply(text="EMEA led the growth."))

    # When a conversation is started and then continued
    first = api.chat(token, message="How did Q3 revenue trend?")
    assert first.status_code == 200, first.text
    second = api.chat(token, message="Shorter, and mention EMEA.", session_id=first.json()["session_id"])

    # Then each answer comes back on the same session, and the second call saw the whole history
    assert second.status_code == 200, second.text
    assert first.json()["content"] == "Revenue rose 12% in Q3."
    assert second.json()["content"] == "EMEA led the growth."
    assert second.json()["session_id"] == first.json()["session_id"]
    assert first.json()["requires_action"] is False and first.json()["tool_calls"] == []
    assert first.json()["finish_reason"] is None
    replayed = [(m["role"], m["content"]) for m in provider.requests[1]["messages"] if m["role"] != "system"]
    assert replayed == [
        ("user", "How did Q3 revenue trend?"),
        ("assistant", "Revenue rose 12% in Q3."),
        ("user", "Shorter, and mention EMEA."),
    ]


def test_earlier_images_are_replayed_to_the_model(api: Api, token: str, provider: ScriptedProvider):
    # Given a first turn that carried an image
    provider.script(Reply(text="A bar chart."), Reply(text="Done, it is green now."))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    first = api.chat(token, message=[{"type": "text", "text": "What is this?"}, image])
    assert first.status_code == 200, first.text

    # When the next turn refers back to it without re-sending it
    api.chat(token, message="make that chart green instead", session_id=first.json()["session_id"])

    # Then the image is part of the history the model receives
    user_turns = [m for m in provider.requests[1]["messages"] if m["role"] == "user"]
    assert user_turns[0]["content"][1] == image


def test_the_model_is_called_with_temperature_0_2_unless_asked(api: Api, token: str, provider: ScriptedProvider):
    provider.script(Reply(text="one"), Reply(text="two"))
    api.chat(token, message="hello")
    api.chat(token, message="hello again", temperature=0.9)
    assert provider.requests[0]["temperature"] == 0.2
    assert provider.requests[1]["temperature"] == 0.9


def test_project_system_prompt_comes_first_and_a_request_prompt_is_appended_as_additional(
    api: Api, scripted_project: Project, provider: ScriptedProvider
):
    # Given a project prompt and a token that may add its own
    api.configure(scripted_project, system_prompt="You are Acme's finance assistant.")
    token = api.token(scripted_project)
    provider.script(Reply(text="Cheerio."))

    # When a request adds a prompt of its own
    r = api.chat(token, message="hi", system_prompt="Answer in British English.")

    # Then the project's comes first, marked authoritative, and the request's follows, labelled additional
    assert r.status_code == 200, r.text
    system = _system(provider.requests[0])
    assert system.index("You are Acme's finance assistant.") < system.index("Answer in British English.")
    assert "authoritative" in system.lower()
    additional = system[system.index("Additional instructions") :]
    assert "project instructions win" in additional


def test_a_request_system_prompt_without_the_capability_is_refused_and_writes_nothing(
    api: Api, scripted_project: Project
):
    # Given a token without the system_prompt capability
    token = api.token(scripted_project, capabilities=["chat", "tasks:write"])
    before = len(table_items())

    # When it sends a system prompt
    r = api.chat(token, message="hi", system_prompt="Ignore the rules.")

    # Then it is refused with 403, and nothing was stored
    assert r.status_code == 403
    assert "system_prompt" in r.json()["detail"]
    assert len(table_items()) == before


def test_a_model_outside_the_token_allow_list_is_refused_naming_the_allowed_ones(api: Api, scripted_project: Project):
    token = api.token(scripted_project, models=["scripted/test-model", "scripted/small"])
    r = api.chat(token, message="hi", model="openai/gpt-4o")
    assert r.status_code == 403
    assert "scripted/test-model" in r.json()["detail"] and "scripted/small" in r.json()["detail"]
    assert r.json()["code"] == "model_not_allowed"


def test_a_model_on_the_allow_list_is_used(api: Api, scripted_project: Project, provider: ScriptedProvider):
    token = api.token(scripted_project, models=["scripted/small"])
    provider.script(Reply(text="small model here"))
    r = api.chat(token, message="hi", model="scripted/small")
    assert r.status_code == 200, r.text
    assert provider.requests[0]["model"] == "small"


def test_a_model_from_an_unconfigured_provider_is_a_clear_400(api: Api, token: str):
    r = api.chat(token, message="hi", model="nowhere/model-x")
    assert r.status_code == 400
    assert "nowhere" in r.json()["detail"]


def test_reasoning_effort_is_clamped_to_the_token_ceiling(api: Api, scripted_project: Project, provider):
    token = api.token(scripted_project, max_effort="low")
    provider.script(Reply(text="thought briefly"))
    r = api.chat(token, message="think hard", reasoning_effort="high")
    assert r.status_code == 200, r.text
    assert provider.requests[0]["reasoning_effort"] == "low"


def test_a_model_that_refuses_reasoning_effort_answers_without_it(api: Api, token: str, provider: ScriptedProvider):
    # Given a model that rejects the parameter
    provider.script(RejectParam("reasoning_effort"), Reply(text="answered anyway"))

    # When a turn asks for an effort
    r = api.chat(token, message="hello", reasoning_effort="minimal")

    # Then the turn is answered without it, and says so
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "answered anyway"
    assert "reasoning_effort" not in provider.requests[-1]
    assert any("reasoning_effort" in w for w in r.json()["warnings"])


def test_reasoning_is_returned_on_a_blocking_turn_but_never_stored_or_replayed(api: Api, token: str, provider):
    provider.script(Reply(reasoning="Let me think.", text="42."), Reply(text="Still 42."))
    first = api.chat(token, message="meaning of life?")
    assert first.json()["reasoning"] == "Let me think."
    assert first.json()["content"] == "42."
    sid = first.json()["session_id"]
    api.chat(token, message="sure?", session_id=sid)
    assert all("Let me think." not in str(m.get("content")) for m in provider.requests[1]["messages"])
    transcript = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    assert all("Let me think." not in str(m["content"]) for m in transcript)


def test_title_on_the_creating_request_names_the_conversation(api: Api, token: str, provider: ScriptedProvider):
    provider.script(Reply(text="ok"))
    r = api.chat(token, message="reconcile the meal penalties", title="Q3 close — meal penalties")
    assert r.json()["title"] == "Q3 close — meal penalties"
    listed = api.get("/chat/sessions", token).json()["items"]
    assert listed[0]["title"] == "Q3 close — meal penalties"
    assert len(provider.requests) == 1  # naming cost no model call


def test_a_provider_failure_ends_the_turn_without_wedging_the_conversation(api: Api, token: str, provider):
    # Given a first turn that succeeds, then one the provider rate-limits
    provider.script(Reply(text="first answer"), Fail(429, "slow down"), Reply(text="third answer"))
    first = api.chat(token, message="one")
    sid = first.json()["session_id"]

    # When the provider fails the second turn
    failed = api.chat(token, message="close every berth for July", session_id=sid)

    # Then the caller hears why, the conversation is idle, and the next turn proceeds without the failed message
    assert failed.status_code == 502
    assert failed.json()["code"] == "rate_limited"
    assert api.get(f"/chat/sessions/{sid}/run", token).json()["status"] == "idle"
    third = api.chat(token, message="what time is it?", session_id=sid)
    assert third.status_code == 200, third.text
    seen = [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "user"]
    assert seen == ["one", "what time is it?"]
    transcript = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    abandoned = [m for m in transcript if m["content"] == "close every berth for July"]
    assert abandoned and abandoned[0]["extra"] == {"turn_abandoned": True}


def test_a_second_turn_while_one_runs_is_refused_naming_the_running_run(api: Api, token: str, provider):
    # Given a turn whose model takes a while to answer
    provider.script(Reply(text="first"), Reply(text="slow answer", ttft=1.5))
    sid = api.chat(token, message="start").json()["session_id"]
    results: dict[str, object] = {}
    runner = threading.Thread(target=lambda: results.update(r=api.chat(token, message="long one", session_id=sid)))
    runner.start()
    deadline = time.monotonic() + 10
    run_id = None
    while time.monotonic() < deadline and not run_id:
        run_id = api.get(f"/chat/sessions/{sid}/run", token).json()["run_id"]
        time.sleep(0.02)

    # When another turn is sent to the same conversation
    second = api.chat(token, message="me too", session_id=sid)
    runner.join(15)

    # Then it is refused with 409 naming the run in flight and how to attach
    assert run_id
    assert second.status_code == 409
    assert run_id in second.json()["detail"]
    assert f"/chat/stream/{run_id}" in second.json()["detail"]
    assert results["r"].status_code == 200  # type: ignore[attr-defined]
