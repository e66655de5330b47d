"""Which draft pays for a target on this machine: each candidate measured, not guessed, within a time budget
(`specdec pick-draft`, the window's Find the best draft).

A candidate is a draft model, prompt lookup alone ("lookup"), or none at all ("none": plain AR, the reference every
other one must beat). The target loads once and each draft once; that loading and the decoders' warm-up count in
the budget (the CLI says how much of it they took). Then the pick goes in turns, one short prompt of one kind a
turn: one plain AR reply, then one reply of each candidate still measured, in an order that rotates, so a busy
machine's drift hits all alike. Each candidate reply's speedup is its tokens per second while decoding over the
plain reply's of its turn; a candidate's figure is their geometric mean, with a band (`band`: about 95 %
sure).

Sequential elimination: after each turn, a candidate whose band lies wholly below the best band's low end (plain
AR's 1.0 among them) is dropped: measured no more. The pick ends once the first of the ranking is clearly best
(ranking.clearly_best: its band above every other's), or the budget is spent (or MOST_TURNS are): then it returns
the ranking so far, and each Pick says how sure it is (its replies and band). Stop is heard between two rounds of
a reply. The ranking is judged (ranking.judge: a figure that is not fair is not ranked by) and kept per target,
machine and kind of prompt, and read back where the draft list shows it.
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median, stdev

from engine.benchmark.ranking import KINDS, LOOKUP, NONE, Pick, Ranking, clearly_best, judge, rank
from engine.paths import cache_dir

BUDGET_S = 60.0  # the default time budget of a pick, its models' loading included
PROMPTS_PER_PICK = 8  # turns take them in order, and again from the first if the budget allows
MAX_NEW_TOKENS = 24  # most tokens a reply: short, so that a turn is short and the budget holds several
GAMMA = 6  # the most drafts a round may make; cost-aware rounds stop where one more would not pay
TEMPERATURE = 0.7  # where replies are sampled (not greedy): the window's default
WARM_UP_TOKENS = 8  # an untimed first reply of each decoder: a model's first calls are slow
# Prompts come from the templates training draws from (engine.prompts), never from the measurement sets, at a seed
# of their own.
PROMPT_SEED = 19
# A band needs this many replies: before it a candidate is neither dropped nor called best.
SURE_FROM = 3
# A pick ends after this many turns even within its budget: each prompt twice; past that, candidates the bands
# cannot tell apart stay a tie (on a 1.5B target on two cores the budget ends a pick well before)
MOST_TURNS = 2 * PROMPTS_PER_PICK
# Student's t at 97.5 % by degrees of freedom (replies − 1): mean ± t·sd/√n holds the true mean about 95 % of the
# time; from 10 replies on 2.0 (t is within 13 % of it)
STUDENT_T = {2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
# (done, total, what): after each timed reply, the replies timed so far and about how many the pick will time in
# all at its pace so far; it may raise PickStopped to stop
Progress = Callable[[int, int, str], None]


class PickStopped(Exception):
    """A pick was stopped: raised by a progress callback between two replies, or by the pick itself once its stop
    event is set (between two rounds of a reply)."""


def prompts_of(kind: str, n: int = PROMPTS_PER_PICK) -> list[str]:
    """`n` short prompts of `kind` ("code" or "chat"), the same every pick."""
    from engine import prompts

    makers = {"code": (prompts._code_prompt,), "chat": (prompts._topic_prompt, prompts._everyday_prompt)}
    if kind not in makers:
        raise ValueError(f"unknown kind of prompts {kind!r}; choose from {', '.join(KINDS)}")
    rng = random.Random(PROMPT_SEED)
    chosen: list[str] = []
    while len(chosen) < n:
        text = rng.choice(makers[kind])(rng)
        if text not in chosen:
            chosen.append(text)
    return chosen


def default_candidates(target: str) -> list[str]:
    """The models on this machine that can draft for `target` (engine.models.library: tokenizer and size, from
    metadata), smallest first, then lookup and none."""
    from engine.models import library

    records = library.scan()
    drafts = library.compatible_drafts(library.find(target, records), records)
    return [choice.model.path for choice in drafts if not choice.reason] + [LOOKUP, NONE]


def typical(speedups: Sequence[float]) -> float:
    """The speedup these per-reply ones make together: their geometric mean. A ratio's plain mean would favour a
    candidate beside a plain reply that other work slowed (2x then outweighs 0.5x), the geometric one neither."""
    return math.exp(mean(math.log(s) for s in speedups))


def band(speedups: Sequence[float]) -> tuple[float | None, float | None]:
    """Where `typical` of these per-reply speedups lies, about 95 % sure: the mean of their logarithms ± Student's
    t times its standard error (STUDENT_T); (None, None) below SURE_FROM replies."""
    n = len(speedups)
    if n < SURE_FROM:
        return None, None
    logs = [math.log(s) for s in speedups]
    half = STUDENT_T.get(n - 1, 2.0) * stdev(logs) / math.sqrt(n)
    return math.exp(mean(logs) - half), math.exp(mean(logs) + half)


@dataclass
class Candidate:
    """One candidate's decoder and its replies so far, each beside the plain AR reply of its turn."""

    draft: str
    decoder: object  # engine.decoding.decoder.Decoder
    row: object  # engine.benchmark.bench.Row: its replies
    plain: object  # Row: the plain AR replies of the turns it was measured in
    speedups: list[float] = field(default_factory=list)
    dropped: bool = False

    def pick(self) -> Pick:
        from engine.benchmark.summary import summarize_row

        if not self.speedups:
            return Pick(draft=self.draft, problem="not measured: the time budget ran out first")
        figures = summarize_row(self.row, self.plain)
        t_q = figures.get("t_q_s")
        low, high = band(self.speedups)
        return Pick(draft=self.draft, measured_speedup=typical(self.speedups),
                    predicted_speedup=figures.get("predicted_speedup"), alpha=figures["alpha"],
                    tokens_per_round=figures["tokens_per_round"],
                    per_position_acceptance=list(figures.get("per_position_acceptance") or []),
                    draft_step_ms=t_q * 1e3 if t_q and self.draft != LOOKUP else None,
                    target_step_ms=plain_step_ms(self.plain.runs),
                    replies=len(self.speedups), low=low, high=high, dropped=self.dropped)


