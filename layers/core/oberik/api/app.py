"""The FastAPI application factory: the same app behind mangum on AWS and uvicorn locally."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from oberik.api import errors
from oberik.api.routes import chat, projects, sessions, stream, tools
from oberik.settings import Settings, get_settings

WEB_DIR = Path(__file__).resolve().parents[4] / "web"


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(
        title="oberik",
        version="0.1.0",
        description="A self-hosted agent platform: one call runs a whole agent turn.",
    )
    if settings is not None:
        app.dependency_overrides[get_settings] = lambda: settings
    errors.install(app)
    app.include_router(projects.router)
    app.include_router(chat.router)
    app.include_router(stream.router)
    app.include_router(sessions.router)
    app.include_router(tools.router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    return app
