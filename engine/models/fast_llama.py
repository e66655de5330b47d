"""A lean decode-time forward for Llama-family models (Llama 3, SmolLM2, Qwen3): the engine's fast path.

transformers' forward is general: every call builds masks and position tensors, and its DynamicCache grows by
concatenation. Decoding feeds 1 to γ+1 tokens at a time, so that bookkeeping is a large share of a step
(SmolLM2-135M, bf16, 2 CPU cores: 40.8 → 31.7 ms a target step, 4.7 → 3.5 ms a draft step). Here the KV cache
is preallocated and rolled back by moving its length, and q/k/v and gate/up are one matmul each. The logits
equal transformers' bit for bit (tested); models this does not cover keep transformers' own forward.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.models import gguf_native

ARCHITECTURES = ("llama", "qwen3")
POSITION_ONLY_ROPE = ("default", "linear", "llama3")  # RoPE whose angles depend on the position alone
INT8_ALIGNMENT = 16  # the CPU int8 kernel returns garbage unless the input width is a multiple of 16 (measured)


def supports(model) -> bool:
    """Whether `model` is a plain Llama-family decoder on one device, which is all this forward implements."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or []
    devices = {p.device for p in model.parameters()}
    rope = getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "rope_type", None)  # GPT-2 has no .model
    return (config.model_type in ARCHITECTURES and not getattr(config, "attention_bias", False)
            and not getattr(config, "mlp_bias", False) and getattr(config, "hidden_act", "silu") == "silu"
            and all(t == "full_attention" for t in layer_types) and rope in POSITION_ONLY_ROPE
            and len(devices) == 1 and next(iter(devices)).type != "meta")


class Int8Weight:
    """Weight-only int8 with one scale per output row: half the bytes of bf16, and bytes are what a CPU decode
    step waits for. Only for drafts: the target's distribution must stay exactly the model's."""

    def __init__(self, weight: torch.Tensor):
        w = weight.float()
        scales = (w.abs().amax(1) / 127).clamp_min(1e-12)
        self.values = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
        self.scales = scales.to(weight.dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x, self.values, self.scales)

    @staticmethod
    def usable(weight: torch.Tensor) -> bool:
        return (weight.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm")
                and weight.shape[1] % INT8_ALIGNMENT == 0)


def linear(weight: torch.Tensor, int8: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """x ↦ x @ weightᵀ, int8 where asked for and the kernel can take it."""
    if int8 and Int8Weight.usable(weight):
        return Int8Weight(weight)
    return lambda x: F.linear(x, weight)


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: Callable
    q_norm: torch.Tensor | None  # Qwen3 normalises each head's q and k
    k_norm: torch.Tensor | None
    o: Callable
    mlp_norm: torch.Tensor
    gate_up: Callable
    down: Callable


class _Weights:
    """A model's weights arranged for decoding, built once per model (and precision) and shared by its caches."""

    _built: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, model, int8: bool) -> "_Weights":
        built = cls._built.setdefault(model, {})
        # Moving or converting the model reallocates its weights: arrange them again.
        if int8 not in built or built[int8].source != model.model.norm.weight.data_ptr():
            built[int8] = cls(model, int8)
        return built[int8]

    def __init__(self, model, int8: bool):
        config, decoder = model.config, model.model
        # Keyed on the final norm: a native GGUF model's embeddings are file blocks, not one weight tensor.
        self.source = decoder.norm.weight.data_ptr()
        self.device, self.dtype = decoder.norm.weight.device, decoder.norm.weight.dtype
        self.embed = decoder.embed_tokens
        self.eps = config.rms_norm_eps
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.intermediate = config.intermediate_size
        self.final_norm = decoder.norm.weight
        self.rotary = decoder.rotary_emb
        self.layers = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(_Layer(
                attn_norm=layer.input_layernorm.weight,
                qkv=_projection([attn.q_proj, attn.k_proj, attn.v_proj], int8),
                q_norm=attn.q_norm.weight if hasattr(attn, "q_norm") else None,
                k_norm=attn.k_norm.weight if hasattr(attn, "k_norm") else None,
                o=_projection([attn.o_proj], int8),
                mlp_norm=layer.post_attention_layernorm.weight,
                gate_up=_projection([mlp.gate_proj, mlp.up_proj], int8),
                down=_projection([mlp.down_proj], int8),
            ))


