"""The `VectorStore` port: Amazon S3 Vectors on AWS, an in-process numpy store locally.

Both take the same metadata filter (`oberik.domain.vector_filter`). Which one a process uses is decided by the
stack's resources: with `OBERIK_VECTOR_BUCKET` set (template.yaml sets it on every function that reads or writes
vectors) it is S3 Vectors; without it (`oberik dev`, the tests) it is the in-process store, shared by everything in
the process - the API, the step function and the queue consumers all run in that one process locally.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError
from pydantic_settings import BaseSettings, SettingsConfigDict

from oberik.domain import vector_filter
from oberik.domain.retrieval import NON_FILTERABLE, VectorHit, VectorRecord
from oberik.ports import VectorStore
from oberik.settings import Settings, get_settings


class RetrievalResources(BaseSettings):
    """Where the stack keeps documents and vectors, as template.yaml tells the functions (same prefix as Settings).
    Read at the moment they are needed."""

    model_config = SettingsConfigDict(env_prefix="OBERIK_", extra="ignore")

    vector_bucket: str = ""  # S3 Vectors bucket; empty: the in-process store
    documents_bucket: str = ""  # originals of uploaded documents
    document_queue_url: str = ""  # large uploads, parsed and indexed by the ingest function
    # Documents larger than this (bytes) are processed asynchronously (202, status "processing").
    document_sync_bytes: int = 32_000


def retrieval_resources() -> RetrievalResources:
    return RetrievalResources()


# --- in-process ----------------------------------------------------------------------------------------


class _MemoryIndex:
    def __init__(self, dimension: int) -> None:
        import numpy as np

        self.dimension = dimension
        self.matrix = np.zeros((64, dimension), dtype=np.float32)
        self.keys: list[str | None] = []
        self.metadata: list[dict[str, Any] | None] = []
        self.rows: dict[str, int] = {}
        self.free: list[int] = []

    def put(self, record: VectorRecord) -> None:
        import numpy as np

        if len(record.vector) != self.dimension:
            raise ValueError(f"vector {record.key!r} has {len(record.vector)} dimensions, the index {self.dimension}")
        vec = np.asarray(record.vector, dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        vec = vec / norm if norm else vec
        row = self.rows.get(record.key)
        if row is None:
            if self.free:
                row = self.free.pop()
            else:
                row = len(self.keys)
                self.keys.append(None)
                self.metadata.append(None)
                if row >= self.matrix.shape[0]:
                    grown = np.zeros((self.matrix.shape[0] * 2, self.dimension), dtype=np.float32)
                    grown[: self.matrix.shape[0]] = self.matrix
                    self.matrix = grown
            self.rows[record.key] = row
        self.matrix[row] = vec
        self.keys[row] = record.key
        self.metadata[row] = dict(record.metadata)

    def delete(self, key: str) -> None:
        row = self.rows.pop(key, None)
        if row is not None:
            self.matrix[row] = 0.0
            self.keys[row] = None
            self.metadata[row] = None
            self.free.append(row)


class MemoryVectorStore:
    """Vectors in numpy arrays in this process: exact cosine search, then the filter over the best candidates."""

    def __init__(self) -> None:
        self._indexes: dict[str, _MemoryIndex] = {}
        self._lock = threading.RLock()

    def ensure_index(self, index: str, dimension: int) -> None:
        with self._lock:
            found = self._indexes.get(index)
            if found is None:
                self._indexes[index] = _MemoryIndex(dimension)
            elif found.dimension != dimension:
                raise ValueError(f"index {index!r} has {found.dimension} dimensions, not {dimension}")

    def _index(self, index: str) -> _MemoryIndex:
        found = self._indexes.get(index)
        if found is None:
            raise LookupError(f"no vector index named {index!r}")
        return found

    def put(self, index: str, records: list[VectorRecord]) -> None:
        with self._lock:
            target = self._index(index)
            for record in records:
                target.put(record)

    def delete(self, index: str, keys: list[str]) -> None:
        with self._lock:
            target = self._indexes.get(index)
            if target is not None:
                for key in keys:
                    target.delete(key)

    def get(self, index: str, keys: list[str]) -> list[VectorRecord]:
        with self._lock:
            target = self._indexes.get(index)
            if target is None:
                return []
            out = []
            for key in keys:
                row = target.rows.get(key)
                if row is not None:
                    out.append(VectorRecord(key, target.matrix[row].tolist(), dict(target.metadata[row] or {})))
            return out

    def query(
        self, index: str, vector: list[float], *, top_k: int, filter: dict[str, Any] | None = None
    ) -> list[VectorHit]:
        import numpy as np

        vector_filter.validate(filter)
        with self._lock:
            target = self._indexes.get(index)
            if target is None or not target.rows or top_k <= 0:
                return []
            used = len(target.keys)
            q = np.asarray(vector, dtype=np.float32)
            norm = float(np.linalg.norm(q))
            q = q / norm if norm else q
            scores = target.matrix[:used] @ q
            hits: list[VectorHit] = []
            # Best first; the filter is applied while walking, so a selective filter still finds its top_k. The
            # best few hundred are partitioned out and sorted first; the rest only if the filter needs them.
            first = min(used, max(8 * top_k, 256))
            if first < used:
                head = np.argpartition(-scores, first - 1)[:first]
                head = head[np.argsort(-scores[head], kind="stable")]
            else:
                head = np.argsort(-scores, kind="stable")

            def walk(rows: Any) -> bool:
                for row in rows:
                    key = target.keys[row]
                    if key is None:
                        continue
                    meta = target.metadata[row] or {}
                    if vector_filter.matches(filter, meta):
                        hits.append(VectorHit(key, float(scores[row]), dict(meta)))
                        if len(hits) >= top_k:
                            return True
                return False

            if not walk(head) and first < used:
                rest = np.argsort(-scores, kind="stable")
                walk(rest[~np.isin(rest, head)])
            return hits

    def list_indexes(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(name for name in self._indexes if name.startswith(prefix))

    def scan(self, index: str, *, filter: dict[str, Any] | None = None) -> Iterator[VectorRecord]:
        vector_filter.validate(filter)
        with self._lock:  # a snapshot: the caller may put and delete while it walks the records
            target = self._indexes.get(index)
            found = (
                []
                if target is None
                else [
                    VectorRecord(key, [], dict(meta or {}))
                    for key, meta in zip(target.keys, target.metadata, strict=True)
                    if key is not None and vector_filter.matches(filter, meta or {})
                ]
            )
        return iter(found)

    def reset(self) -> None:
        with self._lock:
            self._indexes.clear()


_memory = MemoryVectorStore()


def memory_store() -> MemoryVectorStore:
    """The process's in-process store (tests may `reset()` it)."""
    return _memory


