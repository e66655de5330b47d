"""4- and 8-bit weights times Q8 activations on the CPU (q4q8.c): the native GGUF models' projections.

torch's int4 kernel de-quantises every weight into float32 for each block of 4 rows it multiplies, so a
verification block of k rows costs about k times a single row's arithmetic. This kernel quantises the
activations per row and group of 32 (as llama.cpp's Q8_0 does) and multiplies with integer dot products
(AVX-512 VNNI where the CPU has it, else AVX2, else portable C: the same bits on every path): each weight is read and
unpacked once for up to 8 rows. A row's result does not depend on the other rows or on the thread count.
SPECDEC_ISA (engine.kernels.levels) forces one level on the matrix paths and the forward's float loops alike.

The library is compiled with the system's C compiler (`CC`, else `cc`) the first time it is needed (`make`
does it at set-up) into engine/kernels/build/, or into the user's cache where the package is read-only; without
a compiler `available()` is False and the caller keeps torch's int4 kernel.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.kernels import levels
from engine.paths import home

SOURCE = Path(__file__).with_name("q4q8.c")
SOURCES = (SOURCE, SOURCE.with_name("q4q8_loops.h"))  # what a build compiles (q4q8.c includes the header)
GROUP = 32  # inputs per scale (the GGUF block size)
ROWS = 16  # output rows per weight block: a weight's outputs must be a multiple of this
MAX_GROUP = 16  # query heads per kv head the forward's attention takes (q4q8.c)
MAX_HEAD_DIM = 256  # and dimensions per head
KV_DTYPE = torch.bfloat16  # the forward's key and value cache (q4q8.c's llama_forward says why)
# No contracted multiply-adds (every path does the same IEEE operations); -fno-trapping-math lets the clamps in
# exp_approx become vector selects (no value changes: nothing here reads floating-point exceptions).
FLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-fno-trapping-math", "-fPIC", "-shared")
# How a weight's scales are kept (q4q8.c's SCALES_*): w = d·u + m with fp16 or float32 d, m per row and group of
# 32, or w = d_h·(u − zero) with a float32 d_h per half group of 16 (Q6_K).
SCALES_F16, SCALES_F32, SCALES_HALVES = 0, 1, 2
# A prompt is read in by matrix products over de-quantised weights (LlamaForward.read_in) where the CPU multiplies
# bfloat16 matrices in hardware, on AMX tiles or with AVX-512's bf16 instructions (faster there than the kernel's
# rows: docs/q4q8-kernel.md; without them oneDNN emulates bf16, far slower), in blocks of READ_IN_ROWS rows at multiples
# of it, so that a prompt is cut at the same positions whatever the machine's speed. Each block de-quantises every
# weight again (~0.65 s for the Qwen 1.5B + 0.5B pair on 2 cores), so larger blocks read faster: a 4,000-token
# prompt at 117 tokens/s in blocks of 256, 136 in blocks of 512 (~4 s each); Stop does not wait for a block's end.
# SPECDEC_READ_IN=dense|kernel forces the choice.
READ_IN_ROWS = 512


class ReadInStopped(Exception):
    """A read-in (`LlamaForward.read_in`) was stopped between two layers: the cache holds what it held before it."""


def _library_path() -> Path:
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in SOURCES) + " ".join(FLAGS).encode()).hexdigest()[:12]
    local = SOURCE.parent / "build"
    if os.access(SOURCE.parent, os.W_OK):
        return local / f"libq4q8-{digest}.so"
    return home() / "kernels" / f"libq4q8-{digest}.so"


def build() -> Path:
    """Compile the library unless a build of this source exists; raises OSError with the compiler's words."""
    path = _library_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    compiler = os.environ.get("CC", "cc")
    try:
        result = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(SOURCE)], capture_output=True, text=True)
    except FileNotFoundError:
        raise OSError(f"no C compiler ({compiler}) to build {SOURCE.name}") from None
    if result.returncode:
        partial.unlink(missing_ok=True)
        raise OSError(f"{compiler} could not build {SOURCE.name}: {(result.stderr.strip().splitlines() or ['?'])[0]}")
    partial.replace(path)  # atomic: a concurrent build never loads a half-written file
    return path


