"""The Python SDK for oberik's data plane.

    from oberik.client import Client

    client = Client("http://127.0.0.1:8000", token=END_USER_TOKEN)
    res = client.chat.send(message="How did Q3 revenue trend?")
    handle = client.chat.stream(message="And Q4?", session_id=res.session_id,
                                on_token=lambda delta, full: print(delta, end="", flush=True))
    done = handle.done()

`AsyncClient` is the same API for asyncio. Requests and responses are the API's own pydantic models
(`ChatRequest`, `ChatResponse`, ...), and every error is an `OberikError`.
"""

from oberik.client._core import Handlers
from oberik.client.aio import AsyncClient, AsyncStreamHandle
from oberik.client.cited import Segment, render_cited
from oberik.client.errors import (
    AgentStreamError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    OberikConnectionError,
    OberikError,
    RateLimited,
    ServerError,
    Unauthorized,
)
from oberik.client.models import (
    ActiveRun,
    CancelResult,
    ChatRequest,
    ChatResponse,
    MessagePublic,
    SessionPage,
    SessionPublic,
    ToolsListing,
    Waiting,
)
from oberik.client.sse import Frame
from oberik.client.sync import Client, StreamHandle
from oberik.client.tools import Tool, Ui

__all__ = [
    "ActiveRun",
    "AgentStreamError",
    "AsyncClient",
    "AsyncStreamHandle",
    "CancelResult",
    "ChatRequest",
    "ChatResponse",
    "Client",
    "Conflict",
    "Forbidden",
    "Frame",
    "Handlers",
    "InvalidRequest",
    "MessagePublic",
    "NotFound",
    "OberikConnectionError",
    "OberikError",
    "RateLimited",
    "Segment",
    "ServerError",
    "SessionPage",
    "SessionPublic",
    "StreamHandle",
    "Tool",
    "ToolsListing",
    "Ui",
    "Unauthorized",
    "Waiting",
    "render_cited",
]
