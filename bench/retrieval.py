"""Retrieval benchmark: vector `query` latency over 10,000 chunks, through both VectorStore adapters.

    make bench                      # or: .venv/bin/python bench/retrieval.py [--chunks N] [--queries N]

Built in this process: 10,000 chunks of 384 dimensions (the offline model's size; random unit vectors with the
metadata rag_search filters on: project, kind, tenant, tags, page), written through each adapter. Measured:

1. baseline: a bare numpy product over the same matrix and a top-5 argpartition, no store around it;
2. the in-process store (local/dev): top 5, without a filter and with rag_search's filter (project, chunk, tenant
   either matching or absent, tags $in);
3. the S3 Vectors adapter on moto: the production adapter's calls (put_vectors in batches of 500, query_vectors),
   with QueryVectors answered by the test hook (moto has none) from moto's stored vectors with the same filter
   evaluator. This is the adapter's path, not Amazon's service: the figure is moto's and the hook's cost;
4. the offline embedding model embedding one query (MiniLM, numpy), the other half of a rag_search call.

Both stores must return the same top-5 keys for the same queries (exit 1 otherwise). Figures are medians and p95
in milliseconds, with ratios to the baseline measured in the same run; on these small shared machines only the
ratios mean much.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "core"))

import numpy as np

from oberik.adapters.vectors import MemoryVectorStore, S3VectorsStore
from oberik.domain.retrieval import VectorRecord, index_name

DIM = 384
TAGS = ["hr", "finance", "it", "legal", "sales", "ops", "policies", "reports", "travel", "security"]


def _corpus(n: int, seed: int = 7) -> tuple[np.ndarray, list[VectorRecord]]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    pick = random.Random(seed)
    records = []
    for i in range(n):
        meta: dict[str, Any] = {
            "project_id": "p_bench" if i % 10 else "p_other",
            "doc_id": f"d_{i // 20:05d}",
            "kind": "chunk",
            "page": 1 + (i % 20),
            "tags": pick.sample(TAGS, 2),
            "created_at": 1.7e9 + i,
            "title": f"Document {i // 20}",
            "text": f"passage {i} " * 40,
        }
        if i % 7 == 0:
            meta["tenant_id"] = "acme" if i % 2 else "globex"
        records.append(VectorRecord(f"d_{i // 20:05d}#{i % 20:05d}", matrix[i].tolist(), meta))
    return matrix, records


RAG_FILTER = {
    "$and": [
        {"project_id": "p_bench"},
        {"kind": "chunk"},
        {"$or": [{"tenant_id": "acme"}, {"tenant_id": {"$exists": False}}]},
        {"tags": {"$in": ["finance", "policies"]}},
    ]
}


def _time(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _row(name: str, samples: list[float], baseline: float) -> str:
    p50 = statistics.median(samples)
    p95 = sorted(samples)[max(0, int(len(samples) * 0.95) - 1)]
    return f"{name:<58} {p50:9.2f} {p95:9.2f} {p50 / baseline:9.1f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--s3-queries", type=int, default=10, help="queries through the moto path (slow)")
    args = parser.parse_args()

    matrix, records = _corpus(args.chunks)
    rng = np.random.default_rng(99)
    queries = rng.standard_normal((max(args.queries, args.s3_queries), DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = index_name("chunks", "offline/all-minilm-l6-v2", DIM)
    q_iter = iter(range(10**9))

    def next_query() -> list[float]:
        return queries[next(q_iter) % len(queries)].tolist()

    # 1 and 2, interleaved query by query so that load from elsewhere on the machine hits all three alike.
    memory = MemoryVectorStore()
    memory.ensure_index(index, DIM)
    start = time.perf_counter()
    memory.put(index, records)
    memory_put = time.perf_counter() - start
    baseline: list[float] = []
    mem_plain: list[float] = []
    mem_filtered: list[float] = []
    for round_ in range(args.queries + 1):
        q = queries[round_ % len(queries)]
        ql = q.tolist()
        t0 = time.perf_counter()
        scores = matrix @ q
        top = np.argpartition(-scores, 5)[:5]
        top[np.argsort(-scores[top])]
        t1 = time.perf_counter()
        memory.query(index, ql, top_k=5)
        t2 = time.perf_counter()
        memory.query(index, ql, top_k=5, filter=RAG_FILTER)
        t3 = time.perf_counter()
        if round_:  # the first round warms up
            baseline.append((t1 - t0) * 1000)
            mem_plain.append((t2 - t1) * 1000)
            mem_filtered.append((t3 - t2) * 1000)
    base = statistics.median(baseline)

    # 3. the S3 Vectors adapter on moto (+ the QueryVectors hook)
    import boto3
    from moto import mock_aws

    from oberik.local import s3vectors_query

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(key, value)
    with mock_aws():
        client = boto3.client("s3vectors", region_name="us-east-1")
        client.create_vector_bucket(vectorBucketName="bench-vectors")
        s3vectors_query.install(client)
        s3 = S3VectorsStore("bench-vectors", client=client)
        s3.ensure_index(index, DIM)
        start = time.perf_counter()
        s3.put(index, records)
        s3_put = time.perf_counter() - start
        s3_plain = _time(lambda: s3.query(index, next_query(), top_k=5), args.s3_queries)
        s3_filtered = _time(lambda: s3.query(index, next_query(), top_k=5, filter=RAG_FILTER), args.s3_queries)
        agree = True
        for q in queries[:5]:
            for flt in (None, RAG_FILTER):
                a = [h.key for h in memory.query(index, q.tolist(), top_k=5, filter=flt)]
                b = [h.key for h in s3.query(index, q.tolist(), top_k=5, filter=flt)]
                agree &= a == b

    # 4. embedding one query with the offline model
    embed_row = None
    try:
        from oberik.adapters.embeddings import MiniLM

        model = MiniLM()
        embed = _time(lambda: model.embed(["How many days of paid leave do full-time employees get?"]), args.queries)
        embed_row = _row("embed one query (offline all-MiniLM-L6-v2, numpy)", embed, base)
    except Exception as e:  # the model wheel is installed by `make setup`; say so rather than fail the bench
        embed_row = f"embed one query: skipped ({type(e).__name__}: {e})"

    print(f"\nvector query latency over {args.chunks:,} chunks of {DIM} dimensions, top 5 (ms)")
    print(f"{'':<58} {'p50':>9} {'p95':>9} {'vs base':>10}")
    print(_row("baseline: numpy matrix product + argpartition", baseline, base))
    print(_row("in-process store, no filter", mem_plain, base))
    print(_row("in-process store, rag_search filter", mem_filtered, base))
    print(_row("S3 Vectors adapter on moto + hook, no filter", s3_plain, base))
    print(_row("S3 Vectors adapter on moto + hook, rag_search filter", s3_filtered, base))
    print(embed_row)
    print(f"writing {args.chunks:,} chunks: in-process {memory_put:.2f} s, S3 Vectors adapter on moto {s3_put:.2f} s")
    print(f"both stores return the same top 5: {'yes' if agree else 'NO'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
