"""GGUF weights at their native precision: the file's blocks multiplied as they are, on our 4/8-bit × Q8 kernel
(engine.kernels.q4q8: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) or, without it, torch's CPU int4 kernel
(the 4-bit types alone).

Each block type is unpacked into the kernel's values u and per-group scales exactly (`kernel_values`, tested
against gguf's de-quantisation): 5- and 6-bit values are stored as bytes, the K-quants' scales d·sc and dmin·mn
as float32 (exact: an fp16 times a 6-bit integer), Q6_K's 16-input sub-blocks as half-group scales.

`torch._weight_int4pack_mm_for_cpu` multiplies by 4-bit weights q stored in groups of 32 along the input, each
group with a scale s and a zero z, de-quantising as (q − 8)·s + z (an fma in float32). The GGUF block types map
onto it exactly: Q4_0 (w = d·(q − 8)) is s = d, z = 0; Q4_1 (w = d·q + m) is s = d, z = m + 8d; Q4_K's 32-weight
sub-blocks (w = d·sc·q − dmin·mn) are s = d·sc, z = 8s − dmin·mn. Where the kernel is fast (bfloat16 activations)
it takes s and z in bfloat16: that rounding is the one difference from the file's values (docs/gguf-native.md).

A Q8_0 LM head (SmolLM2's tied embeddings) also goes through the int4 kernel, exactly: q + 128 = 16h + l with
nibbles h, l, so w = d·q = (h − 8)·16d + (l − 8)·d + 8d is two int4 groups over the input fed twice.
Embedding rows are de-quantised from the file's own blocks when looked up (a handful per step), so no dense
table is kept. The model is an ordinary transformers model whose projections are `Int4Linear` modules; the fast
forward (`fast_llama`) calls the same kernels.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import Q4_K, dequantize
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from engine.kernels import q4q8
from engine.models import kept
from engine.models.gguf_header import Header, NotGGUF, read_header
from engine.phases import announce

GROUP = 32  # weights per Q4_0 / Q4_1 block and per Q4_K sub-block: the kernel's group size
# The kernel packs rows in blocks of 64 (AVX-512) or 32 (AVX2, scalar): packed weights whose row counts are
# multiples of 64 can be concatenated as they are.
ROW_BLOCK = 64
PACK_ROWS = 4096  # rows packed at a time: the kernel's packer wants int32 nibbles, 8x the bytes of the result
Q = GGMLQuantizationType
INT4_TYPES = {Q.Q4_0, Q.Q4_1, Q.Q4_K}  # what torch's int4 kernel takes
KERNEL_TYPES = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K}  # what ours takes (kernel_values)
BIASES = ("attn_q", "attn_k", "attn_v")  # qwen2's, added where a file has them
PROJECTIONS = {  # GGUF name in block i -> (module path in a transformers decoder layer)
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
FUSED_PROJECTIONS = {"attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",  # phi3's
                     "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",  # those a file has
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
GEMMA_NORMS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}


@dataclass(frozen=True)
class Layout:
    """How an architecture's GGUF tensors map onto a transformers decoder layer."""

    projections: dict[str, str]
    norms: dict[str, str]
    permuted_qk: bool = False  # llama.cpp permutes q's and k's rows (llama's)
    norm_offset: float = 0.0  # the file holds each norm's multiplier, the module's weight plus this (gemma's 1 + w)


LAYOUTS = {
    "llama": Layout(PROJECTIONS, NORMS, permuted_qk=True),
    "qwen2": Layout(PROJECTIONS, NORMS),  # q/k/v biases
    "qwen3": Layout(PROJECTIONS, NORMS),  # each head's q and k RMS-normed
    "phi3": Layout(FUSED_PROJECTIONS, NORMS),  # q/k/v and gate/up kept fused
    "gemma3": Layout(PROJECTIONS, GEMMA_NORMS, norm_offset=1.0),  # norms after attention and MLP too
}
ARCHITECTURES = tuple(LAYOUTS)
# The kernels a native target's projections can run on: our Q4 × Q8 integer kernel (engine.kernels.q4q8) or
# torch's int4 one, `torch._weight_int4pack_mm_for_cpu`.
KERNELS = ("q4q8", "torch-int4")


