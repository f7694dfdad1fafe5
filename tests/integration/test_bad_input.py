"""Bad input gets a 4xx with a sentence naming the field, and nothing half-written."""

from __future__ import annotations

import pytest

from tests.api_fixtures import Api, Project, table_items


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "hi", "colour": "blue"}, "colour"),
        ({"message": 42}, "message"),
        ({"message": "   "}, "message"),
        ({"message": ""}, "message"),
        ({}, "message"),
        ({"message": "hi", "temperature": "warm"}, "temperature"),
        ({"message": "hi", "temperature": 3}, "temperature"),
        ({"message": "hi", "reasoning_effort": "max"}, "reasoning_effort"),
        ({"message": "hi", "enable_rag": "sometimes"}, "enable_rag"),
        # switches are JSON true or false: a string or a number that merely looks like one is refused
        ({"message": "hi", "enable_rag": "false"}, "enable_rag"),
        ({"message": "hi", "enable_web_search": 0}, "enable_web_search"),
        ({"message": "hi", "enable_auto_title": "yes"}, "enable_auto_title"),
        ({"message": [{"type": "audio"}]}, "message"),
    ],
)
def test_a_malformed_chat_request_names_the_field_and_writes_nothing(api: Api, token: str, body, field):
    before = len(table_items())
    r = api.chat(token, **body)
    assert r.status_code in (400, 422), r.text
    assert field in r.json()["detail"]
    assert r.json()["code"] == "invalid_request"
    assert len(table_items()) == before


def test_a_body_that_is_not_json_is_a_clear_422(api: Api, token: str):
    r = api.client.post(
        "/chat", content=b"{not json", headers={**api.bearer(token), "content-type": "application/json"}
    )
    assert r.status_code == 422
    assert "JSON" in r.json()["detail"]


def test_an_unknown_session_is_404_and_writes_nothing(api: Api, token: str):
    before = len(table_items())
    r = api.chat(token, message="hi", session_id="s_0000000000000000000000000000")
    assert r.status_code == 404
    assert len(table_items()) == before


def test_another_subjects_session_is_404_not_403(api: Api, scripted_project: Project, provider):
    from oberik.local.scripted_provider import Reply

    provider.script(Reply(text="hi ana"))
    ana, bob = api.token(scripted_project, "ana"), api.token(scripted_project, "bob")
    sid = api.chat(ana, message="hello").json()["session_id"]
    before = len(table_items())
    assert api.chat(bob, message="let me in", session_id=sid).status_code == 404
    assert api.get(f"/chat/sessions/{sid}/messages", bob).status_code == 404
    assert api.client.patch(f"/chat/sessions/{sid}", json={"title": "mine"}, headers=api.bearer(bob)).status_code == 404
    assert api.client.delete(f"/chat/sessions/{sid}", headers=api.bearer(bob)).status_code == 404
    assert api.get(f"/chat/sessions/{sid}/run", bob).status_code == 404
    assert api.get("/chat/sessions", bob).json()["items"] == []
    assert len(table_items()) == before


@pytest.mark.parametrize("limit", ["-1", "0", "abc", "1.5"])
def test_a_bad_limit_is_a_422_naming_it(api: Api, token: str, limit: str):
    r = api.get("/chat/sessions", token, limit=limit)
    assert r.status_code == 422
    assert "limit" in r.json()["detail"]


def test_a_bad_offset_is_a_422_naming_it(api: Api, token: str):
    r = api.get("/chat/sessions", token, offset=-3)
    assert r.status_code == 422 and "offset" in r.json()["detail"]


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "token_missing"),
        ("Bearer", "token_malformed"),
        ("Basic abc", "token_malformed"),
        ("Bearer not-a-token", "token_malformed"),
    ],
)
def test_a_missing_or_malformed_token_is_401_with_a_sentence(api: Api, project: Project, header, code):
    headers = {"Authorization": header} if header else {}
    r = api.client.get("/tools", headers=headers)
    assert r.status_code == 401
    assert r.json()["code"] == code
    assert r.json()["detail"].endswith(".")


def test_an_expired_token_is_401(api: Api, project: Project, monkeypatch):
    token = api.token(project, ttl=60)
    import time as _time

    real = _time.time
    monkeypatch.setattr(_time, "time", lambda: real() + 120)
    r = api.client.get("/tools", headers=api.bearer(token))
    assert r.status_code == 401 and r.json()["code"] == "token_expired"


def test_a_forged_token_is_401(api: Api, project: Project):
    import base64
    import json

    token = api.token(project, capabilities=["chat"])
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["capabilities"] = ["chat", "system_prompt", "tasks:write"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    r = api.client.get("/tools", headers=api.bearer(f"{header}.{forged}.{signature}"))
    assert r.status_code == 401 and r.json()["code"] == "token_invalid"


def test_a_token_of_another_project_does_not_open_this_one(api: Api, project: Project):
    other = api.create_project("other")
    token = api.token(other)
    r = api.client.post(f"/api/projects/{project.id}/tokens", json={"subject": "x"}, headers=other.headers)
    assert r.status_code == 404
    assert api.client.get("/tools", headers=api.bearer(token)).status_code == 200


def test_project_creation_needs_the_admin_key(api: Api):
    assert api.client.post("/api/projects", json={"name": "x"}).status_code == 401
    assert api.client.post("/api/projects", json={"name": "x"}, headers={"X-Admin-Key": "wrong"}).status_code == 401


def test_a_wrong_project_key_is_401(api: Api, project: Project):
    r = api.client.post(
        f"/api/projects/{project.id}/tokens", json={"subject": "x"}, headers={"X-API-Key": f"obk_{project.id}_forged"}
    )
    assert r.status_code == 401


def test_minting_rejects_unknown_capabilities(api: Api, project: Project):
    r = api.client.post(
        f"/api/projects/{project.id}/tokens",
        json={"subject": "x", "capabilities": ["chat", "fly"]},
        headers=project.headers,
    )
    assert r.status_code == 400 and "fly" in r.json()["detail"]


def test_an_unknown_route_is_a_json_404(api: Api):
    r = api.client.get("/nope")
    assert r.status_code == 404 and r.json()["code"] == "no_route"
