"""QueryVectors for moto, which stores S3 Vectors but cannot query them (moto 5.2.5; getmoto/moto#9097).

`install()` registers a botocore `before-call.s3vectors.QueryVectors` handler on a client that answers the call
from the vectors moto holds, ranking by the index's distance metric and filtering with the platform's own filter
evaluator. Everything else the S3 Vectors adapter does (create_index, put_vectors, get_vectors, delete_vectors)
goes to moto unchanged, and QueryVectors itself is still serialised and validated by botocore, so the production
adapter's calls are exercised for real. For tests and the benchmark only.
"""

from __future__ import annotations

import json
import math
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from oberik.domain import vector_filter


def _backend(client: Any) -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3vectors.models import s3vectors_backends
    from moto.utilities.utils import get_partition

    # moto keeps S3 Vectors per partition, not per region.
    return s3vectors_backends[DEFAULT_ACCOUNT_ID][get_partition(client.meta.region_name)]


def _answer(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    backend = _backend(client)
    index = backend.get_index(body.get("vectorBucketName"), body.get("indexName"), body.get("indexArn"))
    query = [float(x) for x in body["queryVector"]["float32"]]
    if len(query) != index.dimension:
        raise ValueError(f"query vector has {len(query)} dimensions, the index {index.dimension}")
    flt = body.get("filter")
    vector_filter.validate(flt)
    qn = math.sqrt(sum(x * x for x in query)) or 1.0
    scored = []
    for vector in index.vectors.values():
        meta = vector.metadata or {}
        if not vector_filter.matches(flt, meta):
            continue
        data = vector.data["float32"]
        if index.distance_metric == "euclidean":
            distance = math.sqrt(sum((a - b) ** 2 for a, b in zip(query, data, strict=True)))
        else:
            dn = math.sqrt(sum(x * x for x in data)) or 1.0
            distance = 1.0 - sum(a * b for a, b in zip(query, data, strict=True)) / (qn * dn)
        scored.append((distance, vector.key, meta))
    scored.sort(key=lambda t: (t[0], t[1]))
    out = []
    for distance, key, meta in scored[: int(body.get("topK", 10))]:
        item: dict[str, Any] = {"key": key}
        if body.get("returnDistance"):
            item["distance"] = distance
        if body.get("returnMetadata"):
            item["metadata"] = meta
        out.append(item)
    return {"vectors": out, "distanceMetric": index.distance_metric}


def install(client: Any) -> None:
    """Answer this client's QueryVectors calls from moto's stored vectors."""

    def handler(model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        raw = params.get("body") or b"{}"
        body = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        try:
            parsed = _answer(client, body)
            status = 200
        except Exception as e:  # as the service would: a client error, not a crash in the caller
            from moto.s3vectors.exceptions import IndexNotFound

            code = "NotFoundException" if isinstance(e, IndexNotFound) else "ValidationException"
            parsed = {
                "Error": {"Code": code, "Message": str(e)},
                "ResponseMetadata": {"HTTPStatusCode": 404 if code == "NotFoundException" else 400},
            }
            status = parsed["ResponseMetadata"]["HTTPStatusCode"]
        response = AWSResponse(url="", status_code=status, headers=HTTPHeaders(), raw=None)
        if status == 200:
            parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
        return response, parsed

    client.meta.events.register("before-call.s3vectors.QueryVectors", handler, unique_id="oberik-moto-query-vectors")