class NotNative(ValueError):
    """This GGUF (or device, or dtype) cannot run on the int4 kernel; the message says why, in one line."""


class GGUFError(ValueError):
    """The file is not a readable GGUF (damaged, truncated, or no GGUF at all); the message names it, in one line."""


# ---------------------------------------------------------------------------------------------------- the file


@dataclass
class GGUFTensor:
    """One tensor of a GGUF, as gguf.GGUFReader gives it: `shape` lists the contiguous dimension first; `data` is
    (rows, bytes a row) uint8 for block types, float32 / float16 values otherwise."""

    name: str
    tensor_type: GGMLQuantizationType
    shape: list[int]
    data: np.ndarray


def read_tensors(path: Path) -> tuple[str, dict[str, GGUFTensor]]:
    """The architecture and the tensors (memory-mapped) of a GGUF, its header read by engine.models.gguf_header.
    Every count and offset the header claims is checked against the file's size before it is used, so a damaged or
    truncated file raises GGUFError (naming the file) and nothing of the claimed size is allocated. The last few
    files read are kept (a load checks the file, then reads it: ~0.4 s a walk over a 151k-token vocabulary)."""
    stat = path.stat()
    return _read_tensors(path.resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4)
def _read_tensors(path: Path, size: int, mtime_ns: int) -> tuple[str, dict[str, GGUFTensor]]:
    if size < 24:
        raise GGUFError(f"{path} is damaged or truncated: {size} bytes, fewer than a GGUF header")
    mapped = np.memmap(path, mode="r")
    try:
        header = read_header(memoryview(mapped), size)
        tensors = _tensors(header, mapped)
    except NotGGUF as exc:
        raise GGUFError(f"{path} is {exc}") from None
    except (struct.error, ValueError, KeyError) as exc:
        raise GGUFError(f"{path} is damaged or truncated: {exc}") from None
    return str(header.fields.get("general.architecture", "")), tensors


def _tensors(header: Header, mapped: np.memmap) -> dict[str, GGUFTensor]:
    """Each tensor's data as a view of the mapped file; a tensor whose data would end past the file raises
    ValueError."""
    size = len(mapped)
    tensors = {}
    for name, qtype, shape, start in header.tensors:
        qtype = GGMLQuantizationType(qtype)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        if shape[0] % block:
            raise ValueError(f"tensor {name!r} has rows of {shape[0]} values, not whole {qtype.name} blocks")
        rows = int(np.prod(shape[1:], dtype=object))  # exact: a damaged shape may overflow int64
        row_bytes = shape[0] // block * block_bytes
        end = header.data_start + start + rows * row_bytes
        if end > size:
            raise ValueError(f"tensor {name!r} ends at byte {end} of a {size}-byte file")
        data = mapped[header.data_start + start: end].reshape(rows, row_bytes)
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            data = data.view(np.float32 if qtype == GGMLQuantizationType.F32 else np.float16).reshape(shape[::-1])
        tensors[name] = GGUFTensor(name, qtype, shape, data)
    return tensors


# ---------------------------------------------------------------------------------------------------- blocks


def q4_values(raw: np.ndarray, qtype: GGMLQuantizationType, rows: int, cols: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values u (rows, cols) uint8 in 0..15 and per-32 scales d and offsets m (rows, cols / 32) float32 with
    d·u + m equal to gguf's de-quantisation of `raw` (the tensor's bytes, one row of blocks per row)."""
    if qtype == GGMLQuantizationType.Q4_K:
        blocks = raw.reshape(-1, 144)  # d, dmin (fp16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
        sc, mn = Q4_K.get_scale_min(blocks[:, 4:16])
        qs = blocks[:, 16:].reshape(-1, 4, 1, 32)  # 4 chunks of 64: low nibbles first, then high
        nibbles = np.concatenate((qs & 0x0F, qs >> 4), axis=2)  # (blocks, 4, 2, 32): sub-block 2c, 2c + 1
        scales = d * sc.astype(np.float32)
        offsets = -(dmin * mn.astype(np.float32))
    else:
        size = 18 if qtype == GGMLQuantizationType.Q4_0 else 20
        blocks = raw.reshape(-1, size)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, size - 16:]
        nibbles = np.concatenate((qs & 0x0F, qs >> 4), axis=1)  # weights 0-15 low, 16-31 high
        scales = d
        if qtype == GGMLQuantizationType.Q4_0:
            offsets = -8 * d
        else:
            offsets = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    groups = cols // GROUP
    return nibbles.reshape(rows, cols), scales.reshape(rows, groups), offsets.reshape(rows, groups)


def int4_groups(raw: np.ndarray, qtype: GGMLQuantizationType, rows: int, cols: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`q4_values` as torch's int4 kernel takes them: nibbles q, scales s and zeros z with (q − 8)·s + z = d·u + m."""
    nibbles, scales, offsets = q4_values(raw, qtype, rows, cols)
    return nibbles, scales, offsets + 8 * scales


def q8_0_values(raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0 (w = d·q, q int8) as d·u + m with u = q + 128 in 0..255 and m = −128·d."""
    blocks = raw.reshape(rows, cols // GROUP, 34)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)[..., 0]  # (rows, groups)
    values = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8).reshape(rows, cols)
    return values, d, -128 * d


def _halves(raw: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Q5_0 / Q5_1 blocks' 5-bit values (blocks, 32) and the blocks (blocks, size): weight j's low four bits are
    nibble j % 16 of qs (low nibbles first), its fifth bit is bit j of the 32-bit qh."""
    blocks = raw.reshape(-1, size)
    qs, qh = blocks[:, size - 16:], blocks[:, size - 20:size - 16].copy().view(np.uint32)
    low = np.concatenate((qs & 0x0F, qs >> 4), axis=1)
    high = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    return low | (high << 4), blocks


def _fp16(column: np.ndarray) -> np.ndarray:
    return column.copy().view(np.float16).astype(np.float32)[:, 0]


def kernel_values(raw: np.ndarray, qtype: GGMLQuantizationType, rows: int, cols: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """A tensor's blocks (`raw`: one row of blocks per row) as q4q8's weight: values u (rows, cols) uint8, two
    scale arrays a, b (rows, cols / 32) float32, bits, scale kind and zero, with a·u + b (or, for SCALES_HALVES,
    a_h·(u − zero)) equal to gguf's de-quantisation."""
    groups = cols // GROUP
    if qtype in (Q.Q4_0, Q.Q4_1, Q.Q4_K):
        kind = q4q8.SCALES_F32 if qtype == Q.Q4_K else q4q8.SCALES_F16
        return (*q4_values(raw, qtype, rows, cols), 4, kind, 0)
    if qtype == Q.Q8_0:
        return (*q8_0_values(raw, rows, cols), 8, q4q8.SCALES_F16, 0)
    if qtype in (Q.Q5_0, Q.Q5_1):
        values, blocks = _halves(raw, 22 if qtype == Q.Q5_0 else 24)
        d = _fp16(blocks[:, 0:2])
        m = -16 * d if qtype == Q.Q5_0 else _fp16(blocks[:, 2:4])
        return values.reshape(rows, cols), d.reshape(rows, groups), m.reshape(rows, groups), 8, q4q8.SCALES_F16, 0
    if qtype == Q.Q5_K:
        blocks = raw.reshape(-1, 176)  # d, dmin, 12 bytes of 6-bit scales and mins, 32 of fifth bits, 128 of nibbles
        sc, mn = Q4_K.get_scale_min(blocks[:, 4:16])
        qh, qs = blocks[:, 16:48].reshape(-1, 1, 32), blocks[:, 48:].reshape(-1, 4, 1, 32)
        low = np.concatenate((qs & 0x0F, qs >> 4), axis=2).reshape(-1, 8, 32)  # sub-block 2c, 2c + 1 of chunk c
        high = (qh >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # sub-block i: bit i
        a = _fp16(blocks[:, 0:2])[:, None] * sc.astype(np.float32)
        b = -(_fp16(blocks[:, 2:4])[:, None] * mn.astype(np.float32))
        values = (low | (high << 4)).reshape(rows, cols)
        return values, a.reshape(rows, groups), b.reshape(rows, groups), 8, q4q8.SCALES_F32, 0
    if qtype == Q.Q6_K:
        blocks = raw.reshape(-1, 210)  # 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, d
        ql, qh = blocks[:, :128].reshape(-1, 2, 1, 64), blocks[:, 128:192].reshape(-1, 2, 1, 32)
        low = np.concatenate((ql & 0x0F, ql >> 4), axis=2).reshape(-1, 8, 32)
        high = ((qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3).reshape(-1, 8, 32)
        scales = _fp16(blocks[:, 208:210])[:, None] * blocks[:, 192:208].view(np.int8).astype(np.float32)
        halves = scales.reshape(rows, groups, 2)  # the 16-input sub-blocks 2g, 2g + 1 of group g
        values = (low | (high << 4)).reshape(rows, cols)
        return values, halves[..., 0].copy(), halves[..., 1].copy(), 8, q4q8.SCALES_HALVES, 32
    raise NotNative(f"{qtype.name} blocks have no kernel layout")


def q8_0_as_int4_groups(raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0 (w = d·q, q int8) as int4 groups over the input fed twice: (rows, 2·cols) nibbles, high ones first."""
    blocks = raw.reshape(rows, cols // GROUP, 34)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)[..., 0]  # (rows, groups)
    offset = blocks[..., 2:].view(np.int8).astype(np.int16) + 128  # 0..255
    high, low = (offset >> 4).astype(np.uint8), (offset & 0x0F).astype(np.uint8)
    nibbles = np.concatenate((high.reshape(rows, cols), low.reshape(rows, cols)), axis=1)
    scales = np.concatenate((16 * d, d), axis=1)
    zeros = np.concatenate((np.zeros_like(d), 8 * d), axis=1)
    return nibbles, scales, zeros


def pack(nibbles: np.ndarray, scales: np.ndarray, zeros: np.ndarray, dtype: torch.dtype
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's layout: packed weights (rows, cols / 2) uint8 and scales_and_zeros (cols / 32, rows, 2)."""
    chunks = [torch._convert_weight_to_int4pack_for_cpu(torch.from_numpy(nibbles[i:i + PACK_ROWS].astype(np.int32)), 1)
              for i in range(0, len(nibbles), PACK_ROWS)]
    scales_and_zeros = torch.from_numpy(np.stack((scales, zeros), -1).transpose(1, 0, 2).copy()).to(dtype)
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks), scales_and_zeros


# ---------------------------------------------------------------------------------------------------- modules


class Int4Weight:
    """x ↦ x @ wᵀ on torch's int4 kernel: the callable `fast_llama` uses, like its Int8Weight."""

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, input_copies: int = 1):
        self.packed, self.scales_and_zeros, self.input_copies = packed, scales_and_zeros, input_copies

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_copies > 1:
            x = x.repeat(1, self.input_copies)
        return torch._weight_int4pack_mm_for_cpu(x.contiguous(), self.packed, GROUP, self.scales_and_zeros)


class NativeLinear(torch.nn.Module):
    """A linear layer holding a GGUF's blocks; `native()` is the kernel's callable (x ↦ x @ wᵀ), to which
    `forward` adds the float32 `bias` where the model has one (set after construction, as Qwen2's q/k/v have)."""

    bias: torch.Tensor | None = None

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features

    @property
    def n_weights(self) -> int:
        return self.in_features * self.out_features

    def native(self):
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.native()(x.reshape(-1, self.in_features))
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class Int4Linear(NativeLinear):
    """Int4 groups on torch's kernel; its scales follow `model.to(dtype)` as buffers do."""

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor, in_features: int, input_copies: int = 1):
        super().__init__(in_features, packed.shape[0])
        self.input_copies = input_copies
        self.register_buffer("packed", packed)
        self.register_buffer("scales_and_zeros", scales_and_zeros)

    def native(self) -> Int4Weight:
        return Int4Weight(self.packed, self.scales_and_zeros, self.input_copies)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 groups of {GROUP}"


class Q4Q8Linear(NativeLinear):
    """The file's 4- or 8-bit values on the Q4 × Q8 kernel (engine.kernels.q4q8); its integer buffers, scales
    stored as integers included, are left alone by `model.to(dtype)`: the weights are the file's in any dtype.
    `compacted`: a draft's weight re-quantised to 4 bits as it loaded (`compact`), no longer the file's."""

    def __init__(self, weight: q4q8.Q4Q8Weight, compacted: bool = False):
        super().__init__(weight.in_features, weight.out_features)
        self.compacted = compacted
        self.bits, self.kind, self.zero = weight.bits, weight.kind, weight.zero
        self.register_buffer("blocks", weight.blocks)
        self.register_buffer("scales", weight.scales)

    def native(self) -> q4q8.Q4Q8Weight:
        return q4q8.Q4Q8Weight(self.blocks, self.scales, self.bits, self.out_features, self.in_features, self.kind,
                               self.zero)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, {self.bits}-bit values × "
                f"Q8 activations in groups of {GROUP}")


def fused(modules: list[NativeLinear]):
    """One kernel for projections of the same input (q/k/v, gate/up), or None where their blocks cannot be
    concatenated. The modules' buffers become views of it, so nothing is stored twice."""
    kernels = [m.native() for m in modules]
    if all(isinstance(m, Q4Q8Linear) for m in modules) and q4q8.fusable(kernels):
        weight = q4q8.fuse(kernels)
        blocks, scales = 0, 0
        for m in modules:
            m.blocks = weight.blocks[blocks:blocks + m.blocks.numel()]
            m.scales = weight.scales[scales:scales + m.scales.numel()]
            blocks, scales = blocks + m.blocks.numel(), scales + m.scales.numel()
        return weight
    if any(not isinstance(m, Int4Linear) or m.out_features % ROW_BLOCK or m.input_copies != 1 for m in modules):
        return None
    packed = torch.cat([m.packed for m in modules])
    scales_and_zeros = torch.cat([m.scales_and_zeros for m in modules], 1)
    start = 0
    for m in modules:
        m.packed = packed[start:start + m.out_features]
        start += m.out_features
    return Int4Weight(packed, scales_and_zeros)


class GGUFEmbedding(torch.nn.Module):
    """Token embeddings kept as the file's blocks; the rows looked up are de-quantised exactly: Q8_0 (SmolLM2's)
    in torch, d·q, ~10 µs a step; other types with gguf's numpy de-quantiser, ~45 µs."""

    def __init__(self, raw: np.ndarray, qtype: GGMLQuantizationType, dim: int, dtype: torch.dtype,
                 scale: float | None = None):
        super().__init__()
        self.qtype, self.num_embeddings, self.embedding_dim, self.scale = qtype, raw.shape[0], dim, scale
        if qtype == GGMLQuantizationType.Q8_0:
            blocks = raw.reshape(raw.shape[0], dim // GROUP, 34)
            self.values = torch.from_numpy(blocks[..., 2:].copy().view(np.int8))  # (vocab, groups, 32)
            self.scales = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16).astype(np.float32))
        else:
            self.raw = torch.from_numpy(raw.copy())  # (vocab, bytes per row)
        self.register_buffer("dtype_marker", torch.empty(0, dtype=dtype))  # follows model.to(dtype)

    @property
    def n_weights(self) -> int:
        return self.num_embeddings * self.embedding_dim

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows of `ids` (flattened) in float32, exactly as the file de-quantises them."""
        flat = ids.reshape(-1).cpu()
        if self.qtype == GGMLQuantizationType.Q8_0:
            rows = self.values[flat].float() * self.scales[flat]  # d·q: exact in float32, as gguf computes it
        else:
            rows = torch.from_numpy(dequantize(self.raw[flat].numpy(), self.qtype))
        return rows.reshape(len(flat), self.embedding_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.lookup(ids).to(self.dtype_marker.dtype)
        if self.scale is not None:  # as transformers' scaled embedding: the scale rounded to the dtype
            out = out * torch.tensor(self.scale).to(out.dtype)
        return out.reshape(*ids.shape, self.embedding_dim).to(self.dtype_marker.device)


# ---------------------------------------------------------------------------------------------------- loading


def _rows_to_hf(rows: int, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (as transformers' GGUF loader does) as an index over rows."""
    dim = rows // n_head // 2
    return np.arange(rows).reshape(n_head, dim, 2).swapaxes(2, 1).reshape(rows)


