"""Drafters: whatever proposes γ tokens and the distribution q each was drawn from.

The decoder only sees the `Drafter` protocol (after transformers' candidate generators), so another drafter
(n-gram lookup, early exit, ...) slots in without touching verification.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from engine.decoding.caches import CachedModel
from engine.decoding.costs import Acceptance, RoundPlanner
from engine.models.embedded import DRAFT_VOCAB_FILE
from engine.events import DecodeSettings
from engine.models.fast_llama import ROW_BY_ROW_MAX
from engine.models.loading import LoadedModel
from engine.decoding.sampling import choose, sample_on_device, warp

# A native GGUF draft with a large vocabulary and no draft vocabulary of its own drafts from its first token ids: BPE
# vocabularies number tokens in merge order, roughly by frequency, and the Qwen2.5 tokenizer's first 65,536 ids
# cover 97.6 % of held-out code and 98.1 % of held-out prose (docs/qwen-pair.md), at under half the head's rows.
MERGE_ORDER_VOCAB = 65536
LOOKUP_NGRAM = 3  # a context match must cover the last 3 tokens
LOOKUP_PRECISION = 0.83  # how often such a copy equals the target's choice (measured on the evaluation answers)
# A draft model more than this many tokens behind the sequence (a prompt it reads with its first draft, the tokens of
# plain rounds) reads all but the last apart from its step, timed as Proposal.read_s; fewer ride in the step's block.
# It reads them in blocks of at most fast_llama.ROW_BY_ROW_MAX rows: a longer block is read by a matrix product
# where the CPU has AMX, and each block length that product meets first costs oneDNN's set-up (a draft reading 70
# tokens mid-reply: 35 ms that way, 10.7 ms on the kernel; Xeon with AMX, 2 threads).
READ_APART = 4
# A copied run goes on past γ (which bounds the draft model's drafts) up to this many drafts: an answer that repeats
# a pasted function copies dozens of tokens in a row, and a block of them costs a fraction of a step a row
COPY_RUN_MAX = 32


@dataclass
class Proposal:
    tokens: list[int]  # x_1..x_γ
    probs: torch.Tensor  # (γ, vocab): q each draft was drawn from: warped exactly like p, or 1 on a copied token
    kinds: list[str] = field(default_factory=list)  # "model" or "copy" for each draft (what it cost)
    dropped: list[str] = field(default_factory=list)  # the kinds of drafts made after these, not worth verifying
    # The tokens the draft read apart before its first step (READ_APART), and the seconds that took: what resuming
    # drafting costs once, not what this round's drafts cost, so rounds are judged without it.
    read: int = 0
    read_s: float = 0.0


class Drafter(Protocol):
    runner: CachedModel | None  # the draft model's cache (timed, warmed, read in beside the target's); None: no model

    def prefill(self, prompt: list[int]) -> None:
        """Get ready to draft after `prompt` (a new reply; earlier turns may still be cached)."""

    def propose(self, sequence: list[int], gamma: int, settings: DecodeSettings, generator: torch.Generator,
                planner: RoundPlanner, copies: int | None = None) -> Proposal:
        """Draft 0 to γ tokens that follow `sequence` (prompt + reply so far); with `settings.cost_aware` the
        planner decides how many (engine.decoding.costs), and copied ones may run on to `copies` (None: γ)."""

    def update(self, n_accepted: int) -> None:
        """The target kept the first `n_accepted` proposals of the last `propose`; forget the rest."""

    def cached_length(self) -> int:
        """How many tokens of the sequence the drafter's state covers (checked by the decoder every round)."""

    def reset(self) -> None:
        """Drop all state (a new chat)."""


