"""Projects, kept briefly in memory: every request and every step needs its project (signing key, providers),
and a project changes rarely. Whoever changes one through this process forgets it here at once."""

from __future__ import annotations

import threading
import time
from typing import Any

from oberik.domain.models import Project

TTL_SECONDS = 5.0
_projects: dict[str, tuple[float, Project]] = {}
_lock = threading.Lock()


def load(store: Any, project_id: str, *, fresh: bool = False) -> Project | None:
    now = time.monotonic()
    with _lock:
        hit = _projects.get(project_id)
    if hit and not fresh and now - hit[0] < TTL_SECONDS:
        return hit[1]
    project: Project | None = store.get_project(project_id)
    if project is not None:
        with _lock:
            _projects[project_id] = (now, project)
    return project


def forget(project_id: str) -> None:
    with _lock:
        _projects.pop(project_id, None)