def _linear(tensor, dtype: torch.dtype, row_order: np.ndarray | None = None, kernel: str = "q4q8") -> NativeLinear:
    """The tensor on `kernel`; torch's int4 kernel where the Q4 × Q8 one cannot take its shape."""
    cols, rows = (int(n) for n in tensor.shape)  # GGUF lists the contiguous (input) dimension first
    raw = np.asarray(tensor.data).reshape(rows, -1)
    if kernel == "q4q8" and q4q8.available() and q4q8.Q4Q8Weight.fits(rows, cols) \
            and tensor.tensor_type in KERNEL_TYPES:
        values, a, b, bits, kind, zero = kernel_values(raw, tensor.tensor_type, rows, cols)
        if row_order is not None:
            values, a, b = values[row_order], a[row_order], b[row_order]
        return Q4Q8Linear(q4q8.Q4Q8Weight.from_values(values, a, b, bits, kind, zero))
    if tensor.tensor_type == GGMLQuantizationType.Q8_0:
        nibbles, scales, zeros = q8_0_as_int4_groups(raw, rows, cols)
        copies = 2
    else:
        nibbles, scales, zeros = int4_groups(raw, tensor.tensor_type, rows, cols)
        copies = 1
    if row_order is not None:
        nibbles, scales, zeros = nibbles[row_order], scales[row_order], zeros[row_order]
    packed, scales_and_zeros = pack(nibbles, scales, zeros, dtype)
    return Int4Linear(packed, scales_and_zeros, cols, copies)


