"""Batch invariance of the fast forward: a position's logits are the same bits alone and inside a block.

This is what makes greedy speculative decoding return exactly greedy AR's tokens: the target scores each
position of a verification block as an AR step would. The negative controls check that the comparison really
catches a forward that is not invariant.
"""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from engine.decoding.caches import CachedModel
from engine.decoding.decoder import Decoder
from engine.events import DecodeSettings
from engine.models import fast_llama

# Wide enough that the MLP's down projection takes oneDNN's single-row kernel (inputs of 1536 and wider), which
# the forward has to steer around; two layers so that attention reads keys written by a previous block.
SHAPE = dict(vocab_size=96, hidden_size=64, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=2048)
PREFIX = list(range(3, 40))  # any ids: the cache holds these before the compared positions
CONTINUATION = [50, 7, 81, 12, 12, 64, 3, 90, 41]  # the nine positions compared: blocks of 2..9 and single steps
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def build(kind: str, dtype: torch.dtype):
    torch.manual_seed(0)
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**SHAPE, head_dim=16))
    else:
        model = LlamaForCausalLM(LlamaConfig(**SHAPE))
    return model.to(dtype).eval().requires_grad_(False)


def blocks_that_differ(model, vocab_size: int, prefix: list[int] = PREFIX,
                       continuation: list[int] = CONTINUATION) -> list[tuple[int, int]]:
    """(block length, row) of every row of a block whose logits are not those of the same position fed alone."""
    runner = CachedModel(model, vocab_size)
    assert isinstance(runner.cache, fast_llama.FastLlama)
    runner.forward(prefix)
    alone = torch.cat([runner.forward([token]) for token in continuation])  # (9, vocab): AR steps
    differ = []
    for n in range(2, len(continuation) + 1):
        runner.rollback(len(prefix))
        block = runner.forward(continuation[:n], keep=n)  # a verification block of n
        differ += [(n, row) for row in range(n) if not torch.equal(block[row], alone[row])]
    # A block that starts after a few single steps reads keys those steps wrote.
    runner.rollback(len(prefix) + 3)
    block = runner.forward(continuation[3:], keep=len(continuation) - 3)
    differ += [(-1, row) for row in range(len(block)) if not torch.equal(block[row], alone[3 + row])]
    return differ


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_every_position_of_a_block_scores_exactly_as_an_ar_step(kind, dtype):
    model = build(kind, dtype)
    assert blocks_that_differ(model, SHAPE["vocab_size"]) == []
    if dtype is torch.float32:  # what PairInfo.greedy_exact reports: our promise in float32
        assert CachedModel(model, SHAPE["vocab_size"]).batch_invariant
    # In half precision it is the CPU's kernels': on AVX-512 without bf16 the packed bfloat16 linear gives a 65-row
    # block (a round of 64 drafts) other bits than single rows, and the probe says so; typical rounds' blocks agree.


def test_transformers_forward_does_not_claim_batch_invariance():
    model = LlamaForCausalLM(LlamaConfig(**SHAPE, attention_bias=True)).eval()  # off the fast path
    assert not CachedModel(model, SHAPE["vocab_size"]).batch_invariant


def test_blocks_up_to_the_longest_gamma_are_invariant_too():
    model = build("llama", torch.float32)
    continuation = torch.randint(0, 96, (fast_llama.ROW_BY_ROW_MAX,), generator=torch.Generator().manual_seed(1))
    runner = CachedModel(model, 96)
    runner.forward(PREFIX)
    alone = torch.cat([runner.forward([token]) for token in continuation.tolist()])
    runner.rollback(len(PREFIX))
    assert torch.equal(runner.forward(continuation.tolist(), keep=len(continuation)), alone)


def _causal_block_attention(self, q, keys, values, start, window):
    """The forward's attention before it became invariant: one call over the block with a causal mask (the
    test model has no sliding window)."""
    n, heads, head_dim = q.shape
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(start) if n > 1 else None
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], keys[None, :, : start + n], values[None, :, : start + n], attn_mask=mask,
        scale=head_dim ** -0.5, enable_gqa=True)
    return out[0].transpose(0, 1).reshape(n, heads * head_dim)


def test_negative_control_a_causal_block_attention_is_caught(monkeypatch):
    # In float32: in bfloat16 this tiny model rounds the attention's last-bit differences away.
    monkeypatch.setattr(fast_llama.FastLlama, "_attention", _causal_block_attention)
    assert blocks_that_differ(build("llama", torch.float32), SHAPE["vocab_size"]) != []


def test_negative_control_mkl_linear_layers_are_caught_and_not_claimed(monkeypatch):
    monkeypatch.setattr(fast_llama.PackedWeight, "usable", staticmethod(lambda weight: False))  # F.linear
    model = build("llama", torch.float32)
    assert blocks_that_differ(model, SHAPE["vocab_size"]) != []
    assert not CachedModel(model, SHAPE["vocab_size"]).batch_invariant  # the probe sees it too


@pytest.mark.embedded
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_embedded_target_is_batch_invariant(dtype):
    decoder = Decoder.load("embedded", None, device="cpu", dtype=dtype)
    ids = decoder.chat_ids([{"role": "user", "content": "Why is the sky blue?"}])
    continuation = decoder.tokenizer(" Because sunlight scatters off the air.")["input_ids"][:9]
    assert blocks_that_differ(decoder.target.model, decoder.vocab_size, ids, continuation) == []


def _two_turns(decoder: Decoder, settings: DecodeSettings) -> list[list[int]]:
    """The token ids of two chat turns, the second decoded on the cache the first left."""
    decoder.reset()
    messages = [{"role": "user", "content": "Write two sentences about the sea."}]
    replies = []
    for follow_up in ["And about mountains?", None]:
        replies.append([t.token_id for e in decoder.generate(messages, settings) for t in e.emitted])
        if follow_up:
            messages += [{"role": "assistant", "content": decoder.tokenizer.decode(replies[-1], skip_special_tokens=True)},
                         {"role": "user", "content": follow_up}]
    return replies


@pytest.mark.embedded
def test_greedy_speculative_decoding_equals_greedy_ar_on_the_embedded_pair():
    decoder = Decoder.load("embedded", "embedded-draft", device="cpu")  # the default dtype of this CPU
    assert decoder.info().greedy_exact
    ar = _two_turns(decoder, DecodeSettings(mode="ar", max_new_tokens=40))
    assert _two_turns(decoder, DecodeSettings(gamma=6, max_new_tokens=40)) == ar  # the defaults: adaptive, lookup
    assert _two_turns(decoder, DecodeSettings(gamma=3, stop_below=0.0, lookup=False, max_new_tokens=40)) == ar
