"""Model loading: hub ids, local directories and GGUF files, with device and dtype chosen at load.

The short names `embedded` and `embedded-draft` resolve to the prepared local copies of the embedded pair
(see `engine.embedded`); everything else goes through transformers / huggingface_hub unchanged.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, PreTrainedModel, PreTrainedTokenizerBase

from engine.events import ModelInfo

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(RuntimeError):
    """A model could not be resolved or loaded; the message is meant for the user as it is."""


@dataclass
class LoadedModel:
    name: str
    path: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def info(self) -> ModelInfo:
        n_params = sum(p.numel() for p in self.model.parameters())
        return ModelInfo(name=self.name, path=self.path, n_params=n_params, vocab_size=self.vocab_size)


def pick_device(requested: str = "auto") -> torch.device:
    if requested != "auto":
        if requested == "cuda" and not torch.cuda.is_available():
            raise ModelLoadError("--device cuda was asked for, but PyTorch sees no CUDA device")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ModelLoadError("--device mps was asked for, but PyTorch sees no MPS device")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device, requested: str = "auto") -> torch.dtype:
    if requested != "auto":
        if requested not in DTYPES:
            raise ModelLoadError(f"unknown dtype {requested!r}; choose one of auto, {', '.join(DTYPES)}")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    # Measured on a 2-core AVX-512-bf16 CPU: a bf16 decode step of SmolLM2-135M is ~1.5x faster than fp32.
    return torch.bfloat16 if torch.cpu._is_avx512_bf16_supported() else torch.float32


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so wall-clock timings mean something on asynchronous devices."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def resolve(name: str) -> str:
    """Map a user-facing model name to what `from_pretrained` takes (a path or a hub id)."""
    from engine.models import embedded

    if name == "embedded":
        return str(embedded.target_dir())
    if name == "embedded-draft":
        return str(embedded.draft_dir())
    return name


@contextmanager
def _user_facing_errors(name: str):
    """Turn missing files and hub failures into one readable ModelLoadError."""
    try:
        yield
    except OSError as exc:
        offline = " (offline mode is on: HF_HUB_OFFLINE)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise ModelLoadError(f"cannot load model {name!r}{offline}: {str(exc).splitlines()[0]}") from exc


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer alone (cheap): used to check a pair before any weights are loaded."""
    source = resolve(name)
    path = Path(source).expanduser()
    with _user_facing_errors(name):
        if path.suffix == ".gguf":
            if not path.is_file():
                raise ModelLoadError(f"GGUF file not found: {path}")
            return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        if name.startswith(("embedded", "/", ".", "~")) and not path.is_dir():
            raise ModelLoadError(f"model directory not found: {path} (for the embedded pair run `specdec prepare`)")
        return AutoTokenizer.from_pretrained(source)


def load_model(name: str, device: torch.device, dtype: torch.dtype, *, shard: bool = False,
               tokenizer: PreTrainedTokenizerBase | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer (unless already loaded); `shard` spreads a model too large for one GPU
    with accelerate."""
    source = resolve(name)
    path = Path(source).expanduser()
    kwargs: dict = {"dtype": dtype}
    if shard and device.type == "cuda":
        kwargs["device_map"] = "auto"
    with _user_facing_errors(name):
        tokenizer = tokenizer or load_tokenizer(name)
        if path.suffix == ".gguf":
            model = AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, quantization_config=GgufConfig(dequantize=True), **kwargs
            )
            # A dequantized GGUF model is a plain dense model; drop the quantizer so it can be saved and moved.
            if getattr(model, "hf_quantizer", None) is not None:
                model.hf_quantizer.remove_quantization_config(model)
        else:
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    if "device_map" not in kwargs:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(name=name, path=str(path) if path.exists() else source, model=model, tokenizer=tokenizer)
