"""Pure rules, with no AWS and no HTTP: the capability gate, pauses, tokens, and the frame writer."""

from __future__ import annotations

import time
from typing import Any

import pytest

from oberik.domain import pauses
from oberik.domain.capabilities import Gate, Infrastructure, capability_report, resolve_toolset
from oberik.domain.errors import Conflict, Invalid, Unauthorized
from oberik.domain.identity import TokenClaims, mint_token, read_token, unverified_project
from oberik.domain.tools import CATALOG, ToolSpec
from oberik.engine.frames import FrameWriter

ALL = frozenset({"chat", "tasks:write", "approvals", "ask_user", "todo", "documents:read"})


def _names(gate: Gate, catalog: Any = CATALOG) -> list[str]:
    return resolve_toolset(gate, catalog).names


# --- the gate -----------------------------------------------------------------------------------------


def test_a_tool_needs_the_project_and_the_token_and_the_switch():
    assert "wait" in _names(Gate(ceiling=ALL, token=ALL))
    assert "wait" not in _names(Gate(ceiling=ALL - {"tasks:write"}, token=ALL))
    assert "wait" not in _names(Gate(ceiling=ALL, token=ALL - {"tasks:write"}))
    assert "wait" not in _names(Gate(ceiling=ALL, token=ALL, flags={"enable_scheduling": False}))


def test_allowed_tools_of_the_project_and_the_request_both_narrow():
    gate = Gate(
        ceiling=ALL,
        token=ALL,
        project_allowed=frozenset({"wait", "current_time"}),
        request_allowed=frozenset({"wait", "ask_user"}),
    )
    assert _names(gate) == ["wait"]


def test_a_tool_the_project_cannot_run_is_withheld_with_a_reason():
    needy = ToolSpec("rag_search", "retrieval", "documents:read", "search documents", needs="embeddings")
    toolset = resolve_toolset(Gate(ceiling=ALL, token=ALL), (*CATALOG, needy))
    assert "rag_search" not in toolset.names
    assert [w.name for w in toolset.withheld] == ["rag_search"]
    assert "embedding model" in toolset.withheld[0].unavailable
    with_embeddings = Gate(ceiling=ALL, token=ALL, infra=Infrastructure(embedding_model=True))
    assert "rag_search" in _names(with_embeddings, (*CATALOG, needy))


def test_a_tool_the_token_lacks_is_not_withheld_it_is_simply_absent():
    needy = ToolSpec("rag_search", "retrieval", "documents:read", "search documents", needs="embeddings")
    toolset = resolve_toolset(Gate(ceiling=ALL, token=frozenset({"chat"})), (*CATALOG, needy))
    assert toolset.withheld == [] and toolset.names == []


def test_the_report_gives_the_first_reason_a_capability_is_blocked():
    report = {
        s.capability: s
        for s in capability_report(Gate(ceiling=ALL, token=ALL - {"todo"}, flags={"enable_approvals": False}))
    }
    assert report["tasks:write"].effective and report["tasks:write"].blocked is None
    assert report["todo"].blocked == "not granted to this token"
    assert report["approvals"].blocked == "switched off on this request (enable_approvals: false)"
    assert report["browser"].blocked == "not allowed by the project's capability ceiling"
    assert report["action_space"].blocked in (
        "not allowed by the project's capability ceiling",
        "needs an embedding model",
    )


# --- pauses ---------------------------------------------------------------------------------------------


def _pending(**kinds: Any) -> dict[str, Any]:
    return {**pauses.empty(), **kinds}


def test_client_calls_are_held_back_while_a_person_is_deciding():
    pending = pauses.announce(
        _pending(deferred=[{"id": "c", "name": "t", "args": {}}], approvals=[{"tool_call_id": "a", "tool": None}])
    )
    assert pending["tool_calls"] == [] and pending["deferred"]
    resolved = pauses.resolve(pending, tool_results=None, approval_decisions=[{"approved": True}], answers=None)
    assert [c["id"] for c in resolved.pending["tool_calls"]] == ["c"]
    assert [m.content for m in resolved.messages] == [pauses.APPROVED]


