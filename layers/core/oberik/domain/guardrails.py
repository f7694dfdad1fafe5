"""Guardrails: an input stage (blocked topics and patterns, personal-data masking) and an output stage
(a groundedness judgement made by a separate model call). Pure rules here; the engine runs them."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

JUDGE_TASK = "[oberik:judge]"

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d ().-]{7,}\d\b")


class GuardrailSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    blocked_topics: list[str] = Field(default_factory=list, description="phrases; a message containing one is refused")
    blocked_patterns: list[str] = Field(default_factory=list, description="regular expressions, matched case-blind")
    refusal: str = "I can't help with that here."
    mask_personal_data: bool = False  # e-mail addresses, phone and card numbers, before the model sees them
    groundedness: bool = False  # judge the answer against what the turn's tools returned

    @field_validator("blocked_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"blocked_patterns has an invalid regular expression {p!r}: {e}") from e
        return patterns

    @property
    def active(self) -> bool:
        return bool(self.blocked_topics or self.blocked_patterns or self.mask_personal_data or self.groundedness)


def blocked(settings: GuardrailSettings, text: str) -> dict[str, Any] | None:
    """The input-stage verdict for a message: None when it may pass."""
    lowered = text.lower()
    for topic in settings.blocked_topics:
        if topic.strip() and topic.lower() in lowered:
            return {
                "stage": "input",
                "flags": ["blocked_topic"],
                "reason": f"the message mentions {topic!r}",
                "content": settings.refusal,
            }
    for pattern in settings.blocked_patterns:
        if re.search(pattern, text, flags=re.IGNORECASE):
            return {
                "stage": "input",
                "flags": ["blocked_pattern"],
                "reason": "the message matches a blocked pattern",
                "content": settings.refusal,
            }
    return None


def mask(text: str) -> tuple[str, list[str]]:
    """Personal data replaced by placeholders, and which kinds were found."""
    kinds: list[str] = []
    for kind, pattern, placeholder in (
        ("email", _EMAIL, "[email]"),
        ("card_number", _CARD, "[card number]"),
        ("phone", _PHONE, "[phone]"),
    ):
        text, n = pattern.subn(placeholder, text)
        if n:
            kinds.append(kind)
    return text, kinds


def judge_prompt(answer: str, evidence: list[str]) -> list[dict[str, Any]]:
    shown = "\n\n".join(f"[{i + 1}] {e[:3000]}" for i, e in enumerate(evidence)) or "(nothing)"
    return [
        {
            "role": "system",
            "content": (
                f"{JUDGE_TASK} You check whether an assistant's answer is supported by the evidence it was shown. "
                "Reply with one line: GROUNDED, or UNGROUNDED: followed by the claim that has no support. Claims that "
                "need no evidence (greetings, restating the question, general knowledge) count as grounded."
            ),
        },
        {"role": "user", "content": f"Evidence:\n{shown}\n\nAnswer:\n{answer[:6000]}"},
    ]


def read_verdict(text: str) -> dict[str, Any] | None:
    """A guardrail flag for an ungrounded answer, or None when it is grounded or the judge was unclear."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if line.upper().startswith("UNGROUNDED"):
        reason = (
            line.split(":", 1)[1].strip() if ":" in line else "the answer makes claims nothing it was shown supports"
        )
        return {"stage": "output", "flags": ["ungrounded"], "reason": reason}
    return None
