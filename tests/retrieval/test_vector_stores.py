"""Both VectorStore adapters answer the same queries the same way: S3 Vectors on moto (QueryVectors answered by
the hook, everything else by moto) and the in-process store."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from oberik.adapters.vectors import MemoryVectorStore, S3VectorsStore
from oberik.domain.errors import Invalid
from oberik.domain.retrieval import VectorRecord, index_name
from oberik.local import s3vectors_query

BUCKET = "oberik-vectors-test"
INDEX = index_name("chunks", "offline/hashing-16", 16)


def _unit(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(-1, 1) for _ in range(16)]


@pytest.fixture(params=["s3vectors", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryVectorStore()
        return
    with mock_aws():
        client = boto3.client("s3vectors", region_name="us-east-1")
        client.create_vector_bucket(vectorBucketName=BUCKET)
        s3vectors_query.install(client)
        yield S3VectorsStore(BUCKET, client=client)


def _records() -> list[VectorRecord]:
    out = []
    for i in range(40):
        out.append(
            VectorRecord(
                f"doc{i % 4}#{i:05d}",
                _unit(i),
                {
                    "project_id": "p1" if i < 30 else "p2",
                    "doc_id": f"doc{i % 4}",
                    "tags": ["even" if i % 2 == 0 else "odd", f"t{i % 3}"],
                    "page": i,
                    "kind": "chunk",
                    "text": f"passage {i}",
                    "title": f"Doc {i % 4}",
                    **({"tenant_id": "acme"} if i % 5 == 0 else {}),
                },
            )
        )
    return out


def test_the_nearest_vector_comes_first_with_its_metadata(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    store.ensure_index(INDEX, 16)  # idempotent
    store.put(INDEX, _records())
    hits = store.query(INDEX, _unit(7), top_k=3)
    assert hits[0].key == "doc3#00007"
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].metadata["text"] == "passage 7"
    assert hits[0].metadata["tags"] == ["odd", "t1"]
    assert len(hits) == 3
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_filters_narrow_the_candidates(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    store.put(INDEX, _records())
    hits = store.query(INDEX, _unit(7), top_k=50, filter={"project_id": "p1", "tags": "even"})
    assert hits and all(h.metadata["project_id"] == "p1" and "even" in h.metadata["tags"] for h in hits)
    assert len(hits) == 15
    scoped = store.query(INDEX, _unit(7), top_k=50, filter={"doc_id": {"$in": ["doc1", "doc2"]}, "page": {"$lt": 10}})
    assert sorted(h.key for h in scoped) == ["doc1#00001", "doc1#00005", "doc1#00009", "doc2#00002", "doc2#00006"]
    tenant = store.query(
        INDEX,
        _unit(7),
        top_k=50,
        filter={"$and": [{"project_id": "p1"}, {"$or": [{"tenant_id": "acme"}, {"tenant_id": {"$exists": False}}]}]},
    )
    assert len(tenant) == 30
    only_acme = store.query(INDEX, _unit(7), top_k=50, filter={"tenant_id": "acme"})
    assert sorted(int(h.metadata["page"]) for h in only_acme) == [0, 5, 10, 15, 20, 25, 30, 35]


def test_put_replaces_by_key_and_delete_removes(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    store.put(INDEX, _records())
    store.put(INDEX, [VectorRecord("doc0#00000", _unit(999), {"project_id": "p1", "text": "replaced"})])
    assert store.query(INDEX, _unit(999), top_k=1)[0].metadata["text"] == "replaced"
    keys = [f"doc1#{i:05d}" for i in range(1, 40, 4)]
    store.delete(INDEX, [*keys, "never-existed"])
    left = store.query(INDEX, _unit(1), top_k=100)
    assert len(left) == 30
    assert not {h.key for h in left} & set(keys)
    assert {r.key for r in store.get(INDEX, ["doc0#00000", keys[0]])} == {"doc0#00000"}


def test_a_query_on_an_index_never_written_finds_nothing(store: Any) -> None:
    other = index_name("history", "offline/hashing-16", 16)
    if isinstance(store, MemoryVectorStore):
        assert store.query(other, _unit(1), top_k=3) == []
    else:
        assert store.query(other, _unit(1), top_k=3) == []


def test_a_filter_outside_the_language_is_refused_before_any_call(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    with pytest.raises(Invalid):
        store.query(INDEX, _unit(1), top_k=3, filter={"tags": {"$regex": "^e"}})


def test_the_s3_vectors_index_is_created_with_text_and_title_unfilterable() -> None:
    with mock_aws():
        client = boto3.client("s3vectors", region_name="us-east-1")
        client.create_vector_bucket(vectorBucketName=BUCKET)
        calls: list[dict[str, Any]] = []
        client.meta.events.register("before-call.s3vectors.CreateIndex", lambda params, **_: calls.append(params))
        S3VectorsStore(BUCKET, client=client).ensure_index(INDEX, 16)
        index = client.get_index(vectorBucketName=BUCKET, indexName=INDEX)["index"]
        assert index["dimension"] == 16
        assert index["distanceMetric"] == "cosine"
        import json

        body = json.loads(calls[0]["body"])
        assert body["metadataConfiguration"] == {"nonFilterableMetadataKeys": ["text", "title"]}


def test_index_names_carry_model_and_dimension_within_the_service_limits() -> None:
    assert index_name("chunks", "offline/all-minilm-l6-v2", 384) == "chunks-offline-all-minilm-l6-v2-384"
    assert index_name("memories", "bedrock/amazon.titan-embed-text-v2:0", 1024) == (
        "memories-bedrock-amazon-titan-embed-text-v2-0-1024"
    )
    long = index_name("history", "myprovider/" + "very-long-model-name-" * 5, 3072)
    assert len(long) <= 63 and long.endswith("-3072") and long.startswith("history-")
    assert long != index_name("history", "myprovider/" + "very-long-model-name-" * 6, 3072)


def test_a_selective_filter_still_finds_its_top_k_far_down_the_ranking(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    records = [VectorRecord(f"r{i:04d}", _unit(i), {"project_id": "p1", "n": i}) for i in range(700)]
    store.put(INDEX, records)
    query = _unit(3)
    hits = store.query(INDEX, query, top_k=3, filter={"n": {"$gte": 690}})
    expected = sorted(
        (r for r in records if r.metadata["n"] >= 690),
        key=lambda r: (
            -sum(a * b for a, b in zip(query, r.vector, strict=True)) / math.sqrt(sum(x * x for x in r.vector))
        ),
    )[:3]
    assert [h.key for h in hits] == [r.key for r in expected]


def test_indexes_are_listed_by_prefix(store: Any) -> None:
    assert store.list_indexes("memories-") == []
    names = [index_name(kind, "offline/hashing-16", 16) for kind in ("memories", "history", "chunks")]
    names.append(index_name("memories", "offline/hashing-8", 8))
    for name in names:
        store.ensure_index(name, int(name.rsplit("-", 1)[1]))
    assert store.list_indexes("memories-") == ["memories-offline-hashing-16-16", "memories-offline-hashing-8-8"]
    assert store.list_indexes() == sorted(names)
    assert store.list_indexes("nothing-") == []


def test_a_scan_yields_every_record_the_filter_admits_with_its_metadata(store: Any) -> None:
    store.ensure_index(INDEX, 16)
    store.put(INDEX, _records())
    found = list(store.scan(INDEX, filter={"project_id": "p2"}))
    assert sorted(r.key for r in found) == sorted(r.key for r in _records() if r.metadata["project_id"] == "p2")
    assert len(found) == 10
    by_key = {r.key: r for r in found}
    assert by_key["doc2#00030"].metadata["text"] == "passage 30"
    assert by_key["doc2#00030"].metadata["tags"] == ["even", "t0"]
    assert all(r.vector == [] for r in found)  # keys and metadata only
    assert len(list(store.scan(INDEX))) == 40
    late = store.scan(INDEX, filter={"project_id": "p1", "page": {"$gte": 28}})
    assert sorted(r.key for r in late) == ["doc0#00028", "doc1#00029"]
    # What a scan found can be deleted by key; a missing index has no records.
    store.delete(INDEX, [r.key for r in found])
    assert list(store.scan(INDEX, filter={"project_id": "p2"})) == []
    assert len(list(store.scan(INDEX))) == 30
    assert list(store.scan(index_name("memories", "offline/hashing-16", 16))) == []
    with pytest.raises(Invalid):
        list(store.scan(INDEX, filter={"tags": {"$regex": "^e"}}))