# --- Amazon S3 Vectors -----------------------------------------------------------------------------------

_PUT_BATCH = 500  # PutVectors / DeleteVectors take at most 500 vectors a call
_GET_BATCH = 100
_MAX_TOP_K = 100
_LIST_INDEXES_PAGE = 500  # the most ListIndexes returns a call
_LIST_VECTORS_PAGE = 1000  # the most ListVectors returns a call


class S3VectorsStore:
    """Amazon S3 Vectors (`s3vectors`): one vector bucket, one index per kind, model and dimension, cosine distance.
    Indexes the template does not declare are created on first use, with `text` and `title` non-filterable."""

    def __init__(self, bucket: str, settings: Settings | None = None, client: Any = None) -> None:
        self.bucket = bucket
        self.settings = settings or get_settings()
        self._client = client
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    @property
    def s3v(self) -> Any:
        if self._client is not None:
            return self._client
        from oberik.adapters.aws import client

        return client("s3vectors", self.settings)

    def ensure_index(self, index: str, dimension: int) -> None:
        if index in self._ready:
            return
        try:
            found = self.s3v.get_index(vectorBucketName=self.bucket, indexName=index)["index"]
            if int(found.get("dimension", dimension)) != dimension:
                raise ValueError(f"index {index!r} has {found['dimension']} dimensions, not {dimension}")
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("NotFoundException", "ResourceNotFoundException"):
                raise
            try:
                self.s3v.create_index(
                    vectorBucketName=self.bucket,
                    indexName=index,
                    dataType="float32",
                    dimension=dimension,
                    distanceMetric="cosine",
                    metadataConfiguration={"nonFilterableMetadataKeys": list(NON_FILTERABLE)},
                )
            except ClientError as again:  # created meanwhile by another worker
                if again.response.get("Error", {}).get("Code") != "ConflictException":
                    raise
        with self._lock:
            self._ready.add(index)

    def put(self, index: str, records: list[VectorRecord]) -> None:
        try:
            self._put(index, records)
        except ClientError as e:
            # An index this process created may have been deleted since (by hand, or a torn-down stack): once
            # more after making sure it exists.
            if e.response.get("Error", {}).get("Code") != "NotFoundException" or not records:
                raise
            with self._lock:
                self._ready.discard(index)
            self.ensure_index(index, len(records[0].vector))
            self._put(index, records)

    def _put(self, index: str, records: list[VectorRecord]) -> None:
        for start in range(0, len(records), _PUT_BATCH):
            batch = records[start : start + _PUT_BATCH]
            self.s3v.put_vectors(
                vectorBucketName=self.bucket,
                indexName=index,
                vectors=[
                    {
                        "key": r.key,
                        "data": {"float32": [float(x) for x in r.vector]},
                        "metadata": {k: v for k, v in r.metadata.items() if v is not None},
                    }
                    for r in batch
                ],
            )

    def delete(self, index: str, keys: list[str]) -> None:
        for start in range(0, len(keys), _PUT_BATCH):
            try:
                self.s3v.delete_vectors(
                    vectorBucketName=self.bucket, indexName=index, keys=keys[start : start + _PUT_BATCH]
                )
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "NotFoundException":
                    raise
                return  # no such index: nothing to delete

    def get(self, index: str, keys: list[str]) -> list[VectorRecord]:
        out: list[VectorRecord] = []
        for start in range(0, len(keys), _GET_BATCH):
            try:
                found = self.s3v.get_vectors(
                    vectorBucketName=self.bucket,
                    indexName=index,
                    keys=keys[start : start + _GET_BATCH],
                    returnData=True,
                    returnMetadata=True,
                )
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == "NotFoundException":
                    return []
                raise
            for v in found.get("vectors", []):
                out.append(
                    VectorRecord(v["key"], list(v.get("data", {}).get("float32", [])), dict(v.get("metadata") or {}))
                )
        return out

    def list_indexes(self, prefix: str = "") -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"vectorBucketName": self.bucket, "maxResults": _LIST_INDEXES_PAGE}
        if prefix:
            kwargs["prefix"] = prefix
        while True:
            page = self.s3v.list_indexes(**kwargs)
            names.extend(i["indexName"] for i in page.get("indexes", []) if i["indexName"].startswith(prefix))
            if not page.get("nextToken"):
                return sorted(names)
            kwargs["nextToken"] = page["nextToken"]

    def scan(self, index: str, *, filter: dict[str, Any] | None = None) -> Iterator[VectorRecord]:
        # ListVectors has no filter: every record of the index is read (metadata, not vectors) and filtered here.
        vector_filter.validate(filter)
        kwargs: dict[str, Any] = {
            "vectorBucketName": self.bucket,
            "indexName": index,
            "maxResults": _LIST_VECTORS_PAGE,
            "returnMetadata": True,
            "returnData": False,
        }
        while True:
            try:
                page = self.s3v.list_vectors(**kwargs)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == "NotFoundException":
                    return
                raise
            for v in page.get("vectors", []):
                metadata = dict(v.get("metadata") or {})
                if vector_filter.matches(filter, metadata):
                    yield VectorRecord(v["key"], [], metadata)
            if not page.get("nextToken"):
                return
            kwargs["nextToken"] = page["nextToken"]

    def query(
        self, index: str, vector: list[float], *, top_k: int, filter: dict[str, Any] | None = None
    ) -> list[VectorHit]:
        vector_filter.validate(filter)
        kwargs: dict[str, Any] = {
            "vectorBucketName": self.bucket,
            "indexName": index,
            "queryVector": {"float32": [float(x) for x in vector]},
            "topK": max(1, min(_MAX_TOP_K, top_k)),
            "returnMetadata": True,
            "returnDistance": True,
        }
        if filter:
            kwargs["filter"] = filter
        try:
            found = self.s3v.query_vectors(**kwargs)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "NotFoundException":
                return []  # nothing was ever indexed with this model
            raise
        return [
            VectorHit(v["key"], 1.0 - float(v.get("distance", 1.0)), dict(v.get("metadata") or {}))
            for v in found.get("vectors", [])
        ]


def vector_store(settings: Settings | None = None) -> VectorStore:
    """The store this process uses: S3 Vectors when the stack names a vector bucket, else the in-process one."""
    bucket = retrieval_resources().vector_bucket
    if not bucket:
        return _memory
    s = settings or get_settings()
    key = (bucket, s.region, s.endpoint_url)
    with _stores_lock:
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = S3VectorsStore(bucket, s)
        return found


_stores: dict[tuple[str, str, str | None], S3VectorsStore] = {}
_stores_lock = threading.Lock()
