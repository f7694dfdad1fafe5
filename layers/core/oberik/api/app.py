"""The FastAPI application factory: the same app behind mangum on AWS and uvicorn locally."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from oberik.api import errors
from oberik.api.routes import browser as browser_routes
from oberik.api.routes import chat, projects, sessions, stream, tools
from oberik.api.routes import documents as documents_routes
from oberik.api.routes import push as push_routes
from oberik.api.routes import tasks as tasks_routes
from oberik.api.routes import webhook_tools as webhook_tools_routes
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
    app.include_router(documents_routes.router)
    app.include_router(chat.router)
    app.include_router(stream.router)
    app.include_router(sessions.router)
    app.include_router(tools.router)
    app.include_router(browser_routes.router)
    app.include_router(push_routes.router)
    app.include_router(tasks_routes.router)
    app.include_router(webhook_tools_routes.router)
    app.include_router(webhook_tools_routes.data_router)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    serve_playground(app)
    return app


class _Playground(StaticFiles):
    """The playground's files, revalidated on every load so an edited module is never served stale."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("Cache-Control", "no-cache")
        return response


def serve_playground(app: FastAPI, directory: Path = WEB_DIR) -> None:
    """Serve the static playground: its page at `/` and its files under `/web/`.

    Registered after every API route so it can shadow none of them. Only those two places answer; any other
    unknown path still gets the JSON 404 (`no_route`), and a file missing under `/web/` gets the same.
    """
    index = directory / "index.html"
    if not index.is_file():
        return

    @app.get("/", include_in_schema=False)
    def playground() -> FileResponse:
        return FileResponse(index, headers={"Cache-Control": "no-cache"})

    worker = directory / "sw.js"
    if worker.is_file():
        # The push service worker, at the root so its scope is the whole page (a worker's scope cannot reach
        # above the path it is served from, and the page lives at `/`).
        @app.get("/sw.js", include_in_schema=False)
        def service_worker() -> FileResponse:
            return FileResponse(worker, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    app.mount("/web", _Playground(directory=directory), name="web")
