"""GET /tools and GET /capabilities are filtered exactly as a turn is."""

from __future__ import annotations

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project


def _names(r) -> list[str]:
    assert r.status_code == 200, r.text
    return [t["name"] for t in r.json()["tools"]]


def test_the_seed_tools_are_listed_for_a_token_that_may_schedule(api: Api, project: Project):
    token = api.token(project, capabilities=["chat", "tasks:write"])
    r = api.get("/tools", token)
    assert _names(r) == ["current_time", "wait", "schedule_reminder", "cancel_reminder", "list_reminders"]
    assert r.json()["tools"][0]["source"] == "builtin"
    assert r.json()["withheld"] == []


def test_a_token_without_the_capability_is_not_handed_its_tools(api: Api, project: Project):
    token = api.token(project, capabilities=["chat"])
    assert _names(api.get("/tools", token)) == []


def test_the_project_ceiling_bounds_every_token(api: Api, project: Project):
    api.configure(project, capabilities=["chat"])
    token = api.token(project, capabilities=["chat", "tasks:write"])
    assert _names(api.get("/tools", token)) == []


def test_request_switches_and_allowed_tools_narrow_the_listing(api: Api, project: Project):
    token = api.token(project, capabilities=["chat", "tasks:write"])
    assert _names(api.get("/tools", token, enable_scheduling="false")) == []
    assert _names(api.get("/tools", token, allowed_tools="wait")) == ["wait"]
    assert _names(api.get("/tools", token, allowed_tools="")) == []


def test_the_project_allowed_tools_applies_before_the_request_and_cannot_be_widened(api: Api, project: Project):
    api.configure(project, allowed_tools=["current_time"])
    token = api.token(project)
    assert _names(api.get("/tools", token)) == ["current_time"]
    assert _names(api.get("/tools", token, allowed_tools="current_time,wait")) == ["current_time"]
    assert api.get("/capabilities", token).json()["allowed_tools"] == ["current_time"]


def test_a_turn_is_handed_exactly_what_the_listing_says(api: Api, scripted_project: Project, provider):
    token = api.token(scripted_project)
    provider.script(Reply(text="a"), Reply(text="b"))
    api.chat(token, message="x", allowed_tools=["wait"])
    api.chat(token, message="y", enable_scheduling=False)
    offered = [[t["function"]["name"] for t in r.get("tools", [])] for r in provider.requests]
    assert offered == [
        _names(api.get("/tools", token, allowed_tools="wait")),
        _names(api.get("/tools", token, enable_scheduling="false")),
    ]


def test_capabilities_report_every_switch_with_what_blocks_it(api: Api, project: Project):
    token = api.token(project, capabilities=["chat", "tasks:write"])
    body = api.get("/capabilities", token).json()
    flags = body["flags"]
    assert set(flags) >= {
        "enable_rag",
        "enable_memory",
        "enable_web_search",
        "enable_browser",
        "enable_todo",
        "enable_computer",
        "enable_subagents",
        "enable_scheduling",
        "enable_ask_user",
        "enable_approvals",
        "enable_plugins",
        "enable_action_space",
    }
    assert flags["enable_scheduling"] == {"capability": "tasks:write", "effective": True, "blocked": None}
    assert flags["enable_rag"]["effective"] is False
    assert flags["enable_rag"]["blocked"] == "not granted to this token"
    assert body["allowed_tools"] is None


def test_action_space_is_blocked_without_an_embedding_model(api: Api, project: Project):
    token = api.token(project)
    flag = api.get("/capabilities", token).json()["flags"]["enable_action_space"]
    assert flag == {"capability": "action_space", "effective": False, "blocked": "needs an embedding model"}


def test_allowed_tools_naming_a_tool_that_does_not_exist_is_a_400(api: Api, project: Project, provider):
    token = api.token(project)
    assert api.get("/tools", token, allowed_tools="teleport").status_code == 400
    assert api.chat(token, message="x", allowed_tools=["teleport"]).status_code == 400


def test_settings_are_read_back_without_secrets(api: Api, project: Project, provider: ScriptedProvider):
    body = api.configure(project, providers={"scripted": {"base_url": provider.base_url, "api_key": "sk-secret"}})
    assert body["providers"]["scripted"] == {"base_url": provider.base_url, "api_key_set": True}
    got = api.client.get(f"/api/projects/{project.id}/settings", headers=project.headers)
    assert "sk-secret" not in got.text


def test_a_token_with_every_capability_lists_every_built_tool(api: Api, project: Project):
    token = api.token(project)
    assert _names(api.get("/tools", token)) == [
        "current_time",
        "wait",
        "request_approval",
        "ask_user",
        "todo_write",
        "todo_update",
        "todo_remove",
        "todo_clear",
        *(
            f"browser_{n}"
            for n in ("goto", "read", "html", "viewport", "click", "type", "scroll", "wait", "screenshot", "close")
        ),
        "browser_handoff",
        "browser_handoff_end",
        "browse_url",
        "schedule_reminder",
        "cancel_reminder",
        "list_reminders",
    ]
    # and holds back, with a reason each, what this project cannot run or what another grant replaces
    withheld = {w["name"]: w["unavailable"] for w in api.get("/tools", token).json()["withheld"]}
    assert set(withheld) == {
        "rag_search",
        "remember",
        "recall",
        "wiki_write",
        "wiki_read",
        "search_history",
        "screenshot_url",
        "web_search",
        "tool_search",
    }
    assert all(len(reason) > 20 for reason in withheld.values())
