"""The round loop: speculative decoding (or plain AR, the same loop without a drafter) as a generator of events.

Each reply: fit the conversation into the window (engine.decoding.context), 0) prefill both models in chunks,
reusing the cached prefix of the conversation; then per round 1) draft up to γ tokens, 2) score them in one
target pass, 3) accept the longest prefix, 4) resample from norm(max(0, p − q)) or take the bonus token, 5) roll
both caches back to the accepted sequence.
Invariant between rounds: the target's cache holds every token of the sequence but the last.
"""
from __future__ import annotations

import dataclasses
import hashlib
import platform
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from engine.decoding.caches import PREFILL_CHUNK, CachedModel
from engine.decoding.chat_template import encode_chat, refusing
from engine.decoding.context import fit, require_text, window_of
from engine.decoding.costs import (CONTEXT_REPEATS, LONG_BLOCKS, LONG_POSITIONS, LONG_REPEATS, MEASURE_REPEATS,
                                   MEASURED_ROWS, SCRATCH_POSITIONS, CostModel, LoadGap, RoundPlanner, fastest,
                                   save_costs, saved_costs)
from engine.decoding.drafters import COPY_RUN_MAX, ContinuationIndex, Drafter, DraftModelDrafter
from engine.decoding.repetition import LOOKBACK, read_for_loops, repeating
from engine.decoding.sampling import warp
from engine.decoding.text import TextStream, template_system_prompt
from engine.decoding.verification import Verdict, verify_greedy, verify_sampling
from engine.events import (ContextNotice, DecodeSettings, DraftedToken, EmittedToken, Fate, Mode, PairInfo,
                           PrefillProgress, RoundEvent, TokenProb)
from engine.kernels import q4q8
from engine.models import graphed
from engine.models.kept import file_key
from engine.models.loading import LoadedModel, load_model, pick_device, pick_dtype, synchronize
from engine.models.pairing import check_vocabularies, preflight
from engine.paths import cache_dir

TOP_N_INSPECT = 5  # leading tokens of p and q kept for each rejected draft
WARM_UP_STEPS = 8  # plain steps at load that time a round's bookkeeping
# (done, total): how far the timing at load has come, reported after each step and during a long one; it may raise
# to stop the timing
Progress = Callable[[int, int], None]


