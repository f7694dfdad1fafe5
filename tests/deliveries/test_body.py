"""The turn.stopped body, its signature and when it is held back: pure rules, no AWS."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from oberik.domain import deliveries
from oberik.domain.deliveries import Notification, notification_for
from oberik.domain.models import Turn, TurnPlan

SPEC_FIELDS = {
    "event",
    "reason",
    "needs_input",
    "complete",
    "scheduled",
    "tenant_id",
    "session_id",
    "user_ref",
    "preview",
    "preview_truncated",
    "content_chars",
    "tools",
    "questions",
    "approvals",
}


def turn(**fields: Any) -> Turn:
    unattended = fields.pop("unattended", False)
    defaults: dict[str, Any] = {
        "id": "t_1",
        "session_id": "s_1",
        "project_id": "p_1",
        "owner": "ana",
        "run_id": "r_1",
        "plan": TurnPlan(model="scripted/test", unattended=unattended),
        "created_at": 0.0,
        "status": "completed",
        "content": "Here you go.",
    }
    return Turn(**(defaults | fields))


def body_of(t: Turn, **kwargs: Any) -> dict[str, Any]:
    note = notification_for(t, tenant_id=kwargs.get("tenant_id", "p_1"), user_ref=kwargs.get("user_ref", "u-7"))
    assert note is not None
    parsed: dict[str, Any] = json.loads(note.body)
    return parsed


CLIENT_CALL = {"id": "c1", "name": "lookup_order", "args": {"order_id": "o_7"}}
QUESTIONS = {
    "tool_call_id": "q1",
    "questions": [
        {"id": "Scope", "header": "Scope", "question": "Which?", "options": [], "multi_select": False},
        {"id": "When", "header": "When", "question": "When?", "options": [], "multi_select": False},
    ],
}
APPROVAL = {"tool_call_id": "r1", "action": "Email the Q3 numbers to finance", "detail": "", "tool": None}


# --- reasons and the two booleans ---------------------------------------------------------------------


def test_a_finished_turn_is_completed_and_complete():
    # Given a turn that finished with an answer
    body = body_of(turn())
    # Then it reports completed: the work is done and nobody needs to act
    assert body["reason"] == "completed"
    assert body["complete"] is True and body["needs_input"] is False


def test_a_turn_that_ran_out_of_steps_is_neither_complete_nor_waiting():
    body = body_of(turn(finish_reason="hit_tool_limit", content="Partly done."))
    assert body["reason"] == "hit_tool_limit"
    assert body["complete"] is False and body["needs_input"] is False


def test_a_turn_that_said_nothing_is_no_answer():
    # Given a turn that ended with no prose and nothing to pause on
    body = body_of(turn(content="  "))
    # Then it is no_answer, neither complete nor waiting, and there is nothing to preview
    assert body["reason"] == "no_answer"
    assert body["complete"] is False and body["needs_input"] is False
    assert body["preview"] is None and body["content_chars"] == 2


def test_a_turn_that_only_drew_a_component_is_not_no_answer():
    body = body_of(turn(content="", ui=[{"tool_call_id": "u1", "name": "chart", "props": {}}]))
    assert body["reason"] == "completed"


def test_a_client_tool_pause_names_the_tools():
    # Given a turn paused on two calls of one client tool
    second = CLIENT_CALL | {"id": "c2"}
    body = body_of(turn(status="paused", content="Let me look.", pending={"tool_calls": [CLIENT_CALL, second]}))
    # Then it needs input, is not complete, and names the tool once
    assert body["reason"] == "needs_client_tool"
    assert body["needs_input"] is True and body["complete"] is False
    assert body["tools"] == ["lookup_order"]
    assert body["questions"] == [] and body["approvals"] == []


def test_a_question_pause_lists_each_batch_with_its_headers():
    body = body_of(turn(status="paused", pending={"questions": [QUESTIONS]}))
    assert body["reason"] == "needs_answer"
    assert body["questions"] == [{"tool_call_id": "q1", "headers": ["Scope", "When"]}]
    assert body["needs_input"] is True and body["tools"] == []


def test_an_approval_pause_lists_each_action():
    body = body_of(turn(status="paused", pending={"approvals": [APPROVAL], "deferred": [CLIENT_CALL]}))
    assert body["reason"] == "needs_approval"
    assert body["approvals"] == [{"tool_call_id": "r1", "action": "Email the Q3 numbers to finance"}]
    assert body["tools"] == []  # the deferred client call is not why the turn waits


def test_a_pause_of_a_kind_added_later_still_needs_input():
    # Given a paused turn whose pending record holds nothing this version knows
    t = turn(status="paused", pending={"browser": {"url": "https://example.com"}})
    # Then the booleans come from the turn's state: somebody must act, the work is not done
    body = body_of(t)
    assert body["needs_input"] is True and body["complete"] is False


def test_outstanding_items_mean_needs_input_even_if_the_status_lags():
    t = turn(status="completed", pending={"questions": [QUESTIONS]})
    body = body_of(t)
    assert body["needs_input"] is True and body["complete"] is False and body["reason"] == "needs_answer"


@pytest.mark.parametrize("status", ["failed", "cancelled", "running"])
def test_failed_cancelled_and_running_turns_send_nothing(status: str):
    assert notification_for(turn(status=status), tenant_id="p_1", user_ref=None) is None


# --- the rest of the body -----------------------------------------------------------------------------


def test_every_field_of_the_spec_is_present():
    body = body_of(turn(), tenant_id="tenant-9", user_ref="customer-42")
    assert set(body) == SPEC_FIELDS
    assert body["event"] == "turn.stopped"
    assert body["tenant_id"] == "tenant-9" and body["user_ref"] == "customer-42" and body["session_id"] == "s_1"
    assert body["scheduled"] is False


def test_preview_is_at_most_280_characters_and_says_when_there_is_more():
    # Given answers of 280 and 281 characters
    exact = body_of(turn(content="a" * 280))
    longer = body_of(turn(content="é" * 281))
    # Then the first is previewed whole, the second is cut to its first 280 characters and flagged
    assert exact["preview"] == "a" * 280 and exact["preview_truncated"] is False and exact["content_chars"] == 280
    assert longer["preview"] == "é" * 280 and longer["preview_truncated"] is True and longer["content_chars"] == 281


def test_a_paused_turn_has_no_preview():
    body = body_of(turn(status="paused", content="Let me check that.", pending={"tool_calls": [CLIENT_CALL]}))
    assert body["preview"] is None and body["preview_truncated"] is False
    assert body["content_chars"] == len("Let me check that.")


def test_a_scheduled_turn_says_so():
    assert body_of(turn(unattended=True))["scheduled"] is True


# --- serialising and signing --------------------------------------------------------------------------


def test_the_body_is_compact_json_with_sorted_keys_and_survives_any_text():
    # Given an answer with quotes, non-ASCII characters and a line break
    note = notification_for(turn(content='Voilà — "5 €"\nnext'), tenant_id="p_1", user_ref=None)
    assert note is not None
    # Then the body is the one canonical serialisation of itself
    parsed = json.loads(note.body)
    assert note.body == json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert list(parsed) == sorted(parsed)
    assert parsed["preview"] == 'Voilà — "5 €"\nnext'


def test_the_signature_is_hmac_sha256_of_the_exact_bytes():
    raw = '{"a":"é"}'.encode()
    expected = "sha256=" + hmac.new(b"whsec_k", raw, hashlib.sha256).hexdigest()
    assert deliveries.signature("whsec_k", raw) == expected
    headers = deliveries.headers("whsec_k", raw, "dlv_1")
    assert headers["X-Signature"] == expected and headers["X-Delivery-Id"] == "dlv_1"


def test_each_notification_gets_its_own_delivery_id_and_survives_the_queue():
    a = notification_for(turn(), tenant_id="p_1", user_ref=None)
    b = notification_for(turn(), tenant_id="p_1", user_ref=None)
    assert a is not None and b is not None
    assert a.delivery_id != b.delivery_id and a.delivery_id.startswith("dlv_")
    assert Notification.from_message(a.to_message()) == a


# --- holding interactive pauses -----------------------------------------------------------------------


def test_interactive_pauses_are_held_and_everything_else_is_not():
    paused = {"status": "paused", "pending": {"tool_calls": [CLIENT_CALL]}}
    assert notification_for(turn(**paused), tenant_id="p", user_ref=None).hold is True  # type: ignore[union-attr]
    assert notification_for(turn(**paused, unattended=True), tenant_id="p", user_ref=None).hold is False  # type: ignore[union-attr]
    assert notification_for(turn(), tenant_id="p", user_ref=None).hold is False  # type: ignore[union-attr]


def test_a_held_pause_is_dropped_once_it_was_answered():
    # Given a held notification for the turn's first pause
    note = notification_for(
        turn(status="paused", pause_seq=1, pending={"tool_calls": [CLIENT_CALL]}), tenant_id="p", user_ref=None
    )
    assert note is not None
    # Then it is sent while that pause stands, and dropped once the turn moved on or paused again
    assert deliveries.moved_on(note, turn(status="paused", pause_seq=1)) is None
    assert deliveries.moved_on(note, turn(status="running", pause_seq=1)) is not None
    assert deliveries.moved_on(note, turn(status="paused", pause_seq=2)) is not None
    assert deliveries.moved_on(note, None) is not None


def test_retries_back_off_and_are_capped():
    delays = [deliveries.retry_delay(n, base_seconds=10, cap_seconds=900) for n in range(1, 6)]
    assert delays == [10, 40, 160, 640, 900]
