"""Whole turns: one register across every kind of source, claims and attribution on the terminal payload, markers
kept or stripped, and `citations` frames streaming while the turn runs."""

from __future__ import annotations

from typing import Any

import httpx

from oberik.client import render_cited
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, parse_sse
from tests.citations.fakes import FakeWeb

ANSWER = (
    "Refunds are paid within 14 days [1]. Staff get 25 days of holiday [2]. "
    "Dana Scully's number is +1 202 555 0143 [3]. The basic plan costs 12 euros [4]. "
    "Our founder invented the wheel [12]."
)


def _search_settings(web: FakeWeb) -> dict[str, Any]:
    return {
        "url": web.url + "/search",
        "results_path": "web.results",
        "snippet_field": "description",
        "max_results": 2,
    }


def _script(provider: ScriptedProvider, answer: str = ANSWER) -> None:
    provider.script(
        Reply(
            tool_calls=[
                {"id": "c1", "name": "policy_lookup", "arguments": {"q": "refunds and holidays"}},
                {"id": "c2", "name": "crm_contact", "arguments": {"q": "Dana"}},
            ]
        ),
        Reply(tool_calls=[{"id": "c3", "name": "web_search", "arguments": {"query": "acme pricing"}}]),
        Reply(text=answer),
    )


def test_one_turn_numbers_documents_tool_answers_and_web_results_in_one_sequence(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    fake_web: FakeWeb,
    private_targets,
    catalog_family,
):
    # Given a tool that returns two document passages, one of the project's own systems, and a web search
    api.configure(scripted_project, web_search=_search_settings(fake_web))
    _script(provider)

    # When the model uses all three and answers with markers (one of them invented)
    body = api.chat(token, message="Refunds, holidays, Dana's phone and Acme's price?").json()

    # Then everything it was shown is numbered once, in the order it was shown, whatever its kind
    assert [(c["marker"], c["kind"]) for c in body["citations"]] == [
        (1, "document"),
        (2, "document"),
        (3, "tool"),
        (4, "web"),
        (5, "web"),
    ]
    refunds, holidays, crm, pricing, support = body["citations"]
    assert (refunds["title"], refunds["page"], refunds["score"]) == ("Refund policy", 2, 0.91)
    assert holidays["quote"] == "Every employee has 25 days of paid holiday."
    assert crm["tool"] == "crm_contact" and "Dana Scully" in crm["quote"]
    assert pricing["url"] == fake_web.page("/pages/pricing") and support["url"] == fake_web.page("/pages/support")
    # and the answer is attributed sentence by sentence, the invented [12] dropped from the content
    assert body["attribution"] == "per-claim"
    assert "[12]" not in body["content"] and body["content"].endswith("invented the wheel.")
    assert [c["citations"] for c in body["claims"]] == [[1], [2], [3], [4]]
    for claim in body["claims"]:
        assert body["content"][claim["start"] : claim["end"]] == claim["text"]
    # and `used` says the support page was looked at but did no work
    assert [c["used"] for c in body["citations"]] == [True, True, True, True, False]
    # and the tool answer the model read carries its marker (the family did not number it; the platform did)
    tool_results = {m["tool_call_id"]: m["content"] for m in provider.requests[1]["messages"] if m["role"] == "tool"}
    assert tool_results["c1"].startswith("[1] Refunds") and tool_results["c2"].startswith('[3] {"name"')
    # and the SDK renders pills under the sentences that used them
    segments = render_cited(body)
    assert "".join(s.text for s in segments) == body["content"]
    assert [[c["marker"] for c in s.citations] for s in segments if s.citations] == [[1], [2], [3], [4]]


def test_stripped_markers_keep_the_numbers_out_of_the_content_and_the_claims_still_point_at_sentences(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    fake_web: FakeWeb,
    private_targets,
    catalog_family,
):
    # Given a project that strips markers
    r = api.client.put(
        f"/api/projects/{scripted_project.id}/citations", json={"markers": "stripped"}, headers=scripted_project.headers
    )
    assert r.status_code == 200 and r.json() == {"markers": "stripped"}
    api.configure(scripted_project, web_search=_search_settings(fake_web))
    _script(provider)

    # When the model answers with markers
    body = api.chat(token, message="Tell me everything").json()

    # Then the content has none, and each claim's offsets still pick out its sentence
    assert "[" not in body["content"]
    assert body["content"].startswith("Refunds are paid within 14 days. Staff get 25 days of holiday.")
    assert [(c["text"], c["citations"]) for c in body["claims"]] == [
        ("Refunds are paid within 14 days.", [1]),
        ("Staff get 25 days of holiday.", [2]),
        ("Dana Scully's number is +1 202 555 0143.", [3]),
        ("The basic plan costs 12 euros.", [4]),
    ]
    for claim in body["claims"]:
        assert body["content"][claim["start"] : claim["end"]] == claim["text"]
    assert body["attribution"] == "per-claim"
    segments = render_cited(body)
    assert "".join(s.text for s in segments) == body["content"]
    # and the transcript keeps the answer as the content shows it
    messages = api.get(f"/chat/sessions/{body['session_id']}/messages", token).json()["messages"]
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == body["content"]


