"""Native GGUF weights: the value mappings reproduce gguf's own de-quantisation, a tiny Llama written as a GGUF
decodes on torch's int4 kernel exactly as its de-quantised copy does (float32), and on the Q4 × Q8 kernel as
closely as its quantised activations allow."""
import sys

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize
from transformers import LlamaConfig, LlamaForCausalLM

from engine.benchmark import bench
from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.events import DecodeSettings
from engine.kernels import q4q8
from engine.models import gguf_native
from engine.models.loading import LoadedModel
from tests.tiny import PROMPT, tiny_model, tiny_tokenizer

F32_ULP = 2.0 ** -23


def q4_k_blocks(rows: int, cols: int, seed: int = 0, scale: float = 1e-3) -> np.ndarray:
    """Random Q4_K bytes (gguf has no Q4_K quantiser): fp16 d and dmin, then random 6-bit scales / mins and
    nibbles (every bit pattern is a valid block)."""
    rng = np.random.default_rng(seed)
    n_blocks = rows * cols // 256
    d = (rng.uniform(0.2, 1.0, (n_blocks, 2)) * scale).astype(np.float16).view(np.uint8)
    rest = rng.integers(0, 256, (n_blocks, 140), dtype=np.uint8)
    return np.concatenate((d, rest), axis=1).reshape(rows, -1)


def write_gguf(path, tensors: dict[str, tuple[np.ndarray, Q]], architecture: str = "llama") -> None:
    """A GGUF holding each float32 array quantised to its type (the gguf package's own quantiser); uint8 arrays
    are taken as the type's bytes already."""
    writer = GGUFWriter(str(path), architecture)
    for name, (array, qtype) in tensors.items():
        writer.add_tensor(name, array if array.dtype == np.uint8 else quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read(path) -> dict:
    return {t.name: t for t in GGUFReader(path).tensors}


def kernel_weights(module: gguf_native.Int4Linear) -> np.ndarray:
    """The weights the int4 kernel multiplies by, read back through it with an identity input (float32)."""
    eye = torch.eye(module.in_features)
    return module(eye).T.numpy()


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K])
def test_int4_mappings_reproduce_gguf_dequantisation(tmp_path, qtype):
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 512)) * 0.05 + rng.standard_normal((64, 1)) * 0.02).astype(np.float32)
    write_gguf(tmp_path / "w.gguf", {"w": (q4_k_blocks(64, 512) if qtype == Q.Q4_K else weight, qtype)})
    tensor = read(tmp_path / "w.gguf")["w"]
    reference = dequantize(np.asarray(tensor.data), qtype).reshape(64, 512)
    nibbles, scales, zeros = gguf_native.int4_groups(np.asarray(tensor.data), qtype, 64, 512)
    mapped = (nibbles.astype(np.float32) - 8) * np.repeat(scales, 32, 1) + np.repeat(zeros, 32, 1)
    values, d, m = gguf_native.q4_values(np.asarray(tensor.data), qtype, 64, 512)
    affine = values * np.repeat(d, 32, 1) + np.repeat(m, 32, 1)  # what the Q4 × Q8 kernel takes
    kernel = kernel_weights(gguf_native._linear(tensor, torch.float32, kernel="torch-int4"))
    if qtype == Q.Q4_K:
        # z = 8s − dmin·mn is one more float32 rounding than gguf's d·sc·q − dmin·mn: within an ulp of |z|.
        bound = F32_ULP * np.repeat(np.abs(zeros), 32, 1)
        assert np.all(np.abs(mapped - reference) <= bound)
        assert np.all(np.abs(kernel - reference) <= bound)
        np.testing.assert_array_equal(affine, reference)  # gguf computes d·sc·q − dmin·mn the same way
    else:  # s and z are exact in float32 and (q − 8)·s is exact: one rounding, as gguf's
        np.testing.assert_array_equal(mapped, reference)
        np.testing.assert_array_equal(kernel, reference)
        np.testing.assert_array_equal(affine, reference)


def test_q8_0_head_is_two_int4_groups_exactly(tmp_path):
    weight = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    write_gguf(tmp_path / "h.gguf", {"h": (weight, Q.Q8_0)})
    tensor = read(tmp_path / "h.gguf")["h"]
    reference = dequantize(np.asarray(tensor.data), Q.Q8_0).reshape(64, 128)
    head = gguf_native._linear(tensor, torch.float32, kernel="torch-int4")
    assert head.packed.shape == (64, 128)  # 256 nibbles a row: the high ones, then the low ones
    np.testing.assert_array_equal(kernel_weights(head), reference)


