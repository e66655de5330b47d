"""Every GGUF block type our kernel takes (Q4_0 … Q6_K): its unpacking is gguf's de-quantisation exactly, the
kernel multiplies it as Q8 activations allow, with the same bits on every instruction set and in any block; and a
tiny Qwen2 GGUF of mixed types (q/k/v biases, untied types per projection) decodes natively as its de-quantised
copy does, greedy speculation with a compacted draft of it returning greedy AR's tokens."""
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.events import DecodeSettings
from engine.kernels import q4q8
from engine.models import gguf_native
from engine.models.loading import LoadedModel
from tests.engine.models.test_gguf_native import read, write_gguf
from tests.tiny import PROMPT, tiny_tokenizer

K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


def blocks(qtype: Q, rows: int, cols: int, seed: int = 0, scale: float = 1e-3) -> np.ndarray:
    """A (rows, cols) tensor's bytes: gguf's quantiser for the types it has, else random bytes (every bit pattern
    is a valid K-quant block) with sane fp16 super-block scales."""
    rng = np.random.default_rng(seed)
    if qtype not in K_QUANTS:
        return quantize(rng.standard_normal((rows, cols)).astype(np.float32) * scale * 20, qtype)
    size = GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, (rows * cols // 256, size), dtype=np.uint8)
    if qtype == Q.Q6_K:  # w = d·sc·(q − 32) with int8 sc: a smaller d for weights of the same size
        raw[:, 208:210] = (rng.uniform(0.2, 1.0, (len(raw), 1)) * scale / 20).astype(np.float16).view(np.uint8)
    else:  # d, then dmin
        raw[:, 0:4] = (rng.uniform(0.2, 1.0, (len(raw), 2)) * scale).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def weight_of(raw: np.ndarray, qtype: Q, rows: int, cols: int) -> q4q8.Q4Q8Weight:
    return q4q8.Q4Q8Weight.from_values(*gguf_native.kernel_values(raw, qtype, rows, cols))


def q8_product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x quantised per row and 32 inputs as the kernel does (ties to even), times w, in float64."""
    xg = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    dx = np.abs(xg).max(-1, keepdims=True) / np.float32(127)
    xq = np.rint(xg / np.where(dx == 0, 1, dx)) * dx
    return xq.reshape(x.shape).astype(np.float64) @ w.T.astype(np.float64)


@pytest.mark.parametrize("qtype", sorted(gguf_native.KERNEL_TYPES, key=lambda t: t.name))
def test_each_type_unpacks_to_gguf_s_de_quantisation_exactly(qtype):
    raw = blocks(qtype, 32, 512)
    weight = weight_of(raw, qtype, 32, 512)
    np.testing.assert_array_equal(weight.dense().numpy(), dequantize(raw, qtype).reshape(32, 512))


def test_a_q6_k_read_without_its_zero_point_fails_the_reference():
    """Negative control: the same Q6_K values taken as unsigned (zero 0) are not the file's weights."""
    raw = blocks(Q.Q6_K, 32, 512)
    values, a, b, bits, kind, _ = gguf_native.kernel_values(raw, Q.Q6_K, 32, 512)
    wrong = q4q8.Q4Q8Weight.from_values(values, a, b, bits, kind, 0)
    assert not np.allclose(wrong.dense().numpy(), dequantize(raw, Q.Q6_K).reshape(32, 512))


@pytest.mark.parametrize("qtype", sorted(gguf_native.KERNEL_TYPES, key=lambda t: t.name))
def test_each_type_multiplies_as_its_de_quantised_weight_with_q8_activations(qtype):
    raw = blocks(qtype, 48, 512)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(1))
    expected = q8_product(x.numpy(), dequantize(raw, qtype).reshape(48, 512))
    found = weight_of(raw, qtype, 48, 512)(x).numpy()
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


@pytest.mark.skipif(not q4q8.available() or len(q4q8.executable_levels()) < 2, reason="the CPU has no AVX2")
@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_each_type_gives_one_row_the_same_bits_on_every_path_and_in_any_block(monkeypatch, qtype):
    weight = weight_of(blocks(qtype, 48, 256), qtype, 48, 256)
    x = torch.randn(11, 256, generator=torch.Generator().manual_seed(2)).bfloat16()
    results = {}
    for name in q4q8.executable_levels():
        monkeypatch.setenv("SPECDEC_ISA", name)
        q4q8.isa.cache_clear()
        results[name] = weight(x)
        assert torch.equal(torch.cat([weight(x[r:r + 1]) for r in range(11)]), results[name])
    q4q8.isa.cache_clear()
    assert len(results) >= 2 and all(torch.equal(found, results["portable"]) for found in results.values())


def test_rows_of_a_weight_score_as_those_rows_of_the_whole():
    weight = weight_of(blocks(Q.Q6_K, 64, 256), Q.Q6_K, 64, 256)
    ids = torch.tensor([*range(48, 64), *range(0, 16)])
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3))
    assert torch.equal(weight.rows(ids)(x), weight(x)[:, ids])


def test_a_compacted_weight_is_within_half_a_4_bit_step_of_the_file_s():
    raw = blocks(Q.Q5_0, 32, 256)
    weight = weight_of(raw, Q.Q5_0, 32, 256)
    compacted = gguf_native.compact(weight)
    assert compacted.bits == 4 and weight.bits == 8
    exact = weight.dense().view(32, -1, 32)
    step = (exact.amax(-1) - exact.amin(-1)) / 15
    error = (compacted.dense().view(32, -1, 32) - exact).abs().amax(-1)
    assert torch.all(error <= step * 0.5 + 2e-3 * exact.abs().amax(-1))  # and the fp16 rounding of d and m
    assert not torch.equal(compacted.dense(), weight.dense())