def plain_pick(plain_runs: list) -> Pick:
    """Plain AR's own row: the reference, 1.0 exactly, its target step the median of every plain reply's."""
    step = plain_step_ms(plain_runs)
    return Pick(draft=NONE, measured_speedup=1.0, predicted_speedup=1.0, alpha=None, tokens_per_round=1.0,
                target_step_ms=step, replies=len(plain_runs), low=1.0, high=1.0)


def plain_step_ms(plain_runs: list) -> float | None:
    """The median of these plain AR replies' target steps (each reply's mean): a candidate's baseline, and the
    pick's, are compared by it (ranking.judge)."""
    steps = [mean(e.verify_s for e in run.events) * 1e3 for run in plain_runs if run.events]
    return median(steps) if steps else None


def pick_draft(target: str, candidates: Sequence[str], prompts: Sequence[str], *, device: str = "auto",
               dtype: str = "auto", weights: str = "auto", greedy: bool = True,
               max_new_tokens: int = MAX_NEW_TOKENS, seconds: float = BUDGET_S, progress: Progress | None = None,
               stop: threading.Event | None = None, loaded: Callable[[float], None] | None = None) -> list[Pick]:
    """Measure each candidate with `target` on `prompts` within `seconds` and rank them (see the module docstring).
    A candidate that cannot be loaded (another tokenizer, a damaged file) is a Pick with its one-line problem.
    Setting `stop` ends the pick between two rounds (PickStopped). `loaded(seconds)` is told what the loading and
    warming up took of the budget, before the first reply is timed."""
    started = time.monotonic()  # before importing torch: that is part of what the pick takes too
    deadline = started + seconds
    from engine.benchmark.bench import Config, Row
    from engine.models.loading import ModelLoadError, load_model, pick_device, pick_dtype
    from engine.models.pairing import PairingError

    stop = stop or threading.Event()
    decoding = "greedy" if greedy else "sample"

    def check(*_progress) -> None:
        if stop.is_set():
            raise PickStopped

    # 1) the target, then each candidate's decoder, all warmed up: in the budget
    dev = pick_device(device)
    target_model = load_model(target, dev, pick_dtype(dev, dtype), shard=True, weights=weights)
    measured, problems = [], []
    costs = None  # the first costs measured (or kept): the target's timings, which plain AR and copying share
    for name in sorted((c for c in candidates if c != NONE), key=lambda c: c == LOOKUP):  # model drafts first
        check()
        if time.monotonic() >= deadline:
            problems.append(Pick(draft=name, problem="not measured: the time budget went on loading"))
            continue
        try:
            decoder = _decoder_of(target, target_model, name, dev, dtype, weights)
        except (ModelLoadError, PairingError, OSError, ValueError) as exc:
            problems.append(Pick(draft=name, problem=str(exc).splitlines()[0]))
            continue
        costs = _warm(decoder, costs, check, max_new_tokens, stop)
        method = "spec_lookup" if name == LOOKUP else "spec_draft"
        measured.append(Candidate(name, decoder, Row(Config(method, decoding, GAMMA, stop_below="cost")),
                                  Row(Config("ar", decoding))))
    check()
    from engine.decoding.decoder import Decoder

    plain = Decoder(target_model)
    _warm(plain, costs, check, max_new_tokens, stop)
    plain_config = Config("ar", decoding)
    if loaded:
        loaded(time.monotonic() - started)

    # 2) turns, until one is clearly best or the budget is spent
    plain_runs: list = []
    done, measuring_from = 0, time.monotonic()

    def report(what: str) -> None:
        nonlocal done
        done += 1
        if progress:
            pace = (time.monotonic() - measuring_from) / done
            progress(done, done + max(0, int((deadline - time.monotonic()) / pace)), what)

    def judged() -> list[Pick]:
        return rank(judge([plain_pick(plain_runs)] + [c.pick() for c in measured] + problems,
                          plain_step_ms(plain_runs)))

    turn = 0
    while (turn < MOST_TURNS and any(not c.dropped for c in measured)
           and not (turn and clearly_best(judged()))):
        prompt, seed, said = prompts[turn % len(prompts)], turn, f"prompt {turn % len(prompts) + 1}"
        # plain AR first, then each candidate still measured, the first of them a different one each turn: a turn
        # the deadline cuts short keeps the replies it made
        live = [c for c in measured if not c.dropped]
        runs = {}
        for candidate in [None] + live[turn % len(live):] + live[: turn % len(live)]:
            decoder, config = (plain, plain_config) if candidate is None else (candidate.decoder,
                                                                                candidate.row.config)
            run = _timed_reply(decoder, config, prompt, seed, max_new_tokens, stop, deadline)
            if run is None:
                break
            run.prompt_index = turn
            runs[None if candidate is None else candidate.draft] = run
            report(run_said(NONE if candidate is None else candidate.draft, f"{said} {config.method}"))
        if None in runs:
            baseline = runs.pop(None)
            plain_runs.append(baseline)
            for candidate in measured:
                if candidate.draft in runs and _speed(runs[candidate.draft]) > 0 < _speed(baseline):
                    candidate.row.runs.append(runs[candidate.draft])
                    candidate.plain.runs.append(baseline)
                    candidate.speedups.append(_speed(runs[candidate.draft]) / _speed(baseline))
        if time.monotonic() >= deadline:
            break
        _drop_the_clearly_slower(measured)
        turn += 1
    return judged()