def _set_norm(norm: torch.nn.Module, tensor, dtype: torch.dtype, offset: float = 0.0) -> None:
    """The norm's weight (the file's values less `offset`, Layout.norm_offset) in `dtype`, and the file's float32
    values, the multiplier, as `file_weight` (a plain attribute, which `model.to` leaves alone) for the Q4 × Q8
    forward, which runs in float32 whatever the dtype."""
    values = torch.from_numpy(np.array(tensor.data, dtype=np.float32))
    norm.weight = torch.nn.Parameter((values - offset if offset else values).to(dtype), requires_grad=False)
    norm.file_weight = values


def check(tensors: dict, architecture: str, device: torch.device, kernel: str = "q4q8") -> None:
    """Raise NotNative unless every projection can go to `kernel` (KERNELS) on `device`."""
    if device.type != "cpu":
        raise NotNative(f"native GGUF weights run on our CPU kernels, not on {device.type}")
    if architecture not in ARCHITECTURES:
        raise NotNative(f"native GGUF weights cover {', '.join(ARCHITECTURES)}, not {architecture}")
    if "rope_factors_long.weight" in tensors:
        raise NotNative("its rope is LongRoPE (rope_factors_long/short.weight), which the native forward does not "
                        "apply")
    ours = kernel == "q4q8" and q4q8.available()
    types = KERNEL_TYPES if ours else INT4_TYPES
    projections = LAYOUTS[architecture].projections
    for name, tensor in tensors.items():
        if name.startswith("blk.") and name.endswith(".weight") and name.split(".")[2] in projections \
                and tensor.tensor_type not in types:
            taken = ", ".join(sorted(t.name for t in types))
            raise NotNative(f"{name} is {tensor.tensor_type.name}; the {'q4q8' if ours else 'int4'} kernel takes "
                            f"{taken}")


