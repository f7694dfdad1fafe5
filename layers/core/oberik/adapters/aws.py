"""The one factory for boto3 clients. Honours AWS_ENDPOINT_URL (via Settings) so the same code talks to moto."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from oberik.settings import Settings, get_settings

_lock = threading.Lock()
_clients: dict[tuple[str, str, str | None], Any] = {}
# One session for every client: each new session re-reads botocore's endpoint data (~0.3 s).
_session: boto3.session.Session | None = None


# (event name, handler) pairs every client gets: botocore event hooks a process adds to its own calls (the local
# stack wakes its queue pollers on SendMessage this way).
_hooks: list[tuple[str, Any]] = []


def register_hook(event: str, handler: Any) -> None:
    """Have every client of this process, present and future, call `handler` on botocore event `event`."""
    with _lock:
        _hooks.append((event, handler))
        for existing in _clients.values():
            existing.meta.events.register(event, handler)


def unregister_hook(event: str, handler: Any) -> None:
    with _lock:
        if (event, handler) in _hooks:
            _hooks.remove((event, handler))
        for existing in _clients.values():
            existing.meta.events.unregister(event, handler)


def client(service: str, settings: Settings | None = None) -> Any:
    s = settings or get_settings()
    key = (service, s.region, s.endpoint_url)
    with _lock:
        found = _clients.get(key)
        if found is None:
            global _session
            if _session is None:
                _session = boto3.session.Session()
            found = _session.client(
                service,  # type: ignore[call-overload]
                region_name=s.region,
                endpoint_url=s.endpoint_url,
                config=Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=50),
            )
            for event, handler in _hooks:
                found.meta.events.register(event, handler)
            _clients[key] = found
        return found


def reset_clients() -> None:
    """Forget cached clients (tests and the local stack call this when the endpoint changes)."""
    global _session
    with _lock:
        _clients.clear()
        _session = None
