"""The Browser port: what the browser tools need from wherever the page lives.

Two adapters implement it: `oberik.browser.local.LocalBrowser` (Chromium in this process, `oberik dev` and the
tests) and `oberik.browser.remote.MailboxBrowser` (a container Lambda per conversation on AWS, driven through a
mailbox in the table). Both run the same page operations (`oberik.browser.actions.perform`), so an operation
answers the same way whichever adapter ran it.

An operation is a name from OPS and a dict of arguments; its answer is a JSON-able dict. Every answer that looks
at the page is an observation: `url`, `title`, `text`, `elements` (the numbered list of what can be clicked or
typed into, renumbered after every action), `bot_check` (None, or what was recognised) and `notice` (something
the agent must be told, e.g. that its page was reaped and reopened blank). Failures the agent should read are
answers with `error`, not exceptions; exceptions are for a browser that cannot be reached at all.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

Op = Literal["goto", "read", "html", "viewport", "click", "type", "scroll", "wait", "screenshot", "state"]
OPS: tuple[str, ...] = ("goto", "read", "html", "viewport", "click", "type", "scroll", "wait", "screenshot", "state")


class BrowserUnreachable(RuntimeError):
    """The page's host could not be reached or started (no Chromium, the host Lambda failed, a timeout)."""


class Browser(Protocol):
    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        """Run one operation on the conversation's page (opening a blank one if it has none) and return its
        answer. `screenshot` answers with `image_b64` (PNG) besides the observation."""
        ...

    def close(self, session_id: str) -> bool:
        """Close the conversation's page; True when one was open."""
        ...

    def is_open(self, session_id: str) -> bool:
        """Whether the conversation holds a page right now."""
        ...
