"""Context management: a conversation that outgrows the window is compacted before the turn answers."""

from __future__ import annotations

import httpx

from oberik.adapters.dynamodb import DynamoStore
from oberik.api.deps import forget_project
from oberik.domain.context import ContextSettings
from oberik.engine.context import COMPACT_TASK
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, parse_sse


def _small_window(project: Project, window: int, keep: int = 1) -> None:
    store = DynamoStore()
    stored = store.get_project(project.id)
    assert stored is not None
    settings = stored.settings.model_copy(
        update={
            "context": ContextSettings(
                window_tokens={"scripted/test-model": window}, threshold=0.8, keep_recent_turns=keep
            )
        }
    )
    store.save_project_settings(project.id, settings)
    forget_project(project.id)


def _turns(api: Api, token: str, provider: ScriptedProvider, n: int) -> str:
    sid = None
    for i in range(n):
        provider.script(Reply(text=f"answer {i}: " + "lorem ipsum " * 20))
        body = {"message": f"question {i}: " + "dolor sit amet " * 20}
        if sid:
            body["session_id"] = sid
        sid = api.chat(token, **body).json()["session_id"]
    assert sid
    return sid


def test_a_conversation_that_outgrows_the_window_is_compacted_first(
    api: Api, live: str, token: str, scripted_project: Project, provider: ScriptedProvider
):
    # Given a conversation of three exchanges, and a window it no longer fits in
    sid = _turns(api, token, provider, 3)
    before = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    _small_window(scripted_project, window=400)
    provider.script_when(COMPACT_TASK, Reply(text="Notes: the user asked questions 0 to 2 about lorem."))
    provider.script(Reply(text="final answer"))

    # When the next turn is streamed
    r = httpx.post(
        f"{live}/chat/stream",
        json={"message": "and now?", "session_id": sid},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    events, _ = parse_sse(r.text)

    # Then it reports compacting before anything else is said, then a report, then the answer
    names = [e.event for e in events]
    assert names.index("context") < names.index("token")
    progress, report = [e.data for e in events if e.event == "context"]
    assert progress["phase"] == "compacting"
    assert report["phase"] == "compacted" and report["messages_folded"] == 6
    assert report["tokens_after"] < report["tokens_before"]
    assert events[-1].data["context"] == report

    # And the model saw the summary instead of the folded turns, the latest words verbatim
    main = provider.requests[-1]
    text = str(main["messages"])
    assert "Notes: the user asked questions 0 to 2" in text and "question 0" not in text
    assert main["messages"][-1]["content"] == "and now?"

    # And the stored transcript is untouched
    after = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    assert after[: len(before)] == before


def test_the_summary_is_reused_until_it_is_outgrown(api: Api, token: str, scripted_project: Project, provider):
    sid = _turns(api, token, provider, 3)
    _small_window(scripted_project, window=400)
    provider.script_when(COMPACT_TASK, Reply(text="Notes one."), Reply(text="Notes two."))
    provider.script(Reply(text="a"))
    api.chat(token, message="short", session_id=sid)
    compactions = [r for r in provider.requests if COMPACT_TASK in str(r["messages"])]
    assert len(compactions) == 1
    provider.script(Reply(text="b"))
    api.chat(token, message="tiny", session_id=sid)
    assert len([r for r in provider.requests if COMPACT_TASK in str(r["messages"])]) == 1
    assert "Notes one." in str(provider.requests[-1]["messages"])


def test_a_conversation_within_the_window_is_left_alone(api: Api, token: str, provider):
    sid = _turns(api, token, provider, 2)
    provider.script(Reply(text="ok"))
    body = api.chat(token, message="more", session_id=sid).json()
    assert body["context"] is None
    assert not any(COMPACT_TASK in str(r["messages"]) for r in provider.requests)


def test_the_offline_model_compacts_too(api: Api, project: Project):
    token = api.token(project)
    sid = None
    for i in range(3):
        body = {"message": f"tell me about item {i} " + "with many words " * 30}
        if sid:
            body["session_id"] = sid
        sid = api.chat(token, **body).json()["session_id"]
    store = DynamoStore()
    stored = store.get_project(project.id)
    assert stored is not None
    store.save_project_settings(
        project.id,
        stored.settings.model_copy(update={"context": ContextSettings(default_window_tokens=600, keep_recent_turns=1)}),
    )
    forget_project(project.id)
    body = api.chat(token, message="summarise", session_id=sid).json()
    assert body["context"]["phase"] == "compacted"
    assert "The user asked, in order: tell me about item 0" in str(DynamoStore().get_summary(sid))


def test_the_context_settings_are_set_and_read_with_the_project_key(api: Api, project: Project):
    body = api.configure(
        project, context={"window_tokens": {"openai/gpt-4o": 128000}, "threshold": 0.7, "keep_recent_turns": 3}
    )
    assert body["context"]["threshold"] == 0.7 and body["context"]["keep_recent_turns"] == 3
    bad = api.client.patch(
        f"/api/projects/{project.id}/settings", json={"context": {"threshold": 2}}, headers=project.headers
    )
    assert bad.status_code == 422 and "threshold" in bad.json()["detail"]


def test_the_providers_own_token_counts_calibrate_the_estimate(
    api: Api, token: str, scripted_project: Project, provider: ScriptedProvider
):
    # Given a provider that reports far more prompt tokens than the characters suggest
    dense = {"prompt_tokens": 1500, "completion_tokens": 5, "total_tokens": 1505}
    sid = None
    for i in range(3):
        provider.script(Reply(text=f"answer {i}", usage=dense))
        body = {"message": f"question {i} " + "x" * 40}
        if sid:
            body["session_id"] = sid
        sid = api.chat(token, **body).json()["session_id"]
    # And a window that the character estimate alone would not reach
    _small_window(scripted_project, window=1600)  # characters alone would estimate about 250 tokens
    provider.script_when(COMPACT_TASK, Reply(text="Notes."))
    provider.script(Reply(text="ok", usage=dense))

    # When the next turn starts, then it compacts, because the measured counts say the window is nearly full
    body = api.chat(token, message="next", session_id=sid).json()
    assert body["context"]["phase"] == "compacted"
    assert body["context"]["tokens_before"] > 0.8 * 1600