class Decoder:
    def __init__(self, target: LoadedModel, drafter: Drafter | None = None, draft: LoadedModel | None = None, *,
                 draft_int8: bool = True):
        """A target alone decodes AR only; with a `draft` model the default drafter is built for it."""
        self.target = target
        self.draft = draft
        self.vocab_size = target.vocab_size if draft is None else check_vocabularies(target, draft)
        if drafter is None and draft is not None:
            drafter = DraftModelDrafter.for_model(draft, self.vocab_size, int8=draft_int8)
        self.drafter = drafter
        self.runner = CachedModel(target.model, self.vocab_size)
        self._scratch: CachedModel | None = None  # where the target's blocks are timed
        self.tokenizer = target.tokenizer
        self.eos_ids = _eos_ids(target)
        self.window = window_of(*(m.model for m in (target, draft) if m is not None))  # None: no limit known
        self.target_step_s = 0.0  # one single-token target forward, measured at warm-up and by AR steps
        self.costs: CostModel | None = None  # measured at warm-up (measure_costs)
        self.load_gap = LoadGap()  # the machine's, as the pair's rounds meet it (kept across replies and chats)
        self._retimings = 0  # measure_target_step calls so far: which longer block the next one times
        self.planner: RoundPlanner | None = None
        self._gamma_request: int | None = None
        self._token_texts: dict[int, str] = {}

    @classmethod
    def load(cls, target: str, draft: str | None, device: str = "auto", dtype: str = "auto", *,
             draft_int8: bool = True, target_weights: str = "auto") -> "Decoder":
        """`target_weights`: a GGUF target's 4-bit blocks kept ("native"), de-quantised ("dtype"), or native where
        that is fast ("auto"; see loading.TARGET_WEIGHTS): the same choice with or without a draft, so plain AR
        and speculation decode with one target."""
        dev = pick_device(device)
        dt = pick_dtype(dev, dtype)
        if draft is None:
            return cls(load_model(target, dev, dt, shard=True, weights=target_weights))
        target_tok, draft_tok = preflight(target, draft)
        target_model = load_model(target, dev, dt, shard=True, tokenizer=target_tok, weights=target_weights)
        draft_model = load_model(draft, dev, dt, tokenizer=draft_tok, weights=target_weights, compact=draft_int8)
        return cls(target_model, draft=draft_model, draft_int8=draft_int8)

    def info(self) -> PairInfo:
        draft = self.draft.info() if self.draft else None
        if draft is not None and self.draft_runner is not None and self.draft_runner.compact_weights:
            draft = dataclasses.replace(draft, weights=self.draft_runner.compact_weights)
        return PairInfo(
            target=self.target.info(), draft=draft,
            device=str(self.target.device), dtype=str(self.target.model.dtype).removeprefix("torch."),
            greedy_exact=self.runner.batch_invariant, target_step_s=self.target_step_s,
            costs=self.costs.as_dict() if self.costs else {},
            default_system_prompt=self._system_prompt(),
        )

    @property
    def draft_runner(self) -> CachedModel | None:
        """The draft model's cache, where the drafter has a model."""
        return self.drafter.runner if self.drafter is not None else None

    def _system_prompt(self) -> str:
        with refusing(self.target.name):
            return template_system_prompt(self.tokenizer)

    def request_gamma(self, gamma: int) -> None:
        """Change γ from the next round on (thread-safe enough: one int, read once per round)."""
        self._gamma_request = gamma

    def reset(self) -> None:
        """A new chat: nothing cached is reused."""
        self.runner.reset()
        if self.drafter:
            self.drafter.reset()

    def chat_ids(self, messages: list[dict]) -> list[int]:
        for message in messages:
            require_text(message["content"])
        return encode_chat(self.tokenizer, messages, self.target.name)

    def measure_target_step(self, rows: int = 3) -> float:
        """Time the target's blocks of 1..`rows` rows and one longer block in turn (best of 3 each) on a scratch
        cache: the single-token step is the reference for AR-speedup estimates, and the cost model keeps the
        fastest of every timing. Cheap enough to repeat before each reply, so one busy moment at load does not
        skew the rounds for good: a long block priced too dear at load would never be drafted, so never be timed
        by a round. A draft-model step is re-timed with them, for the same reason."""
        longer = rows + 1 + self._retimings % (MEASURED_ROWS - rows)
        self._retimings += 1
        sizes = [*range(1, rows + 1), longer]
        times = self._time_blocks(sizes, 3)
        self.target_step_s = times[0]
        if self.costs:
            for k, seconds in zip(sizes, times):
                self.costs.observe_block(k, seconds)
            if self.draft_runner is not None:
                self.costs.observe_draft_step(*self._time_draft_step_in_place())
        return self.target_step_s

    def _time_draft_step_in_place(self, repeats: int = 3) -> tuple[float, int]:
        """The fastest of `repeats` draft-model steps after what the draft's cache holds (rolled back after each, so
        the conversation's cache is kept), and how many positions that was."""
        runner = self.draft_runner
        positions, token = len(runner), self._scratch_ids(1)[0]
        seconds = fastest(lambda: (runner.forward_rows([token]), runner.rollback(positions)), repeats,
                          synchronize=lambda: synchronize(self.target.device))
        return seconds, positions

    def measure_costs(self, progress: Progress | None = None) -> CostModel:
        """The pair's cost model (engine.decoding.costs): the target's blocks of 1..MEASURED_ROWS rows, what a
        cached position adds to them, a draft step and a copied token, each the fastest of a few timings on scratch
        caches. `progress(done, total)` is called after each round of timings."""
        ids = self._scratch_ids()
        added = min(LONG_POSITIONS, (self.window or 1 << 30) - SCRATCH_POSITIONS - MEASURED_ROWS)
        drafts = self.draft_runner is not None
        # each timing (blocks, and a draft step) runs at the scratch length, and again after `added` positions
        steps = _Steps(progress, (2 if added > 0 else 1) * (MEASURE_REPEATS + drafts)
                       + (LONG_REPEATS if self.drafter else 0))
        blocks = self._time_blocks(range(1, MEASURED_ROWS + 1), MEASURE_REPEATS, steps=steps)
        first_row = further_rows = 0.0
        if added > 0:
            one, most = self._time_blocks((1, MEASURED_ROWS), MEASURE_REPEATS, SCRATCH_POSITIONS + added, steps)
            first_row = max(0.0, one - blocks[0]) / added
            further_rows = max(0.0, (most - blocks[-1]) / added - first_row) / (MEASURED_ROWS - 1)
        long_blocks = self._time_long_blocks(steps) if self.drafter else []
        draft_s = copy_s = draft_position_s = 0.0
        if drafts:
            draft_s = self._time_draft_step(SCRATCH_POSITIONS)
            steps()
            if added > 0:
                draft_position_s = max(0.0, self._time_draft_step(SCRATCH_POSITIONS + added) - draft_s) / added
                steps()
        if self.drafter:
            history = ids * 8  # a few hundred tokens of conversation to search
            index = ContinuationIndex()
            copy_s = fastest(lambda: index.continuation(history))  # the first builds the index, as a prompt's does
        return self.set_costs(CostModel(blocks, draft_s, copy_s, position_s=first_row, position_row_s=further_rows,
                                        draft_position_s=draft_position_s, long_block_s=long_blocks))

    def _time_long_blocks(self, steps: _Steps | None = None) -> list[float]:
        """The target's blocks of LONG_BLOCKS rows, which copied runs fill (fewer repeats: each is several steps), as
        far as they fit in the window after the scratch cache (a model with learned positions has no others)."""
        fitting = [k for k in LONG_BLOCKS if SCRATCH_POSITIONS + k <= (self.window or 1 << 30)]
        return self._time_blocks(fitting, LONG_REPEATS, steps=steps) if fitting else []

    def _time_context_step(self, sequence: list[int]) -> None:
        """Time the target's next single-row step in place, after all but the last of `sequence` (rolled back after
        each, so the conversation's cache is kept), for what its cached positions add to a step: outside the
        round's timing, as a reply's read-in is."""
        positions = len(sequence) - 1
        seconds = fastest(lambda: (self.runner.forward(sequence[-1:]), self.runner.rollback(positions)),
                          CONTEXT_REPEATS, synchronize=lambda: synchronize(self.target.device))
        self.costs.observe_context_step(positions, seconds)

    def _time_draft_step(self, positions: int) -> float:
        """The fastest of a few draft-model steps after `positions` cached positions, on a scratch cache."""
        self.drafter.prefill(self._scratch_ids(positions + 1))  # holds all but the last id
        seconds, _ = self._time_draft_step_in_place(MEASURE_REPEATS)
        self.drafter.reset()
        return seconds

    def _time_blocks(self, sizes: Sequence[int], repeats: int, positions: int = SCRATCH_POSITIONS,
                     steps: _Steps | None = None) -> list[float]:
        """The fastest of `repeats` timings of the target's forward over a block of each of these numbers of rows,
        after `positions` cached positions on a scratch cache; round-robin over the sizes, so that a busy moment
        slows one timing of each rather than all of one. Each round of them is one of `steps`, and each chunk of
        the scratch cache's prefill is reported as work on the next (a thousand positions take seconds)."""
        steps = steps or _Steps(None, 0)
        ids = self._scratch_ids(positions + max(sizes))
        sync = lambda: synchronize(self.target.device)  # noqa: E731
        runner = self._scratch or CachedModel(self.target.model, self.vocab_size)
        if runner.on_device:  # kept with its cache and graphs; elsewhere it would only hold memory
            self._scratch = runner
        for _ in runner.prefill_chunks(ids[:positions + 1]):
            steps.still()
        times = [float("inf")] * len(sizes)
        for _ in range(repeats):
            for i, k in enumerate(sizes):
                seconds = fastest(lambda: (runner.forward(ids[positions:positions + k], keep=k),
                                           runner.rollback(positions)), 1, sync)
                times[i] = min(times[i], seconds)
            steps()
        return times

    def set_costs(self, costs: CostModel) -> CostModel:
        """Plan rounds on `costs` (measured at warm-up, or given: a test's, a saved profile's)."""
        self.costs, self.planner = costs, RoundPlanner(costs)
        self.target_step_s = costs.block_s(1)
        return costs

    def costs_file(self) -> Path | None:
        """Where this pair's costs measured at load are kept: one file per machine (CPU, threads, kernel path),
        models (their files' size and time), drafter, device and dtype; None for a model that is no file on disk.
        A step's and a draft's costs are timed again before each reply, so a kept measurement that no longer holds
        does not last."""
        def identity(model: LoadedModel | None) -> str | None:
            if model is None:
                return "none"
            path = Path(model.path)
            return file_key(path, model.weights) if path.exists() else None

        models = [identity(self.target), identity(self.draft)]
        if None in models:
            return None
        parts = [*models, type(self.drafter).__name__, str(self.target.device),
                 str(self.target.model.dtype), str(torch.get_num_threads()), _kernel_path(), platform.machine(),
                 cpu_name()]
        return cache_dir() / "costs" / f"{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:20]}.json"

    def warm_up(self, progress: Progress | None = None, *, reuse: bool = False) -> None:
        """Run each model (first calls are slow) while measuring the pair's costs: every cost is the fastest of
        several timings, so the slow first ones never count; with `reuse`, costs this pair measured at an earlier
        load on this machine are taken instead (`costs_file`: a large target's timings take seconds). A few plain
        steps then time a round's bookkeeping: the fastest stands, so a round that met something else later (a
        draft catching up, a collection of garbage: 4 ms against 0.5) cannot make every AR step look dearer.
        `progress`: as measure_costs's."""
        file = self.costs_file() if reuse else None
        kept = saved_costs(file) if file else None
        if kept is not None:
            # timed again now (a second): a kept timing caught by a busy moment would price short blocks too dear for
            # good where no reply re-times them (the CLI); a faster timing, and the plain steps below, improve it
            self.set_costs(kept)
            self.measure_target_step()
            if self.drafter and not kept.long_block_s:  # kept by a version that did not time them
                kept.long_block_s = self._time_long_blocks()
        else:
            self.measure_costs(progress)
        for _ in self.generate([{"role": "user", "content": "Hi"}],
                               DecodeSettings(mode=Mode.AR, max_new_tokens=WARM_UP_STEPS)):
            pass
        self.reset()
        if file:
            save_costs(file, self.costs)

    def _scratch_ids(self, n: int = 32) -> list[int]:
        return [i % self.vocab_size for i in range(1000, 1000 + n)]  # any ids: only the timing matters

    def generate(self, messages: list[dict], settings: DecodeSettings) -> Iterator[RoundEvent]:
        """Yield one RoundEvent per round until EOS or the token budget; stop early by closing the generator."""
        rounds = self.stream(messages, settings)
        try:
            for item in rounds:
                if isinstance(item, RoundEvent):
                    yield item
        finally:
            rounds.close()

    def stream(self, messages: list[dict], settings: DecodeSettings,
               stop: threading.Event | None = None) -> Iterator[ContextNotice | PrefillProgress | RoundEvent]:
        """As `generate`, with what happens before the first round: a ContextNotice if the conversation had to be
        fitted into the window, then a PrefillProgress after each prefill chunk (stop there by closing it too).
        Once `stop` is set, a read-in block that takes seconds ends between two layers and the stream with it."""
        if self.costs is None:
            self.warm_up()
        fitted = fit(messages, settings.max_new_tokens, self.window, self.chat_ids)
        if fitted.notice is not None:
            yield fitted.notice
        speculative = settings.mode == "spec" and self.drafter is not None
        # the longest the reply's caches can grow: its prompt, its budget and a block of drafts past it
        longest = len(fitted.ids) + fitted.max_new_tokens + graphed.BLOCK_ROWS
        self.runner.expect(longest)
        if speculative:
            self.planner.decode(settings.greedy)
            if self.draft_runner is not None:
                self.draft_runner.expect(longest)
        self._gamma_request = settings.gamma
        generator = torch.Generator(device=self.target.device).manual_seed(settings.seed)
        device = self.target.device

        # 0) prefill: both caches end up holding the prompt but its last token
        prompt = fitted.ids
        start = time.perf_counter()
        runners = [self.runner] + ([self.draft_runner] if self.draft_runner is not None else [])
        for runner in runners:
            runner.stop_read_in(stop)
        try:
            yield from self._prefill(prompt, speculative)
        except q4q8.ReadInStopped:
            return
        finally:
            for runner in runners:
                runner.stop_read_in(None)
        synchronize(device)
        prefill_s = time.perf_counter() - start

        sequence = list(prompt)
        # where the repetition stop starts reading: a loop may begin in the part a Continue carries on
        reply_start = len(prompt) - (self._continued_tokens(messages) if settings.stop_repeating else 0)
        text = TextStream(self.tokenizer)
        n_generated = 0
        index = 0
        while True:
            if self.costs and self.costs.wants_context_step(len(sequence) - 1):
                self._time_context_step(sequence)
            round_start = time.perf_counter()
            # 1) draft up to γ tokens (fewer when the draft's confidence runs out, or at the window's end)
            if speculative:
                room = COPY_RUN_MAX  # drafts a round may make where they are copies; γ bounds the model's
                if self.window is not None:  # a draft past the window would have no position to go to
                    room = min(room, self.window - len(sequence))
                if self.runner.on_device:  # a longer block would leave the graphs, and the bits of single steps
                    room = min(room, graphed.BLOCK_ROWS - 1)
                self.planner.positions = len(sequence) - 1  # what this round's block attends to besides itself
                proposal = self.drafter.propose(sequence, min(self._gamma_request, room), settings, generator,
                                                self.planner, copies=room)
                draft_tokens, draft_probs, kinds = proposal.tokens, proposal.probs.to(device), proposal.kinds
                dropped, read_s = proposal.dropped, proposal.read_s
                self.costs.observe_read(proposal.read, read_s)
            else:
                draft_tokens, draft_probs, kinds = [], torch.empty((0, self.vocab_size), device=device), []
                dropped, read_s = [], 0.0
            gamma = len(draft_tokens)
            synchronize(device)
            drafted_at = time.perf_counter()
            # 2) score them in one target pass: p at each draft position and one past the last
            target_logits = self.runner.forward(sequence[-1:] + draft_tokens, keep=gamma + 1)
            synchronize(device)
            forward_s = time.perf_counter() - drafted_at
            target_probs = warp(target_logits, settings)  # (γ+1, vocab)
            synchronize(device)
            verified_at = time.perf_counter()
            # 3) + 4) accept the longest prefix, then the correction or bonus token
            draft_ids = torch.tensor(draft_tokens, dtype=torch.long, device=device)
            if settings.greedy:
                verdict = verify_greedy(draft_ids, target_probs)
            else:
                verdict = verify_sampling(draft_ids, draft_probs, target_probs, generator)
            # 5) roll both caches back to the accepted prefix
            self.runner.rollback(len(sequence) + verdict.n_accepted)
            if speculative:
                self.drafter.update(verdict.n_accepted)
            new_tokens = draft_tokens[: verdict.n_accepted] + [verdict.next_token]
            sequence += new_tokens
            assert len(self.runner) == len(sequence) - 1, "target cache out of step with the sequence"
            if speculative:  # a round that drafted nothing, or only copies, leaves the draft further behind
                assert self.drafter.cached_length() < len(sequence), "draft cache ahead of the sequence"

            if not speculative:
                self.target_step_s = forward_s
            # the drafts' text is read in a copy of the reply's text: a rejected draft follows the accepted ones
            drafted = self._drafted(verdict, draft_tokens, draft_probs, target_probs, text.fork())
            emitted, finish = self._emitted(verdict, draft_tokens, target_probs, gamma,
                                            fitted.max_new_tokens - n_generated, text,
                                            read_for_loops(self._reply_tail(sequence, reply_start, len(new_tokens)),
                                                           self._token_text)
                                            if settings.stop_repeating else None)
            # a reply that ends inside the accepted prefix (EOS, the budget, a loop) keeps the drafts it emitted: the
            # rest never joined it, and counted as kept they would raise α above what its tokens per round show
            drafted = drafted[: len(emitted)]
            n_generated += len(emitted)
            round_s = time.perf_counter() - round_start
            cached = len(sequence) - len(new_tokens) - 1  # what the round's block attended to besides itself
            planned_s = self.costs.round_s(kinds, cached) + self.costs.drafting_s(dropped, cached)
            load = max(1.0, forward_s / self.costs.verify_s(gamma + 1, "model" in kinds, cached))
            # each token plain AR would emit attends to one more position than the one before it
            ar_equivalent_s = sum(self.costs.ar_step_s(cached + i) for i in range(len(emitted)))
            draft_s = drafted_at - round_start
            plain_load = (self.load_gap.drafted_round(load) if gamma
                          else self.load_gap.plain_step(round_s - draft_s, ar_equivalent_s))
            # a draft's reading of what it was behind on is paid once, when drafting resumes: not the round's cost
            judged_s = round_s - read_s
            self.costs.observe_round(kinds, forward_s, judged_s, cached)
            if speculative:
                ran = [*kinds, *dropped]
                self.planner.observe_round("model" if "model" in ran else "copy" if ran else None, ar_equivalent_s,
                                           planned_s, judged_s)
            yield RoundEvent(
                index=index, gamma=gamma, drafted=drafted, emitted=tuple(emitted),
                text_delta="".join(t.text for t in emitted),
                draft_s=draft_s, verify_s=verified_at - drafted_at,
                round_s=round_s, prefill_s=prefill_s if index == 0 else 0.0,
                target_step_s=self.target_step_s, finish_reason=finish, text_notice=text.left_out if finish else None,
                ar_equivalent_s=ar_equivalent_s, load=load, plain_load=plain_load, planned_s=planned_s,
                draft_kinds=tuple(kinds), positions=cached,
            )
            if finish:
                return
            index += 1

    def _prefill(self, prompt: list[int], speculative: bool) -> Iterator[PrefillProgress]:
        """Cache prompt[:-1] in the target (and the draft), a chunk at a time, reporting progress after each with
        the time it took (the time between reports is the consumer's, not the read-in's)."""
        device = self.target.device
        read = PrefillProgress(0, len(prompt) - 1)
        drafter_reads = speculative  # the drafter reads the prompt here, beside the target
        if (speculative and self.draft_runner is not None and not self.draft_runner.on_device
                and self.drafter.defer(prompt, PREFILL_CHUNK)):
            # A few positions are read with the first draft, apart from its step (Proposal.read_s): a reply that
            # drafts nothing (its pair's drafts did not pay in this chat) never pays for them, and a short prompt's
            # read-in was over 1 % of a reply beside a fast target. On a GPU the draft's steps take what is unread
            # as one block of its graphs, which a prompt would overflow.
            drafter_reads = False
        began = time.perf_counter()
        for cached in self.runner.prefill_chunks(prompt):
            if drafter_reads:
                self.drafter.prefill(prompt[: cached + 1])  # the draft keeps pace, chunk by chunk
            synchronize(device)
            read = read.chunk_read(cached, self.runner.last_chunk[0], time.perf_counter() - began)
            yield read
            began = time.perf_counter()
        if drafter_reads:
            # The target had the prompt cached already (plain AR replies earlier in this chat): the draft catches
            # up alone, still in chunks; the last call also rolls back a cache that holds another conversation.
            while (cached := self.drafter.cached_length()) < read.total:
                done = min(cached + PREFILL_CHUNK, read.total)
                self.drafter.prefill(prompt[: done + 1])
                synchronize(device)
                read = read.chunk_read(done, done - cached, time.perf_counter() - began)
                yield read
                began = time.perf_counter()
            self.drafter.prefill(prompt)

    def _token_text(self, token: int) -> str:
        """A token's text alone, decoded once (the repetition stop reads it for every token of a reply's tail)."""
        if token not in self._token_texts:
            self._token_texts[token] = self.tokenizer.decode([token])
        return self._token_texts[token]

    def _continued_tokens(self, messages: list[dict]) -> int:
        """How many of the prompt's last tokens are the reply a Continue carries on (0: a new reply)."""
        if len(messages) < 2 or messages[-1]["role"] != "assistant":
            return 0
        return max(0, len(self.chat_ids(messages)) - len(self.chat_ids(messages[:-1])))

    @staticmethod
    def _reply_tail(sequence: list[int], reply_start: int, new: int) -> list[int]:
        """The reply's last tokens before this round's `new` ones (from `reply_start`, the part a Continue carries
        on included), as many as the repetition stop looks at."""
        end = len(sequence) - new
        return sequence[max(reply_start, end - LOOKBACK):end]

    def _emitted(self, verdict: Verdict, draft_tokens: list[int], target_probs: torch.Tensor, gamma: int,
                 budget: int, text: TextStream, earlier: list[int] | None) -> tuple[list[EmittedToken], str | None]:
        """The tokens this round adds to the reply, cut after EOS, at the token budget or, given the reply's
        `earlier` tokens, where it starts repeating itself; each with the text it completes (the last one also with
        any text still held back)."""
        fates = [Fate.ACCEPTED] * verdict.n_accepted + [verdict.next_fate if gamma else Fate.TARGET]
        ids = draft_tokens[: verdict.n_accepted] + [verdict.next_token]
        probs = target_probs[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        emitted, finish = [], None
        for token, fate, p in zip(ids, fates, probs):
            emitted.append(EmittedToken(token, text.push(token), fate, p))
            if token in self.eos_ids:
                finish = "eos"
            elif len(emitted) >= budget:
                finish = "length"
            elif earlier is not None and repeating(earlier + read_for_loops([t.token_id for t in emitted],
                                                                            self._token_text)):
                finish = "repeating"
            if finish:
                last = emitted[-1]
                emitted[-1] = EmittedToken(last.token_id, last.text + text.flush(), last.fate, last.p)
                break
        return emitted, finish

    def _drafted(self, verdict: Verdict, draft_tokens: list[int], draft_probs: torch.Tensor,
                 target_probs: torch.Tensor, text: TextStream) -> tuple[DraftedToken, ...]:
        """The drafts the target looked at: the accepted prefix and the first rejection, if any; `text` is the
        reply's text so far (consumed)."""
        looked_at = min(verdict.n_accepted + 1, len(draft_tokens))
        rows, ids = torch.arange(looked_at), torch.tensor(draft_tokens[:looked_at], dtype=torch.long)
        # read in one transfer each (a GPU waits for every read)
        p, q = (probs[rows.to(probs.device), ids.to(probs.device)].tolist() for probs in (target_probs, draft_probs))
        drafted = []
        for i in range(looked_at):
            token = draft_tokens[i]
            accepted = i < verdict.n_accepted
            drafted.append(DraftedToken(
                token_id=token, text=text.push(token) if accepted else text.peek(token), p=p[i], q=q[i],
                r=verdict.draws[i] if verdict.draws else None, accepted=accepted,
                top_p=() if accepted else self._top(target_probs[i], text),
                top_q=() if accepted else self._top(draft_probs[i], text),
            ))
        return tuple(drafted)

    def _top(self, probs: torch.Tensor, text: TextStream) -> tuple[TokenProb, ...]:
        values, ids = probs.topk(min(TOP_N_INSPECT, probs.shape[-1]))
        ids = ids.tolist()
        return tuple(TokenProb(i, label, v) for i, label, v in zip(ids, text.labels(ids), values.tolist()))


class _Steps:
    """Counts a timing's steps and reports each to `progress`; a long piece of work within a step reports the count
    again (the caller may stop the timing there: it can raise)."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self) -> None:
        self.done += 1
        self.still()

    def still(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)


def _eos_ids(model: LoadedModel) -> set[int]:
    ids = {model.tokenizer.eos_token_id}
    configured = model.model.generation_config.eos_token_id if model.model.generation_config else None
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def _kernel_path() -> str:
    return q4q8.isa_name() if q4q8.available() else "none"


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what `platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
