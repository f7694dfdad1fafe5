"""rag_search in a turn: passages numbered in the citations register, scoped by tags / document_ids and by the
caller's tenant; naming a scope switches the web off; without an embedding model the family is withheld."""

from __future__ import annotations

import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.retrieval.conftest import call_tool, offered_tools, upload, uploaded

RAG = ["chat", "documents:read"]


@pytest.fixture
def library(api: Api, rag_project: Project) -> dict[str, dict]:
    return {
        "hr": uploaded(
            api,
            rag_project,
            title="Employee handbook",
            tags=["hr", "policies"],
            text="Leave policy: every employee gets 25 days of paid leave per calendar year.",
        ),
        "finance": uploaded(
            api,
            rag_project,
            title="Expense policy",
            tags=["finance", "policies"],
            text="Expense policy: meals on business trips are reimbursed up to 60 euros per day.",
        ),
        "it": uploaded(
            api,
            rag_project,
            title="Laptop guide",
            tags=["it"],
            text="Laptop policy: laptops are replaced every three years by the IT desk.",
        ),
    }


def _titles(content: str) -> set[str]:
    return {t for t in ("Employee handbook", "Expense policy", "Laptop guide") if t in content}


def test_passages_reach_the_model_with_markers_and_are_cited(
    api: Api, rag_project: Project, provider: ScriptedProvider, library: dict
) -> None:
    token = api.token(rag_project, capabilities=RAG)
    content, response = call_tool(
        api, provider, token, "rag_search", {"query": "how many days of paid leave", "top_k": 2}
    )
    assert content.count("\n[") + content.startswith("[") >= 1
    assert "[1] Employee handbook (relevance" in content
    assert "25 days of paid leave" in content
    first = response["citations"][0]
    assert first["marker"] == 1 and first["kind"] == "document"
    assert first["title"] == "Employee handbook"
    assert "25 days of paid leave" in first["quote"]
    assert first["doc_id"] == library["hr"]["id"]
    assert 0 < first["score"] <= 1
    assert first["used"] is True
    assert len(response["citations"]) == 2
    assert response["attribution"] == "per-claim"


def test_the_request_tags_scope_the_search(
    api: Api, rag_project: Project, provider: ScriptedProvider, library: dict
) -> None:
    token = api.token(rag_project, capabilities=RAG)
    content, _ = call_tool(api, provider, token, "rag_search", {"query": "policy", "top_k": 10}, tags=["finance"])
    assert _titles(content) == {"Expense policy"}
    content, _ = call_tool(api, provider, token, "rag_search", {"query": "policy", "top_k": 10}, tags=["policies"])
    assert _titles(content) == {"Employee handbook", "Expense policy"}
    content, _ = call_tool(api, provider, token, "rag_search", {"query": "policy", "top_k": 10})
    assert _titles(content) == {"Employee handbook", "Expense policy", "Laptop guide"}


def test_document_ids_scope_the_search(
    api: Api, rag_project: Project, provider: ScriptedProvider, library: dict
) -> None:
    token = api.token(rag_project, capabilities=RAG)
    ids = [library["it"]["id"]]
    content, _ = call_tool(api, provider, token, "rag_search", {"query": "paid leave", "top_k": 10}, document_ids=ids)
    assert _titles(content) == {"Laptop guide"}
    both, _ = call_tool(
        api, provider, token, "rag_search", {"query": "policy", "top_k": 10}, document_ids=ids, tags=["hr"]
    )
    assert _titles(both) == {"Laptop guide", "Employee handbook"}


def test_a_tenants_documents_are_retrieved_only_by_that_tenant(
    api: Api, rag_project: Project, provider: ScriptedProvider
) -> None:
    uploaded(api, rag_project, title="Acme contract", tenant_id="acme", text="The Acme contract renews on June 1.")
    uploaded(api, rag_project, title="Shared terms", text="Every contract renews on June 1 unless cancelled.")
    acme = api.token(rag_project, subject="a", tenant_id="acme", capabilities=RAG)
    globex = api.token(rag_project, subject="g", tenant_id="globex", capabilities=RAG)
    seen, _ = call_tool(api, provider, acme, "rag_search", {"query": "when does the contract renew", "top_k": 10})
    assert "Acme contract" in seen and "Shared terms" in seen
    seen, _ = call_tool(api, provider, globex, "rag_search", {"query": "when does the contract renew", "top_k": 10})
    assert "Acme contract" not in seen and "Shared terms" in seen


def test_naming_tags_or_document_ids_switches_the_web_off(
    api: Api, rag_project: Project, provider: ScriptedProvider, library: dict
) -> None:
    token = api.token(rag_project, capabilities=[*RAG, "web_search"])
    provider.script(Reply(text="a"), Reply(text="b"), Reply(text="c"))
    assert api.chat(token, message="x").status_code == 200
    assert {"rag_search", "browse_url"} <= set(offered_tools(provider))
    assert api.chat(token, message="y", tags=["hr"]).status_code == 200
    scoped = offered_tools(provider)
    assert "rag_search" in scoped
    assert not {"web_search", "browse_url", "screenshot_url"} & set(scoped)
    assert api.chat(token, message="z", document_ids=[library["hr"]["id"]]).status_code == 200
    assert not {"web_search", "browse_url"} & set(offered_tools(provider))


