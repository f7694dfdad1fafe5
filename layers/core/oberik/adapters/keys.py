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
