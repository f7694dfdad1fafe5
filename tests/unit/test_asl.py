"""The turn state machine definition and the transition check that guards it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ASL = ROOT / "statemachines" / "turn.asl.json"
CHECK = ROOT / "scripts" / "check_asl.py"

CONTRACT_STATES = {
    "Step",
    "Route",
    "WaitForTool",
    "Park",
    "Finish",
    "Finished",
    "Done",
    "ContinueAsNew",
    "Continued",
    "Fail",
    "Failed",
}


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_asl", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _definition() -> dict[str, Any]:
    return json.loads(ASL.read_text())


def _run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(path)], capture_output=True, text=True, timeout=60)


def test_real_turn_definition_passes_the_transition_check() -> None:
    # Given the turn definition as committed
    # When the transition check runs on it
    result = _run_check(ASL)
    # Then it exits 0 and reports nothing wrong
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_bad_next_fails_naming_the_state(tmp_path: Path) -> None:
    # Given a copy of the definition whose Step state goes to a state that does not exist
    broken = _definition()
    broken["States"]["Step"]["Next"] = "Nowhere"
    path = tmp_path / "broken.asl.json"
    path.write_text(json.dumps(broken))
    # When the transition check runs on it
    result = _run_check(path)
    # Then it fails and names both the state and the missing target
    assert result.returncode != 0
    assert "Step.Next" in result.stderr
    assert "'Nowhere'" in result.stderr


def test_every_broken_transition_kind_is_named() -> None:
    # Given a definition with a bad StartAt, Default, choice target and catch target
    machine = _definition()
    machine["StartAt"] = "Begin"
    machine["States"]["Route"]["Default"] = "Elsewhere"
    machine["States"]["Route"]["Choices"][0]["Next"] = "Finnish"
    machine["States"]["Park"]["Catch"][0]["Next"] = "Fial"
    # When it is checked
    problems = "\n".join(_load_checker().find_problems(machine))
    # Then every one of them is reported with where it came from
    assert "StartAt points at missing state 'Begin'" in problems
    assert "Route.Default points at missing state 'Elsewhere'" in problems
    assert "Route.Choices[0].Next points at missing state 'Finnish'" in problems
    assert "Park.Catch[0].Next points at missing state 'Fial'" in problems


def test_unreachable_state_is_reported() -> None:
    # Given a definition with a state nothing transitions to
    machine = _definition()
    machine["States"]["Orphan"] = {"Type": "Succeed"}
    # When it is checked
    problems = _load_checker().find_problems(machine)
    # Then the orphan is named as unreachable, and nothing else is wrong
    assert problems == ["state 'Orphan' is unreachable from StartAt"]


def test_turn_definition_declares_the_contract_states() -> None:
    # Given the turn definition
    machine = _definition()
    # Then its states are exactly the ones the engine and the tests rely on, starting at Step
    assert set(machine["States"]) == CONTRACT_STATES
    assert machine["StartAt"] == "Step"
    assert machine["States"]["Failed"]["Type"] == "Fail"
    assert machine["States"]["Failed"]["Error"] == "TurnFailed"


def test_turn_definition_uses_jsonpath_only() -> None:
    # Given the turn definition (moto's engine cannot evaluate JSONata)
    machine = _definition()
    # Then neither the machine nor any state opts into JSONata
    assert machine.get("QueryLanguage", "JSONPath") == "JSONPath"
    assert all(state.get("QueryLanguage", "JSONPath") == "JSONPath" for state in machine["States"].values())
    assert "{%" not in ASL.read_text()


def test_route_sends_each_verdict_to_its_state() -> None:
    # Given the Route choice
    route = _definition()["States"]["Route"]
    # When the verdicts are read off its choices
    targets = {
        choice["StringEquals"]: choice["Next"] for choice in route["Choices"] if choice["Variable"] == "$.verdict"
    }
    # Then each verdict lands where the engine expects, and anything else steps again
    assert targets == {"finish": "Finish", "pause": "Park", "continue": "ContinueAsNew", "wait": "WaitForTool"}
    assert route["Default"] == "Step"


def test_every_task_but_fail_catches_into_fail() -> None:
    # Given every Task state
    states = _definition()["States"]
    tasks = {name: state for name, state in states.items() if state["Type"] == "Task"}
    # Then each one catches every error: into Fail (keeping the error at $.error), or, for Fail itself, into Failed
    for name, state in tasks.items():
        catchers = state["Catch"]
        assert catchers[0]["ErrorEquals"] == ["States.ALL"], name
        if name == "Fail":
            assert catchers[0]["Next"] == "Failed"
            assert state["Next"] == "Failed"
        else:
            assert catchers[0]["Next"] == "Fail", name
            assert catchers[0]["ResultPath"] == "$.error", name


def test_park_hands_the_task_token_to_its_lambda() -> None:
    # Given the Park state
    park = _definition()["States"]["Park"]
    # Then it waits for a task token and passes that token to the Park Lambda, keeping the resume payload apart
    assert park["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert park["Parameters"]["Payload"]["task_token.$"] == "$$.Task.Token"
    assert park["ResultPath"] == "$.resume"
