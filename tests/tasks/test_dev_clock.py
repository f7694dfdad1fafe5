"""`oberik dev` fires due schedules itself (moto never does): an agent task end to end, over HTTP."""

from __future__ import annotations

import hashlib
import hmac
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx

from tests.deliveries.conftest import Receiver
from tests.integration.test_dev_server import start_dev


def test_oberik_dev_fires_a_due_agent_task_and_its_callback_verifies(tmp_path: Path, receiver: Receiver) -> None:
    # Given `oberik dev` running (offline model), and its project's delivery key
    process, info = start_dev(tmp_path)
    try:
        url, bearer = info["url"], {"Authorization": f"Bearer {info['token']}"}
        secret = httpx.get(
            f"{url}/api/projects/{info['project_id']}/webhook-secret", headers={"X-API-Key": info["project_key"]}
        ).json()["secret"]

        # When an agent task is scheduled a few seconds from now, in Paris time, with a callback on loopback
        paris = (datetime.now(UTC) + timedelta(seconds=3)).astimezone(ZoneInfo("Europe/Paris"))
        created = httpx.post(
            f"{url}/tasks",
            headers=bearer,
            json={
                "schedule": {"at": paris.replace(tzinfo=None, microsecond=0).isoformat(), "timezone": "Europe/Paris"},
                "action": {"type": "agent", "message": "What time is it?", "callback_url": receiver.url},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        task = created.json()

        # Then, with nobody calling anything, the clock fires it: the turn runs and its reply arrives signed
        (got,) = receiver.wait_for(1, timeout=60)
        expected = "sha256=" + hmac.new(secret.encode(), got.raw, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(got.header("X-Signature"), expected)
        body = got.body
        assert body["event"] == "scheduled_task.fired" and body["task_id"] == task["id"]
        assert body["tenant_id"] == info["project_id"] and body["session_id"].startswith("s_")
        assert body["message"].strip()
        # And the conversation holds the exchange, and the one-time task is gone
        messages = httpx.get(f"{url}/chat/sessions/{body['session_id']}/messages", headers=bearer).json()["messages"]
        assert messages[0]["content"] == "What time is it?" and messages[-1]["content"] == body["message"]
        assert httpx.get(f"{url}/tasks", headers=bearer).json()["items"] == []

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0, process.communicate()[0]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
