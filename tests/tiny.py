"""Tiny randomly initialised Llama models and a word-level tokenizer, built in memory: fast and offline."""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from engine.decoding.costs import CostModel
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.models.loading import LoadedModel

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(62)]
EOS_ID = 1


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")


def tiny_model(seed: int, layers: int = 2, vocab_size: int = len(WORDS), hidden: int = 32) -> LoadedModel:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, eos_token_id=EOS_ID, bos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    # Larger output weights make the random model's distributions peaked, like a trained LM's.
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.requires_grad_(False)
    return LoadedModel(name=f"tiny-{seed}", path=f"tiny-{seed}", model=model, tokenizer=tiny_tokenizer())


def cheap_draft_costs() -> CostModel:
    """Costs under which a draft is cheap beside a target block, far below anything a real timing can refresh
    them to: cost-aware rounds then plan the same way on any machine."""
    return CostModel([1e-7 + 1e-8 * k for k in range(9)], draft_step_s=1e-8, copy_s=1e-9, overhead_s=1e-8)


def tiny_decoder(target_seed: int = 0, draft_seed: int | None = 1) -> Decoder:
    """A target and (unless draft_seed is None) a different, smaller random draft, planning on cheap drafts."""
    target = tiny_model(target_seed)
    if draft_seed is None:
        decoder = Decoder(target)
    else:
        draft = tiny_model(draft_seed, layers=1)
        decoder = Decoder(target, DraftModelDrafter(draft, target.vocab_size), draft)
    decoder.set_costs(cheap_draft_costs())
    return decoder


PROMPT = [{"role": "user", "content": "w3 w7 w11 w5"}]