def _drop_the_clearly_slower(measured: list[Candidate]) -> None:
    """Drop each candidate whose band lies wholly below the best low end (plain AR's 1.0 among them)."""
    bands = {id(c): band(c.speedups) for c in measured if not c.dropped}
    best_low = max([1.0] + [low for low, _ in bands.values() if low is not None])
    for candidate in measured:
        high = bands.get(id(candidate), (None, None))[1]
        if high is not None and high < best_low:
            candidate.dropped = True


def _decoder_of(target: str, target_model, candidate: str, device, dtype: str, weights: str):
    """The decoder that drafts with `candidate` for the loaded target (its draft model loaded here)."""
    from engine.decoding.decoder import Decoder
    from engine.decoding.drafters import LookupDrafter
    from engine.models.loading import load_model, pick_dtype
    from engine.models.pairing import preflight

    if candidate == LOOKUP:
        return Decoder(target_model, LookupDrafter(target_model.vocab_size, target_model.device))
    _, draft_tokenizer = preflight(target, candidate)
    draft = load_model(candidate, device, pick_dtype(device, dtype), tokenizer=draft_tokenizer, weights=weights,
                       compact=True)
    return Decoder(target_model, draft=draft)


def _warm(decoder, costs, check: Callable, max_new_tokens: int, stop: threading.Event):
    """Give `decoder` its costs and run it once untimed; returns the costs measured first. A decoder with a draft
    model has costs of its own (kept from an earlier load, else measured: Decoder.warm_up); plain AR and copying
    price only the target's steps and a copy, which the costs measured first already hold, so they take a copy
    of those rather than time the same target again."""
    from engine.benchmark.bench import Config

    if costs is None or decoder.draft_runner is not None:
        decoder.warm_up(progress=check, reuse=True)
    else:
        decoder.set_costs(copy.deepcopy(costs))
    _timed_reply(decoder, Config("ar" if decoder.drafter is None else "spec", "greedy"), "Hi", 0,
                 min(WARM_UP_TOKENS, max_new_tokens), stop, math.inf)
    return costs or decoder.costs


