"""The Browser port on AWS: the page lives in the browser Lambda, reached through a mailbox in the table.

`run` posts the command, makes sure a host is serving the conversation (starting one with an asynchronous invoke
when none is, or the one there went quiet) and reads the answer when it appears. There is no push channel
between a step Lambda and the host, so the answer is polled for, briefly and with a consistent read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from oberik.adapters.dynamodb_browser import STARTING
from oberik.browser.port import BrowserUnreachable

# A lease not renewed for this long belongs to a host that stopped (it renews every few seconds).
STALE_AFTER_SECONDS = 20.0
RECHECK_SECONDS = 2.0


class MailboxBrowser:
    def __init__(
        self,
        store: Any = None,
        invoke: Callable[[str], None] | None = None,
        *,
        poll_seconds: float = 0.1,
        clock: Callable[[], float] = time.time,
    ):
        self._store = store
        self._invoke = invoke
        self.poll_seconds = poll_seconds
        self.clock = clock

    @property
    def store(self) -> Any:
        if self._store is None:
            from oberik.adapters.dynamodb import DynamoStore

            self._store = DynamoStore()
        return self._store

    def _start_host(self, session_id: str) -> None:
        if self._invoke is not None:
            self._invoke(session_id)
            return
        from oberik.adapters.aws import client
        from oberik.settings import get_settings

        name = get_settings().browser_function_name
        if not name:
            raise BrowserUnreachable("no browser function is configured (OBERIK_BROWSER_FUNCTION_NAME)")
        client("lambda").invoke(
            FunctionName=name, InvocationType="Event", Payload=json.dumps({"session_id": session_id}).encode()
        )

    def _live(self, host: dict[str, Any] | None) -> bool:
        return host is not None and self.clock() - host["heartbeat_at"] < STALE_AFTER_SECONDS

    def ensure_host(self, session_id: str) -> None:
        """Start a host unless one is serving (or being started for) the conversation."""
        if self._live(self.store.browser_host(session_id)):
            return
        if self.store.browser_take_lease(session_id, STARTING, self.clock(), STALE_AFTER_SECONDS):
            self._start_host(session_id)

    def _send(self, session_id: str, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        command_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        self.store.browser_post(session_id, command_id, op, args)
        self.ensure_host(session_id)
        deadline = self.clock() + timeout
        recheck = self.clock() + RECHECK_SECONDS
        while self.clock() < deadline:
            answer = self.store.browser_result(session_id, command_id)
            if answer is not None:
                return answer
            if self.clock() >= recheck:  # the host may have stopped between our post and its last look
                self.ensure_host(session_id)
                recheck = self.clock() + RECHECK_SECONDS
            time.sleep(self.poll_seconds)
        raise BrowserUnreachable(f"the browser host did not answer within {timeout:g} seconds")

    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        if op == "screenshot":  # an answer is one table item: a JPEG keeps a window's picture well inside it
            args = {**args, "format": "jpeg"}
        return self._send(session_id, op, args, timeout)

    def close(self, session_id: str) -> bool:
        if not self.is_open(session_id):
            self.store.browser_clear_state(session_id)
            return False
        return bool(self._send(session_id, "close", {}, 30).get("closed"))

    def is_open(self, session_id: str) -> bool:
        host = self.store.browser_host(session_id)
        return self._live(host) and host is not None and host["host_id"] != STARTING


_default: MailboxBrowser | None = None


def default_mailbox() -> MailboxBrowser:
    """The mailbox adapter the tools and the hand-off use (a fresh one on the deployment's table unless set)."""
    return _default or MailboxBrowser()


def set_default_mailbox(browser: MailboxBrowser | None) -> MailboxBrowser | None:
    """Use `browser` for every caller in this process (tests start hosts in threads); returns the one replaced."""
    global _default
    old, _default = _default, browser
    return old
