"""Steering a running turn, and pauses surviving a dropped stream, over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import httpx

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, parse_sse, read_events
from tests.integration.test_pauses import CANCEL, call

LONG = " ".join(f"w{i}" for i in range(40))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _steer(live: str, token: str, run_id: str, message: str) -> httpx.Response:
    return httpx.post(f"{live}/chat/stream/{run_id}/steer", json={"message": message}, headers=_auth(token))


def _user_rows(live: str, token: str, sid: str) -> list[dict[str, Any]]:
    msgs = httpx.get(f"{live}/chat/sessions/{sid}/messages", headers=_auth(token)).json()["messages"]
    return [m for m in msgs if m["role"] == "user"]


def test_a_steer_during_a_tool_is_read_at_the_next_step(live: str, token: str, provider: ScriptedProvider):
    # Given a turn that waits a second in a tool before answering
    provider.script(Reply(tool_calls=[call("wait", "w1", seconds=1)]), Reply(text="Only forfaits, then."))
    with httpx.stream(
        "POST", f"{live}/chat/stream", json={"message": "migrate every fetcher"}, headers=_auth(token), timeout=30
    ) as r:
        run_id = r.headers["X-Run-Id"]
        events = read_events(r, stop_after=2)
        # When the user steers while the tool runs
        while "tool_start" not in [e.event for e in events]:
            events += read_events(r, stop_after=1)
        landed = _steer(live, token, run_id, "only the forfaits-* ones")
        events += read_events(r)

    # Then it landed, the next model call read it, and done says so
    assert landed.status_code == 200 and landed.json() == {"landed": True}
    done = events[-1]
    assert done.event == "done" and done.data["steered"] == ["only the forfaits-* ones"]
    last_user = [m for m in provider.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert last_user["content"] == "only the forfaits-* ones"
    rows = _user_rows(live, token, done.data["session_id"])
    assert rows[-1]["content"] == "only the forfaits-* ones" and rows[-1]["extra"] == {"steered": True}


def test_a_steer_while_the_answer_is_written_costs_one_more_step(live: str, token: str, provider: ScriptedProvider):
    # Given a final answer being streamed slowly
    provider.script(Reply(text=LONG, token_delay=0.03), Reply(text=" Corrected: only forfaits."))
    with httpx.stream(
        "POST", f"{live}/chat/stream", json={"message": "migrate"}, headers=_auth(token), timeout=30
    ) as r:
        run_id = r.headers["X-Run-Id"]
        events = read_events(r, stop_after=4)  # run, start and two token frames: the answer is being written

        # When a steer arrives mid-answer
        landed = _steer(live, token, run_id, "only the forfaits-* ones")
        events += read_events(r)

    # Then it is not dropped: the turn takes one more step, and content holds both answers
    assert landed.json() == {"landed": True}
    done = events[-1].data
    assert done["content"] == LONG + " Corrected: only forfaits."
    assert done["steered"] == ["only the forfaits-* ones"]
    assert len(provider.requests) == 2
    replayed = [(m["role"], m["content"]) for m in provider.requests[1]["messages"] if m["role"] != "system"]
    assert replayed[-2:] == [("assistant", LONG), ("user", "only the forfaits-* ones")]
    msgs = httpx.get(f"{live}/chat/sessions/{done['session_id']}/messages", headers=_auth(token)).json()["messages"]
    assert [(m["role"], m["extra"].get("steered", False)) for m in msgs] == [
        ("user", False),
        ("assistant", False),
        ("user", True),
        ("assistant", False),
    ]


def test_a_steer_after_the_turn_ended_does_not_land(live: str, token: str, provider):
    provider.script(Reply(text="done"))
    r = httpx.post(f"{live}/chat/stream", json={"message": "hi"}, headers=_auth(token), timeout=30)
    landed = _steer(live, token, r.headers["X-Run-Id"], "too late")
    assert landed.status_code == 200 and landed.json() == {"landed": False}


def test_steering_is_checked_like_a_write(live: str, api: Api, scripted_project: Project, provider):
    provider.script(Reply(text="first"), Reply(text="slow", ttft=1.5))
    ana = api.token(scripted_project, "ana")
    run_id = httpx.post(f"{live}/chat/stream", json={"message": "hi"}, headers=_auth(ana), timeout=30).headers[
        "X-Run-Id"
    ]
    assert _steer(live, api.token(scripted_project, "bob"), run_id, "hijack").status_code == 404
    no_steer = api.token(scripted_project, "ana", capabilities=["chat"])
    assert _steer(live, no_steer, run_id, "x").status_code == 403
    assert _steer(live, ana, run_id, "   ").status_code in (400, 422)


def test_a_blocking_turn_cannot_be_steered(live: str, api: Api, token: str, provider):
    import threading

    provider.script(Reply(text="first"), Reply(text="slow", ttft=1.5))
    sid = api.chat(token, message="one").json()["session_id"]
    worker = threading.Thread(target=lambda: api.chat(token, message="two", session_id=sid))
    worker.start()
    run_id = None
    for _ in range(200):
        run_id = api.get(f"/chat/sessions/{sid}/run", token).json()["run_id"]
        if run_id:
            break
        time.sleep(0.02)
    r = _steer(live, token, str(run_id), "faster")
    worker.join(15)
    assert r.status_code == 409 and "blocking" in r.json()["detail"]


def test_a_pending_approval_survives_a_dropped_stream_and_is_answered_from_another_client(
    live: str, api: Api, scripted_project: Project, provider: ScriptedProvider
):
    # Given a streamed turn that will pause for an approval, and a client that drops right after it starts
    provider.script(
        Reply(tool_calls=[call("cancel_booking", "g1", booking_id="NW-3009")], ttft=0.3),
        Reply(text="Booking NW-3009 is cancelled."),
    )
    desktop = api.token(scripted_project, "ana")
    with httpx.stream(
        "POST",
        f"{live}/chat/stream",
        json={"message": "cancel NW-3009", "client_tools": [CANCEL]},
        headers=_auth(desktop),
        timeout=30,
    ) as r:
        sid = read_events(r, stop_after=2)[1].data["session_id"]

    # When another device (a fresh token for the same user) reloads the conversation
    phone = api.token(scripted_project, "ana")
    waiting = None
    for _ in range(250):
        waiting = httpx.get(f"{live}/chat/sessions/{sid}/run", headers=_auth(phone)).json()["waiting"]
        if waiting:
            break
        time.sleep(0.02)
    transcript = httpx.get(f"{live}/chat/sessions/{sid}/messages", headers=_auth(phone)).json()["messages"]

    # Then the pending approval is there, intact, and answering it from the phone completes the turn
    assert waiting is not None and waiting["approvals"][0]["tool_call_id"] == "g1"
    assert waiting["tool_calls"] == []
    assert transcript[-1]["tool_calls"][0]["function"]["name"] == "cancel_booking"
    replay, _ = parse_sse(httpx.get(f"{live}/chat/stream/{waiting['run_id']}", headers=_auth(phone)).text)
    assert [e.event for e in replay][-2:] == ["approvals", "done"] and replay[-1].data["requires_action"] is True
    approved = httpx.post(
        f"{live}/chat",
        json={"session_id": sid, "approval_decisions": [{"approved": True}]},
        headers=_auth(phone),
        timeout=30,
    ).json()
    assert approved["tool_calls"] == [{"id": "g1", "name": "cancel_booking", "args": {"booking_id": "NW-3009"}}]
    done = httpx.post(
        f"{live}/chat",
        json={"session_id": sid, "tool_results": [{"tool_call_id": "g1", "content": "cancelled"}]},
        headers=_auth(phone),
        timeout=30,
    ).json()
    assert done["content"] == "Booking NW-3009 is cancelled."
