"""`specdec prepare`: the embedded pair as ordinary transformers model directories in the user's cache, made once.
The GGUF is slow to load (~16 s of de-quantisation) where a safetensors copy loads in about a second, and the draft
is assembled from the project's trained weights and the tensors it shares with the target."""
from __future__ import annotations

import shutil
from pathlib import Path

from engine.models import embedded


def _replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)


def prepare_target(force: bool = False) -> Path:
    """Dequantise the GGUF once into a float32 safetensors directory (the Q4_1 values are exact in fp32)."""
    import torch

    from engine.models.loading import load_model

    final = embedded.target_dir()
    if (final / "config.json").exists() and not force:
        return final
    print(f"Preparing the embedded target from {embedded.gguf_path().name} (one time, ~20 s)...", flush=True)
    loaded = load_model(str(embedded.gguf_path()), torch.device("cpu"), torch.float32)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    loaded.model.save_pretrained(tmp)
    loaded.tokenizer.save_pretrained(tmp)
    _replace_dir(tmp, final)
    print(f"  -> {final}", flush=True)
    return final


def draft_assets_present() -> bool:
    return (embedded.ASSET_DIR / "config.json").exists() and (embedded.ASSET_DIR / "weights.safetensors").exists()


def _assets_stamp() -> str:
    stat = (embedded.ASSET_DIR / "weights.safetensors").stat()
    return f"{stat.st_size}:{int(stat.st_mtime)}"


def prepare_draft(force: bool = False) -> Path:
    """Assemble a normal transformers directory for the draft: our trained tensors + the target's shared ones."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoTokenizer

    final = embedded.draft_dir()
    stamp_file = final / "specdec_assets.txt"
    if not draft_assets_present():
        raise FileNotFoundError(f"no trained draft in {embedded.ASSET_DIR}; train one with `specdec train-draft`")
    if stamp_file.exists() and stamp_file.read_text() == _assets_stamp() and not force:
        return final
    target = prepare_target()
    print("Assembling the embedded draft model...", flush=True)
    config = AutoConfig.from_pretrained(embedded.ASSET_DIR)
    tensors = load_file(embedded.ASSET_DIR / "weights.safetensors")
    target_tensors = load_file(target / "model.safetensors")
    tensors.update({name: target_tensors[name] for name in embedded.SHARED_TENSORS if name in target_tensors})
    tensors = {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config.save_pretrained(tmp)
    save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
    AutoTokenizer.from_pretrained(target).save_pretrained(tmp)
    if (embedded.ASSET_DIR / embedded.DRAFT_VOCAB_FILE).exists():
        shutil.copy(embedded.ASSET_DIR / embedded.DRAFT_VOCAB_FILE, tmp / embedded.DRAFT_VOCAB_FILE)
    (tmp / "specdec_assets.txt").write_text(_assets_stamp())
    _replace_dir(tmp, final)
    print(f"  -> {final}", flush=True)
    return final


def prepare(force: bool = False) -> None:
    prepare_target(force)
    if draft_assets_present():
        prepare_draft(force)
    else:
        print("No trained draft in assets/ yet: `embedded` will draft for itself.", flush=True)

