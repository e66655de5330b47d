"""Exact at every instruction-set level this CPU executes: under each SPECDEC_ISA level, in a fresh interpreter
(torch takes the level as it loads), torch, oneDNN, oneMKL and both parts of the Q4×Q8 kernel run that level's code;
a native model gives a row the same bits alone and in a block on 1, 2 and 4 threads; greedy speculative decoding
equals greedy AR; and the native forward scores as transformers' de-quantised reading of the file. A level the CPU
cannot execute is skipped here and refused in one line when asked for."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.events import DecodeSettings
from engine.kernels import levels, q4q8
from engine.models import gguf_native
from tests.engine.models.test_gguf_architectures import (CLOSE, PROMPT, Q4_K_M, VOCAB, native_and_transformers,
                                                         write_model)
from tests.engine.models.test_gguf_native import tiny_gguf_pair
from tests.tiny import PROMPT as CHAT
from tests.tiny import cheap_draft_costs, tiny_model

ROOT = Path(__file__).resolve().parents[3]
TORCH_SWITCHES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")  # engine sets them

THREADS = (1, 2, 4)


def rows_alone_and_together(model) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Per thread count, the logits of 11 rows fed one at a time and as one block, after 69 positions: past a
    64-position score tile, more rows than the attention's blocks of 8."""
    runner = CachedModel(model, VOCAB)
    tokens = [3, 7, 11, 5, 9, 2, 8, 4, 6, 1] * 8
    prompt, block = tokens[:69], tokens[69:]
    runner.forward(prompt)
    threads, found = torch.get_num_threads(), {}
    try:
        for count in THREADS:
            torch.set_num_threads(count)
            runner.rollback(len(prompt))
            alone = torch.cat([runner.forward([t]) for t in block])
            runner.rollback(len(prompt))
            found[count] = alone, runner.forward(block, keep=len(block))
    finally:
        torch.set_num_threads(threads)
    return found


def greedy_replies(folder: Path) -> dict[str, list[int]]:
    """24 greedy tokens of a native tiny Llama (the kernel's one-call forward), AR and drafted by a random draft."""
    native, _ = tiny_gguf_pair(folder)
    draft = tiny_model(1, layers=1, vocab_size=native.vocab_size)
    decoder = Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft)
    decoder.set_costs(cheap_draft_costs())  # rounds draft whatever this machine's speed
    replies = {}
    for mode in ("ar", "spec"):
        events = list(decoder.generate(CHAT, DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=24,
                                                            lookup=False)))
        replies[mode] = [t.token_id for e in events for t in e.emitted]
        replies[f"{mode} drafts"] = sum(len(e.drafted) for e in events)
    return replies


def run(out: str) -> None:
    """What the fixture `level` runs in a fresh interpreter (`engine` imported first), saved to `out`."""
    results = {"aten": torch.backends.cpu.get_cpu_capability(), "onednn": os.environ.get("ONEDNN_MAX_CPU_ISA"),
               "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS"), "kernel": q4q8.isa_name(), "loops": q4q8.loops_name()}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "qwen3").mkdir()
        native, reference = native_and_transformers(folder / "qwen3", "qwen3", Q4_K_M)
        assert CachedModel(native, VOCAB).cache.native is not None  # the kernel's one-call forward
        results["native"] = CachedModel(native, VOCAB).forward(PROMPT, keep=len(PROMPT))
        results["transformers"] = reference(input_ids=torch.tensor([PROMPT])).logits[0]
        results["rows qwen3"] = rows_alone_and_together(native)
        (folder / "gemma3").mkdir()
        write_model(folder / "gemma3" / "m.gguf", "gemma3", Q4_K_M)
        config = AutoConfig.from_pretrained(folder / "gemma3", gguf_file="m.gguf")
        gemma3 = gguf_native.load(folder / "gemma3" / "m.gguf", config, torch.float32)  # fast_llama's torch forward
        results["rows gemma3"] = rows_alone_and_together(gemma3)
        (folder / "llama").mkdir()
        results["greedy"] = greedy_replies(folder / "llama")
    torch.save(results, out)


