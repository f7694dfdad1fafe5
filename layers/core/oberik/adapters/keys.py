"""Every DynamoDB key the platform writes is built here and nowhere else."""

from __future__ import annotations

META = "META"


def project_key(project_id: str) -> dict[str, str]:
    return {"pk": f"PROJECT#{project_id}", "sk": META}


def project_api_key(project_id: str, key_hash: str) -> dict[str, str]:
    return {"pk": f"PROJECT#{project_id}", "sk": f"KEY#{key_hash}"}


def session_key(session_id: str) -> dict[str, str]:
    return {"pk": f"SESSION#{session_id}", "sk": META}


def session_pk(session_id: str) -> str:
    return f"SESSION#{session_id}"


def message_key(session_id: str, seq: int) -> dict[str, str]:
    return {"pk": f"SESSION#{session_id}", "sk": f"MSG#{seq:08d}"}


MESSAGE_PREFIX = "MSG#"


def owner_index(project_id: str, owner: str) -> str:
    """GSI1 partition listing one subject's sessions in one project."""
    return f"OWNER#{project_id}#{owner}"


def owner_sort(updated_at: float, session_id: str) -> str:
    return f"{updated_at:017.6f}#{session_id}"


def turn_key(turn_id: str) -> dict[str, str]:
    return {"pk": f"TURN#{turn_id}", "sk": META}


def run_key(run_id: str) -> dict[str, str]:
    return {"pk": f"RUN#{run_id}", "sk": META}


def run_pk(run_id: str) -> str:
    return f"RUN#{run_id}"


def frame_key(run_id: str, seq: int) -> dict[str, str]:
    return {"pk": f"RUN#{run_id}", "sk": f"F#{seq:010d}"}


FRAME_PREFIX = "F#"


def frame_sort(seq: int) -> str:
    return f"F#{seq:010d}"


def idempotency_key(project_id: str, owner: str, key: str) -> dict[str, str]:
    return {"pk": f"IDEMP#{project_id}#{owner}#{key}", "sk": META}


def summary_key(session_id: str) -> dict[str, str]:
    return {"pk": f"SESSION#{session_id}", "sk": "SUMMARY"}


def todo_key(session_id: str, n: int) -> dict[str, str]:
    return {"pk": f"SESSION#{session_id}", "sk": f"TODO#{n:06d}"}


TODO_PREFIX = "TODO#"


def webhook_secret_key(project_id: str) -> dict[str, str]:
    """The project's delivery signing key (turn.stopped, scheduled_task.fired)."""
    return {"pk": f"PROJECT#{project_id}", "sk": "WEBHOOK_SECRET"}


def delivery_pk(delivery_id: str) -> str:
    return f"DELIVERY#{delivery_id}"


def delivery_attempt_key(delivery_id: str, attempt: int, nonce: str) -> dict[str, str]:
    """One attempt at one delivery; `nonce` keeps a message SQS hands out twice from overwriting a record."""
    return {"pk": f"DELIVERY#{delivery_id}", "sk": f"ATTEMPT#{attempt:04d}#{nonce}"}


DELIVERY_ATTEMPT_PREFIX = "ATTEMPT#"


def deliveries_index(project_id: str) -> str:
    """GSI1 partition listing one project's delivery attempts."""
    return f"DELIVERIES#{project_id}"


def deliveries_sort(at: float, delivery_id: str, attempt: int) -> str:
    return f"{at:017.6f}#{delivery_id}#{attempt:04d}"


def push_subscription_key(project_id: str, endpoint_hash: str) -> dict[str, str]:
    """One browser's push subscription in one project, by a hash of its endpoint (so a repeat replaces it)."""
    return {"pk": f"PUSHSUB#{project_id}#{endpoint_hash}", "sk": META}


def push_subscribers_index(project_id: str, owner: str) -> str:
    """GSI1 partition listing one subject's push subscriptions in one project."""
    return f"PUSHSUBS#{project_id}#{owner}"


def push_sent_key(delivery_id: str, endpoint_hash: str) -> dict[str, str]:
    """Marks one notification as sent to one subscription, so a retried delivery does not send it twice."""
    return {"pk": f"PUSHSENT#{delivery_id}#{endpoint_hash}", "sk": META}


def webhook_tool_key(project_id: str, tool_id: str) -> dict[str, str]:
    return {"pk": f"PROJECT#{project_id}", "sk": f"WHTOOL#{tool_id}"}


WEBHOOK_TOOL_PREFIX = "WHTOOL#"


def webhook_tool_name_key(project_id: str, name: str) -> dict[str, str]:
    """Holds a webhook tool's name in its project, so two tools can never share one."""
    return {"pk": f"PROJECT#{project_id}", "sk": f"WHTOOLNAME#{name}"}


def webhook_tool_calls_pk(project_id: str) -> str:
    """One project's recent webhook-tool calls, newest last by sort key."""
    return f"WHCALLS#{project_id}"


def webhook_tool_call_key(project_id: str, at: float, call_id: str) -> dict[str, str]:
    return {"pk": webhook_tool_calls_pk(project_id), "sk": f"{at:017.6f}#{call_id}"}


def handoff_key(session_id: str) -> dict[str, str]:
    """The conversation's browser hand-off (one at a time; a new one replaces the last)."""
    return {"pk": f"SESSION#{session_id}", "sk": "HANDOFF"}


def task_key(task_id: str) -> dict[str, str]:
    """A scheduled task (its id is also its schedule's name)."""
    return {"pk": f"TASK#{task_id}", "sk": META}


def tasks_index(project_id: str, owner: str) -> str:
    """GSI1 partition listing one subject's scheduled tasks in one project."""
    return f"TASKS#{project_id}#{owner}"


def tasks_sort(created_at: float, task_id: str) -> str:
    return f"{created_at:017.6f}#{task_id}"


def document_key(project_id: str, doc_id: str) -> dict[str, str]:
    return {"pk": f"PROJECT#{project_id}", "sk": f"DOC#{doc_id}"}


DOCUMENT_PREFIX = "DOC#"


def wiki_page_key(project_id: str, scope: str, slug: str) -> dict[str, str]:
    """One wiki page of a project's scope (the text of record; its passages are embedded in the memories index)."""
    return {"pk": wiki_pk(project_id, scope), "sk": f"PAGE#{slug}"}


def wiki_pk(project_id: str, scope: str) -> str:
    return f"WIKI#{project_id}#{scope}"


WIKI_PAGE_PREFIX = "PAGE#"


def browser_key(session_id: str, part: str) -> dict[str, str]:
    """The browser mailbox of a conversation, beside its messages (deleting the conversation deletes its
    saved cookies too): `HOST` (who hosts the page), `STATE` (a page saved for the next host),
    `CMD#<id>` (commands waiting), `RES#<id>` (their answers) and `CAST#<slot>` (a hand-off's newest frames)."""
    return {"pk": f"SESSION#{session_id}", "sk": f"BROWSER#{part}"}


BROWSER_COMMAND_PREFIX = "BROWSER#CMD#"
