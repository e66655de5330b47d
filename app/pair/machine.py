"""What this machine offers the model picker (its devices and dtypes, and which preset pairs are on disk), and
what runs a loaded pair on it (the export's environment).

Asked here, in app/, because the answers need torch and the hub cache, which the widgets never import.
Nothing here goes to the network: the hub cache is read with huggingface_hub's own offline lookup.
"""
from __future__ import annotations

import torch
from huggingface_hub import try_to_load_from_cache

from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.events import PairInfo
from engine.kernels import q4q8
from engine.models import fast_llama, gguf_native, packaged
from engine.models.pairing import PRESETS, Preset
from words.records import Runtime

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
    if name in packaged.MODELS:
        return packaged.MODELS[name].installed()
    cached = [try_to_load_from_cache(name, filename) for filename in ("config.json",) + WEIGHT_FILES]
    return isinstance(cached[0], str) and any(isinstance(path, str) for path in cached[1:])


def default_pair() -> tuple[str, str]:
    """The window's pair when none is asked for: the Qwen2.5-Coder pair where it is installed (`make run` does
    it), else the embedded one."""
    preset = PRESETS["qwen2.5-coder"]
    if on_disk(preset.target) and on_disk(preset.draft):
        return preset.target, preset.draft
    return "embedded", "embedded-draft"


def offline_presets(presets: dict[str, Preset]) -> dict[str, bool]:
    return {name: on_disk(preset.target) and on_disk(preset.draft) for name, preset in presets.items()}


def described(decoder: Decoder) -> tuple[PairInfo, Runtime]:
    """The decoder's PairInfo and what runs the pair here. Call it on the thread that decodes: torch's thread count
    is that thread's."""
    info = decoder.info()
    runtime = Runtime(cpu_capability=torch.backends.cpu.get_cpu_capability(), threads=torch.get_num_threads(),
                      target_kernel=_target_kernel(decoder, info.dtype),
                      draft_weights=None if decoder.draft is None else _kernel_name(_draft_multiply(decoder),
                                                                                     info.dtype))
    return info, runtime


def _target_kernel(decoder: Decoder, dtype: str) -> str:
    """A native GGUF target's kernels, read from its layers (torch's int4 kernel takes the shapes the Q4 × Q8 one
    cannot); else what multiplies its weights in the forward."""
    native = {type(module) for module in decoder.target.model.modules()
              if isinstance(module, gguf_native.NativeLinear)}
    names = {gguf_native.Q4Q8Linear: f"Q4×Q8 native kernel ({q4q8.isa_name()})",
             gguf_native.Int4Linear: "torch's int4 kernel (_weight_int4pack_mm_for_cpu)"}
    if native:
        return " and ".join(name for kind, name in names.items() if kind in native)
    return _kernel_name(_multiply(decoder.runner), dtype)


def _multiply(runner: CachedModel):
    """What multiplies the model's weights on the fast forward (FastLlama.projection), or None where the model
    runs on transformers' forward."""
    cache = runner.cache
    return cache.projection if isinstance(cache, fast_llama.FastLlama) else None


def _draft_multiply(decoder: Decoder):
    return _multiply(decoder.draft_runner) if decoder.draft_runner is not None else None


def _kernel_name(multiply, dtype: str) -> str:
    if multiply is None:
        return f"{dtype}, transformers' forward"
    if isinstance(multiply, q4q8.Q4Q8Weight):
        blocks = "int8 (Q8_0 blocks)" if multiply.bits == 8 else f"{multiply.bits}-bit blocks"
        return f"{blocks} on the Q4×Q8 native kernel ({q4q8.isa_name()})"
    if isinstance(multiply, fast_llama.Int8Weight):
        return "int8 on torch's weight-only int8 kernel (_weight_int8pack_mm)"
    if isinstance(multiply, fast_llama.PackedWeight):
        return f"{dtype}, packed for oneDNN"
    return f"{dtype}, torch's linear"