def _projection(modules: list[torch.nn.Module], int8: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """One callable for projections of the same input: a native GGUF model's int4 weights as they are (`int8`
    does not apply: they are the target's own), else one weight fused from the modules'."""
    if isinstance(modules[0], gguf_native.Int4Linear):
        kernels = [m.native() for m in modules]
        return gguf_native.fused(modules) or (lambda x: torch.cat([k(x) for k in kernels], -1))
    return linear(_fused(modules) if len(modules) > 1 else modules[0].weight, int8)


def _fused(projections: list[torch.nn.Linear]) -> torch.Tensor:
    """One weight for several projections of the same input; the modules' weights become views of it, so the
    model keeps working and no memory is duplicated."""
    fused = torch.cat([p.weight.data for p in projections])
    start = 0
    for p in projections:
        rows = p.weight.shape[0]
        p.weight.data = fused[start:start + rows]
        start += rows
    return fused


class FastLlama:
    """One KV cache over a Llama-family model: `forward` feeds tokens after the cached ones, `crop` rolls back."""

    def __init__(self, model, head: torch.Tensor | Callable, *, int8: bool = False):
        """`head`: the LM head's weight, or a native GGUF head's kernel."""
        self.weights = _Weights.of(model, int8)
        self.head = linear(head, int8) if isinstance(head, torch.Tensor) else head
        self.length = 0
        self.k = self.v = self.cos = self.sin = None

    def _reserve(self, needed: int) -> None:
        """Grow the cache (by doubling, copying what it holds) so that it has room for `needed` positions."""
        capacity = 0 if self.k is None else self.k.shape[2]
        if needed <= capacity:
            return
        w = self.weights
        capacity = max(needed, 2 * capacity, 256)
        shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)
        k, v = (torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in range(2))
        if self.k is not None:
            k[:, :, : self.length], v[:, :, : self.length] = self.k[:, :, : self.length], self.v[:, :, : self.length]
        self.k, self.v = k, v
        positions = torch.arange(capacity, device=w.device)[None]
        cos, sin = w.rotary(torch.zeros(1, dtype=w.dtype, device=w.device), positions)
        self.cos, self.sin = cos[0], sin[0]

    def crop(self, length: int) -> None:
        self.length = length

    def forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Float logits (keep, head rows) of the last `keep` of `ids` (a 1-d tensor), fed after the cached ones."""
        w = self.weights
        n, start = len(ids), self.length
        end = start + n
        self._reserve(end)
        x = w.embed(ids)
        cos, sin = self.cos[start:end], self.sin[start:end]
        # One query attends to everything cached; several (prefill, verification) also need the causal mask.
        mask = torch.ones(n, end, dtype=torch.bool, device=w.device).tril(start) if n > 1 else None
        q_width, kv_width = w.heads * w.head_dim, w.kv_heads * w.head_dim
        for i, layer in enumerate(w.layers):
            qkv = layer.qkv(_rms_norm(x, layer.attn_norm, w.eps))
            qk = qkv[:, :q_width + kv_width].view(n, w.heads + w.kv_heads, w.head_dim)  # rotated together
            v = qkv[:, q_width + kv_width:].view(n, w.kv_heads, w.head_dim)
            if layer.q_norm is not None:
                qk = torch.cat((_rms_norm(qk[:, : w.heads], layer.q_norm, w.eps),
                                _rms_norm(qk[:, w.heads:], layer.k_norm, w.eps)), 1)
            qk = _rope(qk.transpose(0, 1), cos, sin)
            q, k = qk[: w.heads], qk[w.heads:]
            self.k[i, :, start:end], self.v[i, :, start:end] = k, v.transpose(0, 1)
            attn = F.scaled_dot_product_attention(q[None], self.k[i, None, :, :end], self.v[i, None, :, :end],
                                                  attn_mask=mask, scale=w.head_dim ** -0.5, enable_gqa=True)
            x = x + layer.o(attn[0].transpose(0, 1).reshape(n, q_width))
            gate, up = layer.gate_up(_rms_norm(x, layer.mlp_norm, w.eps)).split(w.intermediate, -1)
            x = x + layer.down(F.silu(gate) * up)
        self.length = end
        return self.head(_rms_norm(x[-keep:], w.final_norm, w.eps)).float()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers computes it (bit for bit): normalised in float32, scaled in the model's dtype."""
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin
