"""Webhook tools: tools a project hosts at its own HTTPS endpoint, which the platform calls during a turn.

What is here is pure: the stored tool and what the API shows of it, the rules a definition must follow, the
body a call sends (the caller's identity comes from the verified token held in the turn's plan, never from the
model), the signature header (two signatures, comma-separated, while a rotated secret is still honoured), and
how the endpoint's answer becomes the text the model reads. Storage and HTTP belong to the adapters and the
engine (`oberik.engine.webhook_tools`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, Field

from oberik.domain import egress
from oberik.domain.errors import Invalid

FAMILY = "webhook_tools"
CAPABILITY = "webhook_tools"
SOURCE = "webhook"
SIGNATURE_HEADER = "X-Oberik-Signature"

RESULT_MAX_CHARS = 20_000  # what the model reads of one answer, citation marker and notes included
ROTATION_GRACE_SECONDS = 24 * 3600  # how long the secret a rotation replaced still signs calls
MAX_TOOLS_PER_PROJECT = 100
MAX_DESCRIPTION_CHARS = 1024
MAX_PARAMETERS_BYTES = 16_000
QUOTE_CHARS = 280  # the excerpt of an answer shown in its citation

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Names the platform's own tools use or will use (the spec's table of server-side tools, the gated-approval and
# question tools): a webhook tool may not take one, so adding a built-in family later cannot change what an
# existing name means. Names offered by any registered tool family are refused too (checked by the caller).
RESERVED_NAMES: frozenset[str] = frozenset(
    {
        "rag_search",
        "web_search",
        "browse_url",
        *(
            f"browser_{n}"
            for n in ("goto", "read", "html", "viewport", "click", "type", "scroll", "wait", "screenshot", "close")
        ),
        "browser_handoff",
        "browser_handoff_end",
        "remember",
        "recall",
        "wiki_write",
        "wiki_read",
        "search_history",
        "schedule_reminder",
        "cancel_reminder",
        "list_reminders",
        "current_time",
        "wait",
        "list_files",
        "read_file",
        "write_file",
        "send_file",
        "screenshot_url",
        "todo_write",
        "todo_update",
        "todo_remove",
        "todo_clear",
        "ask_user",
        "request_approval",
        "load_skill",
        "read_skill_file",
        "subagent_start",
        "subagent_check",
        "subagent_stop",
        "subagent_answer",
        "tool_search",
    }
)
RESERVED_PREFIXES = ("computer_",)

# The fields the write surface takes, as it spells them.
WRITABLE = ("name", "description", "url", "parameters", "requiresApproval")
_MISSPELLED = {"requires_approval": "requiresApproval", "require_approval": "requiresApproval"}

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def new_tool_id() -> str:
    return f"wht_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def new_call_id() -> str:
    return f"whc_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def new_tool_secret() -> str:
    return "whts_" + secrets.token_urlsafe(32)


# --- the stored tool -------------------------------------------------------------------------------------


class WebhookTool(BaseModel):
    """A project's webhook tool as stored, secrets included (never returned by the API after creation)."""

    id: str
    project_id: str
    name: str
    description: str = ""
    url: str
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    requires_approval: bool = False
    secret: str
    previous_secret: str | None = None
    previous_secret_until: float | None = None
    created_at: float
    updated_at: float

    def live_secrets(self, now: float) -> list[str]:
        """The secrets a call is signed with: the current one, then the one a rotation replaced while it lasts."""
        out = [self.secret]
        if self.previous_secret and self.previous_secret_until and now < self.previous_secret_until:
            out.append(self.previous_secret)
        return out


class WebhookToolPublic(BaseModel):
    """What the API shows of a tool: everything but its secrets."""

    id: str
    name: str
    description: str
    url: str
    parameters: dict[str, Any]
    requiresApproval: bool  # the write surface spells it so, and so does the answer
    previousSecretUntil: int | None = None
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, tool: WebhookTool, now: float) -> WebhookToolPublic:
        until = tool.previous_secret_until
        return cls(
            id=tool.id,
            name=tool.name,
            description=tool.description,
            url=tool.url,
            parameters=tool.parameters,
            requiresApproval=tool.requires_approval,
            previousSecretUntil=int(until) if until and now < until else None,
            created_at=tool.created_at,
            updated_at=tool.updated_at,
        )


