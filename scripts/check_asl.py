#!/usr/bin/env python3
"""Check that every transition in an Amazon States Language definition lands on a real state.

Usage: python scripts/check_asl.py statemachines/turn.asl.json [more.asl.json ...]

Reports, and exits 1 on, any of:
- a StartAt, Next, Default, Choices[].Next or Catch[].Next naming a state that does not exist;
- a state that cannot be reached from StartAt;
- a state (other than Choice, Succeed and Fail) with neither Next nor "End": true.

Parallel branches and Map item processors are checked as their own scopes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TERMINAL_TYPES = {"Succeed", "Fail"}


def _transitions(name: str, state: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Yield (where, target) for every transition a state declares."""
    if "Next" in state:
        yield f"{name}.Next", state["Next"]
    if "Default" in state:
        yield f"{name}.Default", state["Default"]
    for i, choice in enumerate(state.get("Choices", [])):
        if "Next" in choice:
            yield f"{name}.Choices[{i}].Next", choice["Next"]
    for i, catcher in enumerate(state.get("Catch", [])):
        if "Next" in catcher:
            yield f"{name}.Catch[{i}].Next", catcher["Next"]


def _sub_machines(name: str, state: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield the nested state machines of a Parallel or Map state."""
    for i, branch in enumerate(state.get("Branches", [])):
        yield f"{name}.Branches[{i}]", branch
    for key in ("ItemProcessor", "Iterator"):
        if isinstance(state.get(key), dict):
            yield f"{name}.{key}", state[key]


def find_problems(machine: dict[str, Any], scope: str = "") -> list[str]:
    """Every broken transition, unreachable state and dangling state in `machine` and its nested scopes."""
    prefix = f"{scope}: " if scope else ""
    states: dict[str, Any] = machine.get("States") or {}
    problems: list[str] = []

    start = machine.get("StartAt")
    if start not in states:
        problems.append(f"{prefix}StartAt points at missing state {start!r}")

    edges: dict[str, list[str]] = {}
    for name, state in states.items():
        edges[name] = []
        for where, target in _transitions(name, state):
            if target in states:
                edges[name].append(target)
            else:
                problems.append(f"{prefix}{where} points at missing state {target!r}")
        kind = state.get("Type")
        if kind != "Choice" and kind not in _TERMINAL_TYPES and "Next" not in state and state.get("End") is not True:
            problems.append(f"{prefix}state {name!r} has neither Next nor End")
        for sub_scope, sub_machine in _sub_machines(name, state):
            problems.extend(find_problems(sub_machine, f"{scope} > {sub_scope}" if scope else sub_scope))

    reached: set[str] = set()
    pending = [start] if start in states else []
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending.extend(edges[name])
    problems.extend(f"{prefix}state {name!r} is unreachable from StartAt" for name in states if name not in reached)
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: check_asl.py FILE.asl.json [...]", file=sys.stderr)
        return 2
    failed = False
    for arg in argv:
        try:
            machine = json.loads(Path(arg).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"{arg}: cannot read: {exc}", file=sys.stderr)
            failed = True
            continue
        problems = find_problems(machine)
        for problem in problems:
            print(f"{arg}: {problem}", file=sys.stderr)
        if problems:
            failed = True
        else:
            print(f"{arg}: {len(machine.get('States', {}))} states, all transitions land, all states reachable")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
