"""Web push: the VAPID public key, storing a browser's subscription, and the hook that turns `turn.stopped` into a
notification. Wiring: point the project's `webhook_url` at this deployment's `/push/hook`."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from oberik.api.deps import CallerDep, SettingsDep, StoreDep
from oberik.engine import push

router = APIRouter(prefix="/push", tags=["push"])


class PushKey(BaseModel):
    key: str


@router.get("/key", response_model=PushKey)
def push_key(caller: CallerDep, settings: SettingsDep) -> PushKey:
    """The VAPID public key a browser subscribes with (`applicationServerKey`); blank when push is off here."""
    return PushKey(key=push.public_key(settings))


class Subscribed(BaseModel):
    subscribed: bool = True
    endpoint: str
    expiration_time: float | None
    created_at: float
    updated_at: float


SUBSCRIPTION_EXAMPLE = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/…",
    "expirationTime": None,
    "keys": {"p256dh": "BOr…", "auth": "k8J…"},
}


@router.post("/subscribe", response_model=Subscribed, responses={201: {"model": Subscribed}})
def subscribe(
    caller: CallerDep,
    settings: SettingsDep,
    store: StoreDep,
    response: Response,
    body: Annotated[
        Any,
        Body(
            description="the browser's PushSubscription as subscription.toJSON() gives it",
            examples=[SUBSCRIPTION_EXAMPLE],
        ),
    ] = None,
) -> Subscribed:
    """Store this browser's subscription for the token's subject: 201 the first time, 200 for a repeat of the same
    endpoint (which replaces its keys)."""
    stored, created = push.subscribe(store, settings, project_id=caller.project.id, owner=caller.claims.sub, doc=body)
    response.status_code = 201 if created else 200
    return Subscribed(**stored.model_dump())


@router.post(
    "/hook",
    responses={
        401: {"description": "unsigned, or not signed with the webhook secret of the conversation's project"},
        503: {"description": "some pushes must be tried again later: retry the delivery after Retry-After"},
    },
)
async def hook(
    request: Request,
    settings: SettingsDep,
    store: StoreDep,
    x_signature: Annotated[str | None, Header()] = None,
    x_delivery_id: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Receives a project's signed `turn.stopped` delivery and pushes a notification to every browser the
    conversation's subject subscribed. Point the project's webhook_url here."""
    raw = await request.body()
    outcome = await run_in_threadpool(
        push.handle_hook, store, settings, raw=raw, signature=x_signature, delivery_id=x_delivery_id
    )
    body = outcome.public()
    if outcome.retry_after is None:
        return JSONResponse(body)
    seconds = max(1, math.ceil(outcome.retry_after))
    return JSONResponse(
        {
            "detail": f"Some notifications could not be pushed yet; deliver this again in {seconds} s.",
            "code": "push_deferred",
            **body,
        },
        status_code=503,
        headers={"Retry-After": str(seconds)},
    )
