"""The library of models on this machine (engine.models.library): records read from metadata alone, the stores
(LM Studio's folder, Ollama's manifests and blobs, the Hugging Face cache, llama.cpp's cache, added folders) built
here in tmp_path from small GGUFs written by the `gguf` package, damaged files listed with their reasons, the
tokenizer fingerprint judged as pairing.compare_tokenizers judges tokenizers, and `specdec models`."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, LlamaFileType
from safetensors.numpy import save_file

from app import cli
from engine.models import embedded, library, packaged
from engine.models.pairing import compare_tokenizers

# A tiny byte-pair vocabulary: specials, letters, and the merges' results
SPECIALS = ["<s>", "</s>", "<unk>"]
LETTERS = list("abcdefgh")
MERGED = ["ab", "cd", "abcd", "ef"]
TOKENS = SPECIALS + LETTERS + MERGED
MERGES = ["a b", "c d", "ab cd", "e f"]
HIDDEN = 32  # one Q8_0 block a row


def write_gguf(path: Path, architecture: str = "qwen2", *, tokens: list[str] | None = TOKENS, bos: int = 0,
               eos: int = 1, layers: int = 2, file_type: LlamaFileType = LlamaFileType.MOSTLY_Q8_0,
               general_type: str | None = None, split: tuple[int, int] | None = None,
               context: int | str = 4096) -> Path:
    """A small GGUF: a Q8_0 embedding and `layers` Q8_0 projections of HIDDEN columns, an F32 norm, the metadata
    a converter writes (context length, file type) and, unless `tokens` is None, a gpt2-style tokenizer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), architecture)
    if general_type:
        writer.add_type(general_type)
    if isinstance(context, str):  # as another writer, or a damaged header, leaves it
        writer.add_string(f"{architecture}.context_length", context)
    else:
        writer.add_context_length(context)
    writer.add_file_type(file_type)
    if split:
        writer.add_uint16("split.no", split[0] - 1)
        writer.add_uint16("split.count", split[1])
    if tokens is not None:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_merges(MERGES)
        writer.add_bos_token_id(bos)
        writer.add_eos_token_id(eos)
    rows = len(tokens or TOKENS)
    writer.add_tensor("token_embd.weight", np.zeros((rows, 34), np.uint8), raw_dtype=Q.Q8_0)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((HIDDEN, 34), np.uint8), raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def parameters(layers: int = 2, vocab: int = len(TOKENS)) -> int:
    return vocab * HIDDEN + layers * HIDDEN * HIDDEN + HIDDEN


