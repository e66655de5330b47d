"""A byte-level tokenizer and a 'chain' model that greedily spells out a fixed text, one byte per token.

Every character of CHAIN_TEXT is 2 to 4 UTF-8 bytes, each its own token, so each character spans several tokens;
all its bytes are distinct, so "the token after x" is a function of x, which one layer with its output
projections zeroed computes exactly: the residual stream carries the one-hot embedding straight to the head.
"""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from engine.models.loading import LoadedModel

CHAIN_TEXT = "🐉日語Ωж"
EOS = "<|im_end|>"


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte (GPT-2's byte-to-character table), plus <|im_end|> as the special end of text."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS)
    tokenizer.add_special_tokens({"eos_token": EOS})
    return tokenizer


def chain_ids(tokenizer: PreTrainedTokenizerFast, text: str = CHAIN_TEXT) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def chain_model(tokenizer: PreTrainedTokenizerFast, chain: list[int], window: int = 512) -> LoadedModel:
    """Greedy decoding after any token outside `chain` spells `chain` and then emits EOS."""
    vocab = len(tokenizer)
    eos = tokenizer.eos_token_id
    config = LlamaConfig(vocab_size=vocab, hidden_size=vocab + (-vocab % 8), intermediate_size=8,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=window, eos_token_id=eos, bos_token_id=None, pad_token_id=None,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    following = {token: chain[0] for token in range(vocab)}
    following.update(zip(chain, chain[1:] + [eos]))
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        model.model.layers[0].self_attn.o_proj.weight.zero_()
        model.model.layers[0].mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        for token, after in following.items():
            model.lm_head.weight[after, token] = 30.0
    model.requires_grad_(False)
    return LoadedModel(name="chain", path="chain", model=model, tokenizer=tokenizer)