def test_bfloat16_scales_round_each_weight_by_at_most_a_bfloat16_step(tmp_path):
    weight = (np.random.default_rng(2).standard_normal((64, 256)) * 0.05).astype(np.float32)
    write_gguf(tmp_path / "w.gguf", {"w": (weight, Q.Q4_1)})
    tensor = read(tmp_path / "w.gguf")["w"]
    reference = dequantize(np.asarray(tensor.data), Q.Q4_1).reshape(64, 256)
    nibbles, scales, zeros = gguf_native.int4_groups(np.asarray(tensor.data), Q.Q4_1, 64, 256)
    module = gguf_native._linear(tensor, torch.bfloat16, kernel="torch-int4")
    s, z = (module.scales_and_zeros[..., i].float().T.repeat_interleave(32, 1).numpy() for i in (0, 1))
    rounded = (nibbles - 8.0) * s + z
    # |Δw| ≤ |q − 8|·|Δs| + |Δz|, |Δs| ≤ 2^-8·|s|, |Δz| ≤ 2^-8·|z| (bfloat16 keeps 8 significant bits)
    bound = 2.0 ** -8 * (np.abs(nibbles - 8.0) * np.repeat(scales, 32, 1) + np.repeat(np.abs(zeros), 32, 1))
    assert np.all(np.abs(rounded - reference) <= bound)


@pytest.mark.parametrize("kernel", gguf_native.KERNELS)
def test_fused_projections_multiply_as_the_separate_ones(tmp_path, kernel):
    rng = np.random.default_rng(3)
    write_gguf(tmp_path / "p.gguf", {f"p{i}": (rng.standard_normal((rows, 64)).astype(np.float32), Q.Q4_0)
                                     for i, rows in enumerate((128, 64, 64))})
    modules = [gguf_native._linear(t, torch.bfloat16, kernel=kernel) for t in read(tmp_path / "p.gguf").values()]
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    separate = torch.cat([m(x) for m in modules], -1)
    fused = gguf_native.fused(modules)
    assert fused is not None
    assert torch.equal(fused(x), separate)
    assert torch.equal(torch.cat([m(x) for m in modules], -1), separate)  # the modules now view the fused weight


# ---------------------------------------------------------------------------------------------------- a tiny GGUF


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf), which the loader undoes."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


TINY_TYPES = {"attn_q": Q.Q4_0, "attn_k": Q.Q4_0, "attn_v": Q.Q4_1, "attn_output": Q.Q4_1, "ffn_gate": Q.Q4_1,
              "ffn_up": Q.Q4_0, "ffn_down": Q.Q4_K}


def tiny_gguf_pair(tmp_path, kernel: str = "q4q8") -> tuple[LoadedModel, LoadedModel]:
    """A random tiny Llama written as a GGUF (Q4_0 / Q4_1 / Q4_K projections, a Q8_0 tied head), loaded native on
    `kernel` and as its float32 de-quantised copy."""
    config = LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=1, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    dense = LlamaForCausalLM(config).eval().requires_grad_(False)
    tensors = {"token_embd.weight": (dense.model.embed_tokens.weight.numpy() * 40, Q.Q8_0),
               "output_norm.weight": (dense.model.norm.weight.numpy(), Q.F32)}
    for i, layer in enumerate(dense.model.layers):
        hf = {"attn_q": layer.self_attn.q_proj, "attn_k": layer.self_attn.k_proj, "attn_v": layer.self_attn.v_proj,
              "attn_output": layer.self_attn.o_proj, "ffn_gate": layer.mlp.gate_proj, "ffn_up": layer.mlp.up_proj,
              "ffn_down": layer.mlp.down_proj}
        for name, module in hf.items():
            weight = module.weight.numpy()
            heads = {"attn_q": 4, "attn_k": 2}.get(name)
            if TINY_TYPES[name] == Q.Q4_K:
                weight = q4_k_blocks(*weight.shape, seed=i)
            tensors[f"blk.{i}.{name}.weight"] = (_permute(weight, heads) if heads else weight, TINY_TYPES[name])
        tensors[f"blk.{i}.attn_norm.weight"] = (layer.input_layernorm.weight.numpy() + 0.1, Q.F32)
        tensors[f"blk.{i}.ffn_norm.weight"] = (layer.post_attention_layernorm.weight.numpy() - 0.1, Q.F32)
    write_gguf(tmp_path / "tiny.gguf", tensors)

    # The de-quantised copy: every tensor through gguf's own de-quantiser, q/k back in transformers' order.
    stored = read(tmp_path / "tiny.gguf")
    state = {}
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    for name, tensor in stored.items():
        values = dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape([int(n) for n in tensor.shape[::-1]])
        if name == "token_embd.weight":
            state["model.embed_tokens.weight"] = values
            continue
        if name == "output_norm.weight":
            state["model.norm.weight"] = values
            continue
        _, i, kind, _ = name.split(".")
        heads = {"attn_q": 4, "attn_k": 2}.get(kind)
        if heads:
            values = values[gguf_native._rows_to_hf(values.shape[0], heads)]
        state[f"model.layers.{i}.{names[kind]}.weight"] = values
    reference = LlamaForCausalLM(config)
    missing, unexpected = reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], [])  # tied to the embeddings
    reference.tie_weights()
    reference.eval().requires_grad_(False)
    native = gguf_native.load(tmp_path / "tiny.gguf", config, torch.float32, kernel=kernel)
    return (LoadedModel("native", "tiny.gguf", native, tiny_tokenizer(), weights="native"),
            LoadedModel("dequantised", "tiny.gguf", reference, tiny_tokenizer()))