class ContinuationIndex:
    """Prompt lookup: what followed the latest earlier occurrence of a sequence's last `n` tokens.

    Each n-gram maps to the position that followed its latest occurrence, kept up to date as the sequence grows and
    rolled back where it changes (a rejected draft, another conversation): a lookup costs what the new tokens
    cost, not the conversation's length (searching 2,580 tokens afresh took 0.4 ms of a 19 ms round), and a
    matched span's whole continuation is a slice from that position (`span`), however long the paste."""

    def __init__(self, n: int = LOOKUP_NGRAM):
        self.n = n
        self.tokens: list[int] = []
        self.followers: dict[tuple[int, ...], int] = {}  # n-gram -> the position of the token after its latest one
        self.replaced: list[int | None] = []  # [i - n]: what position i's n-gram mapped to before it (None: nothing)

    def continuation(self, tokens: list[int]) -> int | None:
        """The token that followed the latest occurrence of tokens[-n:] before the end of `tokens`, if any."""
        found = self.span(tokens, 1)
        return found[1][0] if found else None

    def span(self, tokens: list[int], most: int) -> tuple[int, list[int]] | None:
        """(source, copied): up to `most` tokens that followed the latest earlier occurrence of tokens[-n:], from
        position `source` of `tokens` on; None where the n-gram occurred nowhere before."""
        if self.tokens != tokens[:len(self.tokens)]:
            self._truncate(common_prefix(self.tokens, tokens))
        for token in tokens[len(self.tokens):]:
            if len(self.tokens) >= self.n:
                key = tuple(self.tokens[-self.n:])
                self.replaced.append(self.followers.get(key))
                self.followers[key] = len(self.tokens)
            self.tokens.append(token)
        source = self.followers.get(tuple(tokens[-self.n:])) if len(tokens) > self.n else None
        return None if source is None else (source, tokens[source:source + most])

    def _truncate(self, length: int) -> None:
        while len(self.tokens) > length:
            self.tokens.pop()
            if len(self.tokens) >= self.n:
                key, before = tuple(self.tokens[-self.n:]), self.replaced.pop()
                if before is None:
                    del self.followers[key]
                else:
                    self.followers[key] = before


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two lists (by halving: each comparison runs at C speed)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _keep_estimate(q: torch.Tensor, settings: DecodeSettings) -> float:
    """The draft's own estimate that the target keeps its proposal: q's top probability for greedy drafts, the
    chance that two draws from q agree for sampled ones (both track the measured acceptance on held-out answers)."""
    return (q.max() if settings.greedy else q.square().sum()).item()


def copied_chances(acceptance: Acceptance, kinds: Sequence[str], count: int) -> list[float]:
    """The chances of `count` copies made after `kinds`, by their places in the run of copies they go on or start."""
    place = len(kinds) - next((i + 1 for i, kind in enumerate(reversed(kinds)) if kind != "copy"), 0) + 1
    return acceptance.copy_run(acceptance.calibrated(LOOKUP_PRECISION, "copy"), place, count)


