"""Tool narrowing (action_space): past about 8 tools only the relevant few are bound, plus pinned and used ones and
tool_search; whole families stay whole; tool_search makes what it finds callable; without an embedding model every
tool is bound and the turn says so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oberik.domain.tools import TODO_TOOLS
from oberik.engine.action_space import KEEP, THRESHOLD
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.citations.fakes import CATALOG_TOOLS

EMBEDDER = "offline/hashing-256"
TWELVE = list(CATALOG_TOOLS)  # twelve tools with distinct purposes
TODOS = sorted(TODO_TOOLS)


WEATHER = "What is the weather forecast for Paris: rain or wind?"


def _least_relevant(message: str, among: list[str]) -> list[str]:
    """The tools the narrowing ranks lowest for `message`, least relevant first (same embedder, same ranking)."""
    from oberik.adapters.embeddings import HashingEmbedder
    from oberik.domain.models import Project as ProjectModel
    from oberik.engine.action_space import rank
    from tests.citations.fakes import FAMILY

    specs = [s for s in FAMILY.specs(ProjectModel(id="p", name="p", created_at=0, signing_secret="x"), None)]
    ranked = rank(HashingEmbedder(256), message, [s for s in specs if s.name in among])
    return [spec.name for spec, _ in reversed(ranked)]


def _bound(provider: ScriptedProvider, request: int = 0) -> list[str]:
    return [t["function"]["name"] for t in provider.requests[request].get("tools", [])]


@pytest.fixture
def narrowing(api: Api, scripted_project: Project, catalog_family) -> Project:
    api.configure(scripted_project, embedding_model=EMBEDDER)
    return scripted_project


def test_at_eight_tools_or_fewer_nothing_is_narrowed_and_tool_search_is_not_bound(
    api: Api, narrowing: Project, token: str, provider: ScriptedProvider
):
    # Given a turn that could be handed exactly eight tools (and holds action_space)
    eight = TWELVE[:THRESHOLD]
    provider.script(Reply(text="ok"))

    # When it runs
    api.chat(token, message="What's the weather in Paris?", allowed_tools=[*eight, "tool_search"])

    # Then all eight are bound and tool_search is not: there is nothing it could find
    assert sorted(_bound(provider)) == sorted(eight)


def test_past_eight_tools_the_relevant_few_are_bound_plus_pinned_and_tool_search(
    api: Api, narrowing: Project, token: str, provider: ScriptedProvider
):
    # Given twelve tools and, pinned by the project, the one the message ranks lowest
    pinned = _least_relevant(WEATHER, TWELVE)[0]
    api.configure(narrowing, pinned_tools=[pinned])
    provider.script(Reply(text="ok"))

    # When the message is about the weather
    api.chat(token, message=WEATHER, allowed_tools=[*TWELVE, "tool_search"])

    # Then about six relevant tools are bound, the forecast among them, plus the pinned one and tool_search
    bound = _bound(provider)
    assert "weather_forecast" in bound and pinned in bound and bound[-1] == "tool_search"
    assert len(bound) <= KEEP + 2 < len(TWELVE) + 1
    # and the tool_search the model holds is the one that can reach the rest
    search = next(t for t in provider.requests[0]["tools"] if t["function"]["name"] == "tool_search")
    assert "more tools than the ones you can see" in search["function"]["description"]


def test_a_pinned_tool_must_exist(api: Api, narrowing: Project):
    r = api.client.patch(
        f"/api/projects/{narrowing.id}/settings", json={"pinned_tools": ["teleport"]}, headers=narrowing.headers
    )
    assert r.status_code == 400 and "teleport" in r.json()["detail"]


def test_families_that_only_work_whole_are_never_split(
    api: Api, narrowing: Project, token: str, provider: ScriptedProvider
):
    # Given twelve tools plus the plan's four, and a message that is about keeping a plan
    provider.script(Reply(text="ok"), Reply(text="ok"))

    # When one turn asks about planning and another about the weather
    allowed = [*TWELVE, *TODOS, "tool_search"]
    api.chat(token, message="Add steps to your plan for this multi-step work", allowed_tools=allowed)
    api.chat(token, message="Weather forecast for Paris, rain or wind?", allowed_tools=allowed)

    # Then the plan's tools are bound all together (when planning ranks) or not at all, never some of them
    planning, weather = set(_bound(provider, 0)), set(_bound(provider, 1))
    assert set(TODOS) <= planning and "tool_search" in planning
    assert "weather_forecast" in weather and (set(TODOS) <= weather or not set(TODOS) & weather)


def test_a_tool_used_earlier_in_the_turn_stays_bound(
    api: Api, narrowing: Project, token: str, provider: ScriptedProvider
):
    # Given a weather question, and a model that nevertheless calls the tool the message ranks lowest
    far = _least_relevant(WEATHER, TWELVE)[0]
    provider.script(Reply(tool_calls=[{"id": "c1", "name": far, "arguments": {"q": "x"}}]), Reply(text="done"))

    # When the turn goes on to its next step
    api.chat(token, message=WEATHER, allowed_tools=[*TWELVE, "tool_search"])

    # Then the tool it is using is bound on the next step although the message does not rank it
    assert far not in _bound(provider, 0)
    assert far in _bound(provider, 1)


def test_tool_search_makes_what_it_finds_callable_for_the_rest_of_the_turn(
    api: Api, narrowing: Project, token: str, provider: ScriptedProvider
):
    # Given a weather question, so the tool the model will need is not bound at first
    far = _least_relevant(WEATHER, TWELVE)[0]
    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": "tool_search", "arguments": {"query": CATALOG_TOOLS[far]}}]),
        Reply(tool_calls=[{"id": "c2", "name": "weather_forecast", "arguments": {"q": "Paris"}}]),
        Reply(tool_calls=[{"id": "c3", "name": far, "arguments": {"q": "x"}}]),
        Reply(text="done"),
    )

    # When the model searches for it by what it does
    body = api.chat(token, message=WEATHER, allowed_tools=[*TWELVE, "tool_search"]).json()

    # Then tool_search returned it, and it is bound on every later step of the turn, not only the next one
    assert far not in _bound(provider, 0)
    found = json.loads(next(m["content"] for m in provider.requests[1]["messages"] if m["role"] == "tool"))
    assert found["found"][0]["name"] == far
    assert all(far in _bound(provider, step) for step in (1, 2, 3))
    assert body["content"] == "done"
    # and a new turn starts from the message again
    provider.script(Reply(text="again"))
    api.chat(token, message=WEATHER, allowed_tools=[*TWELVE, "tool_search"], session_id=body["session_id"])
    assert far not in _bound(provider, 4)


def test_without_an_embedding_model_every_tool_is_bound_and_the_turn_says_why(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, catalog_family
):
    # Given no embedding model, twelve tools, and a request that asks for narrowing
    provider.script(Reply(text="ok"))

    # When the turn runs
    body = api.chat(token, message="weather?", enable_action_space=True, allowed_tools=[*TWELVE, "tool_search"]).json()

    # Then every tool is bound (tool_search is not: it needs embeddings), and warnings explain the cost
    assert sorted(_bound(provider)) == sorted(TWELVE)
    assert any("enable_action_space could not narrow" in w for w in body["warnings"])
    # and the listing says why tool_search is missing, and capabilities says what blocks action_space
    withheld = {w["name"]: w["unavailable"] for w in api.get("/tools", token).json()["withheld"]}
    assert "embedding model" in withheld["tool_search"]
    flag = api.get("/capabilities", token).json()["flags"]["enable_action_space"]
    assert flag == {"capability": "action_space", "effective": False, "blocked": "needs an embedding model"}


def test_with_an_embedding_model_action_space_is_effective(api: Api, narrowing: Project, token: str):
    flag = api.get("/capabilities", token).json()["flags"]["enable_action_space"]
    assert flag == {"capability": "action_space", "effective": True, "blocked": None}
    assert "tool_search" in [t["name"] for t in api.get("/tools", token).json()["tools"]]
    off = api.get("/tools", token, enable_action_space="false").json()
    assert "tool_search" not in [t["name"] for t in off["tools"]]


def test_declining_action_space_binds_everything(api: Api, narrowing: Project, token: str, provider: ScriptedProvider):
    provider.script(Reply(text="ok"))
    body: dict[str, Any] = api.chat(
        token, message="weather?", enable_action_space=False, allowed_tools=[*TWELVE, "tool_search"]
    ).json()
    assert sorted(_bound(provider)) == sorted(TWELVE) and body["warnings"] == []


def test_tool_descriptions_are_embedded_once_per_process_and_ranking_follows_meaning():
    # Given an embedder that counts what it is asked to embed
    from oberik.adapters.embeddings import HashingEmbedder
    from oberik.domain.tools import ToolSpec
    from oberik.engine.action_space import rank

    class Counting(HashingEmbedder):
        texts: list[str]

        def embed(self, texts: list[str]) -> list[list[float]]:
            self.texts = [*getattr(self, "texts", []), *texts]
            return super().embed(texts)

    embedder = Counting(128, model="test/counting-128")
    specs = [ToolSpec(n, n, None, d) for n, d in CATALOG_TOOLS.items()]

    # When two messages are ranked against the same tools
    first = rank(embedder, "convert 12 euros to another currency", specs)
    second = rank(embedder, "the weather forecast: rain and wind", specs)

    # Then each description was embedded once, and each message found its tool first
    assert len(embedder.texts) == len(specs) + 2
    assert first[0][0].name == "currency_convert" and second[0][0].name == "weather_forecast"