def test_native_tiny_llama_on_torch_int4_decodes_identically_to_its_dequantised_copy(tmp_path):
    native, reference = tiny_gguf_pair(tmp_path, kernel="torch-int4")
    assert isinstance(native.model.model.layers[0].mlp.down_proj, gguf_native.Int4Linear)
    ids = torch.tensor([[3, 7, 11, 5, 9, 2]])
    torch.testing.assert_close(native.model(input_ids=ids).logits, reference.model(input_ids=ids).logits,
                               rtol=0, atol=1e-4)
    settings = DecodeSettings(mode="ar", greedy=True, max_new_tokens=24)
    replies = [[t.token_id for e in Decoder(m).generate(PROMPT, settings) for t in e.emitted]
               for m in (native, reference)]
    assert len(replies[0]) > 5
    assert replies[0] == replies[1]
    # the app's status bar says which weights the target runs on
    assert (Decoder(native).info().target.weights, Decoder(reference).info().target.weights) == ("native", "dtype")


def test_native_tiny_llama_on_q4q8_scores_as_its_dequantised_copy_up_to_quantised_activations(tmp_path):
    native, reference = tiny_gguf_pair(tmp_path)
    assert isinstance(native.model.model.layers[0].mlp.down_proj, gguf_native.Q4Q8Linear)
    ids = [3, 7, 11, 5, 9, 2, 8, 4]
    runner = CachedModel(native.model, native.vocab_size)
    assert runner.cache.native is not None  # the whole forward in one kernel call
    logits = runner.forward(ids, keep=len(ids))
    expected = reference.model(input_ids=torch.tensor([ids])).logits[0]
    # int8 activations (a step of max|x|/127 per 32 inputs) move the logits by a few per cent of their spread
    assert (logits - expected).abs().max() < 0.05 * (expected.max() - expected.min())
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


# A verification block, and one past the attention's 8-row blocks after more than a 64-position score tile
@pytest.mark.parametrize("positions,rows", [(4, 5), (70, 11)])
def test_native_forward_gives_a_row_the_same_bits_alone_in_a_block_and_on_one_thread(tmp_path, positions, rows):
    native, _ = tiny_gguf_pair(tmp_path)
    runner = CachedModel(native.model, native.vocab_size)
    tokens = [3, 7, 11, 5, 9, 2, 8, 4, 6, 1] * 10
    prompt, block = tokens[:positions], tokens[positions:positions + rows]
    runner.forward(prompt[:-1])
    together = runner.forward(prompt[-1:] + block, keep=len(block) + 1)
    runner.rollback(len(prompt) - 1)
    alone = torch.cat([runner.forward([t]) for t in prompt[-1:] + block])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        runner.rollback(len(prompt) - 1)
        one_thread = runner.forward(prompt[-1:] + block, keep=len(block) + 1)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(together, alone)
    assert torch.equal(one_thread, together)