@cache
def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(str(build()))
    except OSError as exc:
        print(f"specdec: {exc}: the int4 target runs on torch's int4 kernel", file=sys.stderr)
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.q4q8_linear.argtypes = [ptr, ptr, ctypes.c_int, i64, ptr, ptr, ctypes.c_int, ctypes.c_int]
    lib.q4q8_linear.restype = None
    lib.llama_forward.argtypes = [ptr, ptr, i64, i64, ptr, ptr, i64, ptr, ptr, i64, ptr, ptr, ctypes.c_int,
                                  ctypes.c_int]
    lib.llama_forward.restype = None
    lib.llama_scratch_bytes.argtypes = [ptr, i64, i64]
    lib.llama_scratch_bytes.restype = i64
    lib.q4q8_scratch_bytes.argtypes = [i64, i64, i64]
    lib.q4q8_scratch_bytes.restype = i64
    lib.q4q8_best_isa.restype = ctypes.c_int
    lib.q4q8_dequantize.argtypes = [ptr, ptr, i64, ctypes.c_int, ctypes.c_int]
    lib.q4q8_dequantize.restype = None
    lib.llama_place.argtypes = [ptr, i64, ptr, i64, i64, ptr, ptr, i64, ptr, ptr, ctypes.c_int]
    lib.llama_place.restype = None
    lib.llama_rms_norm.argtypes = [ptr, ptr, i64, i64, ctypes.c_float, ptr, ctypes.c_int]
    lib.llama_rms_norm.restype = None
    lib.llama_silu_mul.argtypes = [ptr, i64, i64, ptr, ctypes.c_int]
    lib.llama_silu_mul.restype = None
    lib.q4q8_loops_level.argtypes = [ctypes.c_int]
    lib.q4q8_loops_level.restype = ctypes.c_int
    return lib


def available() -> bool:
    return _library() is not None


def executable_levels() -> tuple[str, ...]:
    """The levels (engine.kernels.levels) this CPU executes, best first: ("avx512", "avx2", "portable") on an
    AVX-512 VNNI CPU."""
    best = _library().q4q8_best_isa()
    return tuple(name for name, level in levels.LEVELS.items() if level.isa <= best)


@cache
def isa() -> int:
    """The kernel's level as q4q8.c numbers it (read once: SPECDEC_ISA forces one, else the CPU's best); a level
    this CPU cannot execute raises ValueError."""
    forced = levels.forced()
    if forced is None:
        return _library().q4q8_best_isa()
    if forced not in executable_levels():
        raise ValueError(f"{levels.SWITCH}={forced}: this CPU cannot execute that level (it executes "
                         f"{', '.join(executable_levels())})")
    return levels.LEVELS[forced].isa


def isa_name() -> str:
    """The kernel's level: avx512, avx2 or portable."""
    return next(name for name, level in levels.LEVELS.items() if level.isa == isa())


def loops_name() -> str:
    """The level of the forward's float loops (attention, norms, activation) the kernel runs, as that copy's own
    code reports it: the same as `isa_name`."""
    level = _library().q4q8_loops_level(isa())
    return next(name for name, each in levels.LEVELS.items() if each.isa == level)


def reads_in_densely() -> bool:
    """Whether a native forward reads prompts in with `LlamaForward.read_in` on this machine (see READ_IN_ROWS):
    where oneDNN multiplies bfloat16 in hardware, on AMX tiles or AVX-512's bf16 instructions, and is let to."""
    forced = os.environ.get("SPECDEC_READ_IN")
    if forced in ("dense", "kernel"):
        return forced == "dense"
    onednn_isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()  # set lower (SPECDEC_ISA), bf16 is emulated
    if onednn_isa not in ("ALL", "DEFAULT") and "AMX" not in onednn_isa and "BF16" not in onednn_isa:
        return False
    return torch.cpu._is_amx_tile_supported() or "avx512_bf16" in (levels.cpu_flags() or ())


def fast() -> bool:
    """Whether the kernel runs on a vector path here (the portable C one is for correctness, ~30x slower)."""
    return available() and isa_name() != "portable"


