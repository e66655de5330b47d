"""A model with its KV cache and the token ids that cache holds: the one owner of rollback.

transformers' `DynamicCache.crop(-n)` drops the last n positions (this release refuses the legacy positive
argument), so rolling back to the accepted prefix is one call, and the ids we keep beside the cache let a new
chat turn reuse the longest cached prefix of the conversation.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


class CachedModel:
    def __init__(self, model: PreTrainedModel, vocab_size: int, draft_vocab: list[int] | None = None):
        self.model = model
        self.vocab_size = vocab_size  # logits beyond this (padding rows) are dropped
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []
        # A draft vocabulary (FR-Spec) scores only its frequent tokens: a smaller LM head, same model.
        self.draft_vocab = None if draft_vocab is None else torch.tensor(draft_vocab, device=model.device)
        if self.draft_vocab is not None:
            head = model.get_output_embeddings().weight
            self.draft_vocab_head = head[self.draft_vocab].detach()  # (draft_vocab, hidden)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], keep: int = 1) -> torch.Tensor:
        """Feed `new_tokens` after the cached ones; return float logits (keep, vocab) of the last `keep` positions."""
        ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)
        if self.draft_vocab is None:
            out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
            logits = out.logits[0, :, : self.vocab_size].float()
        else:
            hidden = self.model.get_decoder()(input_ids=ids, cache=self.cache, use_cache=True)
            subset_logits = hidden.last_hidden_state[0, -keep:] @ self.draft_vocab_head.T
            logits = torch.full((keep, self.vocab_size), float("-inf"), device=self.device)
            logits[:, self.draft_vocab] = subset_logits.float()
        self.tokens.extend(new_tokens)
        return logits

    def rollback(self, length: int) -> None:
        """Forget every position from `length` on."""
        extra = len(self.tokens) - length
        if extra < 0:
            raise ValueError(f"cannot roll back to {length}: only {len(self.tokens)} tokens are cached")
        if extra:
            self.cache.crop(-extra)
            del self.tokens[length:]
        assert self.cache.get_seq_length() == len(self.tokens), "KV cache and token ids disagree"

    def common_prefix(self, ids: list[int]) -> int:
        n = 0
        for cached, new in zip(self.tokens, ids):
            if cached != new:
                break
            n += 1
        return n

    def prefill(self, ids: list[int]) -> None:
        """Make the cache hold ids[:-1], reusing the longest cached prefix: the last id is fed by the next step."""
        self.rollback(min(self.common_prefix(ids), len(ids) - 1))
        if len(self.tokens) < len(ids) - 1:
            self.forward(ids[len(self.tokens): -1])

    def reset(self) -> None:
        self.rollback(0)
