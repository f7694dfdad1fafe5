"""A receiver written in Node, the way the spec tells consumers to verify, accepts our deliveries byte for byte."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from oberik.domain import deliveries
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import eventually

VERIFIER = Path(__file__).with_name("verify.mjs")
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.usefixtures("allow_private", "quick"),
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
]


class NodeReceiver:
    def __init__(self, secret: str) -> None:
        assert NODE is not None
        self.secret = secret
        self.proc = subprocess.Popen(
            [NODE, str(VERIFIER)],
            env={"WEBHOOK_SECRET": secret, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = int(self.next_line(10)["listening"])
        self.url = f"http://127.0.0.1:{self.port}/webhooks/oberik"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def next_line(self, timeout: float = 15) -> dict[str, Any]:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"verify.mjs printed nothing within {timeout} s") from None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def node_receiver(api: Api, scripted_project: Project) -> Iterator[NodeReceiver]:
    r = api.client.get(f"/api/projects/{scripted_project.id}/webhook-secret", headers=scripted_project.headers)
    started = NodeReceiver(r.json()["secret"])
    yield started
    started.stop()


def test_the_node_verifier_accepts_a_captured_delivery(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, node_receiver: NodeReceiver
):
    # Given a project whose webhook is the Node receiver, and an answer that is not plain ASCII
    api.configure(scripted_project, webhook_url=node_receiver.url)
    answer = 'Voilà — the "Q3" numbers: 5 € ↑, 3 ✓\nnext line'
    provider.script(Reply(text=answer))

    # When a turn finishes
    api.chat(token, message="Q3?")

    # Then the receiver verified the signature over the raw bytes, and parsed the body only after that
    seen = node_receiver.next_line()
    assert seen["ok"] is True, seen
    assert seen["delivery_id"].startswith("dlv_")
    assert seen["event"]["event"] == "turn.stopped" and seen["event"]["preview"] == answer
    # And the attempt is logged as delivered with the receiver's 200
    logged = eventually(
        lambda: api.client.get(
            f"/api/projects/{scripted_project.id}/webhook-deliveries",
            params={"delivery_id": seen["delivery_id"]},
            headers=scripted_project.headers,
        ).json()["items"],
        what="the logged attempt",
    )
    assert [(a["outcome"], a["status_code"]) for a in logged] == [("delivered", 200)]


def test_the_node_verifier_refuses_a_body_changed_by_one_byte(api: Api, node_receiver: NodeReceiver):
    # Given a body signed with the project's key, and the same signature on a body one byte different
    signature = deliveries.signature(node_receiver.secret, b'{"a":1}')
    good = httpx.post(node_receiver.url, content=b'{"a":1}', headers={"X-Signature": signature})
    changed = httpx.post(node_receiver.url, content=b'{"a":2}', headers={"X-Signature": signature})
    # Then the first verifies and the second does not
    assert good.status_code == 200 and node_receiver.next_line()["ok"] is True
    assert changed.status_code == 401 and node_receiver.next_line()["ok"] is False
