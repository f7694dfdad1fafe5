"""Follow-ups and the recap: one bounded model call each, never stored, never an error."""

from __future__ import annotations

import time
from typing import Any

import pytest

from oberik.client import Client, NotFound
from oberik.domain.models import Message
from oberik.engine import aside
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from tests.api_fixtures import Api, Project

SUGGESTIONS = '["do the box-* ones too", "show me a diff first", "what breaks if I skip archived?"]'


def conversation(client: Client, provider: ScriptedProvider) -> str:
    provider.script(Reply(text="I migrated the forfaits-* fetchers; archived ones are untouched."))
    return client.chat.send(message="migrate the forfaits fetchers").session_id


def test_followups_come_from_one_model_call_and_are_not_stored(live: str, token: str, provider: ScriptedProvider):
    # Given a conversation, and a model that suggests three follow-ups
    client = Client(live, token=token)
    sid = conversation(client, provider)
    before = client.sessions.messages(sid)
    provider.script(Reply(text=SUGGESTIONS))

    # When follow-ups are asked for
    suggestions = client.sessions.followups(sid, n=3)

    # Then they come back as the model wrote them, from one call that saw the conversation and no tools
    assert suggestions == ["do the box-* ones too", "show me a diff first", "what breaks if I skip archived?"]
    asked = provider.requests[-1]
    assert len(provider.requests) == 2 and not asked.get("tools")
    prompt = "\n".join(str(m["content"]) for m in asked["messages"])
    assert "User: migrate the forfaits fetchers" in prompt and "Assistant: I migrated" in prompt
    # And nothing was added to the conversation, so the agent never sees them
    assert client.sessions.messages(sid) == before


def test_followups_keep_to_n_and_the_recap_is_one_line(live: str, token: str, provider):
    # Given a conversation, and a model that offers four numbered suggestions, then a chatty recap
    client = Client(live, token=token)
    sid = conversation(client, provider)
    provider.script(
        Reply(text="1. one\n2. two\n3. three\n4. four"),
        Reply(text='Recap: "You were migrating the forfaits-* fetchers."\n\nAnything else?'),
    )

    # When two follow-ups and a recap are asked for
    # Then two come back, and the recap is its one line, without label or quotes
    assert client.sessions.followups(sid, n=2) == ["one", "two"]
    assert client.sessions.recap(sid) == "You were migrating the forfaits-* fetchers."


def test_a_provider_failure_is_an_empty_answer_not_an_error(live: str, token: str, provider):
    # Given a conversation and a provider that fails both calls
    client = Client(live, token=token)
    sid = conversation(client, provider)
    provider.script(Fail(500), Fail(500))

    # When follow-ups and a recap are asked for, then both are empty
    assert client.sessions.followups(sid) == []
    assert client.sessions.recap(sid) == ""


def test_a_provider_that_hangs_is_an_empty_answer_at_the_deadline(
    live: str, token: str, provider, monkeypatch: pytest.MonkeyPatch
):
    # Given a deadline of 0.3 s and a provider that takes 2 s to say anything
    client = Client(live, token=token)
    sid = conversation(client, provider)
    monkeypatch.setattr(aside, "ASIDE_DEADLINE_SECONDS", 0.3)
    provider.script(Reply(text=SUGGESTIONS, ttft=2.0), Reply(text="You were migrating.", ttft=2.0))

    # When each is asked for
    started = time.monotonic()
    suggestions = client.sessions.followups(sid)
    recap = client.sessions.recap(sid)
    elapsed = time.monotonic() - started

    # Then both are empty, on time
    assert suggestions == [] and recap == ""
    assert elapsed < 2.0


def test_the_deadline_is_a_project_setting(live: str, api: Api, token: str, scripted_project: Project, provider):
    # Given a project whose asides may take 0.3 s, and a provider that takes 2 s
    client = Client(live, token=token)
    sid = conversation(client, provider)
    api.configure(scripted_project, aside_deadline_seconds=0.3)
    provider.script(Reply(text=SUGGESTIONS, ttft=2.0))

    # When follow-ups are asked for, then they are empty, on the project's time
    started = time.monotonic()
    assert client.sessions.followups(sid) == []
    assert time.monotonic() - started < 1.5


def test_another_users_conversation_is_a_404(live: str, api: Api, scripted_project: Project, provider):
    ana = Client(live, token=api.token(scripted_project, "ana"))
    bob = Client(live, token=api.token(scripted_project, "bob"))
    sid = conversation(ana, provider)
    with pytest.raises(NotFound):
        bob.sessions.followups(sid)
    with pytest.raises(NotFound):
        bob.sessions.recap(sid)
    assert len(provider.requests) == 1


# --- reading what a model wrote ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (SUGGESTIONS, ["do the box-* ones too", "show me a diff first", "what breaks if I skip archived?"]),
        ('```json\n["a", "b"]\n```', ["a", "b"]),
        ('Sure! Here you go: ["a", {"text": "b"}]', ["a", "b"]),
        ('{"suggestions": ["a", "a", "b"]}', ["a", "b"]),
        ("Here are some ideas:\n- 'a'\n* \"b\"\n3) c's\n", ["a", "b", "c's"]),
        ("x" * 500, []),
        ("", []),
    ],
)
def test_suggestions_are_read_from_a_list_in_any_common_shape(answer: str, expected: list[str]):
    assert aside.parse_suggestions(answer, 3) == expected


def test_the_recap_is_cut_to_a_sentence_when_the_model_rambles():
    long = "You were reconciling meal penalties for week 12. " + "More detail. " * 40
    assert aside.parse_recap(long) == "You were reconciling meal penalties for week 12."
    assert aside.parse_recap("") == ""


def _message(seq: int, role: str, content: Any, **fields: Any) -> Message:
    return Message(id=f"m{seq}", session_id="s", seq=seq, role=role, content=content, created_at=seq, **fields)


def test_the_transcript_is_the_last_things_said_without_tools_or_abandoned_turns():
    # Given a long conversation with tool traffic and an abandoned turn
    rows = [_message(i, "user" if i % 2 else "assistant", f"line {i}") for i in range(1, 31)]
    rows.append(_message(31, "tool", "{}", tool_call_id="c1"))
    rows.append(_message(32, "user", "close every berth", turn_id="t9", extra={"turn_abandoned": True}))
    rows.append(_message(33, "user", [{"type": "text", "text": "look at this"}, {"type": "image_url"}]))

    # When it becomes the prompt's transcript
    text = aside.transcript(rows)

    # Then it holds the last twenty things said, and nothing the agent itself no longer sees
    lines = text.splitlines()
    assert len(lines) == aside.TRANSCRIPT_MESSAGES
    assert lines[-1] == "User: look at this [image]" and lines[0] == "Assistant: line 12"
    assert "berth" not in text and "{}" not in text


def test_the_offline_model_suggests_follow_ups_and_a_recap(api, project):
    # Given a conversation on the built-in offline model
    token = api.token(project)
    sid = api.chat(token, message="reconcile the meal penalties").json()["session_id"]

    # When the UI asks for follow-ups and a recap
    suggestions = api.client.post(f"/chat/sessions/{sid}/followups", json={"n": 2}, headers=api.bearer(token))
    recap = api.client.post(f"/chat/sessions/{sid}/recap", headers=api.bearer(token))

    # Then both come back, short and in the user's voice
    assert suggestions.json()["suggestions"] == ["What time is it?", "Wait 2 seconds, then tell me the time"]
    assert recap.json()["recap"] == "You last asked: reconcile the meal penalties."