def test_results_for_calls_not_yet_handed_over_are_a_conflict():
    pending = _pending(deferred=[{"id": "c", "name": "t", "args": {}}], approvals=[{"tool_call_id": "a", "tool": None}])
    with pytest.raises(Conflict):
        pauses.resolve(
            pending, tool_results=[{"tool_call_id": "c", "content": "x"}], approval_decisions=None, answers=None
        )


def test_a_note_travels_with_an_approval_and_a_refusal():
    pending = _pending(approvals=[{"tool_call_id": "a", "tool": None}, {"tool_call_id": "b", "tool": None}])
    out = pauses.resolve(
        pending,
        tool_results=None,
        answers=None,
        approval_decisions=[
            {"approved": True, "tool_call_id": "a", "note": "only once"},
            {"approved": False, "tool_call_id": "b", "note": "not to them"},
        ],
    )
    assert out.needs_model
    assert out.messages[0].content.startswith(pauses.APPROVED) and "only once" in out.messages[0].content
    assert out.messages[1].content.startswith(pauses.REFUSAL) and "not to them" in out.messages[1].content


@pytest.mark.parametrize(
    "decision", [{"approved": "yes"}, {"approved": True, "extra": 1}, {"approved": True, "note": 3}]
)
def test_malformed_decisions_are_invalid(decision: dict[str, Any]):
    with pytest.raises(Invalid):
        pauses.resolve(
            _pending(approvals=[{"tool_call_id": "a", "tool": None}]),
            tool_results=None,
            approval_decisions=[decision],
            answers=None,
        )


def test_questions_are_normalised_and_checked():
    batch = pauses.question_batch(
        "q",
        {
            "questions": [
                {
                    "header": "Scope",
                    "question": "Which?",
                    "options": ["a", {"label": "b", "description": "bee"}],
                    "multi_select": True,
                }
            ]
        },
    )
    assert batch["questions"][0]["options"] == [{"label": "a"}, {"label": "b", "description": "bee"}]
    with pytest.raises(ValueError):
        pauses.question_batch("q", {"questions": []})
    with pytest.raises(ValueError):
        pauses.question_batch("q", {"questions": [{"header": "A", "question": "x"}, {"header": "A", "question": "y"}]})
    out = pauses.resolve(
        _pending(questions=[batch]),
        tool_results=None,
        approval_decisions=None,
        answers={"tool_call_id": "q", "answers": [{"question_id": "Scope", "selected": ["a", "b"]}]},
    )
    assert out.needs_model and "bee" not in out.messages[0].content


def test_the_digest_of_a_resume_ignores_key_order():
    assert pauses.digest({"a": 1, "b": [1, 2]}) == pauses.digest({"b": [1, 2], "a": 1})


# --- tokens ---------------------------------------------------------------------------------------------


def _claims(**over: Any) -> TokenClaims:
    now = int(time.time())
    return TokenClaims(
        **{
            "sub": "ana",
            "pid": "p_x",
            "tenant_id": "p_x",
            "capabilities": ["chat"],
            "iat": now,
            "exp": now + 60,
            "jti": "j",
        }
        | over
    )


def test_a_token_reads_back_what_was_minted():
    token = mint_token(_claims(roles=["admin"]), "secret")
    assert unverified_project(token) == "p_x"
    assert read_token(token, "secret", int(time.time())).roles == ["admin"]


def test_a_token_signed_with_another_key_or_expired_is_refused():
    token = mint_token(_claims(), "secret")
    with pytest.raises(Unauthorized, match="signature"):
        read_token(token, "other", int(time.time()))
    with pytest.raises(Unauthorized, match="expired"):
        read_token(mint_token(_claims(exp=int(time.time()) - 1), "secret"), "secret", int(time.time()))


# --- the frame writer -----------------------------------------------------------------------------------


class FakeFrames:
    """An in-memory frame log, with an optional number already taken by someone else."""

    def __init__(self, taken: int | None = None) -> None:
        self.frames: dict[int, tuple[str, dict[str, Any]]] = {}
        if taken is not None:
            self.frames[taken] = ("token", {"delta": "from a retried writer"})

    def last_frame_seq(self, run_id: str) -> int:
        return max(self.frames, default=0)

    def put_frame(self, run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None = None) -> bool:
        if seq in self.frames:
            return False
        self.frames[seq] = (event, data)
        return True