def write_snapshot(folder: Path, tokens: list[str] = TOKENS, bos: str = "<s>", eos: str = "</s>") -> Path:
    """A safetensors snapshot: config.json, tokenizer.json / tokenizer_config.json saved by transformers, and one
    weights file."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = [tuple(m.split()) for m in MERGES if all(part in vocab for part in [*m.split(), m.replace(" ", "")])]
    backend = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos, unk_token="<unk>"
                            ).save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                                                    "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}))
    save_file({"model.embed_tokens.weight": np.zeros((len(tokens), HIDDEN), np.float16),
               "model.norm.weight": np.ones(HIDDEN, np.float16)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An empty machine: HOME in tmp_path, no store's environment variable, no embedded model."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPECDEC_HOME", str(home / ".cache" / "specdec-studio"))
    for name in ("OLLAMA_MODELS", "LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def not_installed():
        raise FileNotFoundError("not installed")

    monkeypatch.setattr(embedded, "gguf_path", not_installed)
    return home


def ollama_model(home: Path, name: str, tag: str, gguf: Path) -> Path:
    """Ollama's layout: the GGUF as blobs/sha256-<digest>, named by a manifest's model layer."""
    root = home / ".ollama" / "models"
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    blob = root / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        gguf.rename(blob)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:0", "size": 1},
        {"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}", "size": blob.stat().st_size}]}))
    return blob


OLLAMA_MODEL = "application/vnd.ollama.image.model"


def hub_file(home: Path, repo: str, filename: str, source: Path) -> Path:
    """The hub cache's layout: the file as a blob, the snapshot's name a symlink to it, refs/main the revision."""
    root = home / ".cache" / "huggingface" / "hub" / f"models--{repo.replace('/', '--')}"
    blob = root / "blobs" / hashlib.sha256(source.read_bytes()).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    source.rename(blob)
    link = root / "snapshots" / "0123abcd" / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text("0123abcd")
    return link


@pytest.fixture
def stores(machine, tmp_path):
    """LM Studio's folder (a model, its mmproj, a truncated and a random-bytes file), Ollama's store (one blob
    under two tags), the hub cache (a GGUF and a safetensors snapshot), llama.cpp's cache, and an added folder with
    a split file missing its third part and a link to the hub's GGUF."""
    scratch = tmp_path / "scratch"
    lm = machine / ".lmstudio" / "models" / "someone"
    write_gguf(lm / "Qwen-Tiny-GGUF" / "qwen-tiny-q8_0.gguf", layers=4)
    write_gguf(lm / "Qwen-Tiny-GGUF" / "mmproj-qwen-tiny-f16.gguf", "clip", tokens=None, general_type="mmproj")
    whole = write_gguf(scratch / "whole.gguf").read_bytes()
    (lm / "Cut-GGUF").mkdir(parents=True)
    (lm / "Cut-GGUF" / "cut-q8_0.gguf").write_bytes(whole[: len(whole) - 200])  # the tensor data's end is gone
    (lm / "Noise-GGUF").mkdir(parents=True)
    (lm / "Noise-GGUF" / "noise.gguf").write_bytes(np.random.default_rng(0).bytes(5000))
    ollama_model(machine, "llama-tiny", "latest", write_gguf(scratch / "llama.gguf", "llama", layers=3))
    ollama_model(machine, "llama-tiny", "q8", write_gguf(scratch / "llama2.gguf", "llama", layers=3))
    hub = hub_file(machine, "org/Phi-Tiny-GGUF", "phi-tiny-q4_k_m.gguf",
                   write_gguf(scratch / "phi.gguf", "phi3", layers=1, file_type=LlamaFileType.MOSTLY_Q4_K_M))
    write_snapshot(machine / ".cache" / "huggingface" / "hub" / "models--org--tiny-st" / "snapshots" / "r1")
    write_gguf(machine / ".cache" / "llama.cpp" / "org_Bert-GGUF_bert.gguf", "bert")
    added = tmp_path / "mine"
    write_gguf(added / "big-00001-of-00003.gguf", split=(1, 3))
    write_gguf(added / "big-00002-of-00003.gguf", tokens=None, split=(2, 3))
    (added / "phi-tiny-q4_k_m.gguf").symlink_to(hub.resolve())  # the hub's file, reached twice
    return added


def by_name(records: list[library.ModelRecord]) -> dict[str, library.ModelRecord]:
    names = [r.name for r in records]
    assert len(names) == len(set(names)), names
    return {r.name: r for r in records}


def test_every_store_lists_each_model_once_with_its_architecture_and_quantisation(stores):
    records = by_name(library.scan([stores]))
    assert {name: (r.store, r.architecture, r.quantisation, r.parameters) for name, r in records.items()
            if not r.problem} == {
        "qwen-tiny-q8_0": ("LM Studio", "qwen2", "Q8_0", parameters(4)),
        "org/Phi-Tiny-GGUF/phi-tiny-q4_k_m.gguf": ("Hugging Face", "phi3", "Q4_K_M", parameters(1)),
        "llama-tiny:latest": ("Ollama", "llama", "Q8_0", parameters(3)),
        "org/tiny-st": ("Hugging Face", "qwen2", "F16", len(TOKENS) * HIDDEN + HIDDEN),
    }
    tiny = records["qwen-tiny-q8_0"]
    assert (tiny.context_length, tiny.format, tiny.size) == (4096, "gguf", Path(tiny.path).stat().st_size)
    assert tiny.tokenizer.vocab_size == len(TOKENS) and (tiny.tokenizer.bos_id, tiny.tokenizer.eos_id) == (0, 1)
    assert records["org/tiny-st"].context_length == 2048


def test_unusable_files_are_listed_with_their_reasons(stores):
    problems = {name: r.problem for name, r in by_name(library.scan([stores])).items() if r.problem}
    assert problems.keys() == {"mmproj-qwen-tiny-f16", "cut-q8_0", "noise", "org_Bert-GGUF_bert", "big"}
    assert problems["mmproj-qwen-tiny-f16"].startswith("a vision projector (mmproj)")
    assert problems["cut-q8_0"].startswith("truncated: its tensor data ends at byte")
    assert problems["noise"] == "damaged: not a GGUF file (it does not start with 'GGUF')"
    assert problems["org_Bert-GGUF_bert"].startswith("unsupported architecture 'bert'")
    assert problems["big"] == "a split file's missing part: big-00003-of-00003.gguf of 3 parts is not beside it"


