"""A lean decode-time forward for Llama-family models (Llama 3, SmolLM2, Mistral, Qwen2, Qwen3, Phi-3, Gemma 3): the
engine's fast path.

transformers' forward is general: every call builds masks and position tensors, and its DynamicCache grows by
concatenation. Decoding feeds 1 to γ+1 tokens at a time, so that bookkeeping is a large share of a step
(SmolLM2-135M, bf16, 2 CPU cores: 40.8 → 31.7 ms a target step, 4.7 → 3.5 ms a draft step). Here the KV cache
is preallocated and rolled back by moving its length, and q/k/v and gate/up are one matmul each. Models this
does not cover keep transformers' own forward.

It is also batch-invariant: a position's logits are the same bits whether it is fed alone (an AR step) or inside
a verification block, so greedy speculative decoding returns exactly greedy AR's tokens. Two things make it so
(docs/batch-invariance.md has the measurements): linear layers run on oneDNN with weights packed once, whose
kernels sum each output row in the same order for any number of rows (MKL's float32 GEMM, behind F.linear, does
not, and is 2-4x slower for a few rows); and a decoding block's attention runs one query row at a time, each
exactly the call an AR step makes. Only a prompt, longer than any block, takes one causal attention. Whether the
linear kernels really are row-invariant on this machine is probed once (`FastLlama.batch_invariant`, which the
decoder reports as PairInfo.greedy_exact).
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

import torch
import torch.nn.functional as F

from engine.kernels import q4q8
from engine.models import gguf_native

# qwen2: q/k/v biases, which `_Layer.qkv_bias` adds; phi3: q/k/v and gate/up already fused; gemma3: norms after
# attention and MLP too, each (1 + w), sliding-window layers with a rope of their own
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text")
UNIT_OFFSET_NORMS = ("gemma3_text",)  # whose RMSNorm multiplies by 1 + weight
ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh")}  # the MLP's gate's
LAYER_TYPES = ("full_attention", "sliding_attention")
POSITION_ONLY_ROPE = ("default", "linear", "llama3")  # RoPE whose angles depend on the position alone
INT8_ALIGNMENT = 16  # the CPU int8 kernel returns garbage unless the input width is a multiple of 16 (measured)
# The longest block a decoding round feeds: γ ≤ 64 drafts (DecodeSettings) and the position after them. Blocks up
# to this length attend row by row; only a longer one (a prompt, fed the same way in AR and speculative decoding)
# takes the cheaper causal attention.
ROW_BY_ROW_MAX = 65
# A linear layer's kernel is probed with blocks of every length up to 9 (typical rounds) and a few up to the
# longest; their first PROBED_ROWS rows are compared with single rows.
PROBED_BLOCKS = (2, 3, 4, 5, 6, 7, 8, 9, 16, 33, ROW_BY_ROW_MAX)
PROBED_ROWS = 9
PACKED_FOR_ROWS = 8  # the row count oneDNN lays packed weights out for: a decoding block has 1 to ~8 rows
# oneDNN multiplies 1 row with another kernel (another summation order where the input is 1536 wide or more), and
# 1 or 2 rows more slowly than 3 (embedded target, float32: 39, 46 and 35 ms of CPU for all layers): fewer rows
# are padded to this many.
PACKED_MIN_ROWS = 3


def supports(model) -> bool:
    """Whether `model` is a plain Llama-family decoder on one device, which is all this forward implements."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or []
    devices = {p.device for p in model.parameters()}
    rope = getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "rope_type", None)  # GPT-2 has no .model
    ropes = set(rope.values()) if isinstance(rope, dict) else {rope}  # gemma3's: one per layer type
    rotated = (getattr(config, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)  # of each head
    return (config.model_type in ARCHITECTURES and not getattr(config, "attention_bias", False)
            and not getattr(config, "mlp_bias", False) and _activation(config) in ACTIVATIONS
            and all(t in LAYER_TYPES for t in layer_types) and ropes <= set(POSITION_ONLY_ROPE) and rotated == 1.0
            and getattr(config, "final_logit_softcapping", None) is None
            and getattr(config, "attn_logit_softcapping", None) is None
            and len(devices) == 1 and next(iter(devices)).type != "meta")


def plain(model) -> bool:
    """Whether a model `supports` takes is a Llama layer stack exactly: RMSNorm by w, silu, one rope over the whole
    context, head_dim^-1/2 scores, embeddings as they are. The one-call kernel forward (q4q8) and the CUDA one
    (graphed) implement these; this module's own forward implements the rest too."""
    config, decoder = model.config, model.model
    return (config.model_type not in UNIT_OFFSET_NORMS and _activation(config) == "silu"
            and all(window is None for window in windows(config))
            and getattr(config, "query_pre_attn_scalar", None) is None
            and not hasattr(decoder.rotary_emb, "layer_types") and not hasattr(decoder.embed_tokens, "embed_scale")
            and getattr(decoder.embed_tokens, "scale", None) is None)


def _activation(config) -> str:
    return getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")


def windows(config) -> list[int | None]:
    """Each layer's sliding window (the positions a query sees, itself included), or None where it sees all: those
    its layer types name, or every layer where a config has a window and no layer types (Mistral's, Phi-3's)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not layer_types:
        return [window] * config.num_hidden_layers
    return [window if t == "sliding_attention" else None for t in layer_types]


class Int8Weight:
    """Weight-only int8 with one scale per output row: half the bytes of bf16, and bytes are what a CPU decode
    step waits for. Only for drafts: the target's distribution must stay exactly the model's."""

    def __init__(self, weight: torch.Tensor):
        w = weight.float()
        scales = (w.abs().amax(1) / 127).clamp_min(1e-12)
        self.values = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
        # The kernel is 4.5x slower on float32 activations than on bfloat16 ones (a draft token of the embedded
        # draft: 16.8 vs 3.8 ms of CPU, measured), so a float32 draft multiplies in bfloat16: it only proposes,
        # and verification keeps every output distributed as the target's whatever it proposes.
        self.dtype = torch.bfloat16 if weight.dtype == torch.float32 else weight.dtype
        self.scales = scales.to(self.dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x.to(self.dtype), self.values, self.scales).to(x.dtype)

    @staticmethod
    def usable(weight: torch.Tensor) -> bool:
        return (weight.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm")
                and weight.shape[1] % INT8_ALIGNMENT == 0)


def packed_rows(rows: int) -> int:
    """The rows a packed multiply runs for `rows`: at least PACKED_MIN_ROWS, and above 16 rounded up to an eighth
    of their power of two (at most 12.5 % more). torch keeps a oneDNN primitive for every row count it has met, up
    to 1,024 of them at 0.2-0.4 MB each: prefill chunks of every length had grown a process by 300 MB."""
    if rows <= 16:
        return max(rows, PACKED_MIN_ROWS)
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


class PackedWeight:
    """A weight in oneDNN's packed layout, multiplied by oneDNN's blocked kernels.

    For float32 and bfloat16 on CPU these are both faster than F.linear for 1-9 rows (the float32 LM head of the
    embedded target: 2.6 ms for one row vs 9.6 ms) and row-invariant: a row's output does not depend on how many
    rows are multiplied with it, once `__call__` steers around a single row. In float16, where oneDNN has it, they
    are here for that invariance: on AVX-512-fp16 F.linear's float16 kernel gives every block other bits than its
    rows alone. The packed copy is extra memory (the model keeps its own weights for transformers' forward).
    """

    def __init__(self, weight: torch.Tensor):
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        padded = packed_rows(rows)
        if padded > rows:
            x = torch.cat((x, x[:1].expand(padded - rows, -1)))
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")[:rows]

    @staticmethod
    def usable(weight: torch.Tensor) -> bool:
        if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
            return False
        if weight.dtype == torch.float32:
            return True
        if weight.dtype == torch.float16:
            return torch.ops.mkldnn._is_mkldnn_fp16_supported()
        return weight.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def linear(weight: torch.Tensor, int8: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """x ↦ x @ weightᵀ: int8 where asked for (Q8_0 blocks on the Q4 × Q8 kernel where it runs fast, so the whole
    forward is one call; else torch's weight-only int8), else packed for oneDNN where it can be."""
    if int8 and weight.device.type == "cpu" and q4q8.fast() and q4q8.Q4Q8Weight.fits(*weight.shape):
        return q4q8.Q4Q8Weight.from_dense(weight)
    if int8 and Int8Weight.usable(weight):
        return Int8Weight(weight)
    if PackedWeight.usable(weight):
        return PackedWeight(weight)
    return lambda x: F.linear(x, weight)


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: Callable
    qkv_bias: torch.Tensor | None  # Qwen2's q, k and v biases, concatenated
    q_norm: torch.Tensor | None  # Qwen3 and Gemma 3 normalise each head's q and k
    k_norm: torch.Tensor | None
    o: Callable
    mlp_norm: torch.Tensor
    gate_up: Callable
    down: Callable
    window: int | None  # a sliding window's length, or None: attends to every position
    rope: str | None  # which rotary table (Gemma 3's layer type), or None: the model's one
    post_attn_norm: torch.Tensor | None = None  # Gemma 3 normalises the attention's and the MLP's outputs too
    post_mlp_norm: torch.Tensor | None = None


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
        self.hidden = config.hidden_size
        self.intermediate = config.intermediate_size
        unit_offset = config.model_type in UNIT_OFFSET_NORMS
        self.final_norm = _norm_weight(decoder.norm, unit_offset)
        self.rotary = decoder.rotary_emb
        self.act = ACTIVATIONS[_activation(config)]
        # Gemma 3 scales scores by query_pre_attn_scalar^-1/2 rather than head_dim^-1/2
        self.attn_scale = getattr(config, "query_pre_attn_scalar", None) or self.head_dim
        rope_kinds = getattr(self.rotary, "layer_types", None)  # a rotary of several tables takes the layer type
        layer_windows = windows(config)
        self._lm_heads: dict = {}
        self._native: dict = {}
        self._decoder = decoder
        self.layers = []
        for i, layer in enumerate(decoder.layers):
            attn, mlp = layer.self_attn, layer.mlp
            qkv = [attn.qkv_proj] if hasattr(attn, "qkv_proj") else [attn.q_proj, attn.k_proj, attn.v_proj]
            sandwiched = hasattr(layer, "pre_feedforward_layernorm")  # Gemma's: post_attention_layernorm is after it
            norm = partial(_norm_weight, unit_offset=unit_offset)
            self.layers.append(_Layer(
                attn_norm=norm(layer.input_layernorm),
                qkv=_projection(qkv, int8),
                qkv_bias=_bias(qkv),
                q_norm=norm(attn.q_norm) if hasattr(attn, "q_norm") else None,
                k_norm=norm(attn.k_norm) if hasattr(attn, "k_norm") else None,
                o=_projection([attn.o_proj], int8),
                mlp_norm=norm(layer.pre_feedforward_layernorm if sandwiched else layer.post_attention_layernorm),
                gate_up=_projection([mlp.gate_up_proj] if hasattr(mlp, "gate_up_proj") else [mlp.gate_proj,
                                                                                              mlp.up_proj], int8),
                down=_projection([mlp.down_proj], int8),
                window=layer_windows[i],
                rope=config.layer_types[i] if rope_kinds else None,
                post_attn_norm=norm(layer.post_attention_layernorm) if sandwiched else None,
                post_mlp_norm=norm(layer.post_feedforward_layernorm) if sandwiched else None,
            ))
        self.plain = plain(model)
        down, native = self.layers[0].down, decoder.layers[0].mlp.down_proj
        if isinstance(native, gguf_native.NativeLinear):
            self.compaction = "4-bit" if getattr(native, "compacted", False) else None
        else:
            self.compaction = "int8" if int8 and isinstance(down, (Int8Weight, q4q8.Q4Q8Weight)) else None

    @cached_property
    def file_norms(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (attention, MLP) norm weights in float32, as the native forward uses them."""
        return [(_file_weight(m.input_layernorm), _file_weight(m.post_attention_layernorm))
                for m in self._decoder.layers]

    def native_forward(self, head: Callable) -> q4q8.LlamaForward | None:
        """The whole forward in one kernel call, where every projection and the head are Q4 × Q8 weights (a
        native GGUF target): built once per head."""
        if not self.plain or not isinstance(head, q4q8.Q4Q8Weight) or any(
                _q4q8_parts(getattr(layer, name)) is None for layer in self.layers
                for name in ("qkv", "o", "gate_up", "down")) or self.head_dim % 16 \
                or self.head_dim > q4q8.MAX_HEAD_DIM or self.heads // self.kv_heads > q4q8.MAX_GROUP:
            return None
        key = id(head)
        if key not in self._native:
            layers = [(_q4q8_parts(layer.qkv), layer.o, _q4q8_parts(layer.gate_up), layer.down, attn, mlp)
                      for layer, (attn, mlp) in zip(self.layers, self.file_norms)]
            biases = None if self.layers[0].qkv_bias is None else torch.stack([
                layer.qkv_bias.float() for layer in self.layers])
            q_norm, k_norm = (None if self.layers[0].q_norm is None else torch.stack([
                _file_weight(getattr(layer.self_attn, name)) for layer in self._decoder.layers])
                for name in ("q_norm", "k_norm"))
            self._native[key] = (head, q4q8.LlamaForward(
                layers, _file_weight(self._decoder.norm), head, heads=self.heads, kv_heads=self.kv_heads,
                head_dim=self.head_dim, eps=self.eps, qkv_bias=biases, q_norm=q_norm, k_norm=k_norm))
        return self._native[key][1]

    def lm_head(self, weight: torch.Tensor, int8: bool) -> Callable[[torch.Tensor], torch.Tensor]:
        """`linear(weight)` for an LM head, arranged once per weight: packing the embedded target's head takes
        ~0.1 s, and the decoder builds a scratch cache before every reply to time a step."""
        key = (weight.data_ptr(), tuple(weight.shape))
        if key not in self._lm_heads:
            self._lm_heads[key] = (weight, linear(weight, int8))  # holding the weight keeps its address its own
        return self._lm_heads[key][1]

    @cached_property
    def row_invariant(self) -> bool:
        """Whether every linear layer gives a row the same bits alone and in a block (`rows_agree`), probed once
        per projection and kernel: the layers share their shapes."""
        widths = {"qkv": self.hidden, "o": self.heads * self.head_dim, "gate_up": self.hidden,
                  "down": self.intermediate}
        kinds = {(name, type(getattr(layer, name))): getattr(layer, name) for layer in self.layers for name in widths}
        return all(rows_agree(multiply, widths[name], self.dtype, self.device) for (name, _), multiply in kinds.items())


def _embed_float(embed: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Embeddings in float32, for the native forward: a GGUF's rows as the file de-quantises them."""
    return embed.lookup(ids) if isinstance(embed, gguf_native.GGUFEmbedding) else embed(ids).float()


def _file_weight(norm: torch.nn.Module) -> torch.Tensor:
    """A norm's float32 weight: the GGUF's own values where the loader kept them (gguf_native._set_norm)."""
    return getattr(norm, "file_weight", norm.weight).float()


class _Parts:
    """Projections of one input whose weights cannot be fused (a GGUF stores them in different types): run one by
    one, their outputs side by side."""

    def __init__(self, kernels: list[Callable]):
        self.kernels = kernels

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([k(x) for k in self.kernels], -1)


def _q4q8_parts(projection: Callable) -> q4q8.Q4Q8Weight | list[q4q8.Q4Q8Weight] | None:
    """What the native forward takes for a projection: its Q4 × Q8 weight or list of parts, else None."""
    parts = projection.kernels if isinstance(projection, _Parts) else [projection]
    if not all(isinstance(p, q4q8.Q4Q8Weight) for p in parts):
        return None
    return parts if isinstance(projection, _Parts) else projection


def _bias(modules: list[torch.nn.Module]) -> torch.Tensor | None:
    """The projections' biases as one vector (in the model's dtype, or float32 for a GGUF's), or None without."""
    biases = [getattr(m, "bias", None) for m in modules]
    return None if biases[0] is None else torch.cat([b.detach() for b in biases])


def _projection(modules: list[torch.nn.Module], int8: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """One callable for projections of the same input: a native GGUF model's weights as they are (a draft's were
    made compact as they loaded: gguf_native.load), else one weight fused from the modules'."""
    if isinstance(modules[0], gguf_native.NativeLinear):
        kernels = [m.native() for m in modules]
        return gguf_native.fused(modules) or (_Parts(kernels) if len(kernels) > 1 else kernels[0])
    return linear(_fused(modules) if len(modules) > 1 else modules[0].weight, int8)


@torch.inference_mode()
def rows_agree(multiply: Callable[[torch.Tensor], torch.Tensor], width: int, dtype: torch.dtype,
               device: torch.device) -> bool:
    """Whether `multiply` gives a row the same bits alone and inside a block of any length a round can feed.

    Probed rather than assumed: kernels pick their summation order by shape, dtype and CPU, never by the values,
    so a few random rows tell, and a new kernel (another CPU, int4 weights) is checked the same way.
    """
    x = torch.randn(ROW_BY_ROW_MAX, width, generator=torch.Generator().manual_seed(0)).to(device, dtype)
    alone = torch.cat([multiply(x[r:r + 1]) for r in range(PROBED_ROWS)])
    return all(torch.equal(multiply(x[:n])[:PROBED_ROWS], alone[:n]) for n in PROBED_BLOCKS)


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
        self.head = self.weights.lm_head(head, int8) if isinstance(head, torch.Tensor) else head
        self.native = self.weights.native_forward(self.head)
        # a prompt's blocks of more than ROW_BY_ROW_MAX rows: read in by a matrix product (q4q8.READ_IN_ROWS)
        self.read_in_rows = q4q8.READ_IN_ROWS if self.native and q4q8.reads_in_densely() else None
        self.stop_read_in: threading.Event | None = None  # set: a read-in block ends between layers (ReadInStopped)
        self.length = 0
        self.k = self.v = self.cos = self.sin = None

    @property
    def projection(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The callable behind the first layer's MLP down projection: every projection of a model is built alike,
        so it tells what multiplies the model's weights."""
        return self.weights.layers[0].down

    @property
    def compact_weights(self) -> str | None:
        """What a draft's projections were made into to cost less ("int8", "4-bit"), or None: kept as they are."""
        return self.weights.compaction

    def _reserve(self, needed: int) -> None:
        """Grow the cache (by doubling, copying what it holds) so that it has room for `needed` positions."""
        capacity = 0 if self.k is None else self.v.shape[2]
        if needed <= capacity:
            return
        w = self.weights
        capacity = max(needed, 2 * capacity, 256)
        # Keys and values are kept in float32 whatever the model's dtype: CPU attention over bfloat16 is ~6x
        # slower for one query (227 vs 35 µs at 400 positions, measured), and float32 holds them exactly. The
        # native forward widens its own bfloat16 cache (q4q8.KV_DTYPE) as it reads it.
        shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)
        kv_dtype = q4q8.KV_DTYPE if self.native else torch.float32
        k, v = (torch.zeros(shape, dtype=kv_dtype, device=w.device) for _ in range(2))
        if self.native:  # the native forward keeps keys transposed: (layers, kv_heads, head_dim, capacity)
            k = k.view(len(w.layers), w.kv_heads, w.head_dim, capacity)
        if self.k is not None:
            if self.native:
                k[..., : self.length] = self.k[..., : self.length]
            else:
                k[:, :, : self.length] = self.k[:, :, : self.length]
            v[:, :, : self.length] = self.v[:, :, : self.length]
        self.k, self.v = k, v
        positions = torch.arange(capacity, device=w.device)[None]
        dtype = torch.float32 if self.native else w.dtype  # the native forward runs in float32
        zero = torch.zeros(1, dtype=dtype, device=w.device)
        self.rope = {}  # (cos, sin) per rotary table, each (capacity, 1, head_dim): broadcast over heads
        for kind in {layer.rope for layer in w.layers}:
            cos, sin = w.rotary(zero, positions) if kind is None else w.rotary(zero, positions, kind)
            self.rope[kind] = cos[0, :, None], sin[0, :, None]
        self.cos, self.sin = self.rope[w.layers[0].rope]  # the native forward's (its models have one table)

    def crop(self, length: int) -> None:
        self.length = length

    @cached_property
    def batch_invariant(self) -> bool:
        """Whether blocks score each position with the same bits as single steps (see the module docstring):
        attention is by construction, the linear layers where their kernels are (probed once)."""
        w = self.weights
        return w.row_invariant and rows_agree(self.head, w.hidden, w.dtype, w.device)

    def forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Float logits (keep, head rows) of the last `keep` of `ids` (a 1-d tensor), fed after the cached ones."""
        w = self.weights
        n, start = len(ids), self.length
        end = start + n
        self._reserve(end)
        if self.native:  # a decoding block's rows have the same numbers alone or together, on every kernel path
            x = _embed_float(w.embed, ids)
            if self.read_in_rows and n > ROW_BY_ROW_MAX:
                logits = self.native.read_in(x, start, self.k, self.v, self.cos, self.sin, keep, self.stop_read_in)
            else:
                logits = self.native(x, start, self.k, self.v, self.cos, self.sin, keep)
            self.length = end
            return logits
        x = w.embed(ids)
        q_width, kv_width = w.heads * w.head_dim, w.kv_heads * w.head_dim
        for i, layer in enumerate(w.layers):
            qkv = layer.qkv(_rms_norm(x, layer.attn_norm, w.eps))
            if layer.qkv_bias is not None:
                qkv = qkv + layer.qkv_bias.to(qkv.dtype)
            qk = qkv[:, :q_width + kv_width].view(n, w.heads + w.kv_heads, w.head_dim)  # rotated together
            v = qkv[:, q_width + kv_width:].view(n, w.kv_heads, w.head_dim)
            if layer.q_norm is not None:
                qk = torch.cat((_rms_norm(qk[:, : w.heads], layer.q_norm, w.eps),
                                _rms_norm(qk[:, w.heads:], layer.k_norm, w.eps)), 1)
            cos, sin = self.rope[layer.rope]
            qk = _rope(qk, cos[start:end], sin[start:end])
            q, k = qk[:, : w.heads].float(), qk[:, w.heads:]  # (n, heads, head_dim), (n, kv_heads, head_dim)
            self.k[i, :, start:end], self.v[i, :, start:end] = k.transpose(0, 1), v.transpose(0, 1)
            attn = self._attention(q, self.k[i], self.v[i], start, layer.window).to(x.dtype)
            attn = layer.o(attn)
            if layer.post_attn_norm is not None:
                attn = _rms_norm(attn, layer.post_attn_norm, w.eps)
            x = x + attn
            gate, up = layer.gate_up(_rms_norm(x, layer.mlp_norm, w.eps)).split(w.intermediate, -1)
            mlp = layer.down(w.act(gate) * up)
            if layer.post_mlp_norm is not None:
                mlp = _rms_norm(mlp, layer.post_mlp_norm, w.eps)
            x = x + mlp
        self.length = end
        return self.head(_rms_norm(x[-keep:], w.final_norm, w.eps)).float()

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int,
                   window: int | None) -> torch.Tensor:
        """(n, heads·head_dim) attention of queries q (n, heads, head_dim) at positions start..start+n-1 over one
        layer's cache (kv_heads, capacity, head_dim); a query at p sees positions p - window < t ≤ p."""
        n, heads, head_dim = q.shape
        end = start + n
        scale = self.weights.attn_scale ** -0.5
        if n > ROW_BY_ROW_MAX:
            mask = torch.ones(n, end, dtype=torch.bool, device=q.device).tril(start)
            if window is not None:
                mask &= ~torch.ones(n, end, dtype=torch.bool, device=q.device).tril(start - window)
            out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys[None, :, :end], values[None, :, :end],
                                                 attn_mask=mask, scale=scale, enable_gqa=True)
            return out[0].transpose(0, 1).reshape(n, heads * head_dim)
        # Row r is exactly the call an AR step at its position makes: the same contiguous (heads, head_dim) query
        # over the same keys, without a mask, so its result is the same bits. One call over the block with a
        # causal mask would differ in the last bits; per row it costs about the same for the 1-3 rows of an
        # average round (docs/batch-invariance.md).
        first = [0 if window is None else max(0, start + r + 1 - window) for r in range(n)]
        rows = [F.scaled_dot_product_attention(q[r][None, :, None], keys[None, :, first[r]: start + r + 1],
                                               values[None, :, first[r]: start + r + 1], scale=scale, enable_gqa=True)
                for r in range(n)]  # each (1, heads, 1, head_dim)
        return torch.cat(rows).view(n, heads * head_dim)


def _norm_weight(norm: torch.nn.Module, unit_offset: bool) -> torch.Tensor:
    """What an RMSNorm multiplies by: its weight, or (Gemma's) 1 + its weight, in the weight's dtype."""
    return (1 + norm.weight.float()).to(norm.weight.dtype) if unit_offset else norm.weight


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers computes it (bit for bit): normalised in float32, scaled in the model's dtype."""
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin
