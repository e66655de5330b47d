"""Each architecture the native GGUF loader maps, on a small random-weight file written here with the `gguf`
package and its metadata: scored as transformers' own loading of the same file (de-quantised) scores it, greedy
decoding the same 32 tokens, and one row the same bits alone, inside a block and on 1, 2 or 4 threads."""
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from transformers import AutoConfig, AutoModelForCausalLM

from engine.decoding.caches import CachedModel
from engine.kernels import q4q8
from engine.models import gguf_native, loading
from engine.models.fast_llama import FastLlama
from tests.engine.kernels.test_kquants import blocks

# head_dim = hidden / heads: phi3's config has no other (qwen3's defaults to 128)
VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 256, 512, 2, 2, 1, 128
# A Q4_K_M file's mix (llama.cpp's choice): v and down in Q6_K, the rest in Q4_K
Q4_K_M = {"attn_q": Q.Q4_K, "attn_k": Q.Q4_K, "attn_v": Q.Q6_K, "attn_output": Q.Q4_K, "ffn_gate": Q.Q4_K,
          "ffn_up": Q.Q4_K, "ffn_down": Q.Q6_K}
SHAPES = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
          "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "attn_output": (HIDDEN, HEADS * HEAD_DIM),
          "ffn_gate": (INTERMEDIATE, HIDDEN), "ffn_up": (INTERMEDIATE, HIDDEN), "ffn_down": (HIDDEN, INTERMEDIATE)}
# phi3 keeps q/k/v as one tensor (of attn_q's type here) and gate/up as one (ffn_up, gate first)
FUSED = {"attn_qkv": ("attn_q", ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN)), "attn_output": ("attn_output", None),
         "ffn_up": ("ffn_up", (2 * INTERMEDIATE, HIDDEN)), "ffn_down": ("ffn_down", None)}
# Types a K-quant file of these architectures holds: each alone, and Q4_K_M's mix
TYPES = {qtype.name: dict.fromkeys(SHAPES, qtype) for qtype in (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q5_K,
                                                                Q.Q6_K)} | {"Q4_K_M": Q4_K_M}
PROMPT = [3, 7, 11, 5, 9, 2, 8, 4]
EMBED_SCALE = 2e-3  # embeddings of std ~0.1 (Q6_K): the layers' part of the logits is not drowned by the tied head's
# How far from transformers' logits ours may be, as a share of their spread: int8 activations (a step of max|x|/127
# per 32 inputs) move them by 0.3 % (8 positions) to 1.2 % (48); a qwen3 without its q/k norms is 4 % away, a
# llama 3 file with the plain rope 24 %.
CLOSE = 0.02
GREEDY_TRIES = 40
WINDOW = 16  # gemma3's sliding window: shorter than the greedy tests' 40 positions
# q and k 8x larger than the other weights: attention scores of a few units, so that where a key sits (the rope)
# matters, as in a trained model; at the others' size every query attends about evenly
GAINS = {"attn_q": 8.0, "attn_k": 8.0}
K_SCALES = {Q.Q4_K: 1e-4, Q.Q5_K: 5e-5, Q.Q6_K: 5e-4}  # `blocks`' scale for weights of std ~0.02


def tensor_bytes(qtype: Q, rows: int, cols: int, seed: int, gain: float = 1.0) -> np.ndarray:
    """A tensor's bytes, its weights `gain` times std ~0.02: `blocks` (gguf's quantiser of Gaussian weights, random
    K-quant blocks) with the K-quants' scales set to that size and Q4_K's and Q5_K's dmin to d times their values'
    mean, so that a sub-block's weights d·sc·q − dmin·mn centre on d·mean(q)·(sc − mn), as often below zero as
    above (with d and dmin drawn apart every weight leans one way, all outputs move together and the residual
    stream cancels to a few per cent of its terms, where Q8 activations' rounding is no longer small). The IQ4
    types (which gguf cannot quantise): random bytes under a small fp16 d (every bit pattern is a valid block)."""
    if qtype in K_SCALES:
        raw = blocks(qtype, rows, cols, seed=seed, scale=K_SCALES[qtype] * gain).reshape(
            -1, GGML_QUANT_SIZES[qtype][1])
        if qtype != Q.Q6_K:
            mean = 7.5 if qtype == Q.Q4_K else 15.5
            raw[:, 2:4] = (raw[:, 0:2].copy().view(np.float16) * mean).view(np.uint8)
        return raw.reshape(rows, -1)
    if qtype not in (Q.IQ4_NL, Q.IQ4_XS):
        return blocks(qtype, rows, cols, seed=seed, scale=1e-3 * gain)
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    raw[:, 0:2] = (rng.uniform(0.2, 1.0, (len(raw), 1)) * 1e-3).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def write_model(path, architecture: str, types: dict[str, Q], embedding: Q = Q.Q6_K, seed: int = 0,
                rope_freqs: np.ndarray | None = None, rope_factors: np.ndarray | None = None) -> None:
    """A random-weight GGUF of `architecture` with the metadata llama.cpp writes (that transformers reads too):
    projections of `types`, embeddings of `embedding` tied to the head, norms in float32, and `rope_freqs` where
    given (a Llama 3.1+ file's), LongRoPE's `rope_factors` where given (a Phi-3.5 file's)."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), architecture)
    writer.add_vocab_size(VOCAB)
    writer.add_pad_token_id(0)  # phi3's config would default to 32,000, past this vocabulary
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)  # transformers' head_dim for llama (qwen3's is its default, 128)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(WINDOW)  # gemma3's sliding layers; the others have none

    def norm(size: int) -> np.ndarray:
        return (1 + 0.2 * rng.standard_normal(size)).astype(np.float32)

    writer.add_tensor("token_embd.weight", blocks(embedding, VOCAB, HIDDEN, seed=seed + 1, scale=EMBED_SCALE),
                      raw_dtype=embedding)
    writer.add_tensor("output_norm.weight", norm(HIDDEN))
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs)
    if rope_factors is not None:  # LongRoPE's (Phi-3.5)
        writer.add_tensor("rope_factors_long.weight", rope_factors)
        writer.add_tensor("rope_factors_short.weight", rope_factors)
    for i in range(LAYERS):
        written = {name: (types[of], shape or SHAPES[of]) for name, (of, shape) in FUSED.items()} \
            if architecture == "phi3" else {name: (qtype, SHAPES[name]) for name, qtype in types.items()}
        for name, (qtype, shape) in written.items():
            raw = tensor_bytes(qtype, *shape, seed=seed + 10 * i + len(name), gain=GAINS.get(name, 1.0))
            writer.add_tensor(f"blk.{i}.{name}.weight", raw, raw_dtype=qtype)
        for name in ("attn_norm", "ffn_norm") + (("post_attention_norm", "post_ffw_norm") if architecture == "gemma3"
                                                  else ()):
            writer.add_tensor(f"blk.{i}.{name}.weight", norm(HIDDEN))  # gemma3's: the multiplier 1 + w
        if architecture in ("qwen3", "gemma3"):
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", norm(HEAD_DIM))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", norm(HEAD_DIM))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def native_and_transformers(tmp_path, architecture: str, types: dict[str, Q], **written):
    """The file loaded native (our loader, the config as the app reads it: transformers' from the file) and by
    transformers itself, de-quantised into float32."""
    write_model(tmp_path / "m.gguf", architecture, types, **written)
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    native = gguf_native.load(tmp_path / "m.gguf", config, torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32)
    return native, reference.eval().requires_grad_(False)


def greedy(step, prompt: list[int], tokens: int) -> tuple[list[int], float]:
    """`tokens` greedy tokens after `prompt` (`step(ids, new)` gives the last position's logits), and the smallest
    lead of a chosen token over the next, as a share of the logits' spread."""
    ids, lead = list(prompt), 1.0
    logits = step(ids, ids)
    for _ in range(tokens):
        top = logits.topk(2).values
        lead = min(lead, float((top[0] - top[1]) / (logits.max() - logits.min())))
        ids.append(int(logits.argmax()))
        logits = step(ids, ids[-1:])
    return ids[len(prompt):], lead


def assert_scores_and_decodes_as(native, reference, ids: list[int], one_call: bool = True) -> None:
    """Our forward's logits of `ids` within CLOSE of transformers', and 32 greedy tokens the same as its. The
    greedy prompt is the first of a few random ones after which transformers' every choice leads the runner-up by
    more than twice CLOSE (a random model often has near ties, which Q8 activations may tip either way); it is
    picked by transformers' scores alone. `one_call`: ours runs on the one-call kernel forward, else on
    fast_llama's own over our projections."""
    runner = CachedModel(native, VOCAB)
    if one_call:
        assert runner.cache.native is not None  # the whole forward in one kernel call
    else:
        assert isinstance(runner.cache, FastLlama) and runner.cache.native is None
    logits = runner.forward(ids, keep=len(ids))
    expected = reference(input_ids=torch.tensor([ids])).logits[0]
    assert (logits - expected).abs().max() < CLOSE * (expected.max() - expected.min())
    rng = np.random.default_rng(0)
    for _ in range(GREEDY_TRIES):
        prompt = rng.integers(0, VOCAB, 8).tolist()
        theirs, lead = greedy(lambda ids, new: reference(input_ids=torch.tensor([ids])).logits[0, -1], prompt, 32)
        if lead > 2 * CLOSE:
            break
    else:
        pytest.fail(f"no prompt of {GREEDY_TRIES} after which transformers' greedy choices are clear")
    runner = CachedModel(native, VOCAB)
    assert greedy(lambda ids, new: runner.forward(new)[-1], prompt, 32)[0] == theirs


@pytest.mark.parametrize("types", TYPES, ids=list(TYPES))
def test_a_native_qwen3_scores_and_decodes_as_transformers_loads_the_file(tmp_path, types):
    native, reference = native_and_transformers(tmp_path, "qwen3", TYPES[types])
    assert_scores_and_decodes_as(native, reference, PROMPT)


def test_a_qwen3_without_its_q_k_norms_scores_otherwise(tmp_path):
    """Negative control: the same file with each head's q/k norm weights reset to ones is not transformers'
    (the kernel reads the norms' float32 `file_weight`)."""
    native, reference = native_and_transformers(tmp_path, "qwen3", Q4_K_M)
    for layer in native.model.layers:
        for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
            norm.file_weight = torch.ones_like(norm.file_weight)
    logits = CachedModel(native, VOCAB).forward(PROMPT, keep=len(PROMPT))
    expected = reference(input_ids=torch.tensor([PROMPT])).logits[0]
    assert (logits - expected).abs().max() > CLOSE * (expected.max() - expected.min())


@pytest.mark.parametrize("architecture,types", [("qwen3", "Q4_K_M"), ("qwen3", "Q8_0"), ("phi3", "Q4_K_M"),
                                                ("gemma3", "Q4_K_M")])
def test_a_native_model_gives_a_row_the_same_bits_alone_in_a_block_and_on_1_2_4_threads(tmp_path, architecture,
                                                                                        types):
    write_model(tmp_path / "m.gguf", architecture, TYPES[types])
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    runner = CachedModel(gguf_native.load(tmp_path / "m.gguf", config, torch.float32), VOCAB)
    tokens = [3, 7, 11, 5, 9, 2, 8, 4, 6, 1] * 8
    prompt, block = tokens[:70], tokens[70:]  # past a 64-position score tile, more rows than the 8 of a block
    runner.forward(prompt[:-1])
    threads = torch.get_num_threads()
    alone, together = {}, {}
    try:
        for count in (1, 2, 4):  # greedy speculation equals greedy AR at each thread count: rows alone = the block
            torch.set_num_threads(count)
            runner.rollback(len(prompt) - 1)
            alone[count] = torch.cat([runner.forward([t]) for t in prompt[-1:] + block])
            runner.rollback(len(prompt) - 1)
            together[count] = runner.forward(prompt[-1:] + block, keep=len(block) + 1)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(together[count], alone[count]) for count in alone)
    if architecture != "gemma3":  # the same bits on every count too (gemma3's norms and gelu run on torch's ops,
        # whose single rows may add in another order on another count: one ulp on an AMD EPYC, AVX-512 or AVX2)
        assert all(torch.equal(alone[count], alone[1]) for count in alone)


def test_a_projection_type_the_kernel_does_not_take_is_de_quantised_with_a_notice(tmp_path, monkeypatch, capsys):
    types = dict(Q4_K_M, attn_q=Q.IQ4_NL, ffn_up=Q.IQ4_XS)
    write_model(tmp_path / "m.gguf", "qwen3", types)
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    config.save_pretrained(tmp_path / "metadata")
    monkeypatch.setattr(loading, "gguf_metadata", lambda path: tmp_path / "metadata")  # no tokenizer in the file
    model = loading._native_model(str(tmp_path / "m.gguf"), torch.device("cpu"), torch.float32, "native")
    assert model is None
    notice = capsys.readouterr().err.strip()
    assert notice.startswith("specdec: blk.0.attn_q.weight is IQ4_NL; the ")
    assert notice.endswith(f"{tmp_path / 'm.gguf'} is de-quantised into torch.float32")
    assert len(notice.splitlines()) == 1
    # and transformers' de-quantised loading, the fallback's, reads the file
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32)
    assert torch.isfinite(reference(input_ids=torch.tensor([PROMPT])).logits).all()


@pytest.mark.skipif(not q4q8.available() or len(q4q8.executable_levels()) < 2, reason="the CPU has no AVX2")
def test_a_native_qwen3_gives_the_same_bits_on_every_instruction_set(tmp_path, monkeypatch):
    write_model(tmp_path / "m.gguf", "qwen3", Q4_K_M)
    native = gguf_native.load(tmp_path / "m.gguf", AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf"),
                              torch.float32)
    ids = [3, 7, 11, 5, 9, 2, 8, 4] * 10
    logits = {}
    for isa in q4q8.executable_levels():
        monkeypatch.setenv("SPECDEC_ISA", isa)
        q4q8.isa.cache_clear()
        logits[isa] = CachedModel(native, VOCAB).forward(ids, keep=len(ids))
    q4q8.isa.cache_clear()
    assert len(logits) >= 2 and all(torch.equal(found, logits["portable"]) for found in logits.values())


# ---------------------------------------------------------------------------------------------------- llama

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def llama3_rope_freqs() -> np.ndarray:
    """The divisor of each rope frequency that llama.cpp's converter writes as rope_freqs.weight for a Llama 3.1+
    model (convert_hf_to_gguf, LlamaModel.generate_extra_tensors), for LLAMA3_ROPE."""
    freqs = 1.0 / (LLAMA3_ROPE["rope_theta"] ** (np.arange(0, HEAD_DIM, 2, dtype=np.float32) / HEAD_DIM))
    old, low, high = (LLAMA3_ROPE[k] for k in ("original_max_position_embeddings", "low_freq_factor",
                                               "high_freq_factor"))
    factors = []
    for wavelen in 2 * np.pi / freqs:
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(LLAMA3_ROPE["factor"])
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / LLAMA3_ROPE["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def with_rope(model, rope_parameters: dict):
    """`model` rotating with `rope_parameters` (transformers' GGUF reader leaves a llama file's rope_freqs out)."""
    config = type(model.config).from_dict({**model.config.to_dict(), "rope_parameters": rope_parameters})
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    return model


@pytest.mark.parametrize("types", ["Q4_K_M", "Q8_0"])
def test_a_native_llama_scores_and_decodes_as_transformers_loads_the_file(tmp_path, types):
    native, reference = native_and_transformers(tmp_path, "llama", TYPES[types])
    assert_scores_and_decodes_as(native, reference, PROMPT)


def test_a_native_llama_3_file_rotates_as_transformers_llama3_rope(tmp_path):
    native, reference = native_and_transformers(tmp_path, "llama", Q4_K_M, rope_freqs=llama3_rope_freqs())
    with_rope(reference, LLAMA3_ROPE)
    assert_scores_and_decodes_as(native, reference, PROMPT * 6)  # past the original 64 positions


def test_a_llama_3_file_read_without_its_rope_freqs_scores_otherwise(tmp_path):
    """Negative control: the plain rope (what transformers' GGUF reader gives a Llama 3.1+ file) is not the
    model's."""
    native, reference = native_and_transformers(tmp_path, "llama", Q4_K_M, rope_freqs=llama3_rope_freqs())
    ids = PROMPT * 6
    logits = CachedModel(native, VOCAB).forward(ids, keep=len(ids))
    expected = reference(input_ids=torch.tensor([ids])).logits[0]
    assert (logits - expected).abs().max() > CLOSE * (expected.max() - expected.min())


# ---------------------------------------------------------------------------------------------------- phi3


@pytest.mark.parametrize("types", ["Q4_K_M", "Q8_0"])
def test_a_native_phi3_scores_and_decodes_as_transformers_loads_the_file(tmp_path, types):
    native, reference = native_and_transformers(tmp_path, "phi3", TYPES[types])
    assert isinstance(native.model.layers[0].self_attn.qkv_proj, gguf_native.NativeLinear)  # fused as in the file
    assert isinstance(native.model.layers[0].mlp.gate_up_proj, gguf_native.NativeLinear)
    assert_scores_and_decodes_as(native, reference, PROMPT)


def test_a_phi3_file_with_longrope_factors_is_refused_in_one_line(tmp_path):
    """Phi-3.5 / Phi-4-mini files keep LongRoPE's per-frequency factors as tensors, which the forward does not
    apply: such a file is left to the de-quantised path (whose rope is transformers' reading of the file)."""
    write_model(tmp_path / "m.gguf", "phi3", Q4_K_M, rope_factors=np.ones(HEAD_DIM // 2, np.float32))
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    with pytest.raises(gguf_native.NotNative, match="LongRoPE") as refused:
        gguf_native.load(tmp_path / "m.gguf", config, torch.float32)
    assert "\n" not in str(refused.value)


# ---------------------------------------------------------------------------------------------------- gemma3


@pytest.mark.parametrize("types", ["Q4_K_M", "Q8_0"])
def test_a_native_gemma3_scores_and_decodes_as_transformers_loads_the_file(tmp_path, types):
    """Gemma 3's norms around attention and MLP, (1 + w) multipliers as the file keeps them, √hidden embeddings,
    gelu-tanh MLP and sliding-window layers, on fast_llama's forward over our projections."""
    native, reference = native_and_transformers(tmp_path, "gemma3", TYPES[types])
    assert native.config.model_type == "gemma3_text" and "sliding_attention" in native.config.layer_types
    assert isinstance(native.model.layers[0].mlp.down_proj, gguf_native.NativeLinear)
    assert_scores_and_decodes_as(native, reference, PROMPT * 3, one_call=False)  # past the window


def test_a_gemma3_read_with_the_file_s_norm_values_as_weights_scores_otherwise(tmp_path):
    """Negative control: transformers' Gemma norm multiplies by 1 + weight; the file's values taken as the weight
    (no offset) are not the model."""
    write_model(tmp_path / "m.gguf", "gemma3", Q4_K_M)
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    native = gguf_native.load(tmp_path / "m.gguf", config, torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32)
    for module in native.modules():
        if hasattr(module, "file_weight"):
            module.weight.data = module.file_weight.clone()
    logits = native(input_ids=torch.tensor([PROMPT])).logits[0]
    expected = reference(input_ids=torch.tensor([PROMPT])).logits[0]
    assert (logits - expected).abs().max() > CLOSE * (expected.max() - expected.min())