def test_a_file_cut_inside_its_header_is_called_truncated_not_a_crash(machine, tmp_path):
    whole = write_gguf(tmp_path / "whole.gguf").read_bytes()
    folder = tmp_path / "cut"
    folder.mkdir()
    for end in (10, 30, 60, 200):
        (folder / f"cut-{end}.gguf").write_bytes(whole[:end])
    problems = {r.name: r.problem for r in library.scan([folder])}
    assert problems.keys() == {"cut-10", "cut-30", "cut-60", "cut-200"}
    assert all(p.startswith("truncated: ") and p.endswith(library.FETCH_AGAIN) for p in problems.values()), problems
    assert problems["cut-200"].startswith("truncated: its header alone reads on to byte ")
    assert problems["cut-200"].split(", past the file's ")[1].startswith("200 bytes")


def test_a_file_whose_context_length_is_no_number_is_listed_damaged_beside_the_others(machine, tmp_path):
    """One bad GGUF in a store ("lots" for its context length) broke the whole scan with a ValueError: it is a
    record with its reason, and the file beside it is listed as ever."""
    folder = tmp_path / "store"
    write_gguf(folder / "lots.gguf", context="lots")
    write_gguf(folder / "fine.gguf")
    problems = {r.name: r.problem for r in library.scan([folder])}
    assert problems == {"lots": "damaged: its qwen2.context_length is 'lots', not a number", "fine": ""}


def test_a_whole_split_file_is_one_model_of_all_its_parts(machine, tmp_path):
    folder = tmp_path / "split"
    parts = [write_gguf(folder / f"big-{i:05d}-of-00002.gguf", tokens=TOKENS if i == 1 else None, split=(i, 2))
             for i in (1, 2)]
    (record,) = library.scan([folder])
    assert (record.name, record.path) == ("big", str(parts[0]))
    assert record.size == sum(p.stat().st_size for p in parts) and record.parameters == 2 * parameters()
    assert record.problem.startswith("split into 2 files")


def test_records_are_kept_and_read_again_when_the_file_changes(machine, tmp_path, monkeypatch):
    folder = tmp_path / "kept"
    path = write_gguf(folder / "m.gguf", layers=1)
    assert library.scan([folder])[0].parameters == parameters(1)
    reads = []
    read = library._gguf_facts
    monkeypatch.setattr(library, "_gguf_facts", lambda p: reads.append(p) or read(p))
    assert library.scan([folder])[0].parameters == parameters(1) and reads == []
    write_gguf(path, layers=3)
    os.utime(path, ns=(1, 1))  # a new version, whatever the clock's resolution
    assert library.scan([folder])[0].parameters == parameters(3) and reads == [path]


def test_drafts_are_the_models_whose_tokenizer_agrees_smaller_first(machine, tmp_path):
    folder = tmp_path / "drafts"
    write_gguf(folder / "target.gguf", layers=8)
    write_gguf(folder / "small.gguf", layers=1)
    write_gguf(folder / "medium.gguf", "llama", layers=4)
    write_gguf(folder / "big.gguf", layers=9)
    write_gguf(folder / "other-vocab.gguf", layers=1, tokens=TOKENS[:-1] + ["gh"])
    write_gguf(folder / "other-eos.gguf", layers=1, eos=2)
    (folder / "broken.gguf").write_bytes(b"GGUF")
    records = library.scan([folder])
    target = library.find("target", records)
    choices = [(c.model.name, c.reason) for c in library.compatible_drafts(target, records)]
    assert choices[:2] == [("small", ""), ("medium", "")]
    reasons = dict(choices[2:])
    assert reasons.keys() == {"big", "broken", "other-eos", "other-vocab"}
    assert reasons["other-vocab"] == f"vocabularies differ (both {len(TOKENS)} tokens, not the same ones)"
    assert reasons["other-eos"] == "eos_token differs (id 1 vs 2)"
    assert reasons["big"].startswith("not smaller than the target")
    assert reasons["broken"].startswith("truncated")


def test_a_model_is_found_by_a_part_of_its_name_where_one_name_alone_has_it(machine, tmp_path):
    folder = tmp_path / "models"
    for name in ("qwen-coder-1.5b", "qwen-coder-0.5b", "smol-135m"):
        write_gguf(folder / f"{name}.gguf", layers=1)
    records = library.scan([folder])
    assert library.find("smol", records).name == "smol-135m"
    assert library.find("1.5B", records).name == "qwen-coder-1.5b"
    with pytest.raises(ValueError, match="could be any of qwen-coder-0.5b, qwen-coder-1.5b"):
        library.find("qwen", records)
    with pytest.raises(ValueError, match="no model 'llama'"):
        library.find("llama", records)


