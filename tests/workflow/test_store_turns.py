"""How DynamoStore keeps a turn: its plan as one JSON string (written and read whole), everything else as
attributes; a turn stored the older way, with the plan as a map, still reads."""

from __future__ import annotations

from typing import Any

from oberik.adapters import keys
from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore, serialize
from oberik.domain.models import Turn, TurnPlan
from oberik.settings import get_settings


def a_turn(turn_id: str = "t_plan") -> Turn:
    plan = TurnPlan(
        model="scripted/x",
        system_prompt="Be brief. «Grüße»",
        tools=["current_time", "cancel_order"],
        dynamic_tools={"cancel_order": {"description": "Cancel an order", "parameters": {"type": "object"}}},
        caller={"subject": "ana", "roles": ["buyer"]},
        client_tools=[{"type": "function", "function": {"name": "pick", "parameters": {"type": "object"}}}],
        temperature=0.7,
    )
    return Turn(id=turn_id, session_id="s", project_id="p", owner="ana", run_id="r", plan=plan, created_at=1.0)


def raw(turn_id: str) -> dict[str, Any]:
    item: dict[str, Any] = client("dynamodb").get_item(
        TableName=get_settings().table_name, Key=serialize(keys.turn_key(turn_id))
    )["Item"]
    return item


def test_a_turn_reads_back_as_written_with_its_plan_kept_as_text(aws: Any) -> None:
    store = DynamoStore()
    turn = a_turn()
    store.save_turn(turn)
    assert "S" in raw(turn.id)["plan"]  # one string attribute, not hundreds of map members
    assert store.get_turn(turn.id) == turn
    got, _ = store.get_turn_and_run(turn.id, "r_none")
    assert got == turn


def test_a_new_plan_set_on_a_turn_is_kept_as_text_too(aws: Any) -> None:
    store = DynamoStore()
    turn = a_turn()
    store.save_turn(turn)
    changed = turn.plan.model_copy(update={"tools": ["wait"], "unattended": True})
    store.update_turn(turn.id, plan=changed.model_dump(mode="json"), steps=2)
    assert "S" in raw(turn.id)["plan"]
    got = store.get_turn(turn.id)
    assert got is not None and got.plan == changed and got.steps == 2


def test_a_turn_stored_with_its_plan_as_a_map_still_reads(aws: Any) -> None:
    turn = a_turn("t_old")
    client("dynamodb").put_item(
        TableName=get_settings().table_name,
        Item=serialize({**keys.turn_key(turn.id), **turn.model_dump(mode="json")}),
    )
    assert "M" in raw(turn.id)["plan"]
    assert DynamoStore().get_turn(turn.id) == turn


def test_a_frame_writer_starts_after_the_frames_this_process_wrote_without_reading_the_log(
    aws: Any, monkeypatch: Any
) -> None:
    from oberik.engine.frames import FrameWriter

    store = DynamoStore()
    first = FrameWriter(store, "r_cached")
    for i in range(3):
        first.emit("note", {"n": i})
    first.close()

    # Another process adds a frame this one never saw
    client("dynamodb").put_item(
        TableName=get_settings().table_name,
        Item=serialize({**keys.frame_key("r_cached", 4), "seq": 4, "event": "note", "data": '{"n": "elsewhere"}'}),
    )
    monkeypatch.setattr(DynamoStore, "last_frame_seq", _no_log_read)
    second = FrameWriter(store, "r_cached")  # starts from memory: frame 3
    assert second.seq == 3
    monkeypatch.undo()
    second.emit("done", {})  # 4 is taken: it moves past it rather than overwrite it
    assert [f["seq"] for f in store.frames_after("r_cached", 0, cached=False)] == [1, 2, 3, 4, 5]
    assert store.frames_after("r_cached", 3, cached=False)[0]["data"] == {"n": "elsewhere"}


def _no_log_read(self: Any, run_id: str) -> int:
    raise AssertionError("the writer read the log although this process knew where it ends")
