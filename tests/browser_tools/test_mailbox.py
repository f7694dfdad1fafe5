"""The AWS adapter's command loop, run in-process: MailboxBrowser posts commands into moto's DynamoDB, and the
browser host (the code the browser Lambda runs) serves them with a real Chromium page started with the Lambda's
flags. Hand-over near the time limit, idle reaping and close go through the same table."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore
from oberik.browser.host import LAMBDA_CHROMIUM_ARGS, HostLimits, serve_event
from oberik.browser.local import DEFAULT_EXECUTABLE
from oberik.browser.remote import MailboxBrowser
from oberik.local.stack import load_handler
from oberik.local.template import load_template, table_definition
from oberik.settings import get_settings
from tests.browser_tools.conftest import Site


@pytest.fixture
def store(mocked_aws: None) -> DynamoStore:
    client("dynamodb").create_table(TableName=get_settings().table_name, **table_definition(load_template()))
    return DynamoStore()


@dataclass
class Hosts:
    """Starts hosts the way an asynchronous Lambda invoke would: each in a thread of its own."""

    store: DynamoStore
    limits: HostLimits
    remaining: Callable[[int], int] = lambda served: 600_000
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    count: int = 0

    def invoke(self, session_id: str) -> None:
        self._start({"session_id": session_id})

    def _start(self, event: dict[str, Any]) -> None:
        self.count += 1
        number = self.count
        served = {"n": 0}

        def run() -> None:
            out = asyncio.run(
                serve_event(
                    event,
                    store=self.store,
                    remaining_ms=lambda: self.remaining(served["n"]) if number == 1 else 600_000,
                    executable=DEFAULT_EXECUTABLE,
                    limits=self.limits,
                    allow_private=True,
                    launch_args=LAMBDA_CHROMIUM_ARGS,
                    host_id=f"host-{number}",
                    successor=self._start,
                )
            )
            self.outcomes.append(out)

        # Count what the first host served, so a test can make it run out of time after a given command.
        original_answer = self.store.browser_answer

        def counting_answer(session_id: str, command_id: str, result: dict[str, Any]) -> None:
            original_answer(session_id, command_id, result)
            served["n"] += 1

        if number == 1:
            self.store.browser_answer = counting_answer  # type: ignore[method-assign]
        t = threading.Thread(target=run, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self, timeout: float = 60) -> None:
        for t in list(self.threads):
            t.join(timeout)


def _limits(**kw: Any) -> HostLimits:
    base = {"poll_seconds": 0.02, "heartbeat_seconds": 0.5, "idle_seconds": 60.0, "handover_margin_seconds": 90.0}
    return HostLimits(**(base | kw))


@pytest.fixture
def hosts(store: DynamoStore) -> Iterator[Hosts]:
    h = Hosts(store, _limits())
    yield h
    for sid in ("ses-m",):
        MailboxBrowser(store, h.invoke).close(sid)
    h.join()


def test_goto_click_read_through_the_mailbox(store: DynamoStore, hosts: Hosts, site: Site):
    browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
    a = browser.run("ses-m", "goto", {"url": site.url("/button")})
    assert a["title"] == "Counter" and a["elements"][0] == '[1] button "Add one"'
    a = browser.run("ses-m", "click", {"n": 1})
    assert "1 clicks" in a["text"] and a["elements"][0] == '[1] link "Inserted link" -> /links'
    a = browser.run("ses-m", "read", {})
    assert "1 clicks" in a["text"]
    assert hosts.count == 1  # one host served every command
    assert browser.is_open("ses-m")
    assert store.browser_commands("ses-m") == []  # answered commands are gone
    shot = browser.run("ses-m", "screenshot", {})
    assert shot["image"]["type"] == "image/jpeg"
    assert browser.close("ses-m") is True
    hosts.join()
    assert [o["stopped"] for o in hosts.outcomes] == ["closed"]
    assert not browser.is_open("ses-m")


def test_a_host_near_its_time_limit_hands_the_page_to_a_fresh_one(store: DynamoStore, site: Site):
    hosts = Hosts(store, _limits())
    hosts.remaining = lambda served: 600_000 if served < 2 else 1_000  # out of time after two answers
    browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
    browser.run("ses-h", "goto", {"url": site.url("/set-cookie")})
    browser.run("ses-h", "goto", {"url": site.url("/form")}, timeout=30)
    # The first host is past its margin now: it saves the page and starts its successor, which answers these.
    a = browser.run("ses-h", "read", {})
    assert a["url"] == site.url("/form") and a["title"] == "Sign in" and "notice" not in a
    a = browser.run("ses-h", "goto", {"url": site.url("/show-cookie")})
    assert "visit=42" in a["text"]  # the cookie moved with the page
    browser.close("ses-h")
    hosts.join()
    stopped = [o["stopped"] for o in hosts.outcomes]
    assert stopped == ["handover", "closed"]
    assert hosts.count == 2


def test_an_idle_host_stops_and_the_next_page_is_blank_with_the_agent_told(store: DynamoStore, site: Site):
    hosts = Hosts(store, _limits(idle_seconds=0.5))
    browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
    browser.run("ses-i", "goto", {"url": site.url("/links")})
    hosts.join()  # the host stops by itself once idle
    assert [o["stopped"] for o in hosts.outcomes] == ["idle"]
    assert not browser.is_open("ses-i")
    a = browser.run("ses-i", "read", {})
    assert a["url"] == "about:blank"
    assert "had not been used for 0.5 seconds" in a["notice"] and site.url("/links") in a["notice"]
    browser.close("ses-i")
    hosts.join()


def test_a_second_start_finds_the_page_already_hosted(store: DynamoStore, hosts: Hosts, site: Site):
    browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
    browser.run("ses-m", "goto", {"url": site.url("/links")})
    hosts.invoke("ses-m")  # a duplicate invoke (a retry) must not open a second page
    hosts.threads[-1].join(30)
    assert hosts.outcomes[-1]["stopped"] == "already_hosted"
    assert browser.run("ses-m", "read", {})["title"] == "Articles"


def test_the_lambda_handler_serves_the_mailbox(store: DynamoStore, site: Site, monkeypatch):
    """functions/browser/app.py itself, invoked in-process with a Lambda-like context."""

    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "true")
    monkeypatch.setenv("OBERIK_BROWSER_IDLE_SECONDS", "1")
    get_settings.cache_clear()
    handler = load_handler(Path(__file__).parents[2] / "functions/browser/app.py", "oberik_fn_browser_test", "handler")

    class Context:
        function_name = "oberik-browser"
        memory_limit_in_mb = 2048
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:oberik-browser"
        aws_request_id = "req-1"

        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 600_000

    results: list[dict[str, Any]] = []

    def invoke(session_id: str) -> None:
        threading.Thread(
            target=lambda: results.append(handler({"session_id": session_id}, Context())), daemon=True
        ).start()

    browser = MailboxBrowser(store, invoke, poll_seconds=0.02)
    a = browser.run("ses-app", "goto", {"url": site.url("/form")})
    assert a["title"] == "Sign in"
    a = browser.run("ses-app", "type", {"selector": "#email", "text": "x@example.com", "submit": True})
    assert "Welcome x@example.com" in a["text"]
    deadline = time.monotonic() + 30
    while not results and time.monotonic() < deadline:  # the host stops on its own after a second idle
        time.sleep(0.05)
    assert results and results[0]["stopped"] == "idle" and results[0]["served"] == 2
    json.dumps(results)


def test_an_operation_another_module_registers_runs_in_the_host_too(store: DynamoStore, hosts: Hosts, site: Site):
    from oberik.browser.actions import EXTRA_OPS, register_op

    async def heading(page, state, args):
        return {"heading": await page.inner_text(args["selector"])}

    register_op("test_heading", heading)
    try:
        browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
        browser.run("ses-m", "goto", {"url": site.url("/links")})
        assert browser.run("ses-m", "test_heading", {"selector": "h1"}) == {"heading": "Articles"}
        assert "unknown browser operation" in browser.run("ses-m", "nope", {})["error"]
    finally:
        EXTRA_OPS.pop("test_heading", None)
