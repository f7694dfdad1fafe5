"""Dependencies the routes declare: settings, ports, and who is calling."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Header, Path

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
from oberik.domain.errors import NotFound, Unauthorized
from oberik.domain.identity import TokenClaims, hash_key, project_of_key, read_token, same_secret, unverified_project
from oberik.domain.models import Project
from oberik.engine import projects
from oberik.settings import Settings, get_settings

SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_store(settings: SettingsDep) -> DynamoStore:
    return DynamoStore(settings)


def get_orchestrator(settings: SettingsDep) -> StepFunctionsOrchestrator:
    return StepFunctionsOrchestrator(settings)


StoreDep = Annotated[DynamoStore, Depends(get_store)]
OrchestratorDep = Annotated[StepFunctionsOrchestrator, Depends(get_orchestrator)]

# Projects are kept briefly in memory (engine.projects), shared with the steps that run in this process.
load_project = projects.load
forget_project = projects.forget


@dataclass(frozen=True)
class Caller:
    """An end-user, as their token describes them, and the project the token belongs to."""

    claims: TokenClaims
    project: Project
    store: Any = None


def current_caller(store: StoreDep, authorization: Annotated[str | None, Header()] = None) -> Caller:
    if not authorization:
        raise Unauthorized(
            "This route needs an end-user token: send Authorization: Bearer <token>.", code="token_missing"
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("The Authorization header must read 'Bearer <token>'.", code="token_malformed")
    project_id = unverified_project(token.strip())
    project = load_project(store, project_id)
    if project is None:
        raise Unauthorized("The bearer token belongs to a project that does not exist here.", code="token_invalid")
    claims = read_token(token.strip(), project.signing_secret.get_secret_value(), int(time.time()))
    return Caller(claims, project, store)


CallerDep = Annotated[Caller, Depends(current_caller)]


def project_by_key(
    store: StoreDep,
    project_id: Annotated[str, Path(alias="id")],
    x_api_key: Annotated[str | None, Header()] = None,
) -> Project:
    """The project named in the path, if the project key in X-API-Key is its key; 404 for any other project."""
    if not x_api_key:
        raise Unauthorized("This route needs the project key: send X-API-Key: <project key>.", code="key_missing")
    owner = project_of_key(x_api_key)
    if owner is None:
        raise Unauthorized("X-API-Key is not a project key issued by this platform.", code="key_invalid")
    if owner != project_id:
        raise NotFound(f"No project {project_id} exists for this key.")
    if not store.project_key_matches(project_id, hash_key(x_api_key)):
        raise Unauthorized(
            "X-API-Key is not a valid key for this project (it may have been revoked).", code="key_invalid"
        )
    project = load_project(store, project_id, fresh=True)
    if project is None:
        raise NotFound(f"No project {project_id} exists for this key.")
    return project


ProjectDep = Annotated[Project, Depends(project_by_key)]


def require_admin(settings: SettingsDep, x_admin_key: Annotated[str | None, Header()] = None) -> None:
    configured = settings.admin_key.get_secret_value() if settings.admin_key else ""
    if not configured:
        raise Unauthorized(
            "Project creation is switched off: this deployment has no admin key configured.", code="admin_disabled"
        )
    if not x_admin_key or not same_secret(x_admin_key, configured):
        raise Unauthorized("Creating a project needs the deployment's admin key in X-Admin-Key.", code="admin_key")


AdminDep = Annotated[None, Depends(require_admin)]
