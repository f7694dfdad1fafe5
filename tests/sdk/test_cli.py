"""`oberik token` and `oberik chat`: the terminal chat driven by a script of inputs against the live stack."""

from __future__ import annotations

import _thread
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oberik.cli import main
from oberik.client import Client
from oberik.client.repl import ChatRepl
from oberik.domain import pauses
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Project


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def scripted(lines: list[str], prompts: list[str]) -> Callable[[str], str]:
    """input() for a test: each call answers the next line; past the last one it is Ctrl-D."""
    answers: Iterator[str] = iter(lines)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    return read


def test_the_terminal_chat_streams_shows_tools_and_the_plan_and_asks_at_the_prompt(
    live: str, token: str, provider: ScriptedProvider
):
    # Given three turns: one with a plan, a tool and thinking; one asking approval; one asking a question
    provider.script(
        Reply(tool_calls=[call("todo_write", "t1", items=["check the clock", "answer"]), call("current_time", "c1")]),
        Reply(reasoning="Reading the clock.", text="It is noon."),
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
        Reply(text="Not sent."),
        Reply(
            tool_calls=[
                call(
                    "ask_user",
                    "q1",
                    questions=[
                        {"header": "Scope", "question": "Which fetchers?", "options": ["forfaits-* only", "box-* too"]}
                    ],
                )
            ]
        ),
        Reply(text="Migrating the box ones too."),
    )
    out: list[str] = []
    prompts: list[str] = []
    inputs = ["what time is it?", "email Q3", "maybe", "n", "use the other address", "", "migrate", "2"]
    client = Client(live, token=token)

    # When a user types them at the terminal, then presses Ctrl-D
    status = ChatRepl(client, read=scripted(inputs, prompts), write=out.append).run()

    # Then everything was shown as it happened, and the pauses were asked at the prompt
    text = "".join(out)
    assert status == 0
    for expected in (
        "-> todo_write",
        "-> current_time",
        "<- current_time:",
        "Plan:\n    [ ] 1. check the clock\n    [ ] 2. answer",
        "(thinking) Reading the clock.\nIt is noon.\n",
        "Approval needed: Email the Q3 numbers to finance\n  To: finance@acme.com\n  Cannot be undone: It cannot be unsent",
        "Answer y or n.",
        "Not sent.",
        "Scope: Which fetchers?\n  1. forfaits-* only\n  2. box-* too",
        "Migrating the box ones too.",
    ):
        assert expected in text
    assert prompts.count("you> ") == 5  # three turns, one blank line, then Ctrl-D
    # And the answers reached the model: a refusal with its note, and the option picked by number
    told = tool_messages(provider.requests[3])["r1"]
    assert told.startswith(pauses.REFUSAL) and "use the other address" in told
    assert json.loads(tool_messages(provider.requests[5])["q1"])["answers"][0]["selected"] == ["box-* too"]
    # And it was all one conversation
    assert len(client.sessions.list().items) == 1


def test_ctrl_c_during_a_turn_cancels_it_and_the_chat_goes_on(live: str, token: str, provider: ScriptedProvider):
    # Given a long answer, and a user who presses Ctrl-C once its first words are on screen
    provider.script(Reply(text=" ".join(f"t{i}" for i in range(300)), token_delay=0.01))
    out: list[str] = []
    pressed: list[bool] = []

    def write(text: str) -> None:
        out.append(text)
        if text.startswith("t0") and not pressed:
            pressed.append(True)
            _thread.interrupt_main()  # what Ctrl-C does to the main thread

    # When the turn is interrupted
    status = ChatRepl(Client(live, token=token), read=scripted(["go"], []), write=write).run()

    # Then it was cancelled server-side, said so, and the chat carried on to the next prompt
    text = "".join(out)
    assert status == 0 and pressed
    assert "^C: cancelling the turn" in text and "(cancelled)" in text
    assert provider.tokens_sent < 300


def test_token_mints_with_the_project_key_and_defaults_from_the_dev_file(
    live: str, token: str, scripted_project: Project, provider, tmp_path: Path, monkeypatch, capsys
):
    # Given a project key, given on the command line
    # When a token is minted for ana with only the chat capability
    assert main(
        ["token", "--url", live, "--project", scripted_project.id, "--key", scripted_project.key,
         "--subject", "ana", "--ttl", "600", "--capabilities", "chat"]
    ) == 0  # fmt: skip
    minted = capsys.readouterr().out.strip()

    # Then it works, with exactly that capability
    assert Client(live, token=minted).tools.list().tools == []

    # And with a .oberik/dev.json in the working directory, the flags default to it, for token and chat alike
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".oberik").mkdir()
    dev = {"url": live, "project_id": scripted_project.id, "project_key": scripted_project.key, "token": token}
    (tmp_path / ".oberik" / "dev.json").write_text(json.dumps(dev))
    assert main(["token", "--subject", "bob"]) == 0
    assert Client(live, token=capsys.readouterr().out.strip()).sessions.list().items == []
    provider.script(Reply(text="Hello from the terminal."))
    monkeypatch.setattr("builtins.input", scripted(["hi"], []))
    assert main(["chat"]) == 0
    assert "Hello from the terminal." in capsys.readouterr().out


def test_without_a_dev_file_the_flags_are_required(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["token", "--subject", "ana"]) == 2
    assert "--url is required" in capsys.readouterr().err
