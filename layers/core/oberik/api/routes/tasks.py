"""Data plane: the subject's scheduled tasks and reminders."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from oberik.api.deps import CallerDep, SettingsDep, StoreDep
from oberik.domain.errors import Forbidden
from oberik.domain.tasks import TaskCreate, TaskPublic
from oberik.engine.tasks import Tasks, kept_claims, view

router = APIRouter(prefix="/tasks", tags=["tasks"])


@router.post("", response_model=TaskPublic, status_code=status.HTTP_201_CREATED)
def create_task(
    body: TaskCreate, caller: CallerDep, store: StoreDep, settings: SettingsDep, response: Response
) -> TaskPublic:
    """Schedule a task: once (`at`, in `timezone`) or repeatedly (`cron`, `rate`), to run the agent with a
    message (`agent`, reply POSTed to `callback_url`) or to POST to a URL (`webhook`). An `idempotency_key`
    sent again returns the task it made (200) instead of making another."""
    if not ("tasks:write" in caller.claims.capabilities and "tasks:write" in caller.project.settings.capabilities):
        raise Forbidden(
            "This token may not schedule tasks: it lacks the tasks:write capability (or the project does not "
            "allow it). Mint a token that carries tasks:write."
        )
    task, created = Tasks(store, settings=settings).create(caller.project, kept_claims(caller.claims), body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return view(task)


@router.get("")
def list_tasks(caller: CallerDep, store: StoreDep, settings: SettingsDep) -> dict[str, Any]:
    """This subject's scheduled tasks and reminders (made here or by the agent), oldest first."""
    found = Tasks(store, settings=settings).list(caller.project.id, caller.claims.sub)
    return {"items": [view(t).model_dump(mode="json") for t in found]}


@router.get("/{task_id}", response_model=TaskPublic)
def get_task(task_id: str, caller: CallerDep, store: StoreDep, settings: SettingsDep) -> TaskPublic:
    return view(Tasks(store, settings=settings).get(caller.project.id, caller.claims.sub, task_id))


@router.delete("/{task_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_task(task_id: str, caller: CallerDep, store: StoreDep, settings: SettingsDep) -> Response:
    """Cancel a task: its schedule is deleted and it never fires again. Anyone else's task is a 404."""
    Tasks(store, settings=settings).cancel(caller.project.id, caller.claims.sub, task_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
