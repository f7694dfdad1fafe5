"""The pure rules of web push: what a stopped turn says in a notification, and how a push service's answers read."""

from __future__ import annotations

import email.utils
import json

import pytest

from oberik.adapters.webpush import VapidMisconfigured, vapid_keys
from oberik.domain import push
from tests.push.conftest import new_vapid_pair


def event(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "event": "turn.stopped",
        "reason": "completed",
        "needs_input": False,
        "complete": True,
        "session_id": "s_1",
        "preview": "All done.",
        "preview_truncated": False,
        "tools": [],
        "questions": [],
        "approvals": [],
    }
    return base | fields


def test_a_finished_turn_reads_as_its_preview_marked_when_cut():
    note = push.notification_for(event(preview="x" * 280, preview_truncated=True))
    assert note["title"] == "The answer is ready"
    assert note["body"].endswith("…") and len(note["body"]) <= push.BODY_CHARS


def test_each_kind_of_pause_names_what_is_waiting():
    asked = push.notification_for(
        event(
            reason="needs_answer",
            needs_input=True,
            complete=False,
            questions=[{"tool_call_id": "q", "headers": ["Scope", "Deadline"]}],
        )
    )
    assert asked["title"] == "The agent has a question for you" and asked["body"] == "Scope, Deadline"
    tool = push.notification_for(event(reason="needs_client_tool", needs_input=True, complete=False, tools=["pick"]))
    assert tool["title"] == "The agent is waiting for your app" and "pick" in tool["body"]
    two = push.notification_for(
        event(
            reason="needs_approval",
            needs_input=True,
            complete=False,
            approvals=[{"tool_call_id": "a", "action": "Pay"}, {"tool_call_id": "b", "action": "Email"}],
        )
    )
    assert two["body"] == "2 actions wait for your decision: Pay; Email"


def test_a_pause_kind_added_later_still_reads_as_needing_the_person():
    note = push.notification_for(event(reason="needs_signature", needs_input=True, complete=False))
    assert note["title"] == "The agent needs you" and "needs_signature" in note["body"]
    assert note["needs_input"] is True


@pytest.mark.parametrize(
    ("reason", "title"),
    [
        ("hit_tool_limit", "The agent stopped short"),
        ("no_answer", "The turn ended without an answer"),
        ("subagents_incomplete", "The agent stopped"),
    ],
)
def test_turns_that_end_short_say_so(reason: str, title: str):
    note = push.notification_for(event(reason=reason, complete=False, preview=None))
    assert note["title"] == title and note["needs_input"] is False


def test_a_notification_fits_a_push_message_whatever_the_event_holds():
    huge = push.notification_for(
        event(reason="needs_approval", needs_input=True, complete=False, approvals=[{"action": "a" * 10_000}] * 50)
    )
    assert len(json.dumps(huge).encode()) < 3000


def test_retry_after_reads_seconds_and_http_dates():
    assert push.retry_after_seconds("120", now=0) == 120
    now = 1_800_000_000.0
    later = email.utils.formatdate(now + 90, usegmt=True)
    assert push.retry_after_seconds(later, now=now) == pytest.approx(90, abs=1)
    assert push.retry_after_seconds(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0
    assert push.retry_after_seconds("soon", now=now) is None
    assert push.retry_after_seconds(None, now=now) is None


def test_which_answers_are_gone_and_which_are_worth_retrying():
    assert push.gone(404) and push.gone(410) and not push.gone(429)
    assert push.worth_retrying(429) and push.worth_retrying(503) and push.worth_retrying(None)
    assert not push.worth_retrying(400) and not push.worth_retrying(403) and not push.worth_retrying(413)


def test_a_vapid_pair_is_read_as_web_push_writes_it_and_checked():
    pair = new_vapid_pair()
    keys = vapid_keys(pair.public, pair.private, None)
    assert keys is not None and keys.public_key == pair.public
    assert keys.subject.startswith("mailto:")  # a placeholder contact until VAPID_SUBJECT is set
    assert vapid_keys(None, pair.private, None) is None and vapid_keys(pair.public, "", None) is None
    with pytest.raises(VapidMisconfigured, match="public half"):
        vapid_keys(new_vapid_pair().public, pair.private, None)
    with pytest.raises(VapidMisconfigured, match="P-256 public key"):
        vapid_keys("AAAA", pair.private, None)
    with pytest.raises(VapidMisconfigured, match="mailto"):
        vapid_keys(pair.public, pair.private, "ops@acme.example")