class DraftModelDrafter:
    """A small causal LM with its own KV cache, drafting autoregressively (the seed's M_q).

    With `settings.lookup`, a position whose last few tokens already occurred in the conversation proposes the
    token that followed them, with q = 1 on it: a small draft copies less well (on the evaluation answers the
    embedded draft is right at 60 % of such positions, the copy at 83 %), and the target repeats itself often.
    q stays the distribution the proposal was really drawn from, so verification remains exact.
    """

    def __init__(self, draft: LoadedModel, vocab_size: int, draft_vocab: list[int] | None = None, *,
                 int8: bool = True):
        """`int8`: compact weights on CPU (caches.CachedModel), where a draft step costs what its weights weigh."""
        self.draft = draft
        self.runner = CachedModel(draft.model, vocab_size, draft_vocab, int8=int8)
        self._proposed_from = 0  # sequence length when the last proposal started
        self._kinds: list[str] = []  # the last proposal's drafts: "model" or "copy"
        self._estimates: list[float] = []  # and their keep estimates
        self._dropped: str | None = None  # and the kind of a draft it made beyond them not worth verifying
        self._no_drafts = torch.empty((0, vocab_size), device=self.runner.device)
        self._lookup = ContinuationIndex()
        self._acceptance: Acceptance | None = None  # the planner's, told each verdict
        self._read = (0, 0.0)  # the current proposal's reading (step_logits): tokens, seconds
        self._prompt_end = 0  # the length of the prompt whose reading was deferred (`defer`)

    @classmethod
    def for_model(cls, draft: LoadedModel, vocab_size: int, *, int8: bool = True) -> "DraftModelDrafter":
        """Use the draft vocabulary shipped beside the model's weights, if there is one (a native GGUF's: its
        first MERGE_ORDER_VOCAB ids, where it has more)."""
        vocab_file = Path(draft.path) / DRAFT_VOCAB_FILE
        draft_vocab = json.loads(vocab_file.read_text()) if vocab_file.is_file() else None
        if draft_vocab is None and draft.weights == "native" and vocab_size > MERGE_ORDER_VOCAB:
            draft_vocab = list(range(MERGE_ORDER_VOCAB))
        return cls(draft, vocab_size, draft_vocab, int8=int8)

    def prefill(self, prompt: list[int]) -> None:
        self.runner.prefill(prompt)
        self._prompt_end = 0

    def defer(self, prompt: list[int], most: int) -> bool:
        """Whether what the cache lacks of `prompt` is at most `most` positions: then, as `prefill`, but those are
        read with the next draft step (`step_logits`). Either way the cache keeps only what it holds of `prompt`."""
        cached = min(self.runner.common_prefix(prompt), len(prompt) - 1)
        self.runner.rollback(cached)
        if len(prompt) - 1 - cached > most:
            return False
        self._prompt_end = len(prompt) - 1
        return True

    def step_logits(self, sequence: list[int]) -> torch.Tensor:
        """The draft's logits after `sequence`, feeding it whatever it has not seen (a round that drafted nothing
        or only copies leaves it behind): a few tokens in the step's block, more read apart first (`read_s`)."""
        behind = sequence[len(self.runner):-1]
        if len(behind) >= READ_APART:
            began = time.perf_counter()
            for start in range(0, len(behind), ROW_BY_ROW_MAX):
                self.runner.forward_rows(behind[start:start + ROW_BY_ROW_MAX])
            self._read = (self._read[0] + len(behind), self._read[1] + time.perf_counter() - began)
        return self.runner.forward_rows(sequence[len(self.runner):])[-1]

    def propose(self, sequence: list[int], gamma: int, settings: DecodeSettings, generator: torch.Generator,
                planner: RoundPlanner, copies: int | None = None) -> Proposal:
        self._proposed_from = len(sequence)
        self._acceptance = planner.acceptance
        self._read = (0, 0.0)
        if self.runner.on_device:
            return self._propose_on_device(sequence, gamma, settings, generator, planner)
        # past γ only where the planner prices the longer block; the confidence rule's rounds draft γ
        copies = max(gamma, copies) if copies is not None and settings.cost_aware else gamma
        tokens, kinds, chances, q_rows = [], [], [], []
        self._estimates = []
        all_kept = 1.0  # the confidence rule's estimate that every draft so far will be kept
        while len(tokens) < copies and (settings.cost_aware or all_kept >= settings.stop_below):
            found = self._lookup.span(sequence + tokens, copies - len(tokens)) if settings.lookup else None
            if found is None and len(tokens) >= gamma:
                break
            kind = "model" if found is None else "copy"
            # Whether one more draft pays is decided from this round's drafts, earlier rounds' verdicts and the
            # measured costs, never from this round's p: every position's output is still distributed as p.
            # The planner prices the reading of what rounds left unread; a deferred prompt's is not: read beside the
            # target, it was paid in every reply, and priced it kept a pair whose drafts pay on prose (the Qwen pair:
            # ~3 ms a token beside a 51 ms step) from drafting a reply's first rounds.
            unread = max(0, len(sequence) + len(tokens) - 1 - max(len(self.runner), self._prompt_end))
            if settings.cost_aware and not planner.draft_more(kinds, chances, gamma if found is None else copies,
                                                              kind, later_kind=kind, unread=unread):
                break
            if found is None:
                q = warp(self.step_logits(sequence + tokens), settings)
                made = [self.runner.token_id(choose(q, settings, generator))]
                self._estimates.append(_keep_estimate(q, settings))
                chance_of = [planner.acceptance.calibrated(self._estimates[-1], kind)]
                q_rows.append(q)
            else:
                made = found[1]
                chance_of = copied_chances(planner.acceptance, kinds, len(made))
                self._estimates += [LOOKUP_PRECISION] * len(made)
                q_rows += [None] * len(made)
            for token, chance in zip(made, chance_of):
                tokens.append(token)
                kinds.append(kind)
                chances.append(chance)
                all_kept *= chance
                if not settings.cost_aware and all_kept < settings.stop_below:
                    break
        if settings.cost_aware:  # a draft made before its chance was known may not be worth verifying
            del tokens[planner.best_length(kinds, chances):]
        self._kinds = kinds[: len(tokens)]
        self._dropped = kinds[len(tokens)] if len(kinds) > len(tokens) else None
        return self._proposal(tokens, q_rows[: len(tokens)], self._kinds, kinds[len(tokens):])

    def _propose_on_device(self, sequence: list[int], gamma: int, settings: DecodeSettings,
                           generator: torch.Generator, planner: RoundPlanner) -> Proposal:
        """`propose` on a GPU: how many drafts to make is decided before the first (from the acceptance measured at
        each position), each draft is fed to the next step as a device tensor, and the drafts and their keep
        estimates are read back once, at the end: a read per draft would stall the GPU between steps. What the
        drafts' own estimates say is applied after they are made (the cost-aware length, the confidence stop), so
        the tokens proposed are the ones the host loop would propose but for the drafts a step later it drops.
        Copies (`settings.lookup`) need the drafts on the host, and a model draft here costs less than that read."""
        planned = planner.planned_length(gamma) if settings.cost_aware else gamma
        if not planned:
            self._kinds, self._estimates, self._dropped = [], [], None
            return Proposal([], self._no_drafts, [])
        runner = self.runner
        fed = sequence[len(runner):]  # what the draft has not seen, then each draft but the last
        pending = torch.tensor(fed, dtype=torch.long, device=runner.device)
        q_rows, drafted, estimates = [], [], []
        for _ in range(planned):
            q = warp(runner.feed(pending), settings)[0]
            row = q.argmax() if settings.greedy else sample_on_device(q, generator)
            pending = (row if runner.draft_vocab is None else runner.draft_vocab[row]).view(1)
            q_rows.append(q)
            drafted.append(pending)
            estimates.append(q.max() if settings.greedy else q.square().sum())
        tokens = torch.cat(drafted).tolist()  # the round's one wait for the device
        estimates = torch.stack(estimates).tolist()
        runner.tokens.extend(fed + tokens[:-1])
        kinds = ["model"] * planned
        chances = [planner.acceptance.calibrated(e, "model") for e in estimates]
        if settings.cost_aware:
            kept = planner.best_length(kinds, chances)
        else:
            kept, all_kept = 0, 1.0
            while kept < planned and all_kept >= settings.stop_below:
                all_kept *= chances[kept]
                kept += 1
        self._kinds, self._estimates = kinds[:kept], estimates
        # as the host loop's: made, not worth verifying
        self._dropped = "model" if settings.cost_aware and kept < planned else None
        return self._proposal(tokens[:kept], q_rows[:kept], self._kinds, kinds[kept:])

    def _proposal(self, tokens: list[int], q_rows: list[torch.Tensor | None], kinds: list[str],
                  dropped: list[str]) -> Proposal:
        """q over the whole vocabulary: the warped draft rows spread from the head's rows, 1 on a copied token."""
        if not tokens:  # most rounds beside a fast target: no tensor work for them
            return Proposal([], self._no_drafts, [], dropped, *self._read)
        draft_vocab = self.runner.draft_vocab
        width = self.runner.vocab_size if draft_vocab is None else len(draft_vocab)
        rows = torch.zeros((len(tokens), width), device=self.runner.device)
        for i, q in enumerate(q_rows):
            if q is not None:
                rows[i] = q
        probs = self.runner.to_vocab(rows, 0.0)
        copies = [i for i, q in enumerate(q_rows) if q is None]
        probs[copies, [tokens[i] for i in copies]] = 1.0  # a copied row is all zeros until here
        return Proposal(tokens, probs, list(kinds), dropped, *self._read)

    def update(self, n_accepted: int) -> None:
        self.runner.rollback(min(len(self.runner), self._proposed_from + n_accepted))
        if self._acceptance is not None:
            self._acceptance.record(self._kinds, self._estimates, n_accepted, self._dropped)

    def cached_length(self) -> int:
        return len(self.runner)

    def reset(self) -> None:
        self.runner.reset()
        self._lookup = ContinuationIndex()
        self._prompt_end = 0