def test_an_answer_that_cites_nothing_is_retrieval_only(
    api: Api, token: str, provider: ScriptedProvider, catalog_family
):
    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": "policy_lookup", "arguments": {}}]), Reply(text="Refunds are quick.")
    )
    body = api.chat(token, message="refunds?").json()
    assert body["attribution"] == "retrieval-only" and body["claims"] == []
    assert [c["used"] for c in body["citations"]] == [False, False]
    assert [(s.text, s.citations) for s in render_cited(body)] == [("Refunds are quick.", [])]


def test_a_turn_shown_nothing_citable_has_no_attribution_and_keeps_no_invented_pill(
    api: Api, token: str, provider: ScriptedProvider
):
    provider.script(Reply(text="Paris is the capital of France [1]."))
    body = api.chat(token, message="capital?").json()
    assert body["citations"] == [] and body["claims"] == [] and body["attribution"] == "none"
    assert body["content"] == "Paris is the capital of France."


def test_citations_frames_stream_as_sources_are_added(
    api: Api,
    live: str,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    fake_web: FakeWeb,
    private_targets,
    catalog_family,
):
    # Given the same three tools
    api.configure(scripted_project, web_search=_search_settings(fake_web))
    _script(provider)

    # When the turn is streamed
    r = httpx.post(f"{live}/chat/stream", json={"message": "all of it"}, headers=api.bearer(token), timeout=60)
    events, _ = parse_sse(r.text)

    # Then each addition to the register sent the register so far, while the tool that added it was running
    frames = [e for e in events if e.event == "citations"]
    assert [len(f.data["citations"]) for f in frames] == [1, 2, 3, 4, 5]
    assert [c["marker"] for c in frames[-1].data["citations"]] == [1, 2, 3, 4, 5]
    names = [(e.event, e.data.get("name")) for e in events]
    first = names.index(("citations", None))
    assert names[first - 1] == ("tool_start", "policy_lookup")
    search_start = names.index(("tool_start", "web_search"))
    assert [n for n, _ in names[search_start + 1 : search_start + 3]] == ["citations", "citations"]
    assert names[search_start + 3] == ("tool_end", "web_search")
    # and the done frame carries the final register with `used`, the claims and the attribution
    done = events[-1]
    assert done.event == "done" and done.data["attribution"] == "per-claim"
    assert [c["used"] for c in done.data["citations"]] == [True, True, True, True, False]
    # and the streamed text already read as the content does: the invented [12] never went out
    assert "".join(e.data["delta"] for e in events if e.event == "token") == done.data["content"]


def test_with_markers_stripped_the_stream_carries_no_numbers_either(
    api: Api, live: str, scripted_project: Project, token: str, provider: ScriptedProvider, catalog_family
):
    api.client.put(
        f"/api/projects/{scripted_project.id}/citations", json={"markers": "stripped"}, headers=scripted_project.headers
    )
    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": "policy_lookup", "arguments": {}}]),
        Reply(
            text="Refunds take 14 days [1]. Holidays are 25 days [2].",
            chunks=["Refunds take 14 days [", "1]. Holi", "days are 25 days [2", "]."],
        ),
    )
    r = httpx.post(f"{live}/chat/stream", json={"message": "policies"}, headers=api.bearer(token), timeout=60)
    events, _ = parse_sse(r.text)
    streamed = "".join(e.data["delta"] for e in events if e.event == "token")
    assert streamed == events[-1].data["content"] == "Refunds take 14 days. Holidays are 25 days."


def test_the_sdk_hands_each_citations_frame_to_on_citations_and_renders_the_final_answer(
    api: Api, live: str, token: str, provider: ScriptedProvider, catalog_family
):
    # Given a tool that returns two document passages and an answer citing both
    from oberik.client import Client

    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": "policy_lookup", "arguments": {}}]),
        Reply(text="Refunds take 14 days [1]. Holidays are 25 days [2]."),
    )
    seen: list[list[int]] = []

    # When the SDK streams the turn
    done = (
        Client(live, token=token)
        .chat.stream(message="policies?", on_citations=lambda cs: seen.append([c["marker"] for c in cs]))
        .done(timeout=30)
    )

    # Then on_citations saw the register grow, and the answer renders with a pill per sentence
    assert seen == [[1], [1, 2]]
    assert done.attribution == "per-claim"
    assert [(s.text, [c["marker"] for c in s.citations]) for s in render_cited(done)] == [
        ("Refunds take 14 days [1].", [1]),
        (" ", []),
        ("Holidays are 25 days [2].", [2]),
    ]