def pack(values: np.ndarray, scales: np.ndarray, offsets: np.ndarray, bits: int, kind: int = SCALES_F16
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's layout: `values` u (N, K) uint8 (0..15 for 4 bits, 0..255 for 8) and two arrays (N, K / 32) of
    scales of `kind`: d and m (w = d·u + m), or the halves' d (see SCALES_F16). Returns the weight blocks (uint8)
    and the scales (fp16 kept as int16, float32 as int32: `model.to(dtype)` leaves integers alone)."""
    n, k = values.shape
    blocks, groups = n // ROWS, k // GROUP
    u = values.reshape(blocks, ROWS, groups, GROUP).transpose(0, 2, 1, 3)  # (block, group, row, input)
    if bits == 4:
        low = u[..., :16].reshape(blocks, groups, ROWS, 4, 4).transpose(0, 1, 3, 2, 4)  # (b, g, chunk, row, j)
        high = u[..., 16:].reshape(blocks, groups, ROWS, 4, 4).transpose(0, 1, 3, 2, 4)
        packed = (low | (high << 4)).astype(np.uint8)
    else:
        packed = u.reshape(blocks, groups, ROWS, 8, 4).transpose(0, 1, 3, 2, 4).astype(np.uint8)
    dtype, kept_as = (np.float16, np.int16) if kind == SCALES_F16 else (np.float32, np.int32)
    dm = np.stack((scales, offsets)).astype(dtype)  # (2, N, groups)
    dm = dm.reshape(2, blocks, ROWS, groups).transpose(1, 3, 0, 2)  # (block, group, a | b, row)
    return torch.from_numpy(np.ascontiguousarray(packed).reshape(-1)), torch.from_numpy(
        np.ascontiguousarray(dm).reshape(-1).view(kept_as))


_scratch = threading.local()


def _scratch_buffer(size: int) -> torch.Tensor:
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.numel() < size:
        buffer = _scratch.buffer = torch.empty(max(size, 1 << 20), dtype=torch.uint8)
    return buffer


class Q4Q8Weight:
    """x ↦ x @ wᵀ for x (rows, K) float32 or bfloat16, on the kernel; the result has x's dtype."""

    def __init__(self, blocks: torch.Tensor, scales: torch.Tensor, bits: int, out_features: int, in_features: int,
                 kind: int = SCALES_F16, zero: int = 0):
        self.blocks, self.scales, self.bits, self.kind, self.zero = blocks, scales, bits, kind, zero
        self.out_features, self.in_features = out_features, in_features
        self._lib = _library()

    @classmethod
    def from_values(cls, values: np.ndarray, scales: np.ndarray, offsets: np.ndarray, bits: int,
                    kind: int = SCALES_F16, zero: int = 0) -> "Q4Q8Weight":
        """`offsets` are the halves' scales for SCALES_HALVES (w = d_h·(u − zero)); else w = scales·u + offsets."""
        blocks, dm = pack(values, scales, offsets, bits, kind)
        return cls(blocks, dm, bits, *values.shape, kind, zero)

    @classmethod
    def from_dense(cls, weight: torch.Tensor) -> "Q4Q8Weight":
        """A dense weight quantised as Q8_0 is (d = max|w| / 127 per 32 inputs, q = round(w / d)): for drafts,
        whose proposals verification corrects, never for a target."""
        w = weight.detach().float().reshape(weight.shape[0], -1, GROUP)
        d = (w.abs().amax(-1) / 127).clamp_min(1e-12)
        q = torch.round(w / d[..., None]).clamp(-127, 127).to(torch.int16) + 128
        d16 = d.half().float()  # the kernel keeps scales in fp16
        return cls.from_values(q.to(torch.uint8).reshape(weight.shape).numpy(), d16.numpy(), (-128 * d16).numpy(), 8)

    @classmethod
    def from_dense_4bit(cls, weight: torch.Tensor) -> "Q4Q8Weight":
        """A dense weight quantised as Q4_1 is (per 32 inputs d = (max − min) / 15, m = min, u = round((w − m) / d)):
        for drafts, a step of whose costs what its weights weigh, never for a target."""
        w = weight.detach().float().reshape(weight.shape[0], -1, GROUP)
        low, high = w.amin(-1), w.amax(-1)
        m = low.half().float()  # the kernel keeps scales in fp16
        d = ((high - m) / 15).half().float().clamp_min(1e-7)
        u = torch.round((w - m[..., None]) / d[..., None]).clamp(0, 15).to(torch.uint8)
        return cls.from_values(u.reshape(weight.shape).numpy(), d.numpy(), m.numpy(), 4)

    def unpacked(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`pack`'s inverse: values u (N, K) uint8 and the scale arrays a, b (N, K / 32) float32."""
        n, k = self.out_features, self.in_features
        blocks, groups = n // ROWS, k // GROUP
        if self.bits == 4:
            packed = self.blocks.view(blocks, groups, 4, ROWS, 4).permute(0, 3, 1, 2, 4)  # (block, row, g, chunk, j)
            u = torch.cat(((packed & 0x0F).reshape(blocks, ROWS, groups, 16), (packed >> 4).reshape(
                blocks, ROWS, groups, 16)), -1)
        else:
            u = self.blocks.view(blocks, groups, 8, ROWS, 4).permute(0, 3, 1, 2, 4)
        float_type = torch.float16 if self.kind == SCALES_F16 else torch.float32
        ab = self.scales.view(float_type).view(blocks, groups, 2, ROWS).permute(2, 0, 3, 1).float()
        return u.reshape(n, k).contiguous(), ab[0].reshape(n, groups), ab[1].reshape(n, groups)

    def dense(self) -> torch.Tensor:
        """The weight (N, K) float32 as the kernel multiplies it (before the activations' quantisation)."""
        u, a, b = self.unpacked()
        n, k = u.shape
        if self.kind == SCALES_HALVES:
            halves = (u.float().view(n, -1, 2, GROUP // 2) - self.zero) * torch.stack((a, b), -1)[..., None]
            return halves.reshape(n, k)
        return (u.float().view(n, -1, GROUP) * a[..., None] + b[..., None]).reshape(n, k)

    def dense_bf16_t(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """`dense` rounded to bfloat16 and transposed (K, N), by the kernel's library (fast); into `out` where given,
        (K, ≥ N) columns of a wider matrix whose rows may lie further apart."""
        if out is None:
            out = torch.empty((self.in_features, self.out_features), dtype=torch.bfloat16)
        assert out.dtype == torch.bfloat16 and out.stride(1) == 1 and out.shape == (self.in_features, self.out_features)
        self._lib.q4q8_dequantize(ctypes.byref(_QWeight.of(self)), out.data_ptr(), out.stride(0), isa(),
                                  torch.get_num_threads())
        return out

    def rows(self, ids: torch.Tensor) -> "Q4Q8Weight":
        """The weight of output rows `ids` alone, in their order (a multiple of ROWS of them): a draft's head over
        its draft vocabulary."""
        u, a, b = (t[ids].numpy() for t in self.unpacked())
        return Q4Q8Weight.from_values(u, a, b, self.bits, self.kind, self.zero)

    @staticmethod
    def fits(out_features: int, in_features: int) -> bool:
        return out_features % ROWS == 0 and in_features % GROUP == 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in (torch.float32, torch.bfloat16):
            x = x.float()
        x = x.contiguous()
        rows = x.shape[0]
        out = torch.empty((rows, self.out_features), dtype=x.dtype)
        lib = self._lib
        scratch = _scratch_buffer(lib.q4q8_scratch_bytes(rows, self.in_features, self.out_features))
        lib.q4q8_linear(ctypes.byref(_QWeight.of(self)), x.data_ptr(), int(x.dtype == torch.bfloat16), rows,
                        out.data_ptr(), scratch.data_ptr(), isa(), torch.get_num_threads())
        return out


def fuse(weights: list["Q4Q8Weight"]) -> "Q4Q8Weight":
    """One weight for projections of the same input (q/k/v, gate/up) stored alike (`fusable`): blocks of 16 rows
    concatenate as they are."""
    first = weights[0]
    return Q4Q8Weight(torch.cat([w.blocks for w in weights]), torch.cat([w.scales for w in weights]), first.bits,
                      sum(w.out_features for w in weights), first.in_features, first.kind, first.zero)


def fusable(weights: list["Q4Q8Weight"]) -> bool:
    first = weights[0]
    return all((w.bits, w.kind, w.zero) == (first.bits, first.kind, first.zero) for w in weights)


class _QWeight(ctypes.Structure):
    _fields_ = [("blocks", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("bits", ctypes.c_int64),
                ("N", ctypes.c_int64), ("K", ctypes.c_int64), ("kind", ctypes.c_int64), ("zero", ctypes.c_int64)]

    @classmethod
    def of(cls, weight: Q4Q8Weight) -> "_QWeight":
        return cls(weight.blocks.data_ptr(), weight.scales.data_ptr(), weight.bits, weight.out_features,
                   weight.in_features, weight.kind, weight.zero)


class _Llama(ctypes.Structure):
    _fields_ = [("layers", ctypes.c_int64), ("hidden", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64), ("intermediate", ctypes.c_int64),
                ("eps", ctypes.c_float), ("qkv", ctypes.POINTER(_QWeight)), ("gate_up", ctypes.POINTER(_QWeight)),
                ("qkv_first", ctypes.POINTER(ctypes.c_int64)), ("gate_up_first", ctypes.POINTER(ctypes.c_int64)),
                ("o", ctypes.POINTER(_QWeight)), ("down", ctypes.POINTER(_QWeight)), ("qkv_bias", ctypes.c_void_p),
                ("attn_norm", ctypes.c_void_p), ("mlp_norm", ctypes.c_void_p), ("final_norm", ctypes.c_void_p),
                ("head", ctypes.POINTER(_QWeight)), ("q_norm", ctypes.c_void_p), ("k_norm", ctypes.c_void_p)]


def _product(x: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """x (rows, K) times a de-quantised weight (K, N) bfloat16, in float32 (contiguous)."""
    return torch.mm(x.to(torch.bfloat16), dense).float()


def _parts(per_layer: list) -> tuple[list[Q4Q8Weight], ctypes.Array]:
    """Each layer's weight or list of weights (side by side in the output) as one flat list and its layers'
    offsets into it."""
    flat, first = [], [0]
    for weights in per_layer:
        flat.extend(weights if isinstance(weights, (list, tuple)) else [weights])
        first.append(len(flat))
    return flat, (ctypes.c_int64 * len(first))(*first)


class LlamaForward:
    """A whole Llama-family forward on the kernel, in float32 (q4q8.c's llama_forward): one call per block of
    tokens instead of a few hundred torch ops, so a verification block's extra rows cost their arithmetic only.

    `layers` holds per layer the Q4Q8 weights (qkv, o, gate_up, down) and float32 norm weights (attn, mlp); qkv and
    gate_up may each be a list of weights whose outputs lie side by side (projections stored in different types);
    `qkv_bias`, where the model has one (Qwen2), is (layers, qkv outputs); `q_norm` and `k_norm`, where the model
    RMS-norms each head's q and k (Qwen3), are (layers, head_dim)."""

    def __init__(self, layers: list[tuple], final_norm: torch.Tensor, head: Q4Q8Weight, *, heads: int,
                 kv_heads: int, head_dim: int, eps: float, qkv_bias: torch.Tensor | None = None,
                 q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None):
        self._lib = _library()
        self.head = head
        qkv, o, gate_up, down, attn_norm, mlp_norm = zip(*layers)
        (qkv, qkv_first), (gate_up, gate_up_first) = _parts(qkv), _parts(gate_up)
        self._keep = [*qkv, *o, *gate_up, *down, head]  # the structs below point into these tensors
        self.attn_norm = torch.stack(attn_norm).float().contiguous()
        self.mlp_norm = torch.stack(mlp_norm).float().contiguous()
        self.final_norm = final_norm.float().contiguous()
        self.qkv_bias = None if qkv_bias is None else qkv_bias.float().contiguous()
        self.q_norm, self.k_norm = (None if n is None else n.float().contiguous() for n in (q_norm, k_norm))
        qkv_array, gate_up_array, o_array, down_array = [(_QWeight * len(ws))(*[_QWeight.of(w) for w in ws])
                                                         for ws in (qkv, gate_up, o, down)]
        self._head = _QWeight.of(head)
        self._arrays = (qkv_array, gate_up_array, o_array, down_array, qkv_first, gate_up_first)
        self.spec = _Llama(len(layers), qkv[0].in_features, heads, kv_heads, head_dim, down[0].in_features, eps,
                           qkv_array, gate_up_array, qkv_first, gate_up_first, o_array, down_array,
                           None if self.qkv_bias is None else self.qkv_bias.data_ptr(),
                           self.attn_norm.data_ptr(), self.mlp_norm.data_ptr(), self.final_norm.data_ptr(),
                           ctypes.pointer(self._head), *(None if n is None else n.data_ptr()
                                                         for n in (self.q_norm, self.k_norm)))
        self.hidden = qkv[0].in_features
        # per layer, for read_in: the projections' weights (each a list of parts side by side in the output), and
        # where they are de-quantised, one layer at a time (every layer's projections have the same shapes)
        self._projections = [[list(w) if isinstance(w, (list, tuple)) else [w] for w in layer[:4]] for layer in layers]
        self._dense: list[torch.Tensor] = []

    def read_in(self, x: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, keep: int, stop: threading.Event | None = None) -> torch.Tensor:
        """`__call__` for a prompt's many rows: each layer's projections de-quantised into bfloat16 for the block
        and multiplied by torch's matrix products (oneDNN, on AMX tiles where the CPU has them), as its attention;
        the norms, RoPE, cache writes and activation are the forward's own C code. A row's numbers are not the
        kernel's (its activations are not quantised to 8 bits) and may depend on the block's other rows: the
        caller reads a prompt in blocks fixed by the prompt alone (engine.decoding.caches). Once `stop` is set it
        raises ReadInStopped before the next layer: a block takes seconds, a layer a few hundredths of them; the
        positions it wrote lie past the cache's length, which the caller advances only after the block."""
        assert k.dtype == v.dtype == KV_DTYPE
        x = x.to(torch.float32, copy=True).contiguous()
        rows, capacity, level = x.shape[0], v.shape[2], isa()
        lib, spec, hidden = self._lib, self.spec, self.hidden
        heads, kv_heads, head_dim, end = spec.heads, spec.kv_heads, spec.head_dim, start + rows
        h = torch.empty((rows, hidden))
        act = torch.empty((rows, spec.intermediate))
        mask = torch.ones(rows, end, dtype=torch.bool).tril(start)  # row r sees positions up to start + r
        for layer in range(spec.layers):
            if stop is not None and stop.is_set():
                raise ReadInStopped
            qkv, o, gate_up, down = self._dense_layer(layer)
            lib.llama_rms_norm(x.data_ptr(), self.attn_norm[layer].data_ptr(), rows, hidden, spec.eps, h.data_ptr(),
                               level)
            projected = _product(h, qkv)
            lib.llama_place(ctypes.byref(spec), layer, projected.data_ptr(), rows, start, k.data_ptr(), v.data_ptr(),
                            capacity, cos.data_ptr(), sin.data_ptr(), level)
            queries = projected[:, :heads * head_dim].view(rows, heads, head_dim).transpose(0, 1)
            keys = k[layer, :, :, :end].transpose(1, 2).contiguous()  # the cache holds them transposed
            attn = F.scaled_dot_product_attention(queries[None].to(KV_DTYPE), keys[None], v[layer, None, :, :end],
                                                  attn_mask=mask, scale=head_dim ** -0.5, enable_gqa=True)
            x += _product(attn[0].transpose(0, 1).reshape(rows, heads * head_dim), o)
            lib.llama_rms_norm(x.data_ptr(), self.mlp_norm[layer].data_ptr(), rows, hidden, spec.eps, h.data_ptr(),
                               level)
            projected = _product(h, gate_up)
            lib.llama_silu_mul(projected.data_ptr(), rows, spec.intermediate, act.data_ptr(), level)
            x += _product(act, down)
        last = x[rows - keep:].contiguous()
        lib.llama_rms_norm(last.data_ptr(), self.final_norm.data_ptr(), keep, hidden, spec.eps, last.data_ptr(), level)
        return self.head(last)

    def _dense_layer(self, layer: int) -> list[torch.Tensor]:
        """Layer `layer`'s projections de-quantised and transposed (K, N) into bfloat16, in buffers every layer
        reuses."""
        if not self._dense:
            self._dense = [torch.empty((parts[0].in_features, sum(p.out_features for p in parts)),
                                       dtype=torch.bfloat16) for parts in self._projections[0]]
        for weight, parts in zip(self._dense, self._projections[layer]):
            column = 0
            for part in parts:
                part.dense_bf16_t(weight[:, column:column + part.out_features])
                column += part.out_features
        return self._dense

    def __call__(self, x: torch.Tensor, start: int, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, keep: int) -> torch.Tensor:
        """Logits (keep, vocab) float32 of the last `keep` rows of x (rows, hidden), the embeddings of tokens at
        positions start..; their keys are written into k (layers, kv_heads, head_dim, capacity), their values into
        v (layers, kv_heads, capacity, head_dim), both KV_DTYPE."""
        assert k.dtype == v.dtype == KV_DTYPE
        x = x.to(torch.float32, copy=True).contiguous()  # the forward changes it in place
        rows, capacity, threads = x.shape[0], v.shape[2], torch.get_num_threads()
        logits = torch.empty((keep, self.head.out_features), dtype=torch.float32)
        lib = self._lib
        scratch = _scratch_buffer(lib.llama_scratch_bytes(ctypes.byref(self.spec), rows, capacity))
        lib.llama_forward(ctypes.byref(self.spec), x.data_ptr(), rows, start, k.data_ptr(), v.data_ptr(), capacity,
                          cos.data_ptr(), sin.data_ptr(), keep, logits.data_ptr(), scratch.data_ptr(), isa(), threads)
        return logits


if __name__ == "__main__":  # `make` builds the library at set-up: python -m engine.kernels.q4q8
    print(f"q4q8: {build()} ({isa_name()} level)" if available() else "q4q8: not built (see above)")
