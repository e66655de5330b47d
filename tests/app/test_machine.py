"""What runs a loaded pair here, as the export reports it: the draft's weights named as they run, torch's CPU
instructions and threads, and the kernels behind each model."""
from __future__ import annotations

import torch

from app.pair.machine import described
from engine.decoding.decoder import Decoder
from tests.tiny import tiny_decoder, tiny_model


def test_a_draft_run_in_int8_is_named_int8():
    info, runtime = described(tiny_decoder())
    assert info.draft.weights == "int8"
    assert runtime.draft_weights.startswith("int8")


def test_a_draft_kept_in_its_dtype_is_named_dtype():
    target, draft = tiny_model(0), tiny_model(1, layers=1)
    info, runtime = described(Decoder(target, draft=draft, draft_int8=False))
    assert info.draft.weights == "dtype"
    assert runtime.draft_weights.startswith("float32")


def test_the_runtime_says_torchs_cpu_capability_and_threads():
    _, runtime = described(tiny_decoder())
    assert runtime.cpu_capability == torch.backends.cpu.get_cpu_capability()
    assert runtime.threads == torch.get_num_threads()


def test_a_dense_target_is_named_by_its_dtype():
    _, runtime = described(tiny_decoder(draft_seed=None))
    assert runtime.target_kernel.startswith("float32") and runtime.draft_weights is None