# ---------------------------------------------------------------------------------------------------- tiny Qwen2

QWEN_TYPES = {"attn_q": Q.Q4_K, "attn_k": Q.Q4_K, "attn_v": Q.Q6_K, "attn_output": Q.Q5_0, "ffn_gate": Q.Q4_K,
              "ffn_up": Q.Q5_K, "ffn_down": Q.Q8_0}
MODULES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj"}


def tiny_qwen2(tmp_path) -> tuple[Qwen2Config, Qwen2ForCausalLM]:
    """A random tiny Qwen2 written as a GGUF of mixed types with q/k/v biases and a Q6_K tied head, and its
    de-quantised copy as transformers' Qwen2 model."""
    config = Qwen2Config(vocab_size=64, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=1, bos_token_id=None, pad_token_id=None)
    rng = np.random.default_rng(5)
    tensors = {"token_embd.weight": (blocks(Q.Q6_K, 64, 256, seed=9, scale=2e-2), Q.Q6_K),
               "output_norm.weight": (np.ones(256, np.float32), Q.F32)}
    for i in range(2):
        for name, qtype in QWEN_TYPES.items():
            rows, cols = {"attn_q": (256, 256), "attn_k": (128, 256), "attn_v": (128, 256),
                          "attn_output": (256, 256), "ffn_gate": (512, 256), "ffn_up": (512, 256),
                          "ffn_down": (256, 512)}[name]
            tensors[f"blk.{i}.{name}.weight"] = (blocks(qtype, rows, cols, seed=10 * i + len(name)), qtype)
            if name in gguf_native.BIASES:
                tensors[f"blk.{i}.{name}.bias"] = (rng.standard_normal(rows).astype(np.float32), Q.F32)
        tensors[f"blk.{i}.attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(256).astype(np.float32), Q.F32)
        tensors[f"blk.{i}.ffn_norm.weight"] = (1 + 0.1 * rng.standard_normal(256).astype(np.float32), Q.F32)
    write_gguf(tmp_path / "qwen.gguf", tensors, architecture="qwen2")
    state = {}
    for name, tensor in read(tmp_path / "qwen.gguf").items():
        values = dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape([int(n) for n in tensor.shape[::-1]])
        if name == "token_embd.weight":
            state["model.embed_tokens.weight"] = values
        elif name == "output_norm.weight":
            state["model.norm.weight"] = values
        else:
            _, i, kind, part = name.split(".")
            hf = MODULES.get(kind) or {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}[kind]
            state[f"model.layers.{i}.{hf}.{part}"] = values
    reference = Qwen2ForCausalLM(config)
    missing, unexpected = reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], [])
    reference.tie_weights()
    return config, reference.eval().requires_grad_(False)


def test_a_native_qwen2_of_mixed_types_scores_as_its_de_quantised_copy(tmp_path):
    config, reference = tiny_qwen2(tmp_path)
    native = gguf_native.load(tmp_path / "qwen.gguf", config, torch.float32)
    runner = CachedModel(native, 64)
    assert runner.cache.native is not None  # q/k (Q4_K) and v (Q6_K) run as parts of one kernel call
    ids = [3, 7, 11, 5, 9, 2, 8, 4]
    logits = runner.forward(ids, keep=len(ids))
    expected = reference(input_ids=torch.tensor([ids])).logits[0]
    assert (logits - expected).abs().max() < 0.05 * (expected.max() - expected.min())
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
    # Negative control: without its biases the same model scores otherwise
    unbiased_model = gguf_native.load(tmp_path / "qwen.gguf", config, torch.float32)
    for layer in unbiased_model.model.layers:
        layer.self_attn.q_proj.bias = layer.self_attn.k_proj.bias = layer.self_attn.v_proj.bias = None
    unbiased = CachedModel(unbiased_model, 64).forward(ids, keep=len(ids))
    assert (unbiased - expected).abs().max() > 0.05 * (expected.max() - expected.min())


def test_a_second_load_reads_the_prepared_weights_back_as_they_were_made(tmp_path):
    config, _ = tiny_qwen2(tmp_path)
    first = gguf_native.load(tmp_path / "qwen.gguf", config, torch.float32)
    assert gguf_native.prepared_path(tmp_path / "qwen.gguf", False).is_file()
    again = gguf_native.load(tmp_path / "qwen.gguf", config, torch.float32)
    for module in ("self_attn.v_proj", "mlp.up_proj", "mlp.down_proj"):
        made, read_back = (m.model.layers[1].get_submodule(module) for m in (first, again))
        x = torch.randn(2, made.in_features)
        assert torch.equal(made(x), read_back(x))


def test_greedy_speculation_with_a_compacted_native_draft_equals_greedy_ar(tmp_path):
    config, _ = tiny_qwen2(tmp_path)
    target = LoadedModel("qwen", str(tmp_path / "qwen.gguf"), gguf_native.load(tmp_path / "qwen.gguf", config,
                                                                               torch.float32), tiny_tokenizer(),
                         weights="native")
    draft_model = gguf_native.load(tmp_path / "qwen.gguf", config, torch.float32, compacted=True)
    draft = LoadedModel("draft", str(tmp_path / "qwen.gguf"), draft_model, tiny_tokenizer(), weights="native")
    drafter = DraftModelDrafter(draft, 64)
    assert drafter.runner.compact_weights == "4-bit"
    decoder = Decoder(target, drafter, draft)
    replies = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=24, lookup=False)
        replies[mode] = [t.token_id for e in decoder.generate(PROMPT, settings) for t in e.emitted]
    assert len(replies["ar"]) > 5 and replies["spec"] == replies["ar"]