def best_kernel(dtype: torch.dtype) -> str | None:
    """The kernel a native target runs fastest on here for `dtype` activations (KERNELS), or None where
    de-quantising into `dtype` is faster: the Q4 × Q8 kernel where it has a vector path (AVX-512 VNNI or AVX2),
    else torch's int4 kernel for bfloat16 (its float32 path is scalar code, docs/gguf-native.md)."""
    if q4q8.fast():
        return "q4q8"
    return "torch-int4" if dtype == torch.bfloat16 else None


def compact(weight: q4q8.Q4Q8Weight) -> q4q8.Q4Q8Weight:
    """A draft's weight stored in bytes (5-, 6- and 8-bit blocks) re-quantised to 4 bits: a draft step costs what
    its weights weigh, and verification keeps the output the target's whatever the draft proposes."""
    return q4q8.Q4Q8Weight.from_dense_4bit(weight.dense()) if weight.bits == 8 else weight


# ---------------------------------------------------------------------------------------------------- prepared

PREPARED_LAYOUT = 1  # the version of q4q8's packed layout and kernel_values' mapping that a prepared file holds


def prepared_path(path: Path, compacted: bool) -> Path:
    """Where the kernel's weights of a GGUF are kept once made (keyed on `_prepared_source`): unpacking and packing a
    1.5B model's blocks takes ~7 s, reading them back about one."""
    from engine.paths import cache_dir

    key = _prepared_source(path, compacted)
    return cache_dir() / "prepared" / f"{path.stem}{'-compact' if compacted else ''}-{key}.safetensors"


def _prepared_source(path: Path, compacted: bool) -> str:
    """What a prepared file is made from: the GGUF's version (its path, size and time), PREPARED_LAYOUT and
    whether it is compacted."""
    return kept.file_key(path, PREPARED_LAYOUT, compacted)