def _eventually(check: Any, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not written in time"
        time.sleep(0.005)


def test_the_first_delta_goes_out_at_once_and_the_rest_are_batched():
    # Given a writer with a 200 ms batch window
    store = FakeFrames()
    writer = FrameWriter(store, "r", batch_seconds=0.2)

    # When a first delta arrives, then three more in quick succession
    writer.delta("token", "Hel")
    _eventually(lambda: len(store.frames) == 1)
    writer.delta("token", "lo")
    writer.delta("token", " world")
    writer.delta("token", "!")

    # Then the first went out alone and at once, and the rest became one frame after the window
    time.sleep(0.05)
    assert [d["delta"] for _, d in store.frames.values()] == ["Hel"]
    _eventually(lambda: len(store.frames) == 2)
    assert [d["delta"] for _, d in store.frames.values()] == ["Hel", "lo world!"]
    writer.close()


def test_2_kb_goes_out_without_waiting_and_channels_are_never_merged():
    store = FakeFrames()
    writer = FrameWriter(store, "r", batch_seconds=10)
    writer.delta("reasoning", "thinking")  # the first: at once
    _eventually(lambda: len(store.frames) == 1)
    writer.delta("reasoning", " more")
    writer.delta("token", "a" * 3000)  # over 2 KB: due now, in order, one frame per channel
    _eventually(lambda: len(store.frames) == 3)
    assert [(e, d["delta"][:5]) for e, d in store.frames.values()] == [
        ("reasoning", "think"),
        ("reasoning", " more"),
        ("token", "aaaaa"),
    ]
    writer.close()


def test_emit_writes_queued_text_first_and_close_flushes_the_rest():
    store = FakeFrames()
    writer = FrameWriter(store, "r", batch_seconds=10)
    writer.delta("token", "a")
    _eventually(lambda: len(store.frames) == 1)
    writer.delta("token", "b")
    writer.emit("tool_start", {"name": "x"})
    writer.delta("token", "c")
    writer.close()
    assert [(e, d) for e, d in store.frames.values()] == [
        ("token", {"delta": "a"}),
        ("token", {"delta": "b"}),
        ("tool_start", {"name": "x"}),
        ("token", {"delta": "c"}),
    ]


class SlowFrames(FakeFrames):
    def put_frame(self, run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None = None) -> bool:
        time.sleep(0.1)
        return super().put_frame(run_id, seq, event, data, expires_at)


def test_a_slow_write_never_holds_up_the_stream_it_makes_frames_bigger():
    store = SlowFrames()
    writer = FrameWriter(store, "r", batch_seconds=0.01)
    started = time.monotonic()
    for i in range(50):
        writer.delta("token", f"t{i} ")
    queued_in = time.monotonic() - started
    writer.close()
    assert queued_in < 0.05  # fifty deltas queued while writes take 100 ms each
    assert "".join(d["delta"] for _, d in store.frames.values()) == "".join(f"t{i} " for i in range(50))
    assert len(store.frames) < 10


def test_a_taken_sequence_number_is_skipped_never_overwritten():
    store = FakeFrames(taken=2)
    writer = FrameWriter(store, "r")
    assert writer.seq == 2
    assert writer.emit("done", {}) == 3
    assert store.frames[2][1] == {"delta": "from a retried writer"}


# --- settings -------------------------------------------------------------------------------------------


def test_a_configured_openai_endpoint_becomes_the_default_model_unless_one_is_named(monkeypatch: pytest.MonkeyPatch):
    from oberik.settings import Settings

    for name in ("OPENAI_API_KEY", "OBERIK_OPENAI_API_KEY", "OBERIK_DEFAULT_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert Settings().default_model == "offline/oberik-offline"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert Settings().default_model == "openai/gpt-4o-mini"
    monkeypatch.setenv("OBERIK_DEFAULT_MODEL", "vllm/qwen")
    assert Settings().default_model == "vllm/qwen"
