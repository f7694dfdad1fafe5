"""The interfaces the domain and engine need from the outside world. Adapters implement them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from oberik.domain.llm import Completion, Delta, ModelRequest
from oberik.domain.retrieval import VectorHit, VectorRecord


class Model(Protocol):
    """A chat model. `stream` yields Delta items as they arrive and exactly one Completion last.

    Raises `oberik.domain.errors.ModelError` when the provider fails. `should_stop` is polled between
    deltas; when it returns True the adapter closes the provider stream (so spend stops) and returns a
    Completion with finish_reason "cancelled". `on_open` is called once, when the provider has taken the
    request (its response has begun), before any delta: the caller may hold back work that would compete
    with sending it.
    """

    def stream(
        self,
        request: ModelRequest,
        should_stop: Callable[[], bool] | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[Delta | Completion]: ...


class Orchestrator(Protocol):
    """Runs turns as state-machine executions."""

    def execution_arn(self, name: str) -> str: ...

    def start(self, name: str, payload: dict[str, Any]) -> str: ...

    def resume(self, task_token: str, payload: dict[str, Any]) -> None: ...

    def status(self, execution_arn: str) -> str | None: ...

    def stop(self, execution_arn: str, cause: str) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...


class Embeddings(Protocol):
    """Turns texts into vectors of a fixed dimension. `model` names the model, so indexes built with one
    model are never queried with another."""

    model: str
    dimension: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class VectorStore(Protocol):
    """Vectors with metadata in named indexes, queried by cosine similarity under a metadata filter (the
    language of `oberik.domain.vector_filter`). Amazon S3 Vectors on AWS; an in-process store locally."""

    def ensure_index(self, index: str, dimension: int) -> None:
        """Create the index if it does not exist (idempotent)."""
        ...

    def put(self, index: str, records: list[VectorRecord]) -> None:
        """Insert or replace records by key."""
        ...

    def delete(self, index: str, keys: list[str]) -> None:
        """Remove records by key; missing keys are ignored."""
        ...

    def query(
        self, index: str, vector: list[float], *, top_k: int, filter: dict[str, Any] | None = None
    ) -> list[VectorHit]:
        """The `top_k` records closest to `vector` among those `filter` admits, best first."""
        ...

    def get(self, index: str, keys: list[str]) -> list[VectorRecord]:
        """Records by key (with metadata), in no particular order; missing keys are left out."""
        ...

    def list_indexes(self, prefix: str = "") -> list[str]:
        """The names of the indexes that exist and start with `prefix`, sorted."""
        ...

    def scan(self, index: str, *, filter: dict[str, Any] | None = None) -> Iterator[VectorRecord]:
        """Every record of the index that `filter` admits, with its key and metadata but not its vector (an
        empty list): for moving or removing a project's records. A missing index has none."""
        ...