@pytest.fixture(scope="module", params=list(levels.LEVELS), ids=list(levels.LEVELS))
def level(request, tmp_path_factory) -> tuple[str, dict]:
    """A level's name and what `run` found under it, in a fresh interpreter with SPECDEC_ISA set to it."""
    name = request.param
    if not q4q8.available():
        pytest.skip("no C compiler for the kernel")
    if name not in q4q8.executable_levels():
        pytest.skip(f"this CPU cannot execute {name} (it executes {', '.join(q4q8.executable_levels())})")
    folder = tmp_path_factory.mktemp(name)
    env = {key: value for key, value in os.environ.items() if key not in TORCH_SWITCHES}
    env |= {levels.SWITCH: name, "SPECDEC_CACHE_DIR": str(folder / "cache")}
    script = f"import engine; from {__name__} import run; run({str(folder / 'found.pt')!r})"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return name, torch.load(folder / "found.pt")


def test_a_level_runs_torch_onednn_mkl_and_both_kernel_parts_at_that_level(level):
    name, found = level
    assert found["aten"] == levels.LEVELS[name].aten.upper()
    assert (found["onednn"], found["mkl"]) == (levels.LEVELS[name].onednn, levels.LEVELS[name].mkl)
    assert found["kernel"] == name  # the matrix paths
    assert found["loops"] == name  # the forward's attention, norms and activation: their copy says which it is


@pytest.mark.parametrize("architecture", ["qwen3", "gemma3"])  # the kernel's one-call forward; fast_llama's on torch
def test_a_row_is_the_same_bits_alone_and_in_a_block_on_1_2_4_threads(level, architecture):
    _, found = level
    for count, (alone, together) in found[f"rows {architecture}"].items():
        assert torch.equal(together, alone), f"{count} threads"


def test_greedy_speculative_decoding_equals_greedy_ar(level):
    _, found = level
    replies = found["greedy"]
    assert replies["spec drafts"] > 0 and len(replies["ar"]) == 24
    assert replies["spec"] == replies["ar"]


def test_the_native_forward_scores_as_transformers_reads_the_file(level):
    _, found = level
    native, expected = found["native"], found["transformers"]
    assert (native - expected).abs().max() < CLOSE * (expected.max() - expected.min())


def test_a_level_that_is_no_level_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(levels.SWITCH, "avx3")
    with pytest.raises(ValueError, match="SPECDEC_ISA=avx3 is no level; the levels are avx512, avx2, portable") as e:
        levels.forced()
    assert "\n" not in str(e.value)


def test_a_level_the_cpu_lacks_is_refused_before_torch_would_run_it(monkeypatch):
    monkeypatch.setattr(levels, "cpu_flags", lambda: frozenset({"sse4_1", "avx2", "fma", "f16c"}))  # an AVX2 CPU
    monkeypatch.setenv(levels.SWITCH, "avx512")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    levels.force_torch()  # at import: torch is left at the CPU's best, and the refusal waits for a command
    assert "ATEN_CPU_CAPABILITY" not in os.environ
    with pytest.raises(ValueError, match="cannot execute that level") as e:
        levels.forced()
    assert "\n" not in str(e.value)
    monkeypatch.setenv(levels.SWITCH, "avx2")
    assert levels.forced() == "avx2"


@pytest.mark.skipif(not q4q8.available(), reason="no C compiler for the kernel")
def test_the_kernel_refuses_a_level_the_cpu_lacks_where_proc_cpuinfo_says_nothing(monkeypatch):
    monkeypatch.setattr(levels, "cpu_flags", lambda: None)  # not Linux: the kernel's own CPU check decides
    monkeypatch.setattr(q4q8, "executable_levels", lambda: ("portable",))
    monkeypatch.setenv(levels.SWITCH, "avx2")
    q4q8.isa.cache_clear()
    try:
        with pytest.raises(ValueError, match="SPECDEC_ISA=avx2: this CPU cannot execute that level"):
            q4q8.isa()
    finally:
        q4q8.isa.cache_clear()