# --- checking a definition ---------------------------------------------------------------------------------


def check_name(value: Any, *, taken: set[str]) -> str:
    """A name the model can call and that no other tool of the turn uses. `taken`: other families' names."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise Invalid("name must be 1-64 letters, digits, '_' or '-' (the names models accept).", field="name")
    if value in RESERVED_NAMES or value.startswith(RESERVED_PREFIXES) or value in taken:
        raise Invalid(
            f"name {value!r} is the name of one of the platform's own tools; choose another, e.g. a prefix "
            "naming your product.",
            field="name",
        )
    return value


def check_description(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid("description must be text: what the tool does, as the model should read it.", field="description")
    if len(value) > MAX_DESCRIPTION_CHARS:
        raise Invalid(f"description is longer than {MAX_DESCRIPTION_CHARS} characters.", field="description")
    return value.strip()


def check_url_shape(value: Any) -> str:
    """The URL's form (absolute http(s), a host, no fragment); where it resolves is the adapter's check."""
    if not isinstance(value, str):
        raise Invalid("url must be an absolute https URL: the endpoint the platform POSTs each call to.", field="url")
    egress.parse_target(value, field="url")
    return value


def check_parameters(value: Any) -> dict[str, Any]:
    """A JSON Schema for the arguments: an object schema that is itself valid JSON Schema."""
    if not isinstance(value, dict):
        raise Invalid(
            "parameters must be a JSON Schema object such as "
            '{"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}.',
            field="parameters",
        )
    if len(json.dumps(value)) > MAX_PARAMETERS_BYTES:
        raise Invalid(f"parameters is larger than {MAX_PARAMETERS_BYTES} bytes of JSON.", field="parameters")
    if value.get("type") != "object":
        raise Invalid(
            'parameters must describe an object: set "type": "object" (models pass arguments as one object).',
            field="parameters",
        )
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.path) or "the top level"
        raise Invalid(f"parameters is not a valid JSON Schema at {where}: {e.message}.", field="parameters") from e
    props = value.get("properties", {})
    required = value.get("required", [])
    missing = [r for r in required if r not in props] if isinstance(props, dict) else []
    if missing:
        raise Invalid(
            f"parameters.required names {', '.join(missing)}, which parameters.properties does not define.",
            field="parameters",
        )
    return value


def check_approval(value: Any) -> bool:
    if not isinstance(value, bool):
        shown = json.dumps(value)
        raise Invalid(
            f"requiresApproval takes true or false, not {shown}. To leave the gate as it is, omit the field "
            "rather than sending null.",
            field="requiresApproval",
        )
    return value


def read_fields(body: Any, *, creating: bool, taken: set[str]) -> dict[str, Any]:
    """The fields of a create or a PATCH, checked; raises Invalid (400) naming the first thing wrong.

    A PATCH changes only what it sends; null is never read as "unset" or "false", and a field the write
    surface does not take (the underscored requires_approval above all) is refused rather than ignored.
    """
    if not isinstance(body, dict):
        raise Invalid("The request body must be a JSON object of the tool's fields.", field="body")
    for wrong, right in _MISSPELLED.items():
        if wrong in body:
            raise Invalid(
                f"{wrong} is not a field of this route: it is spelled {right} here (GET /tools reports it as "
                "requires_approval). Nothing was changed.",
                field=wrong,
            )
    extra = sorted(set(body) - set(WRITABLE))
    if extra:
        raise Invalid(
            f"{', '.join(extra)}: not a field a webhook tool takes. It takes {', '.join(WRITABLE)}.", field=extra[0]
        )
    for key in WRITABLE:
        if key in body and body[key] is None:
            raise Invalid(
                f"{key} is null. Omit a field to leave it as it is; null is not a value any of them takes.", field=key
            )
    if creating:
        for key in ("name", "url"):
            if key not in body:
                raise Invalid(f"{key} is required to create a webhook tool.", field=key)
    out: dict[str, Any] = {}
    if "name" in body:
        out["name"] = check_name(body["name"], taken=taken)
    if "description" in body:
        out["description"] = check_description(body["description"])
    if "url" in body:
        out["url"] = check_url_shape(body["url"])
    if "parameters" in body:
        out["parameters"] = check_parameters(body["parameters"])
    if "requiresApproval" in body:
        out["requires_approval"] = check_approval(body["requiresApproval"])
    if not creating and not out:
        raise Invalid(f"Nothing to change: send at least one of {', '.join(WRITABLE)}.", field="body")
    return out


# --- a call ------------------------------------------------------------------------------------------------


def call_body(tool: str, arguments: dict[str, Any], caller: dict[str, Any], session_id: str) -> dict[str, Any]:
    """What the endpoint receives. Who is asking comes from the verified token (the turn's plan keeps it),
    so nothing in `arguments` (which the model wrote) can change it."""
    return {
        "tool": tool,
        "arguments": arguments,
        "subject": caller.get("subject"),
        "scope": caller.get("scope"),
        "roles": list(caller.get("roles") or []),
        "groups": list(caller.get("groups") or []),
        "tenant_id": caller.get("tenant_id"),
        "session_id": session_id,
    }


def encode(body: dict[str, Any]) -> bytes:
    """The exact bytes sent and signed."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), raw, hashlib.sha256).hexdigest()


def signature_header(live_secrets: list[str], raw: bytes) -> str:
    """One `sha256=<hex>` per live secret, newest first, comma-separated."""
    return ",".join(sign(s, raw) for s in live_secrets)


def _cap(text: str, budget: int) -> tuple[str, bool]:
    if len(text) <= budget:
        return text, False
    return text[: max(0, budget)], True


def answer_text(name: str, body: str, marker: int | None) -> str:
    """A 2xx answer as the model reads it: its citation marker, then the body, within RESULT_MAX_CHARS."""
    prefix = f"[{marker}] " if marker is not None else ""
    note = f"\n[{name}'s answer was cut at {RESULT_MAX_CHARS:,} characters]"
    text, cut = _cap(body, RESULT_MAX_CHARS - len(prefix))
    if cut:
        text = text[: RESULT_MAX_CHARS - len(prefix) - len(note)] + note
    return prefix + text


def status_text(name: str, status: int, body: str) -> str:
    """A non-2xx answer, told to the model as a result: the endpoint's explanation is worth reading."""
    head = f"'{name}' returned {status}"
    body = body.strip()
    if not body:
        return head + " (with no explanation in its body)"
    text, _ = _cap(body, RESULT_MAX_CHARS - len(head) - 2)
    return f"{head}: {text}"


def quote_of(body: str) -> str:
    text = " ".join(body.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


# --- the record of a call ----------------------------------------------------------------------------------


class WebhookToolCall(BaseModel):
    """One call the platform made to a webhook tool, as the deliveries list shows it."""

    id: str
    project_id: str
    tool: str
    tool_id: str | None
    url: str | None
    status: int | None = None  # the endpoint's HTTP status; null when no answer came
    ok: bool
    duration_ms: int = 0
    error: str | None = None
    called_at: float
    session_id: str | None = None
    turn_id: str | None = None
    tool_call_id: str | None = None
    subject: str | None = None


class WebhookToolCallPublic(BaseModel):
    id: str
    tool: str
    tool_id: str | None
    url: str | None
    status: int | None
    ok: bool
    duration_ms: int
    error: str | None
    called_at: float
    session_id: str | None
    turn_id: str | None
    tool_call_id: str | None
    subject: str | None
