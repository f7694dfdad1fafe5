"""The playground page, end to end: headless Chromium against the live stack and the scripted model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from oberik.domain import pauses
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api
from tests.browser.conftest import Playground
from tests.integration.test_pauses import QUESTION, call, tool_messages

pytestmark = pytest.mark.browser

ANSWER = "It is a quarter past nine in the morning, so there is time for coffee before the meeting."
THOUGHT = "The clock says nine fifteen on a Monday, which is morning, so the answer is about the morning."
LONG = " ".join(f"word{i}" for i in range(60))


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def answers(pg: Playground) -> Any:
    """The text of every agent answer in the transcript (not the rows that only show tool calls)."""
    return pg.page.locator("#transcript .msg.assistant:not(.tool-row) .content")


def test_a_message_streams_in_piece_by_piece(playground: Playground, provider: ScriptedProvider):
    # Given a model that asks the clock, thinks, then answers a word at a time
    provider.script(
        Reply(tool_calls=[call("current_time", "c1")]),
        Reply(reasoning=THOUGHT, text=ANSWER, token_delay=0.06),
    )
    pg = playground.open()
    pg.record()

    # When a message is sent
    pg.send("What time is it?")

    # Then the reasoning shows, collapsed and dimmed, while the model thinks
    page = pg.page
    expect(page.locator(".msg.live .reasoning summary")).to_contain_text("Thinking…")
    pg.shot("thinking")

    # And the answer is written into the page while it streams
    pg.wait_for_text(25)
    expect(page.locator("#steer-form")).to_be_visible()
    pg.shot("streaming")

    # And it ends up whole in the transcript, having arrived in several pieces
    pg.wait_until_idle()
    expect(answers(pg).last).to_have_text(ANSWER)
    partial = {text for text in pg.recorded("answer") if text and text != ANSWER}
    assert len(partial) >= 3, partial
    assert all(ANSWER.startswith(text) for text in partial)
    assert "Running current_time…" in pg.recorded("status")
    expect(page.get_by_text("Used current_time")).to_be_visible()

    # And the conversation is listed under its first words and is the one in the URL
    expect(page.locator("#sessions .session.current .title")).to_have_text("What time is it?")
    assert "#session=s_" in page.url and "token=" not in page.url
    pg.shot("answered")
    assert pg.errors == []


def test_an_approval_is_given_in_the_dialog_and_the_turn_carries_on(playground: Playground, provider: ScriptedProvider):
    # Given a model that asks before sending mail, then confirms
    provider.script(
        Reply(
            tool_calls=[
                call(
                    "request_approval",
                    "r1",
                    action="Email the Q3 numbers to finance",
                    detail="To: finance@acme.com",
                    consequence="It cannot be unsent",
                )
            ]
        ),
        Reply(text="Done: the Q3 numbers are on their way to finance.", token_delay=0.02),
    )
    pg = playground.open()

    # When the turn pauses for approval
    pg.send("Email the Q3 numbers to finance")
    dialog = pg.page.get_by_role("dialog", name="The agent asks for your approval")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Email the Q3 numbers to finance")
    expect(dialog).to_contain_text("To: finance@acme.com")
    expect(dialog).to_contain_text("It cannot be unsent")
    expect(pg.page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    pg.shot("approval-asked")

    # And the user approves it with a note
    dialog.get_by_label("Note for the agent (optional)").fill("bcc me")
    dialog.get_by_role("button", name="Approve").click()

    # Then the same turn resumes and answers
    pg.wait_until_idle()
    expect(answers(pg).last).to_have_text("Done: the Q3 numbers are on their way to finance.")
    expect(dialog).to_be_hidden()
    expect(pg.page.get_by_text("Asked for approval")).to_be_visible()
    told = tool_messages(provider.requests[-1])["r1"]
    assert told.startswith(pauses.APPROVED) and "bcc me" in told
    pg.shot("approved-and-answered")
    assert pg.errors == []


def test_a_question_is_answered_by_picking_an_option(playground: Playground, provider: ScriptedProvider):
    # Given a model that asks which fetchers to migrate
    provider.script(
        Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]),
        Reply(text="Migrating the forfaits and box fetchers.", token_delay=0.02),
    )
    pg = playground.open()

    # When it asks
    pg.send("Migrate the fetchers")
    picker = pg.page.get_by_role("dialog", name="The agent has a question")
    expect(picker).to_be_visible()
    expect(picker.get_by_role("group", name="Scope")).to_contain_text("Which fetchers?")
    pg.shot("question-asked")

    # And the user picks an option and sends it
    picker.get_by_label("box-* too").check()
    pg.shot("option-picked")
    picker.get_by_role("button", name="Send answer").click()

    # Then the answer reaches the model and the turn finishes
    pg.wait_until_idle()
    expect(answers(pg).last).to_have_text("Migrating the forfaits and box fetchers.")
    answer = json.loads(tool_messages(provider.requests[-1])["q1"])
    assert answer["answers"][0]["selected"] == ["box-* too"]
    pg.shot("answered")
    assert pg.errors == []


def test_stop_cancels_the_answer_mid_stream(playground: Playground, provider: ScriptedProvider):
    # Given a long answer written slowly
    provider.script(Reply(text=LONG, token_delay=0.08))
    pg = playground.open()
    pg.send("Tell me everything")
    pg.wait_for_text(20)
    pg.shot("before-stop")

    # When the user presses Stop
    page = pg.page
    page.get_by_role("button", name="Stop").click()

    # Then the page says it stopped, the stream ends, and the message is marked unanswered
    expect(page.locator("#status")).to_have_text("Stopped.")
    pg.wait_until_idle()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    expect(page.locator(".msg.stopped")).to_contain_text("Stopped.")
    expect(page.locator(".msg.user.abandoned")).to_contain_text("not answered")
    shown = page.locator(".msg.stopped .content").text_content() or ""
    assert shown and LONG.startswith(shown) and shown != LONG
    page.wait_for_timeout(400)
    assert page.locator(".msg.stopped .content").text_content() == shown  # nothing more arrives
    pg.shot("stopped")
    assert pg.errors == []


def test_a_reload_mid_turn_reattaches_and_the_answer_finishes(playground: Playground, provider: ScriptedProvider):
    # Given an answer that takes a few seconds to write
    provider.script(Reply(text=LONG, token_delay=0.05))
    pg = playground.open()
    pg.send("Write it slowly")
    pg.wait_for_text(20)
    page = pg.page
    assert "#session=s_" in page.url

    # When the page is reloaded mid-answer
    page.reload()

    # Then it finds the running turn through /run, re-attaches, and the text keeps arriving
    expect(page.locator(".msg.live .content")).not_to_be_empty()
    expect(page.locator("#steer-form")).to_be_visible()
    pg.shot("reattached-mid-turn")

    # And the final text appears once the turn finishes, under the one question that was asked
    pg.wait_until_idle()
    expect(answers(pg).last).to_have_text(LONG)
    expect(page.locator(".msg.user")).to_have_count(1)
    pg.shot("finished-after-reload")
    assert pg.errors == []


def test_a_question_left_waiting_is_shown_again_after_a_reload(playground: Playground, provider: ScriptedProvider):
    # Given a turn paused on a question
    provider.script(
        Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]),
        Reply(text="Fine, let us just talk.", token_delay=0.02),
    )
    pg = playground.open()
    pg.send("Migrate the fetchers")
    expect(pg.page.get_by_role("dialog", name="The agent has a question")).to_be_visible()

    # When the page is reloaded
    pg.page.reload()

    # Then /run's `waiting` brings the picker back, and "Just chat" resumes the turn without an answer
    picker = pg.page.get_by_role("dialog", name="The agent has a question")
    expect(picker).to_be_visible()
    pg.shot("question-after-reload")
    picker.get_by_role("button", name="Just chat").click()
    pg.wait_until_idle()
    expect(answers(pg).last).to_have_text("Fine, let us just talk.")
    assert tool_messages(provider.requests[-1])["q1"] == pauses.CHAT_INSTEAD
    assert pg.errors == []


def test_a_steer_lands_in_the_running_turn(playground: Playground, provider: ScriptedProvider):
    # Given an answer being written slowly, and a second step for the correction
    provider.script(Reply(text=LONG, token_delay=0.04), Reply(text=" Corrected: only forfaits."))
    pg = playground.open()
    pg.send("Migrate every fetcher")
    pg.wait_for_text(10)

    # When the user steers mid-answer
    page = pg.page
    page.get_by_label("Steer this turn").fill("only the forfaits-* ones")
    page.get_by_role("button", name="Steer", exact=True).click()

    # Then the page says it landed, and the transcript shows the correction between the two answers
    expect(page.locator("#steer-result")).to_contain_text("Delivered")
    pg.shot("steered")
    pg.wait_until_idle()
    expect(page.locator(".msg.user").last).to_contain_text("only the forfaits-* ones")
    expect(page.locator(".msg.user").last).to_contain_text("steered mid-turn")
    expect(answers(pg).last).to_have_text("Corrected: only forfaits.")
    assert pg.errors == []


def test_conversations_are_renamed_forked_and_deleted_from_the_page(
    playground: Playground, api: Api, token: str, provider: ScriptedProvider
):
    # Given two conversations
    provider.script(Reply(text="First answer."), Reply(text="Second answer."))
    first = api.chat(token, message="first question", title="Alpha").json()["session_id"]
    api.chat(token, message="second question", title="Beta")
    pg = playground.open()
    page = pg.page
    rows = page.locator("#sessions .session")
    expect(rows).to_have_count(2)

    # When one is opened and renamed
    rows.filter(has_text="Alpha").locator("button.open").click()
    expect(answers(pg).last).to_have_text("First answer.")
    page.get_by_role("button", name="Rename “Alpha”").click()
    page.get_by_label("New name for the conversation (leave empty to clear it)").fill("Alpha, renamed")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#sessions .session.current .title")).to_have_text("Alpha, renamed")

    # And forked from its answer
    page.locator(".msg.assistant").last.get_by_role("button", name="Fork the conversation from this message").click()
    expect(page.locator("#banner")).to_contain_text("Forked into a new conversation")
    expect(rows).to_have_count(3)
    expect(answers(pg).last).to_have_text("First answer.")
    forked = page.url.split("#session=")[1]
    pg.shot("forked")

    # And the fork is deleted (two clicks: the first only asks)
    current = page.locator("#sessions .session.current")
    current.get_by_role("button", name="Delete “Alpha, renamed”").click()
    current.get_by_role("button", name="Confirm deleting “Alpha, renamed”").click()
    expect(rows).to_have_count(2)
    expect(page.locator("#empty")).to_be_visible()

    # Then the API agrees
    listed = httpx.get(f"{pg.base}/chat/sessions", headers=api.bearer(token)).json()["items"]
    assert {s["title"] for s in listed} == {"Alpha, renamed", "Beta"}
    assert forked not in {s["id"] for s in listed} and first in {s["id"] for s in listed}
    pg.shot("after-delete")
    assert pg.errors == []


def test_cited_segments_and_the_stream_reader_in_the_browser(playground: Playground):
    # Given the page's own modules, in the browser
    pg = playground.open()

    # When an answer with claims is split, and a stream that drops mid-run is followed
    result = pg.page.evaluate(
        """async () => {
          const { renderCited } = await import('./web/cited.js');
          const { follow } = await import('./web/sse.js');
          const content = '🙂 Five free days [2]. Nothing else [9].';
          const spans = renderCited({
            content,
            citations: [{ marker: 2, kind: 'document', title: 'Tariff', quote: '5 days', used: true }],
            claims: [
              { text: 'Five free days [2].', start: 2, end: 21, citations: [2] },
              { text: 'Nothing else [9].', start: 22, end: 39, citations: [9] },
            ],
          });
          const enc = new TextEncoder();
          const body = (text) => new Response(
            new ReadableStream({ start(c) { c.enqueue(enc.encode(text)); c.close(); } }),
            { headers: { 'X-Run-Id': 'r_1' } });
          const frames = [], attaches = [], reconnects = [];
          // The first response hands over on purpose (retry:, as a long-poll window does); the first
          // re-attach then drops without a word; the second finishes the run.
          const bodies = [
            'id: 3\\nevent: token\\ndata: {"delta":"l"}\\n\\n',
            'id: 4\\nevent: token\\ndata: {"delta":"o"}\\n\\nid: 5\\nevent: done\\ndata: {"content":"Hello"}\\n\\n',
          ];
          const end = await follow({
            open: async () => body('id: 1\\nevent: run\\ndata: {"run_id":"r_1"}\\n\\n'
              + ': keepalive\\n\\nid: 2\\nevent: token\\ndata: {"delta":"Hel"}\\n\\nretry: 5\\n\\n'),
            attach: async (runId, last) => {
              attaches.push([runId, last]);
              return body(bodies.shift());
            },
            onFrame: (event, data) => frames.push([event, data.delta || data.content || data.run_id]),
            onReconnect: (attempt) => reconnects.push(attempt),
          });
          return {
            joined: spans.map((s) => s.text).join('') === content,
            spans: spans.map((s) => [s.text, s.citations.map((c) => c.marker)]),
            frames, attaches, reconnects, end: end.event,
          };
        }"""
    )

    # Then segments rebuild the text exactly and only a marker that resolves gets a pill
    assert result["joined"] is True
    assert result["spans"] == [
        ["🙂 ", []],
        ["Five free days [2].", [2]],
        [" ", []],
        ["Nothing else [9].", []],
    ]
    # And the stream is re-attached after the last frame it saw each time, without repeats or comments; only
    # the unannounced drop counts as a reconnect
    assert result["attaches"] == [["r_1", 2], ["r_1", 3]]
    assert result["reconnects"] == [1]
    assert result["frames"] == [["run", "r_1"], ["token", "Hel"], ["token", "l"], ["token", "o"], ["done", "Hello"]]
    assert result["end"] == "done"
    assert pg.errors == []


def test_claims_become_pills_that_open_their_source(playground: Playground):
    # Given a turn whose answer attributes its sentences (served here by routing the API's answers, since
    # nothing in the platform produces claims yet)
    content = "There are 5 free days at destination [2]. Ask the port for more [7]."
    first = "There are 5 free days at destination [2]."
    second = "Ask the port for more [7]."
    done = {
        "session_id": "s_cited",
        "run_id": "r_cited",
        "content": content,
        "citations": [
            {"marker": 2, "kind": "document", "title": "Tariff 2024", "quote": "Five (5) free days.", "used": True}
        ],
        "claims": [
            {"text": first, "start": 0, "end": len(first), "citations": [2]},
            {"text": second, "start": len(first) + 1, "end": len(content), "citations": [7]},
        ],
        "attribution": "per-claim",
        "requires_action": False,
    }
    frames = [("run", {"run_id": "r_cited"}), ("start", {"session_id": "s_cited"}), ("token", {"delta": content})]
    body = "".join(
        f"id: {i}\nevent: {event}\ndata: {json.dumps(data)}\n\n"
        for i, (event, data) in enumerate([*frames, ("done", done)], 1)
    )
    transcript = {
        "session_id": "s_cited",
        "messages": [
            {"id": "m_1", "role": "user", "content": "How long can a box stay?", "created_at": 1, "extra": {}},
            {"id": "m_2", "role": "assistant", "content": content, "created_at": 2, "extra": {}},
        ],
    }
    page = playground.page
    page.route(
        "**/chat/stream",
        lambda route: route.fulfill(
            status=200, headers={"X-Run-Id": "r_cited"}, content_type="text/event-stream", body=body
        ),
    )
    page.route("**/chat/sessions/s_cited/messages", lambda route: route.fulfill(json=transcript))
    pg = playground.open()

    # When it is answered
    pg.send("How long can a box stay?")

    # Then the cited sentence carries a pill, and the invented marker [7] none
    pills = page.locator("#transcript .pill")
    expect(pills).to_have_count(1)
    expect(pills).to_have_accessible_name("Source 2: Tariff 2024")
    segments = page.locator("#transcript .content").last.evaluate(
        "e => [...e.querySelectorAll('.segment')].map((s) => s.firstChild.textContent)"
    )
    assert segments == [first, " ", second]

    # And the pill opens what the sentence rests on
    pills.click()
    expect(page.locator("#transcript .source")).to_contain_text("Five (5) free days.")
    expect(page.get_by_text("Sources (1)")).to_be_visible()
    pg.shot("pills")
    assert pg.errors == []


def test_a_token_pasted_under_connection_is_kept(playground: Playground, api: Api, token: str, provider):
    # Given a page opened without a token
    provider.script(Reply(text="hello"))
    api.chat(token, message="hi", title="Kept")
    page = playground.page
    page.goto(playground.base + "/")

    # Then it asks for one, and nothing can be sent
    expect(page.get_by_label("Token")).to_be_visible()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    playground.shot("no-token")

    # When one is pasted and saved, the conversations load, and they are still there after a reload
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#sessions .session .title")).to_have_text(["Kept"])
    page.reload()
    expect(page.locator("#sessions .session .title")).to_have_text(["Kept"])
    expect(page.get_by_label("Token")).to_be_hidden()
    assert playground.errors == []
