"""Random-weight models of named shapes, built in memory from a config: what speculation would give on this
hardware for a model size, before any weights are fetched (`specdec bench --shapes TARGET:DRAFT`).

Speed does not depend on the weights' values, only on the shapes, so a bench row of such a pair is a fair measure
of the machine; its acceptance is not, and every row is labelled synthetic. `perfect` pairs a target whose layers
after the draft's add nothing (their output projections are zero, so the residual stream passes unchanged) with a
draft that is exactly the target's first layers, embedding, norm and head: every greedy draft is kept (α = 1), so
the rows show what drafting costs and gains when the draft is always right.
"""
from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from engine.models.loading import LoadedModel

# Qwen3's published configs (config.json on the hub), trimmed to what the forward uses
SHAPES = {
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    # for tests and a quick look: a few MB (the embedded tokenizer's vocabulary)
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=49152, tie_word_embeddings=True),
}
PERFECT = "perfect"
PERFECT_DRAFT_LAYERS = 4
TOKENIZER = "embedded"  # ids for the prompts: any tokenizer whose ids fit the vocabulary (49,152 ≤ 151,936)


class ShapeError(ValueError):
    """A --shapes value that names no shape; the message lists the known ones."""


def parse(spec: str) -> tuple[str, str]:
    """'TARGET:DRAFT' (each a SHAPES name) or 'perfect:TARGET' (the target's own first layers as the draft)."""
    target, _, draft = spec.partition(":")
    if target == PERFECT:
        target, draft = draft, PERFECT
    if target not in SHAPES or (draft != PERFECT and draft not in SHAPES):
        raise ShapeError(f"--shapes {spec!r}: give TARGET:DRAFT or perfect:TARGET, each of {', '.join(SHAPES)}")
    return target, draft


def config(shape: str, **changes) -> Qwen3Config:
    return Qwen3Config(**{**SHAPES[shape], **changes}, max_position_embeddings=4096, rope_theta=1e6,
                       eos_token_id=None, bos_token_id=None, pad_token_id=None)


def _model(cfg: Qwen3Config, device: torch.device, dtype: torch.dtype, seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    return model.eval().requires_grad_(False)


def pair(spec: str, device: torch.device, dtype: torch.dtype, tokenizer=None) -> tuple[LoadedModel, LoadedModel]:
    """The target and draft `spec` names (see `parse`), random weights on `device` in `dtype`."""
    target_shape, draft_shape = parse(spec)
    tokenizer = tokenizer or _tokenizer(SHAPES[target_shape]["vocab_size"])
    target = _model(config(target_shape), device, dtype, seed=0)
    if draft_shape == PERFECT:
        for layer in target.model.layers[PERFECT_DRAFT_LAYERS:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        draft = _model(config(target_shape, num_hidden_layers=PERFECT_DRAFT_LAYERS), device, dtype, seed=1)
        draft.load_state_dict(target.state_dict(), strict=False)  # the first layers, embedding, norm and head
    else:
        draft = _model(config(draft_shape), device, dtype, seed=1)
    name = f"synthetic {target_shape}"
    draft_name = f"synthetic {target_shape} first {PERFECT_DRAFT_LAYERS} layers" if draft_shape == PERFECT \
        else f"synthetic {draft_shape}"
    return (LoadedModel(name, name, target, tokenizer), LoadedModel(draft_name, draft_name, draft, tokenizer))


def _tokenizer(vocab_size: int):
    from engine.models.loading import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    if len(tokenizer) > vocab_size:
        raise ShapeError(f"the {TOKENIZER} tokenizer has {len(tokenizer)} ids, more than the shape's {vocab_size}")
    return tokenizer