@pytest.mark.skipif(not q4q8.available() or len(q4q8.executable_levels()) < 2, reason="the CPU has no AVX2")
def test_native_forward_gives_the_same_bits_on_every_instruction_set(tmp_path, monkeypatch):
    native, _ = tiny_gguf_pair(tmp_path)
    ids = [3, 7, 11, 5, 9, 2, 8, 4] * 10  # 80 positions: a whole score tile of 64 and a tail in the attention
    logits = {}
    for isa in q4q8.executable_levels():
        monkeypatch.setenv("SPECDEC_ISA", isa)
        q4q8.isa.cache_clear()
        logits[isa] = CachedModel(native.model, native.vocab_size).forward(ids, keep=len(ids))
    q4q8.isa.cache_clear()
    assert len(logits) >= 2 and all(torch.equal(found, logits["portable"]) for found in logits.values())


def test_greedy_speculative_equals_greedy_ar_with_native_weights(tmp_path):
    native, _ = tiny_gguf_pair(tmp_path)
    draft = tiny_model(1, layers=1, vocab_size=64)
    decoder = Decoder(native, DraftModelDrafter(draft, native.vocab_size), draft)
    replies = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=24, lookup=False)
        replies[mode] = [t.token_id for e in decoder.generate(PROMPT, settings) for t in e.emitted]
    assert replies["spec"] == replies["ar"]


def test_projections_of_other_types_are_refused_in_one_line(tmp_path):
    q2_k = np.random.default_rng(0).integers(0, 256, (64, 84), dtype=np.uint8)  # one 256-weight block a row
    write_gguf(tmp_path / "q2.gguf", {"blk.0.attn_q.weight": (q2_k, Q.Q2_K)})
    with pytest.raises(gguf_native.NotNative, match="Q2_K"):
        gguf_native.check(read(tmp_path / "q2.gguf"), "llama", torch.device("cpu"))
    write_gguf(tmp_path / "q8.gguf", {"blk.0.attn_q.weight": (np.zeros((64, 64), np.float32), Q.Q8_0)})
    gguf_native.check(read(tmp_path / "q8.gguf"), "llama", torch.device("cpu"))  # our kernel takes it
    with pytest.raises(gguf_native.NotNative, match="Q8_0"):
        gguf_native.check(read(tmp_path / "q8.gguf"), "llama", torch.device("cpu"), kernel="torch-int4")


def test_bench_goes_on_without_the_llama_cpp_rows_when_the_package_is_missing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError, as if absent
    methods = bench.available_methods(["ar", "spec", "llama_cpp", "llama_cpp_lookup"], str(tmp_path / "m.gguf"))
    assert methods == ["ar", "spec"]
    assert "pip install -e '.[peers]'" in capsys.readouterr().err
    assert [c.method for c in bench.plan(["llama_cpp", "ar"], ["greedy"], [2])] == ["ar", "llama_cpp"]


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1])
def test_embedding_rows_are_gguf_s_own_de_quantisation(tmp_path, qtype):
    weight = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    write_gguf(tmp_path / "e.gguf", {"e": (weight, qtype)})
    tensor = read(tmp_path / "e.gguf")["e"]
    reference = dequantize(np.asarray(tensor.data), qtype).reshape(64, 128)
    embedding = gguf_native.GGUFEmbedding(np.asarray(tensor.data), qtype, 128, torch.float32)
    ids = torch.tensor([[5, 0, 63], [7, 7, 1]])
    np.testing.assert_array_equal(embedding(ids).numpy(), reference[ids.numpy()])


@pytest.mark.embedded
def test_embedded_target_s_int4_groups_are_the_prepared_float32_copy_exactly():
    from safetensors.torch import load_file

    from engine.models import embedded

    _, tensors = gguf_native.read_tensors(embedded.gguf_path())
    prepared = load_file(embedded.target_dir() / "model.safetensors")
    for name, hf, heads in [("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 9),
                            ("blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight", 3),
                            ("blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight", None)]:
        tensor = tensors[name]
        cols, rows = tensor.shape
        q, s, z = gguf_native.int4_groups(tensor.data, tensor.tensor_type, rows, cols)
        weight = (q - np.float32(8)) * np.repeat(s, 32, 1) + np.repeat(z, 32, 1)
        if heads:
            weight = weight[gguf_native._rows_to_hf(rows, heads)]
        np.testing.assert_array_equal(weight, prepared[hf].numpy())