def _timed_reply(decoder, config, prompt: str, seed: int, max_new_tokens: int, stop: threading.Event,
                 deadline: float):
    """One reply to `prompt` as the bench times our engine (bench.Run, its rounds' events), its wall time the
    decoding's (prefill aside: the reading of a short prompt is alike with or without drafts). None where the
    deadline passed first; PickStopped where `stop` was set, heard between two rounds (the engine ends a long
    read-in between two layers)."""
    from engine.benchmark.bench import Run
    from engine.events import DecodeSettings, RoundEvent
    from engine.stats import reply_stats

    settings = DecodeSettings(mode="ar" if config.method == "ar" else "spec", gamma=GAMMA, greedy=config.greedy,
                              temperature=TEMPERATURE, seed=seed, max_new_tokens=max_new_tokens, lookup=False,
                              cost_aware=True)
    decoder.reset()  # otherwise the previous reply's cached prompt would make this prefill free
    events = []
    stream = decoder.stream([{"role": "user", "content": prompt}], settings, stop)
    try:
        for item in stream:
            if isinstance(item, RoundEvent):
                events.append(item)
            if stop.is_set():
                raise PickStopped
            if time.monotonic() > deadline:
                return None
    finally:
        stream.close()
    if stop.is_set():  # a stream stopped in a read-in block ends without a last round
        raise PickStopped
    tokens = [t.token_id for e in events for t in e.emitted]
    return Run(config, 0, 0, tokens, reply_stats(events).decode_s, events=events)


def _speed(run) -> float:
    return len(run.tokens) / run.wall_s if run.wall_s > 0 else 0.0


RUN_WORDS = {"ar": "plain AR", "spec_draft": "drafting", "spec_lookup": "copying"}


def run_said(candidate: str, run: str) -> str:
    """A pick's progress in a reader's words: the bench's 'prompt 2 spec_draft' for the candidate
    'models/x.gguf' is 'x.gguf: prompt 2, drafting'."""
    what, method = run.rsplit(" ", 1)
    name = candidate if candidate in (LOOKUP, NONE) else Path(candidate).name
    return f"{name}: {what}, {RUN_WORDS.get(method, method)}"


def machine() -> str:
    """The machine a pick was measured on, in words: its CPU and the threads torch uses."""
    import torch

    from engine.decoding.decoder import cpu_name

    return f"{cpu_name()}, {torch.get_num_threads()} threads"


def ranking_source(target: str) -> Path | None:
    """The file or folder a target's kept rankings are keyed by (None for a hub id not on disk)."""
    from engine.models.loading import gguf_file, resolve

    source = gguf_file(target) or Path(resolve(target))
    return source if source.exists() else None


def ranking_file(target: Path, kind: str, device: str, dtype: str) -> Path:
    """Where the ranking of drafts for this target file, kind of prompts and machine is kept."""
    from engine.models.kept import file_key

    key = hashlib.sha256("|".join([file_key(target), kind, device, dtype, machine()]).encode()).hexdigest()[:20]
    return cache_dir() / "draft-picks" / f"{key}.json"


def new_ranking(target: str, kind: str, picks: list[Pick], seconds: float | None = None) -> Ranking:
    """`seconds`: what the pick took, its loading included."""
    return Ranking(target=target, kind=kind, machine=machine(), measured_on=datetime.date.today().isoformat(),
                   picks=picks, seconds=seconds)


