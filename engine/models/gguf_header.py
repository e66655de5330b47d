"""A GGUF file's header, read once for all that read GGUFs: the library's records (engine.models.library: metadata,
tokenizer fingerprint, parameters) and the native loader's tensors (engine.models.gguf_native: where each tensor's
data lies).

gguf.GGUFReader parses every metadata value into numpy views first (~4 s for SmolLM2's 100k tokenizer strings);
this walks over the arrays instead, keeping scalars and strings, and of the arrays only a fingerprint of the tokens.
Every count and length the header claims is checked against the file's size before it is used, so a damaged header
raises Damaged (Truncated where it reads on past the file's end; struct.error where a fixed-size number itself is
cut off) and nothing of the claimed size is allocated.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from gguf import GGUF_DEFAULT_ALIGNMENT, GGUFValueType

MAGIC = 0x46554747  # "GGUF", little-endian
_SCALAR_FORMATS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
                   GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
                   GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
                   GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}
_U64 = struct.Struct("<Q")


class Damaged(ValueError):
    """The header claims something the file does not hold; the message says what."""


class Truncated(Damaged):
    """The header reads on past the file's end: a download or copy that stopped early."""


class NotGGUF(Damaged):
    """The file is no GGUF this reader reads: another format, or a GGUF version before 2."""


@dataclass(frozen=True)
class Header:
    fields: dict  # the metadata's scalars and strings by key (arrays are walked over, not kept)
    tokens: tuple[int, str] | None  # tokenizer.ggml.tokens: their count and a sha-256 of them as stored, in id order
    tensors: list[tuple[str, int, list[int], int]]  # (name, type number, shape, offset from data_start) each
    data_start: int  # where the tensors' data begins


def read_header(buffer, size: int) -> Header:
    """The header of the GGUF in `buffer` (a memoryview or mmap of the file's `size` bytes)."""
    magic, version, n_tensors, n_fields = struct.unpack_from("<IIQQ", buffer, 0)
    if magic != MAGIC:
        raise NotGGUF("not a GGUF file (it does not start with 'GGUF')")
    if version < 2:
        raise NotGGUF(f"a GGUF file of version {version}; version 2 or later is needed")
    # the smallest a field (key, type, value) and a tensor entry (name, 1 dimension, type, offset) can be
    if n_fields > size // 13 or n_tensors > size // 32:
        raise Truncated(f"its header claims {n_tensors} tensors and {n_fields} metadata fields, more than its "
                        f"{size:,} bytes hold")
    at = 24

    def within(end: int, what: str) -> int:
        if end > size:
            raise Truncated(f"its header alone reads on to byte {end:,} ({what}), past the file's {size:,} bytes")
        return end

    def string(at: int) -> tuple[str, int]:
        end = within(at + 8 + _U64.unpack_from(buffer, at)[0], "a string")
        try:
            return bytes(buffer[at + 8: end]).decode("utf-8"), end
        except UnicodeDecodeError as exc:
            raise Damaged(f"the string at byte {at:,} is not UTF-8: {exc}") from None

    def skip_strings(at: int, count: int) -> int:
        within(at + 8 * count, "an array of strings")  # each is at least its length
        unpack = _U64.unpack_from
        for _ in range(count):
            at += 8 + unpack(buffer, at)[0]
        return within(at, "an array of strings")

    def skip_array(at: int) -> tuple[int, int, int]:
        """(item type, item count, end) of the array whose type and count start at `at`."""
        item, count = struct.unpack_from("<IQ", buffer, at)
        start = at + 12
        if item in _SCALAR_FORMATS:
            return item, count, within(start + count * struct.calcsize(_SCALAR_FORMATS[item]), "an array")
        if item == GGUFValueType.STRING:
            return item, count, skip_strings(start, count)
        if item == GGUFValueType.ARRAY:  # arrays of arrays: walked, none is read
            end = start
            for _ in range(count):
                end = skip_array(end)[2]
            return item, count, end
        raise Damaged(f"unknown metadata array type {item} at byte {at}")

    fields: dict = {}
    tokens = None
    for _ in range(n_fields):
        key, at = string(at)
        (kind,) = struct.unpack_from("<I", buffer, at)
        at += 4
        if kind in _SCALAR_FORMATS:
            (fields[key],) = struct.unpack_from(_SCALAR_FORMATS[kind], buffer, within(at, key))
            at += struct.calcsize(_SCALAR_FORMATS[kind])
        elif kind == GGUFValueType.STRING:
            fields[key], at = string(at)
        elif kind == GGUFValueType.ARRAY:
            item, count, end = skip_array(at)
            if key == "tokenizer.ggml.tokens" and item == GGUFValueType.STRING:
                # the strings as stored (each its length then its bytes) are the tokens in id order, exactly
                tokens = (count, hashlib.sha256(buffer[at + 12: end]).hexdigest())
            at = end
        else:
            raise Damaged(f"unknown metadata type {kind} of {key!r}")
    tensors = []
    for _ in range(n_tensors):
        name, at = string(at)
        (n_dims,) = struct.unpack_from("<I", buffer, at)
        if not 1 <= n_dims <= 4:
            raise Damaged(f"tensor {name!r} has {n_dims} dimensions")
        shape = list(struct.unpack_from(f"<{n_dims}Q", buffer, at + 4))
        qtype, offset = struct.unpack_from("<IQ", buffer, at + 4 + 8 * n_dims)
        at += 4 + 8 * n_dims + 12
        tensors.append((name, qtype, shape, offset))
    alignment = fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise Damaged(f"general.alignment is {alignment!r}")
    return Header(fields, tokens, tensors, -(-at // alignment) * alignment)
