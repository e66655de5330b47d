"""The fast Llama-family forward against transformers' own, and the fallback for what it does not cover."""
import pytest
import torch
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from engine.decoding.caches import CachedModel, TransformersCache
from engine.kernels import q4q8
from engine.models import fast_llama

SHAPE = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=2048)


def build(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**SHAPE, head_dim=16))
    elif kind.startswith("phi3"):  # fused q/k/v and gate/up; -window: a sliding window, -partial: a partial rope
        model = Phi3ForCausalLM(Phi3Config(**SHAPE, pad_token_id=0, sliding_window=4 if kind == "phi3-window" else None,
                                           partial_rotary_factor=0.5 if kind == "phi3-partial" else 1.0))
    elif kind == "mistral":  # every layer a sliding window
        model = MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=4))
    elif kind == "gemma3":  # (1 + w) norms around attention and MLP, gelu-tanh, a window and a rope per layer type
        model = Gemma3ForCausalLM(Gemma3TextConfig(**SHAPE, head_dim=16, sliding_window=4,
                                                   layer_types=["sliding_attention", "full_attention"]))
        for name, parameter in model.named_parameters():
            if "norm" in name:  # transformers starts them at 0: 1 + w would be 1 everywhere
                parameter.data.normal_(0, 0.3)
    elif kind == "llama3-rope":
        model = LlamaForCausalLM(LlamaConfig(**SHAPE, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))
    else:
        model = LlamaForCausalLM(LlamaConfig(**SHAPE, attention_bias=kind == "llama-bias"))
    return model.eval().requires_grad_(False)


@pytest.mark.parametrize("kind", ["llama", "qwen3", "llama3-rope", "phi3", "phi3-window", "mistral", "gemma3"])
def test_fast_forward_matches_transformers_through_steps_blocks_and_rollback(kind):
    model = build(kind)
    runner = CachedModel(model, 64)
    assert isinstance(runner.cache, fast_llama.FastLlama)
    sequence = [3, 9, 14, 2, 7, 30, 31]
    runner.forward(sequence[:5])
    runner.forward(sequence[5:6])
    block = runner.forward(sequence[6:] + [40, 41], keep=3)  # a verification block of three
    runner.rollback(6)  # two of them rejected
    step = runner.forward([50])
    reference = model(torch.tensor([sequence + [40, 41]])).logits[0]
    assert torch.allclose(block, reference[-3:], atol=1e-5)
    assert torch.allclose(step[0], model(torch.tensor([sequence[:6] + [50]])).logits[0, -1], atol=1e-5)


@pytest.mark.parametrize("kind", ["llama", "phi3-window", "gemma3"])  # a prompt past the windows too
def test_the_cache_grows_past_its_first_allocation_without_changing_the_logits(kind):
    model = build(kind)
    runner = CachedModel(model, 64)
    ids = torch.randint(0, 64, (300,), generator=torch.Generator().manual_seed(0)).tolist()
    runner.forward(ids[:250])
    last = [runner.forward([token])[0] for token in ids[250:]]  # crosses the initial 256 positions
    reference = model(torch.tensor([ids])).logits[0, 250:]
    assert torch.allclose(torch.stack(last), reference, atol=1e-4)


def test_a_partial_rope_is_not_taken_for_the_fast_forward():
    assert fast_llama.supports(build("phi3"))
    assert not fast_llama.supports(build("phi3-partial"))


def test_unsupported_architectures_fall_back_to_the_transformers_forward():
    model = build("llama-bias")
    assert not fast_llama.supports(model)
    runner = CachedModel(model, 64)
    assert isinstance(runner.cache, TransformersCache)
    runner.forward([3, 9, 14, 2])
    runner.forward([20, 21])
    runner.rollback(4)
    assert torch.allclose(runner.forward([30])[0], model(torch.tensor([[3, 9, 14, 2, 30]])).logits[0, -1], atol=1e-5)
    assert runner.cache.length == 5


def test_int8_weights_stay_close_to_the_model_and_leave_it_untouched():
    model = build("llama")
    before = model(torch.tensor([[3, 9, 14, 2]])).logits[0, -1]
    int8 = CachedModel(model, 64, int8=True)
    assert isinstance(int8.cache.weights.layers[0].qkv, (fast_llama.Int8Weight, q4q8.Q4Q8Weight))
    logits = int8.forward([3, 9, 14, 2])[0]
    assert (logits - before).abs().max() < 0.05 * before.abs().max()
    assert not torch.equal(logits, before)  # really quantized
    assert torch.equal(model(torch.tensor([[3, 9, 14, 2]])).logits[0, -1], before)
    # The kernel computes garbage for input widths that are not multiples of 16: those stay dense.
    assert not isinstance(fast_llama.linear(torch.randn(8, 24), int8=True), fast_llama.Int8Weight)


def test_int8_weights_of_a_float32_model_multiply_in_bfloat16_and_answer_in_float32():
    weight = torch.randn(32, 64)
    int8 = fast_llama.Int8Weight(weight)  # where the Q4 × Q8 kernel does not run fast
    x = torch.randn(3, 64)
    out = int8(x)
    assert int8.dtype == torch.bfloat16 and out.dtype == torch.float32  # the kernel's fast activation type
    assert (out - x @ weight.T).abs().max() < 0.05 * (x @ weight.T).abs().max()


def test_linear_layers_are_packed_for_onednn_and_equal_f_linear_closely():
    for dtype in (torch.float32, torch.bfloat16):
        weight, x = torch.randn(48, 64).to(dtype), torch.randn(5, 64).to(dtype)
        packed = fast_llama.linear(weight)
        if not fast_llama.PackedWeight.usable(weight):
            continue  # a CPU or build without oneDNN's kernels for this dtype
        assert isinstance(packed, fast_llama.PackedWeight)
        for rows in (1, 2, 5):  # fewer rows than PACKED_MIN_ROWS are padded and cut back
            assert packed(x[:rows]).shape == (rows, 48)
            assert torch.allclose(packed(x[:rows]).float(), (x[:rows] @ weight.T).float(), atol=0.05, rtol=0.02)


def test_converting_the_model_after_a_cache_was_built_rearranges_its_weights():
    model = build("llama")
    CachedModel(model, 64).forward([3, 9])
    model.to(torch.float64)
    logits = CachedModel(model, 64).forward([3, 9, 14])
    assert logits.dtype == torch.float32  # logits are always float32
    assert torch.allclose(logits[0], model(torch.tensor([[3, 9, 14]])).logits[0, -1].float(), atol=1e-6)
    assert fast_llama._Weights.of(model, False).layers[0].attn_norm.dtype == torch.float64


def test_packed_multiplies_run_for_few_row_counts():
    """Every row count up to 4,096 maps to one of few padded counts, none below it and none over 12.5 % above past
    16 rows (torch keeps a oneDNN primitive for each count it meets); the control, unpadded, has 4,096."""
    from engine.models.fast_llama import PACKED_MIN_ROWS, packed_rows

    padded = [packed_rows(rows) for rows in range(1, 4097)]
    assert all(p >= max(r, PACKED_MIN_ROWS) for r, p in zip(range(1, 4097), padded))
    assert all(p <= 1.125 * r for r, p in zip(range(17, 4097), padded[16:]))
    assert len(set(padded)) < 100 < len(set(range(1, 4097)))
