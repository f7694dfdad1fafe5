"""Projects, kept briefly in memory: every request and every step needs its project (signing key, providers),
and a project changes rarely. Whoever changes one through this process forgets it here at once."""

from __future__ import annotations

from typing import Any

from oberik.adapters.brief_cache import BriefCache
from oberik.domain.models import Project

TTL_SECONDS = 5.0
_projects: BriefCache[Project] = BriefCache(TTL_SECONDS, name="projects")


def load(store: Any, project_id: str, *, fresh: bool = False) -> Project | None:
    return _projects.get(project_id, lambda: store.get_project(project_id), fresh=fresh)


def forget(project_id: str) -> None:
    _projects.forget(project_id)