VARIANTS = {  # a draft's tokenizer next to TOKENS with <s> / </s>: what changes, and whether it can still draft
    "same": (TOKENS, "<s>", "</s>"),
    "a token renamed": (TOKENS[:-1] + ["gh"], "<s>", "</s>"),
    "a token more": (TOKENS + ["gh"], "<s>", "</s>"),
    "two ids swapped": (TOKENS[:3] + [TOKENS[4], TOKENS[3]] + TOKENS[5:], "<s>", "</s>"),
    "another eos": (TOKENS, "<s>", "<unk>"),
    "another bos": (TOKENS, "<unk>", "</s>"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_fingerprint_judges_tokenizers_as_compare_tokenizers_does(machine, tmp_path, variant):
    """The same verdict as pairing.compare_tokenizers on the tokenizers transformers loads from the same files;
    and a GGUF's fingerprint equals a snapshot's of the same vocabulary."""
    from transformers import AutoTokenizer

    tokens, bos, eos = VARIANTS[variant]
    target_dir, draft_dir = write_snapshot(tmp_path / "target"), write_snapshot(tmp_path / "draft", tokens, bos, eos)
    target, draft = library.read(target_dir), library.read(draft_dir)
    problems = compare_tokenizers(AutoTokenizer.from_pretrained(target_dir), AutoTokenizer.from_pretrained(draft_dir))
    assert bool(target.tokenizer.disagreements(draft.tokenizer)) == bool(problems) == (variant != "same")
    gguf = library.read(write_gguf(tmp_path / "draft.gguf", tokens=tokens, bos=tokens.index(bos),
                                   eos=tokens.index(eos)))
    assert gguf.tokenizer == draft.tokenizer


REAL_TARGET, REAL_DRAFT = packaged.MODELS["qwen2.5-coder-1.5b"], packaged.MODELS["qwen2.5-coder-0.5b"]


@pytest.mark.skipif(not (REAL_TARGET.installed() and REAL_DRAFT.installed()), reason="the Qwen pair is not installed")
def test_the_qwen_coder_target_is_drafted_by_its_half_b_and_not_by_smollm2():
    target, draft, smollm2 = (library.read(p) for p in (REAL_TARGET.path, REAL_DRAFT.path, embedded.gguf_path()))
    assert (target.architecture, target.quantisation, target.context_length) == ("qwen2", "Q4_K_M", 32768)
    choices = {c.model.path: c.reason for c in library.compatible_drafts(target, [target, draft, smollm2])}
    assert choices[str(REAL_DRAFT.path)] == ""
    assert choices[str(embedded.gguf_path())] == "vocabularies differ (151936 vs 49152 tokens)"


def test_specdec_models_lists_the_library_and_the_drafts_for_a_target(stores, capsys):
    assert cli.main(["models", "--folder", str(stores)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("9 models found in ") and out[0].endswith(", 5 cannot be used")
    assert out[1].split() == ["name", "arch", "params", "quant", "size", "context", "store"]
    rows = {line.split()[0]: line for line in out[2:]}
    assert rows["qwen-tiny-q8_0"].split()[1:4] == ["qwen2", "4.61K", "Q8_0"] and "[x]" not in rows["qwen-tiny-q8_0"]
    assert "[x] truncated: its tensor data ends at byte" in rows["cut-q8_0"]

    assert cli.main(["models", "--folder", str(stores), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    assert len(listed) == 9 and {m["name"]: m["quantisation"] for m in listed}["llama-tiny:latest"] == "Q8_0"

    assert cli.main(["models", "--target", "qwen-tiny-q8_0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("drafts for qwen-tiny-q8_0 (") and out[0].endswith("): 3 of 7 models")
    assert [line.split()[0] for line in out[2:5]] == [
        "org/tiny-st", "org/Phi-Tiny-GGUF/phi-tiny-q4_k_m.gguf", "llama-tiny:latest"]


def test_specdec_models_says_in_one_line_when_the_target_is_unknown(machine, capsys):
    assert cli.main(["models", "--target", "nothing-here"]) == 1
    assert capsys.readouterr().err == ("specdec: error: no model 'nothing-here' on this machine; `specdec models` "
                                       "lists them\n")


def test_the_stores_environment_variables_move_them(machine, tmp_path, monkeypatch):
    """OLLAMA_MODELS, LLAMA_CACHE and HF_HUB_CACHE are read as those tools read them."""
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    write_gguf(tmp_path / "llama" / "org_Model-GGUF_model-q8_0.gguf")
    write_snapshot(tmp_path / "hub" / "models--org--st" / "snapshots" / "r1")
    manifest = tmp_path / "ollama" / "manifests" / "registry.ollama.ai" / "someone" / "m" / "v1"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": OLLAMA_MODEL, "digest": "sha256:feed"}]}))
    assert {(r.store, r.name, r.problem) for r in library.scan()} == {
        ("llama.cpp", "org_Model-GGUF_model-q8_0", ""), ("Hugging Face", "org/st", ""),
        ("Ollama", "registry.ollama.ai/someone/m:v1", "its model blob sha256-feed is missing")}


def test_a_hub_link_whose_blob_is_gone_is_listed_as_broken(machine, tmp_path):
    link = hub_file(machine, "org/Gone-GGUF", "gone-q8_0.gguf", write_gguf(tmp_path / "gone.gguf"))
    link.resolve().unlink()
    (record,) = library.scan()
    assert (record.name, record.store) == ("org/Gone-GGUF/gone-q8_0.gguf", "Hugging Face")
    assert record.problem.startswith("a broken link: ../../blobs/")


def test_a_vision_language_snapshot_is_read_from_its_text_half(machine, tmp_path):
    folder = write_snapshot(tmp_path / "vl" / "gemma-3-4b-it")
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "max_position_embeddings": 131072}}))
    (broken := write_snapshot(tmp_path / "vl" / "broken")).joinpath("config.json").write_text("[]")
    records = by_name(library.scan([tmp_path / "vl"]))
    vl = records["gemma-3-4b-it"]
    assert (vl.architecture, vl.context_length, vl.quantisation, vl.problem) == ("gemma3", 131072, "F16", "")
    assert records[broken.name].problem == "damaged: config.json is not a JSON object"


def test_a_linked_model_folder_is_walked_and_a_link_back_up_does_not_loop(machine, tmp_path):
    elsewhere = tmp_path / "other-disk" / "Llama-Tiny-GGUF"
    write_gguf(elsewhere / "llama-tiny-q8_0.gguf", "llama")
    (elsewhere / "up").symlink_to("..")
    lm = machine / ".lmstudio" / "models" / "someone"
    lm.mkdir(parents=True)
    (lm / "Llama-Tiny-GGUF").symlink_to(elsewhere)
    assert [(r.name, r.store, r.architecture) for r in library.scan()] == [("llama-tiny-q8_0", "LM Studio", "llama")]


def write_with_head(path: Path, head: str, *, tie_key: bool | None = None) -> Path:
    """A small GGUF whose `output.weight` is its embedding stored again as F16 (`head` "tied": what a converter
    writes for a model whose maker ties the two), or a matrix of its own ("untied"); `tie_key` writes
    qwen2.tie_word_embeddings."""
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    embedding = rng.standard_normal((len(TOKENS), HIDDEN)).astype(np.float32)
    output = embedding if head == "tied" else rng.standard_normal((len(TOKENS), HIDDEN)).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), "qwen2")
    writer.add_context_length(4096)
    if tie_key is not None:
        writer.add_bool("qwen2.tie_word_embeddings", tie_key)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(TOKENS)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_tensor("token_embd.weight", quantize(embedding, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", quantize(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32),
                                                      Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("output.weight", output.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_tied_output_matrix_stored_again_is_counted_once(machine, tmp_path):
    record = library.read(write_with_head(tmp_path / "tied.gguf", "tied"))
    assert record.parameters == len(TOKENS) * HIDDEN + HIDDEN * HIDDEN


def test_an_untied_output_matrix_is_counted_as_parameters_of_its_own(machine, tmp_path):
    record = library.read(write_with_head(tmp_path / "untied.gguf", "untied"))
    assert record.parameters == 2 * len(TOKENS) * HIDDEN + HIDDEN * HIDDEN


def test_a_tie_word_embeddings_key_is_taken_at_its_word(machine, tmp_path):
    record = library.read(write_with_head(tmp_path / "said.gguf", "untied", tie_key=True))
    assert record.parameters == len(TOKENS) * HIDDEN + HIDDEN * HIDDEN


def test_a_scan_keeps_the_name_each_store_lists_a_model_by(machine, tmp_path):
    blob = ollama_model(machine, "qwen2.5-coder", "0.5b", write_gguf(tmp_path / "scratch" / "coder.gguf"))
    outside = write_gguf(tmp_path / "elsewhere" / "never-scanned.gguf")
    assert library.listed_name(blob) == ""  # before any scan
    library.scan()
    assert library.listed_name(blob) == "qwen2.5-coder:0.5b"
    assert library.listed_name(outside) == ""
