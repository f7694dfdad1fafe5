"""The memory family: remember / recall per subject, the wiki per project scope, search_history over the subject's
own earlier conversations (indexed from the table's stream)."""

from __future__ import annotations

from oberik.local import retrieval_sources
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.retrieval.conftest import call_tool

MEMORY = ["chat", "memory"]


def test_remember_and_recall_belong_to_one_subject(api: Api, rag_project: Project, provider: ScriptedProvider) -> None:
    ana = api.token(rag_project, subject="ana", capabilities=MEMORY)
    bob = api.token(rag_project, subject="bob", capabilities=MEMORY)
    said, _ = call_tool(api, provider, ana, "remember", {"fact": "My favourite colour is teal."})
    assert "Remembered" in said
    call_tool(api, provider, ana, "remember", {"fact": "My favourite colour is teal."})  # the same fact again
    call_tool(api, provider, ana, "remember", {"fact": "I live in Porto."})
    recalled, response = call_tool(api, provider, ana, "recall", {"query": "favourite colour", "top_k": 10})
    assert recalled.count("favourite colour is teal") == 1
    assert "[1] My favourite colour is teal." in recalled
    entry = response["citations"][0]
    assert entry["kind"] == "memory" and entry["title"] == "You told me this"
    assert entry["quote"] == "My favourite colour is teal."
    nothing, response = call_tool(api, provider, bob, "recall", {"query": "favourite colour"})
    assert "teal" not in nothing and "Porto" not in nothing
    assert response["citations"] == []


def test_recall_in_another_project_finds_nothing(api: Api, rag_project: Project, provider: ScriptedProvider) -> None:
    ana = api.token(rag_project, subject="ana", capabilities=MEMORY)
    call_tool(api, provider, ana, "remember", {"fact": "My favourite colour is teal."})
    other = api.create_project("other")
    api.configure(
        other,
        providers={"scripted": {"base_url": provider.base_url}},
        default_model="scripted/test-model",
        embedding_model="offline/hashing-256",
    )
    ana_there = api.token(other, subject="ana", capabilities=MEMORY)
    recalled, _ = call_tool(api, provider, ana_there, "recall", {"query": "favourite colour"})
    assert "teal" not in recalled


def test_the_wiki_is_shared_within_a_project_scope(api: Api, rag_project: Project, provider: ScriptedProvider) -> None:
    writer = api.token(rag_project, subject="ana", scope="team-a", capabilities=MEMORY)
    reader = api.token(rag_project, subject="bob", scope="team-a", capabilities=MEMORY)
    outsider = api.token(rag_project, subject="carol", scope="team-b", capabilities=MEMORY)
    page = "To deploy, run make release, then watch the canary dashboard for ten minutes."
    said, _ = call_tool(api, provider, writer, "wiki_write", {"title": "Deploy procedure", "content": page})
    assert "Wrote the wiki page 'Deploy procedure'" in said
    read, response = call_tool(api, provider, reader, "wiki_read", {"title": "Deploy procedure"})
    assert page in read and read.startswith("[1] Deploy procedure")
    assert response["citations"][0]["kind"] == "wiki" and response["citations"][0]["title"] == "Deploy procedure"
    found, response = call_tool(api, provider, reader, "wiki_read", {"query": "how do we deploy a release"})
    assert "canary dashboard" in found and response["citations"][0]["kind"] == "wiki"
    listed, _ = call_tool(api, provider, reader, "wiki_read", {})
    assert "Deploy procedure" in listed
    missing, _ = call_tool(api, provider, outsider, "wiki_read", {"title": "Deploy procedure"})
    assert "no wiki page titled" in missing and "canary" not in missing
    searched, _ = call_tool(api, provider, outsider, "wiki_read", {"query": "how do we deploy a release"})
    assert "canary" not in searched
    # Writing the same title replaces the page, passages included.
    said, _ = call_tool(
        api, provider, writer, "wiki_write", {"title": "Deploy procedure", "content": "Deploys are frozen."}
    )
    assert "Replaced" in said
    found, _ = call_tool(api, provider, reader, "wiki_read", {"query": "how do we deploy a release", "top_k": 10})
    assert "frozen" in found and "canary" not in found


def test_search_history_finds_only_the_subjects_own_earlier_conversations(
    api: Api, rag_project: Project, provider: ScriptedProvider
) -> None:
    ana = api.token(rag_project, subject="ana", capabilities=MEMORY)
    bob = api.token(rag_project, subject="bob", capabilities=MEMORY)
    provider.script(Reply(text="Noted, have a good trip."))
    earlier = api.chat(ana, message="My flight to Lisbon leaves on May 4 from gate 12.")
    assert earlier.status_code == 200
    retrieval_sources.drain()  # the table's stream, handled by the history function
    found, response = call_tool(api, provider, ana, "search_history", {"query": "when does my flight to Lisbon leave"})
    assert "May 4 from gate 12" in found
    entry = response["citations"][0]
    assert entry["kind"] == "memory" and entry["session_id"] == earlier.json()["session_id"]
    nothing, _ = call_tool(api, provider, bob, "search_history", {"query": "when does my flight to Lisbon leave"})
    assert "Lisbon" not in nothing
    # The conversation under way is not searched (it is already in front of the model).
    same, _ = call_tool(
        api,
        provider,
        ana,
        "search_history",
        {"query": "flight to Lisbon gate 12"},
        session_id=earlier.json()["session_id"],
    )
    assert "gate 12" not in same


def test_memory_tools_explain_bad_arguments(api: Api, rag_project: Project, provider: ScriptedProvider) -> None:
    ana = api.token(rag_project, subject="ana", capabilities=MEMORY)
    said, _ = call_tool(api, provider, ana, "remember", {"fact": "  "})
    assert "needs a non-empty fact" in said
    said, _ = call_tool(api, provider, ana, "wiki_write", {"title": "x"})
    assert "needs a title and the page's content" in said
