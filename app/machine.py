"""What this machine offers the model picker: its devices and dtypes, and which preset pairs are on disk.

Asked here, in app/, because the answers need torch and the hub cache, which the widgets never import.
Nothing here goes to the network: the hub cache is read with huggingface_hub's own offline lookup.
"""
from __future__ import annotations

from huggingface_hub import try_to_load_from_cache

from engine.models.pairing import Preset

LOCAL_NAMES = ("embedded", "embedded-draft")  # built from files shipped with the app, never downloaded
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def devices() -> tuple[str, ...]:
    import torch

    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if torch.backends.mps.is_available():
        found.append("mps")
    return tuple(found)


def dtypes(device_names: tuple[str, ...]) -> tuple[str, ...]:
    """float16 only with an accelerator: on a CPU it is slower than float32 and not what `auto` would pick."""
    accelerated = any(name in ("cuda", "mps") for name in device_names)
    return ("auto", "float32", "bfloat16") + (("float16",) if accelerated else ())


def on_disk(name: str) -> bool:
    """Whether a model (hub id or local path) can load without the network: config and weights cached."""
    if name in LOCAL_NAMES or name.startswith(("/", ".", "~")):
        return True
    cached = [try_to_load_from_cache(name, filename) for filename in ("config.json",) + WEIGHT_FILES]
    return isinstance(cached[0], str) and any(isinstance(path, str) for path in cached[1:])


def offline_presets(presets: dict[str, Preset]) -> dict[str, bool]:
    return {name: on_disk(preset.target) and on_disk(preset.draft) for name, preset in presets.items()}
