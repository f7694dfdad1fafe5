"""`client.sessions.*` and `client.tools.list()` against the live stack, and errors as OberikError subclasses."""

from __future__ import annotations

from typing import Any

import pytest

from oberik.api.routes import sessions as session_routes
from oberik.api.routes import stream as stream_routes
from oberik.api.routes import tools as tool_routes
from oberik.client import Client, InvalidRequest, NotFound, OberikError, Unauthorized
from oberik.client import models as sdk_models
from oberik.local.scripted_provider import Reply
from tests.api_fixtures import Api, Project


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_a_conversation_can_be_listed_read_forked_renamed_planned_and_deleted(live: str, token: str, provider):
    # Given two turns in one conversation, the first writing a plan
    provider.script(
        Reply(tool_calls=[call("todo_write", "t1", items=["read", "write"])]),
        Reply(text="Planned."),
        Reply(text="Second answer."),
    )
    client = Client(live, token=token)
    first = client.chat.send(message="plan it", title="Planning")
    client.chat.send(message="and then?", session_id=first.session_id)
    sid = first.session_id

    # When it is listed, read, forked, renamed and deleted through the SDK
    rows = client.sessions.messages(sid)
    forked = client.sessions.fork(sid, up_to_message_id=rows[0].id)
    page = client.sessions.list(limit=1)
    renamed = client.sessions.rename(sid, "Week 12 payroll")
    cleared = client.sessions.rename(sid, None)
    todos = client.sessions.todos(sid)
    run = client.sessions.active_run(sid)
    client.sessions.delete(forked.id)

    # Then each answer is the API's own model, with what the routes say
    assert [s.id for s in page.items] == [forked.id] and page.has_more and page.next_offset == 1
    assert [(m.role, m.content) for m in rows if m.role != "tool"][-2:] == [
        ("user", "and then?"),
        ("assistant", "Second answer."),
    ]
    assert forked.forked_from == sid and forked.title == "Planning"
    assert renamed.title == "Week 12 payroll" and cleared.title is None
    assert [t["text"] for t in todos] == ["read", "write"]
    assert run.status == "idle" and run.run_id is None and run.authoritative is True
    assert [s.id for s in client.sessions.list().items] == [sid]
    assert client.chat.sessions is client.sessions


def test_tools_list_is_filtered_like_a_turn(live: str, token: str):
    client = Client(live, token=token)
    everything = {t["name"] for t in client.tools.list().tools}
    narrowed = {t["name"] for t in client.tools.list(enable_todo=False).tools}
    only = client.tools.list(allowed_tools=["current_time"]).tools
    assert "todo_write" in everything and "todo_write" not in narrowed
    assert [t["name"] for t in only] == ["current_time"]


def test_http_errors_are_oberik_errors_with_status_code_and_detail(live: str, api: Api, scripted_project: Project):
    # Given a client for one user and a conversation that belongs to nobody it knows
    client = Client(live, token=api.token(scripted_project, "ana"))

    # When it asks for something that is not there, sends nonsense, or uses a bad token
    with pytest.raises(NotFound) as missing:
        client.sessions.messages("s_" + "0" * 28)
    with pytest.raises(InvalidRequest) as invalid:
        client.sessions.list(limit=0)
    with pytest.raises(Unauthorized) as unauthorized:
        Client(live, token="not-a-token").sessions.list()
    with pytest.raises(InvalidRequest) as local:
        client.chat.stream(mesage="a typo is caught before anything is sent")

    # Then each is an OberikError subclass carrying the server's status, code and sentence
    assert (missing.value.status, missing.value.code) == (404, "session_not_found")
    assert "No conversation" in missing.value.detail
    assert invalid.value.status == 422 and invalid.value.code == "invalid_request"
    assert unauthorized.value.status == 401 and isinstance(unauthorized.value, OberikError)
    assert local.value.status is None and "mesage" in local.value.detail


def test_get_token_is_asked_on_every_request(live: str, token: str):
    asked: list[int] = []

    def get_token() -> str:
        asked.append(1)
        return token

    client = Client(live, get_token=get_token)
    client.sessions.list()
    client.tools.list()
    assert len(asked) == 2


@pytest.mark.parametrize(
    ("sdk", "route"),
    [
        (sdk_models.SessionPage, session_routes.SessionPage),
        (sdk_models.Transcript, session_routes.Transcript),
        (sdk_models.ActiveRun, session_routes.ActiveRun),
        (sdk_models.Waiting, session_routes.Waiting),
        (sdk_models.CancelResult, stream_routes.CancelResult),
        (sdk_models.ToolsListing, tool_routes.ToolsListing),
    ],
)
def test_the_sdks_answer_models_match_the_routes(sdk: Any, route: Any):
    # Given a model the SDK restates so as not to import the server
    # Then it describes the same JSON as the route's own model (docstrings aside)
    assert shape(sdk.model_json_schema()) == shape(route.model_json_schema())


def shape(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: shape(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [shape(v) for v in schema]
    return schema
