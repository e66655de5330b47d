"""Drafters: whatever proposes γ tokens and the distribution q each was drawn from.

The decoder only sees the `Drafter` protocol (after transformers' candidate generators), so another drafter
(n-gram lookup, early exit, ...) slots in without touching verification.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from engine.decoding.caches import CachedModel
from engine.models.embedded import DRAFT_VOCAB_FILE
from engine.events import DecodeSettings
from engine.models.loading import LoadedModel
from engine.decoding.sampling import choose, warp

LOOKUP_NGRAM = 3  # a context match must cover the last 3 tokens
LOOKUP_PRECISION = 0.83  # how often such a copy equals the target's choice (measured on the evaluation answers)
# The keep estimates are calibrated on the draft's training distribution; on other text it is kept less often
# than it expects. The ratio kept / estimated over recent verdicts corrects for that: it starts at 1 with the
# weight of CALIBRATION_PRIOR drafts, and every round discounts the past by CALIBRATION_DECAY.
CALIBRATION_PRIOR = 10.0
CALIBRATION_DECAY = 0.98


@dataclass
class Proposal:
    tokens: list[int]  # x_1..x_γ
    probs: torch.Tensor  # (γ, vocab): q each draft was drawn from: warped exactly like p, or 1 on a copied token


class Drafter(Protocol):
    def prefill(self, prompt: list[int]) -> None:
        """Get ready to draft after `prompt` (a new reply; earlier turns may still be cached)."""

    def propose(self, sequence: list[int], gamma: int, settings: DecodeSettings,
                generator: torch.Generator) -> Proposal:
        """Draft 1 to γ tokens that follow `sequence` (prompt + reply so far)."""

    def update(self, n_accepted: int) -> None:
        """The target kept the first `n_accepted` proposals of the last `propose`; forget the rest."""

    def cached_length(self) -> int:
        """How many tokens of the sequence the drafter's state covers (checked by the decoder every round)."""

    def reset(self) -> None:
        """Drop all state (a new chat)."""


def lookup_continuation(tokens: list[int], n: int = LOOKUP_NGRAM) -> int | None:
    """The token that followed the latest earlier occurrence of the last `n` tokens, if any (prompt lookup)."""
    if len(tokens) <= n:
        return None
    context = torch.tensor(tokens)
    windows = context[:-1].unfold(0, n, 1)  # tokens[i:i+n] for every i that has a follower, the suffix excluded
    starts = (windows == context[-n:]).all(-1).nonzero()
    return tokens[starts[-1].item() + n] if len(starts) else None


def _keep_estimate(q: torch.Tensor, settings: DecodeSettings) -> float:
    """The draft's own estimate that the target keeps its proposal: q's top probability for greedy drafts, the
    chance that two draws from q agree for sampled ones (both track the measured acceptance on held-out answers)."""
    return (q.max() if settings.greedy else q.square().sum()).item()


class DraftModelDrafter:
    """A small causal LM with its own KV cache, drafting autoregressively (the seed's M_q).

    With `settings.lookup`, a position whose last few tokens already occurred in the conversation proposes the
    token that followed them, with q = 1 on it: a small draft copies less well (on the evaluation answers the
    embedded draft is right at 60 % of such positions, the copy at 83 %), and the target repeats itself often.
    q stays the distribution the proposal was really drawn from, so verification remains exact.
    """

    def __init__(self, draft: LoadedModel, vocab_size: int, draft_vocab: list[int] | None = None, *,
                 int8: bool = True):
        """`int8`: weight-only int8 on CPU, where a draft step costs what its weights weigh (half of bf16)."""
        self.draft = draft
        self.runner = CachedModel(draft.model, vocab_size, draft_vocab, int8=int8)
        self._proposed_from = 0  # sequence length when the last proposal started
        self._estimates: list[float] = []  # the last proposal's keep estimate for each draft
        self._kept = self._estimated = CALIBRATION_PRIOR

    @classmethod
    def for_model(cls, draft: LoadedModel, vocab_size: int, *, int8: bool = True) -> "DraftModelDrafter":
        """Use the draft vocabulary shipped beside the model's weights, if there is one."""
        vocab_file = Path(draft.path) / DRAFT_VOCAB_FILE
        draft_vocab = json.loads(vocab_file.read_text()) if vocab_file.is_file() else None
        return cls(draft, vocab_size, draft_vocab, int8=int8)

    def prefill(self, prompt: list[int]) -> None:
        self.runner.prefill(prompt)

    def propose(self, sequence: list[int], gamma: int, settings: DecodeSettings,
                generator: torch.Generator) -> Proposal:
        # The cache holds a prefix of `sequence`: one token behind it after a rejection, two after a round
        # where all γ were accepted (the last draft was never fed); feeding both at once costs one forward.
        self._proposed_from = len(sequence)
        logits = self.runner.forward_rows(sequence[len(self.runner):])
        # q over the head's rows (the draft vocabulary: the draft gives q = 0 elsewhere), spread once at the end
        tokens, copies, q_rows = [], [], torch.zeros((gamma, logits.shape[-1]), device=logits.device)
        all_accepted = 1.0  # the drafter's own estimate that every draft so far will be accepted
        calibration = self._kept / self._estimated
        self._estimates = []
        for i in range(gamma):
            copied = lookup_continuation(sequence + tokens) if settings.lookup else None
            if copied is None:
                q_rows[i] = warp(logits[-1], settings)
                tokens.append(self.runner.token_id(choose(q_rows[i], settings, generator)))
                self._estimates.append(_keep_estimate(q_rows[i], settings))
            else:
                tokens.append(copied)
                copies.append(i)
                self._estimates.append(LOOKUP_PRECISION)
            all_accepted *= min(1.0, self._estimates[-1] * calibration)
            # A further draft only pays if it is likely to be reached and kept. The decision uses this round's
            # drafts and earlier rounds' verdicts, never this round's p, so every position's output is still
            # distributed as p (see DecodeSettings).
            if i == gamma - 1 or all_accepted < settings.stop_below:
                break
            logits = self.runner.forward_rows(tokens[-1:])
        probs = self.runner.to_vocab(q_rows[: len(tokens)], 0.0)
        probs[copies, [tokens[i] for i in copies]] = 1.0  # a copied row is all zeros until here
        return Proposal(tokens, probs)

    def update(self, n_accepted: int) -> None:
        self.runner.rollback(min(len(self.runner), self._proposed_from + n_accepted))
        verified = self._estimates[: n_accepted + 1]  # the target looked at the accepted ones and the first rejection
        self._kept = CALIBRATION_DECAY * self._kept + n_accepted
        self._estimated = CALIBRATION_DECAY * self._estimated + sum(verified)

    def cached_length(self) -> int:
        return len(self.runner)

    def reset(self) -> None:
        self.runner.reset()
        self._kept = self._estimated = CALIBRATION_PRIOR
