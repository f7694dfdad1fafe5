"""One verifier for every delivery: the Node receiver that accepts turn.stopped accepts scheduled_task.fired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project
from tests.deliveries.test_node_verifier import NODE, NodeReceiver
from tests.tasks.conftest import post_task

pytestmark = [
    pytest.mark.usefixtures("allow_private", "quick", "stop_clock"),
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
]


def test_the_node_verifier_accepts_a_scheduled_task_fired_delivery(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, node_receiver: NodeReceiver
):
    # Given an agent task whose callback is the Node receiver holding the project's webhook secret
    token = api.token(scripted_project, tenant_id="acme-eu")
    task = post_task(
        api,
        token,
        schedule={"rate": "1 hour"},
        action={"type": "agent", "message": "anything new?", "callback_url": node_receiver.url},
    ).json()
    provider.script(Reply(text="Nothing new — « rien de neuf » (5 €)."))

    # When it fires
    (fired,) = aws.clock.tick(datetime.now(UTC) + timedelta(minutes=61))  # type: ignore[union-attr]

    # Then Node's own crypto verified the signature over the raw bytes, and read the body it expected
    line = node_receiver.next_line()
    assert line["ok"] is True and line["delivery_id"].startswith("dlv_")
    assert line["event"] == {
        "event": "scheduled_task.fired",
        "task_id": task["id"],
        "tenant_id": "acme-eu",
        "session_id": fired.result["session_id"],
        "message": "Nothing new — « rien de neuf » (5 €).",
    }
