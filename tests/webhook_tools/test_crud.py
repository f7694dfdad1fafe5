"""Defining webhook tools with the project key: what is kept, what is shown once, what is refused (400, and
nothing changes), and how a rotation answers."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.api_fixtures import Api, Project, table_items
from tests.webhook_tools.conftest import ORDER_PARAMETERS, create_tool

pytestmark = pytest.mark.usefixtures("allow_private")

URL = "http://127.0.0.1:9/agent/orders"


def tools_path(project: Project, *rest: str) -> str:
    return "/".join([f"/api/projects/{project.id}/webhook-tools", *rest])


def listed(api: Api, project: Project) -> list[dict[str, Any]]:
    r = api.client.get(tools_path(project), headers=project.headers)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def patch(api: Api, project: Project, tool_id: str, body: Any) -> Any:
    return api.client.patch(tools_path(project, tool_id), json=body, headers=project.headers)


# --- creating ------------------------------------------------------------------------------------------------


def test_the_secret_is_shown_once_at_creation_and_never_listed(api: Api, project: Project):
    # When a tool is created
    created = create_tool(api, project, URL)

    # Then the answer carries its id, name and a secret
    assert created["id"].startswith("wht_") and created["name"] == "cancel_order"
    secret = created["secret"]
    assert len(secret) > 30
    assert created["requiresApproval"] is False
    assert created["parameters"] == ORDER_PARAMETERS

    # And no later read shows the secret again
    for r in (
        api.client.get(tools_path(project), headers=project.headers),
        api.client.get(tools_path(project, created["id"]), headers=project.headers),
    ):
        assert r.status_code == 200, r.text
        assert secret not in r.text and "secret" not in r.text.replace("previousSecretUntil", "")
    assert [t["name"] for t in listed(api, project)] == ["cancel_order"]


def test_each_tool_gets_its_own_secret(api: Api, project: Project):
    a = create_tool(api, project, URL, name="cancel_order")
    b = create_tool(api, project, URL, name="refund_order")
    assert a["secret"] != b["secret"]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"name": "cancel order"}, "name", "letters, digits"),
        ({"name": "x" * 65}, "name", "1-64"),
        ({"name": "current_time"}, "name", "platform's own tools"),
        ({"name": "web_search"}, "name", "platform's own tools"),
        ({"name": "computer_click"}, "name", "platform's own tools"),
        ({"url": "ftp://example.com/x"}, "url", "https://"),
        ({"url": "not a url"}, "url", "whitespace"),
        ({"url": "https://example.com/x#frag"}, "url", "fragment"),
        ({"url": "http://169.254.169.254/latest"}, "url", "metadata"),
        ({"parameters": "order_id"}, "parameters", "JSON Schema object"),
        ({"parameters": {"type": "array"}}, "parameters", "describe an object"),
        ({"parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "parameters", "JSON Schema"),
        ({"parameters": {"type": "object", "properties": {}, "required": ["a"]}}, "parameters", "does not define"),
        ({"description": 7}, "description", "text"),
        ({"requiresApproval": "true"}, "requiresApproval", "true or false"),
        ({"requires_approval": True}, "requires_approval", "spelled requiresApproval"),
        ({"secret": "mine"}, "secret", "not a field"),
        ({"name": None}, "name", "null"),
    ],
)
def test_a_bad_definition_is_a_400_that_creates_nothing(
    api: Api, project: Project, change: dict[str, Any], field: str, says: str
):
    before = len(table_items())
    body = {"name": "cancel_order", "url": URL, "parameters": ORDER_PARAMETERS, **change}
    r = api.client.post(tools_path(project), json=body, headers=project.headers)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field
    assert says in r.json()["detail"]
    assert len(table_items()) == before
    assert listed(api, project) == []


def test_name_and_url_are_required(api: Api, project: Project):
    for body, field in (({"url": URL}, "name"), ({"name": "cancel_order"}, "url")):
        r = api.client.post(tools_path(project), json=body, headers=project.headers)
        assert r.status_code == 400 and r.json()["field"] == field, r.text


def test_private_targets_are_refused_where_the_deployment_does_not_allow_them(
    api: Api, project: Project, monkeypatch: pytest.MonkeyPatch
):
    from oberik.settings import get_settings

    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "0")
    get_settings.cache_clear()
    for url in ("http://127.0.0.1:8080/x", "http://10.0.0.5/x", "http://localhost/x", "http://[::1]/x"):
        r = api.client.post(tools_path(project), json={"name": "t", "url": url}, headers=project.headers)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "target_refused" and r.json()["field"] == "url"
    assert listed(api, project) == []


def test_two_tools_cannot_share_a_name(api: Api, project: Project):
    create_tool(api, project, URL)
    r = api.client.post(tools_path(project), json={"name": "cancel_order", "url": URL}, headers=project.headers)
    assert r.status_code == 409 and r.json()["code"] == "webhook_tool_exists", r.text
    assert "rotate" in r.json()["detail"]
    assert len(listed(api, project)) == 1


def test_another_projects_key_sees_none_of_it(api: Api, project: Project):
    tool = create_tool(api, project, URL)
    other = api.create_project("other")
    assert api.client.get(tools_path(project), headers=other.headers).status_code == 404
    r = api.client.get(f"/api/projects/{other.id}/webhook-tools/{tool['id']}", headers=other.headers)
    assert r.status_code == 404 and r.json()["code"] == "webhook_tool_not_found"
    assert patch(api, other, tool["id"], {"description": "x"}).status_code == 404
    assert api.client.get(f"/api/projects/{project.id}/webhook-tools").status_code == 401


# --- changing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"requiresApproval": None},
        {"requiresApproval": 0},
        {"requiresApproval": "false"},
        {"requiresApproval": 1},
        {"requires_approval": False},
        {"requires_approval": None},
        {"description": "new words", "requiresApproval": None},
        {"description": "new words", "requires_approval": False},
    ],
)
def test_requires_approval_takes_true_or_false_only_and_a_bad_patch_changes_nothing(
    api: Api, project: Project, body: dict[str, Any]
):
    # Given a gated tool
    tool = create_tool(api, project, URL, requiresApproval=True)
    before = api.client.get(tools_path(project, tool["id"]), headers=project.headers).json()

    # When a PATCH sends something other than true or false for the gate
    r = patch(api, project, tool["id"], body)

    # Then it is a 400 with a sentence, and the tool is exactly as it was
    assert r.status_code == 400, r.text
    assert "requiresApproval" in r.json()["detail"]
    after = api.client.get(tools_path(project, tool["id"]), headers=project.headers).json()
    assert after == before and after["requiresApproval"] is True


def test_a_null_explains_that_omitting_the_field_is_how_to_leave_it_alone(api: Api, project: Project):
    tool = create_tool(api, project, URL, requiresApproval=True)
    r = patch(api, project, tool["id"], {"requiresApproval": None})
    assert r.status_code == 400 and "omit" in r.json()["detail"].lower(), r.text


def test_a_partial_patch_leaves_every_other_field_alone(api: Api, project: Project):
    # Given a gated tool
    tool = create_tool(api, project, URL, requiresApproval=True)

    # When only the description changes
    r = patch(api, project, tool["id"], {"description": "Cancel one of the customer's orders."})

    # Then the gate, the URL, the name and the parameters are untouched
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["description"] == "Cancel one of the customer's orders."
    assert got["requiresApproval"] is True
    assert (got["url"], got["name"], got["parameters"]) == (URL, "cancel_order", ORDER_PARAMETERS)
    assert "secret" not in got


def test_the_gate_switches_with_true_and_false(api: Api, project: Project):
    tool = create_tool(api, project, URL)
    r = patch(api, project, tool["id"], {"requiresApproval": True})
    assert r.status_code == 200 and r.json()["requiresApproval"] is True, r.text
    r = patch(api, project, tool["id"], {"requiresApproval": False})
    assert r.status_code == 200 and r.json()["requiresApproval"] is False, r.text


def test_renaming_checks_the_new_name(api: Api, project: Project):
    a = create_tool(api, project, URL, name="cancel_order")
    create_tool(api, project, URL, name="refund_order")
    assert patch(api, project, a["id"], {"name": "refund_order"}).status_code == 409
    assert patch(api, project, a["id"], {"name": "wait"}).status_code == 400
    r = patch(api, project, a["id"], {"name": "void_order"})
    assert r.status_code == 200 and r.json()["name"] == "void_order", r.text
    # the old name is free again
    create_tool(api, project, URL, name="cancel_order")
    assert sorted(t["name"] for t in listed(api, project)) == ["cancel_order", "refund_order", "void_order"]


def test_an_empty_patch_and_a_non_object_body_are_refused(api: Api, project: Project):
    tool = create_tool(api, project, URL)
    assert patch(api, project, tool["id"], {}).status_code == 400
    assert patch(api, project, tool["id"], ["requiresApproval"]).status_code == 400
    assert patch(api, project, "wht_nope", {"description": "x"}).status_code == 404


# --- deleting and rotating ----------------------------------------------------------------------------------


def test_a_deleted_tool_is_gone(api: Api, project: Project):
    tool = create_tool(api, project, URL)
    r = api.client.delete(tools_path(project, tool["id"]), headers=project.headers)
    assert r.status_code == 204, r.text
    assert api.client.get(tools_path(project, tool["id"]), headers=project.headers).status_code == 404
    assert api.client.delete(tools_path(project, tool["id"]), headers=project.headers).status_code == 404
    assert listed(api, project) == []
    create_tool(api, project, URL)  # its name is free again


def test_rotation_returns_a_new_secret_and_when_the_old_one_stops_signing(api: Api, project: Project):
    tool = create_tool(api, project, URL)
    r = api.client.post(tools_path(project, tool["id"], "rotate"), headers=project.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"secret", "previousSecretUntil"}
    assert body["secret"] != tool["secret"]
    assert abs(body["previousSecretUntil"] - (time.time() + 24 * 3600)) < 60
    shown = api.client.get(tools_path(project, tool["id"]), headers=project.headers).json()
    assert shown["previousSecretUntil"] == body["previousSecretUntil"]
    assert body["secret"] not in str(shown) and tool["secret"] not in str(shown)
    assert api.client.post(tools_path(project, "wht_x", "rotate"), headers=project.headers).status_code == 404


def test_project_allowed_tools_may_name_a_webhook_tool(api: Api, project: Project):
    create_tool(api, project, URL)
    assert api.configure(project, allowed_tools=["cancel_order"])["allowed_tools"] == ["cancel_order"]
    r = api.client.patch(
        f"/api/projects/{project.id}/settings", json={"allowed_tools": ["no_such_tool"]}, headers=project.headers
    )
    assert r.status_code == 400, r.text