def test_a_scope_naming_unknown_documents_is_refused(
    api: Api, rag_project: Project, provider: ScriptedProvider
) -> None:
    token = api.token(rag_project, capabilities=RAG)
    r = api.chat(token, message="x", document_ids=["d_" + "f" * 28])
    assert r.status_code in (400, 422) and r.json()["field"] == "document_ids"
    assert "do not exist" in r.json()["detail"]
    r = api.chat(token, message="x", document_ids=["../etc"])
    assert r.status_code in (400, 422) and "not a document id" in r.json()["detail"]
    r = api.chat(token, message="x", tags=[""])
    assert r.status_code in (400, 422) and r.json()["field"] == "tags"
    assert provider.requests == []


def test_no_match_is_said_plainly(api: Api, rag_project: Project, provider: ScriptedProvider, library: dict) -> None:
    token = api.token(rag_project, capabilities=RAG)
    content, response = call_tool(api, provider, token, "rag_search", {"query": "anything"}, tags=["nonexistent-tag"])
    assert "No passage in the project's documents matches" in content and "nonexistent-tag" in content
    assert response["citations"] == []


def test_without_an_embedding_model_retrieval_and_memory_are_withheld_with_a_sentence(
    api: Api, scripted_project: Project, provider: ScriptedProvider
) -> None:
    token = api.token(scripted_project, capabilities=["chat", "documents:read", "memory"])
    listing = api.get("/tools", token).json()
    withheld = {w["name"]: w["unavailable"] for w in listing["withheld"]}
    assert set(withheld) == {"rag_search", "remember", "recall", "wiki_write", "wiki_read", "search_history"}
    assert all("no embedding model" in s and "embedding_model" in s for s in withheld.values())
    assert "remembered, recalled" in withheld["remember"]
    assert "documents cannot be searched" in withheld["rag_search"]
    assert listing["tools"] == []
    provider.script(Reply(text="ok"))
    assert api.chat(token, message="x").status_code == 200
    assert offered_tools(provider) == []
    # Once a model is configured, the same token is handed them.
    api.configure(scripted_project, embedding_model="offline/hashing-64")
    assert {t["name"] for t in api.get("/tools", token).json()["tools"]} >= {"rag_search", "remember", "search_history"}


def test_an_embedding_model_that_cannot_be_used_is_refused_in_the_settings(api: Api, project: Project) -> None:
    for name, phrase in (
        ("nonsense", "provider/model"),
        ("acme/embed-1", "No model provider named 'acme'"),
        ("offline/word2vec", "no offline embedding model"),
    ):
        r = api.client.patch(
            f"/api/projects/{project.id}/settings", json={"embedding_model": name}, headers=project.headers
        )
        assert r.status_code in (400, 422), r.text
        assert phrase in r.json()["detail"] and r.json()["field"] == "embedding_model"
    assert upload(api, project, text="x").status_code in (400, 422)


def test_the_whole_path_runs_on_s3_vectors_when_the_stack_names_a_vector_bucket(
    api: Api, rag_project: Project, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on AWS: documents, rag_search and delete go through the S3 Vectors adapter (moto, with QueryVectors
    answered by the hook), not the in-process store."""
    from oberik.adapters.aws import client
    from oberik.adapters.vectors import memory_store
    from oberik.domain.retrieval import index_name
    from oberik.local import s3vectors_query

    monkeypatch.setenv("OBERIK_VECTOR_BUCKET", "oberik-vectors-test")
    s3v = client("s3vectors")
    s3v.create_vector_bucket(vectorBucketName="oberik-vectors-test")
    s3vectors_query.install(s3v)
    doc = uploaded(
        api, rag_project, title="Employee handbook", tags=["hr"], text="Every employee gets 25 days of paid leave."
    )
    index = index_name("chunks", "offline/hashing-256", 256)
    stored = s3v.list_vectors(vectorBucketName="oberik-vectors-test", indexName=index, returnMetadata=True)["vectors"]
    assert [v["metadata"]["doc_id"] for v in stored] == [doc["id"]]
    assert memory_store().query(index, [1.0] * 256, top_k=1) == []  # nothing went to the in-process store
    token = api.token(rag_project, capabilities=RAG)
    content, response = call_tool(api, provider, token, "rag_search", {"query": "paid leave"}, tags=["hr"])
    assert "[1] Employee handbook" in content and response["citations"][0]["doc_id"] == doc["id"]
    assert (
        api.client.delete(
            f"/api/projects/{rag_project.id}/documents/{doc['id']}", headers=rag_project.headers
        ).status_code
        == 204
    )
    assert s3v.list_vectors(vectorBucketName="oberik-vectors-test", indexName=index)["vectors"] == []
