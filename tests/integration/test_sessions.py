"""Conversations: listing, paging, renaming, deleting, forking; each subject sees only their own."""

from __future__ import annotations

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project


def _start(api: Api, token: str, provider: ScriptedProvider, text: str, **body) -> str:
    provider.script(Reply(text=f"re: {text}"))
    r = api.chat(token, message=text, **body)
    assert r.status_code == 200, r.text
    return str(r.json()["session_id"])


def test_sessions_are_listed_newest_first_in_pages(api: Api, token: str, provider: ScriptedProvider):
    # Given three conversations
    ids = [_start(api, token, provider, f"conversation {i}") for i in range(3)]

    # When they are listed two at a time
    first = api.get("/chat/sessions", token, limit=2).json()
    second = api.get("/chat/sessions", token, limit=2, offset=first["next_offset"]).json()

    # Then the newest come first, and the pages say whether more follow
    assert [s["id"] for s in first["items"]] == [ids[2], ids[1]]
    assert first["has_more"] is True and first["next_offset"] == 2
    assert [s["id"] for s in second["items"]] == [ids[0]]
    assert second["has_more"] is False and second["next_offset"] is None


def test_a_limit_above_500_is_clamped_not_refused(api: Api, token: str, provider: ScriptedProvider):
    _start(api, token, provider, "only one")
    r = api.get("/chat/sessions", token, limit=10_000)
    assert r.status_code == 200
    assert r.json()["has_more"] is False and r.json()["next_offset"] is None
    assert len(r.json()["items"]) == 1


def test_continuing_a_conversation_moves_it_to_the_top(api: Api, token: str, provider: ScriptedProvider):
    older = _start(api, token, provider, "older")
    _start(api, token, provider, "newer")
    provider.script(Reply(text="back again"))
    api.chat(token, message="again", session_id=older)
    assert api.get("/chat/sessions", token).json()["items"][0]["id"] == older


def test_user_ref_filters_the_listing(api: Api, token: str, provider: ScriptedProvider):
    mine = _start(api, token, provider, "tagged", user_ref="crm-42")
    _start(api, token, provider, "untagged")
    items = api.get("/chat/sessions", token, user_ref="crm-42").json()["items"]
    assert [s["id"] for s in items] == [mine]
    assert items[0]["user_ref"] == "crm-42"


def test_one_subject_never_lists_anothers_sessions(api: Api, scripted_project: Project, provider: ScriptedProvider):
    ana, bob = api.token(scripted_project, "ana"), api.token(scripted_project, "bob")
    _start(api, ana, provider, "ana's")
    assert api.get("/chat/sessions", bob).json()["items"] == []
    assert len(api.get("/chat/sessions", ana).json()["items"]) == 1


def test_rename_and_clear_a_title(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "untitled")
    r = api.client.patch(f"/chat/sessions/{sid}", json={"title": "Week 12 payroll"}, headers=api.bearer(token))
    assert r.status_code == 200 and r.json()["title"] == "Week 12 payroll"
    assert api.get("/chat/sessions", token).json()["items"][0]["title"] == "Week 12 payroll"
    r = api.client.patch(f"/chat/sessions/{sid}", json={"title": None}, headers=api.bearer(token))
    assert r.status_code == 200 and r.json()["title"] is None
    assert api.get("/chat/sessions", token).json()["items"][0]["title"] is None


def test_rename_refuses_a_blank_title_or_a_missing_field(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "x")
    assert api.client.patch(f"/chat/sessions/{sid}", json={"title": "  "}, headers=api.bearer(token)).status_code == 400
    r = api.client.patch(f"/chat/sessions/{sid}", json={}, headers=api.bearer(token))
    assert r.status_code == 422 and "title" in r.json()["detail"]


def test_delete_removes_the_conversation_and_its_messages(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "to delete")
    assert api.client.delete(f"/chat/sessions/{sid}", headers=api.bearer(token)).status_code == 204
    assert api.get(f"/chat/sessions/{sid}/messages", token).status_code == 404
    assert api.get("/chat/sessions", token).json()["items"] == []
    assert api.client.delete(f"/chat/sessions/{sid}", headers=api.bearer(token)).status_code == 404


def test_the_transcript_lists_every_message_in_order(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "first")
    provider.script(Reply(text="second answer"))
    api.chat(token, message="second", messages=["and a third"], session_id=sid)
    msgs = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]
    assert [(m["role"], m["content"]) for m in msgs] == [
        ("user", "first"),
        ("assistant", "re: first"),
        ("user", "second"),
        ("user", "and a third"),
        ("assistant", "second answer"),
    ]
    assert all(m["extra"] == {} for m in msgs)


def test_fork_copies_the_conversation_up_to_a_message(api: Api, token: str, provider: ScriptedProvider):
    # Given a conversation of two exchanges
    sid = _start(api, token, provider, "draft a summary")
    provider.script(Reply(text="shorter summary"))
    api.chat(token, message="shorter", session_id=sid)
    msgs = api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]

    # When it is forked at the first answer
    r = api.client.post(
        f"/chat/sessions/{sid}/fork", json={"up_to_message_id": msgs[1]["id"]}, headers=api.bearer(token)
    )

    # Then the fork holds the first exchange only, the original is untouched, and the fork can go its own way
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    assert r.json()["forked_from"] == sid
    forked = api.get(f"/chat/sessions/{fork}/messages", token).json()["messages"]
    assert [m["content"] for m in forked] == ["draft a summary", "re: draft a summary"]
    assert len(api.get(f"/chat/sessions/{sid}/messages", token).json()["messages"]) == 4
    provider.script(Reply(text="longer summary"))
    assert api.chat(token, message="longer instead", session_id=fork).status_code == 200
    seen = [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "user"]
    assert seen == ["draft a summary", "longer instead"]


def test_fork_at_a_message_of_another_conversation_is_a_clear_400(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "a")
    r = api.client.post(f"/chat/sessions/{sid}/fork", json={"up_to_message_id": "m_nope"}, headers=api.bearer(token))
    assert r.status_code == 400 and "up_to_message_id" in r.json()["detail"]


def test_the_active_run_of_an_idle_conversation(api: Api, token: str, provider: ScriptedProvider):
    sid = _start(api, token, provider, "hi")
    assert api.get(f"/chat/sessions/{sid}/run", token).json() == {
        "run_id": None,
        "last_event_id": None,
        "status": "idle",
        "authoritative": True,
        "waiting": None,
    }