class LookupDrafter:
    """Prompt lookup alone: every draft is a copy of what followed an earlier occurrence of the last few tokens,
    with q = 1 on it, and no draft model at all. A round drafts nothing where nothing matches (a plain target
    step). With `settings.cost_aware` the planner prices each draft at the copy cost; `settings.lookup` does not
    apply (copying is all this drafter does)."""

    runner = None  # no draft model

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu"):
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._covered = 0  # the sequence up to its last token, as the target's cache holds it
        self._proposed_from = 0
        self._estimates: list[float] = []
        self._acceptance: Acceptance | None = None
        self._lookup = ContinuationIndex()

    def prefill(self, prompt: list[int]) -> None:
        self._covered = len(prompt) - 1

    def propose(self, sequence: list[int], gamma: int, settings: DecodeSettings, generator: torch.Generator,
                planner: RoundPlanner, copies: int | None = None) -> Proposal:
        self._proposed_from = len(sequence)
        self._acceptance = planner.acceptance
        # past γ only where the planner prices the longer block; the confidence rule's rounds draft γ
        copies = max(gamma, copies) if copies is not None and settings.cost_aware else gamma
        tokens, chances = [], []
        found = self._lookup.span(sequence, copies)
        if found is not None and (not settings.cost_aware or planner.draft_more([], [], copies, "copy",
                                                                                later_kind="copy")):
            tokens, chances = found[1], copied_chances(planner.acceptance, [], len(found[1]))
        if settings.cost_aware:
            del tokens[planner.best_length(["copy"] * len(tokens), chances):]
        else:
            all_kept, kept = 1.0, 0
            while kept < len(tokens) and all_kept >= settings.stop_below:
                all_kept *= chances[kept]
                kept += 1
            del tokens[kept:]
        self._estimates = [LOOKUP_PRECISION] * len(tokens)
        probs = torch.zeros((len(tokens), self.vocab_size), device=self.device)
        probs[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
        return Proposal(tokens, probs, ["copy"] * len(tokens))

    def update(self, n_accepted: int) -> None:
        self._covered = self._proposed_from + n_accepted
        if self._acceptance is not None:
            self._acceptance.record(["copy"] * len(self._estimates), self._estimates, n_accepted)

    def cached_length(self) -> int:
        return self._covered

    def reset(self) -> None:
        self._covered = 0
        self._lookup = ContinuationIndex()