def _read_prepared(path: Path, compacted: bool) -> tuple[dict[str, q4q8.Q4Q8Weight], str | None]:
    """The weights kept prepared for the GGUF at `path` and None, or none and why those kept are not used: the
    file's seal (engine.models.kept) holds the checksum of its layout and of every tensor's bytes, checked as they
    are read."""
    file, source = prepared_path(path, compacted), _prepared_source(path, compacted)
    if not file.is_file():
        return {}, None
    try:
        with safe_open(file, "pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        layout_text = metadata.get("layout", "")
        why = kept.damage(metadata.get("seal"), source, {"layout": layout_text.encode(),
                                                           **{name: _bytes(t) for name, t in tensors.items()}})
        if why is None:
            return {name: q4q8.Q4Q8Weight(tensors[f"{name}:blocks"], tensors[f"{name}:scales"], *shape)
                    for name, shape in json.loads(layout_text).items()}, None
    except (OSError, SafetensorError) as exc:
        why = f"unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return {}, why


def _bytes(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(torch.uint8).numpy()


def _write_prepared(path: Path, compacted: bool, weights: dict[str, q4q8.Q4Q8Weight]) -> None:
    """Sealed with the checksums `_read_prepared` checks. Best effort (a full disk or a read-only cache leaves the
    next load to make them again)."""
    file, source = prepared_path(path, compacted), _prepared_source(path, compacted)
    layout = json.dumps({name: [w.bits, w.out_features, w.in_features, w.kind, w.zero] for name, w in weights.items()})
    tensors = {f"{name}:{part}": getattr(w, part).contiguous() for name, w in weights.items()
               for part in ("blocks", "scales")}
    sealed = kept.seal(source, {"layout": layout.encode(), **{name: _bytes(t) for name, t in tensors.items()}})
    partial = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(partial), metadata={"layout": layout, "seal": sealed})
        partial.replace(file)
    except OSError:
        partial.unlink(missing_ok=True)


def fallback_kernel() -> str:
    """The kernel for native weights asked for where none is fast: ours on its portable path, if it built."""
    return "q4q8" if q4q8.available() else "torch-int4"


def load(path: Path, config, dtype: torch.dtype, device: torch.device = torch.device("cpu"), kernel: str = "q4q8",
         compacted: bool = False):
    """A transformers model for `config` whose weights are read from the GGUF at `path` without de-quantising:
    projections (and the head) on `kernel` (KERNELS), embeddings as file blocks, norms in `dtype`. `compacted`
    (a draft's): weights kept in bytes on our kernel are re-quantised to 4 bits (`compact`). Our kernel's weights
    are kept prepared in the user's cache (`prepared_path`) and read from there on later loads."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    architecture, tensors = read_tensors(path)
    check(tensors, architecture, device, kernel)
    ours = kernel == "q4q8" and q4q8.available()
    prepared, damage = _read_prepared(path, compacted) if ours else ({}, None)
    if damage is not None:
        kept.say_damaged(prepared_path(path, compacted), damage, path)
    elif ours and not prepared:
        announce(f"specdec: preparing {path.name}'s weights for the kernel (once for this file)...")
    made: dict[str, q4q8.Q4Q8Weight] = {}

    def linear(tensor, row_order: np.ndarray | None = None) -> NativeLinear:
        if tensor.name in prepared:
            return Q4Q8Linear(prepared[tensor.name], compacted)
        module = _linear(tensor, dtype, row_order, kernel)
        if isinstance(module, Q4Q8Linear):
            weight = compact(module.native()) if compacted else module.native()
            made[tensor.name] = weight
            module = Q4Q8Linear(weight, compacted)
        return module

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    decoder = model.model
    decoder.rotary_emb = type(decoder.rotary_emb)(config=config)  # its inverse frequencies were built on meta
    rope_freqs = tensors.get("rope_freqs.weight")
    if rope_freqs is not None:  # Llama 3.1+: llama.cpp keeps the llama3 rope as a divisor of each frequency
        divisors = torch.from_numpy(np.array(rope_freqs.data, dtype=np.float32))
        decoder.rotary_emb.inv_freq = decoder.rotary_emb.inv_freq / divisors
        decoder.rotary_emb.original_inv_freq = decoder.rotary_emb.inv_freq.clone()
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    layout = LAYOUTS[architecture]
    for i, layer in enumerate(decoder.layers):
        for gguf_name, module_path in layout.projections.items():
            order = {"attn_q": heads, "attn_k": kv_heads}.get(gguf_name) if layout.permuted_qk else None
            tensor = tensors[f"blk.{i}.{gguf_name}.weight"]
            owner_name, attr = module_path.split(".")
            module = linear(tensor, None if order is None else _rows_to_hf(int(tensor.shape[1]), order))
            bias = tensors.get(f"blk.{i}.{gguf_name}.bias")
            if bias is not None:
                module.bias = torch.from_numpy(np.array(bias.data, dtype=np.float32))
            setattr(getattr(layer, owner_name), attr, module)
        for gguf_name, module_path in layout.norms.items():
            tensor = tensors.get(f"blk.{i}.{gguf_name}.weight")
            if tensor is not None:  # one the model has but the file lacks is named below
                _set_norm(layer.get_submodule(module_path), tensor, dtype, layout.norm_offset)
    _set_norm(decoder.norm, tensors["output_norm.weight"], dtype, layout.norm_offset)
    embed = tensors["token_embd.weight"]
    scale = getattr(decoder.embed_tokens, "scalar_embed_scale", None)  # gemma's √hidden
    decoder.embed_tokens = GGUFEmbedding(np.asarray(embed.data), embed.tensor_type, config.hidden_size, dtype, scale)
    head = tensors.get("output.weight", embed)
    if head.tensor_type in (KERNEL_TYPES if ours else INT4_TYPES | {Q.Q8_0}):
        model.lm_head = linear(head)
    else:  # F16, F32, other types: a dense head, de-quantised once
        weight = dequantize(np.asarray(head.data), head.tensor_type).reshape(int(head.shape[1]), -1)
        model.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=dtype)
        model.lm_head.weight = torch.nn.Parameter(torch.from_numpy(weight).to(dtype), requires_grad=False)
    if made:
        _write_prepared(path, compacted, {**prepared, **made})
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise NotNative(f"no GGUF tensor for {left[0]}")
    return model.eval().requires_grad_(False)
