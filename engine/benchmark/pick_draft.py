"""Which draft pays for a target on this machine: each candidate measured, not guessed (`specdec pick-draft`, the
window's Find the best draft).

A candidate is a draft model, prompt lookup alone ("lookup"), or none at all ("none": plain AR, the row every other
one must beat). Each decodes the same few short prompts of one kind with the target, interleaved with plain AR on
the same prompts, through the bench's own runs (engine.benchmark.bench), so a pick's figures are the bench's: its
measured speedup over plain AR, the cost model's prediction for the same rounds, acceptance by draft position, and
the draft step's and the target step's costs. The target loads once. The ranking is kept per target, machine and
kind of prompt, and read back where the draft list shows it.
"""
from __future__ import annotations

import datetime
import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.benchmark.ranking import KINDS, LOOKUP, NONE, Pick, Ranking, rank
from engine.paths import cache_dir

PROMPTS_PER_PICK = 3
MAX_NEW_TOKENS = 48
GAMMA = 6  # the most drafts a round may make; cost-aware rounds stop where one more would not pay
# Prompts come from the templates training draws from (engine.prompts), never from the measurement sets, at a seed
# of their own.
PROMPT_SEED = 19
# (done, total, what): after each timed reply; it may raise to stop the pick
Progress = Callable[[int, int, str], None]


class PickStopped(Exception):
    """Raised by a progress callback to stop a pick between two replies."""


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


def _pick_of(draft: str, records: list[dict]) -> Pick:
    """A candidate's Pick from its bench records (an AR row and a drafting row)."""
    drafting = next(r for r in records if r["method"] != "ar")
    ar = next(r for r in records if r["method"] == "ar")
    t_q = drafting.get("t_q_s")
    t_p = drafting.get("t_p_s") or (ar["wall_s"] / ar["tokens"] if ar["tokens"] else None)
    return Pick(draft=draft, measured_speedup=drafting["speedup_vs_ar"],
                predicted_speedup=drafting.get("predicted_speedup"), alpha=drafting["alpha"],
                tokens_per_round=drafting["tokens_per_round"],
                per_position_acceptance=list(drafting.get("per_position_acceptance") or []),
                draft_step_ms=t_q * 1e3 if t_q and draft != LOOKUP else None,
                target_step_ms=t_p * 1e3 if t_p else None)


def pick_draft(target: str, candidates: Sequence[str], prompts: Sequence[str], *, device: str = "auto",
               dtype: str = "auto", weights: str = "auto", greedy: bool = True,
               max_new_tokens: int = MAX_NEW_TOKENS, progress: Progress | None = None) -> list[Pick]:
    """Measure each candidate with `target` on `prompts` and rank them (see the module docstring). A candidate that
    cannot be loaded (another tokenizer, a damaged file) is a Pick with its one-line problem."""
    from engine.benchmark.bench import Bench, Config, run_all
    from engine.benchmark.summary import summarize
    from engine.decoding.decoder import Decoder
    from engine.models.loading import ModelLoadError, load_model, pick_device, pick_dtype
    from engine.models.pairing import PairingError, preflight

    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    decoding = "greedy" if greedy else "sample"
    measured = [c for c in candidates if c != NONE]
    total = len(measured) * 2 * (1 + len(prompts))
    done = 0

    def report(run: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, run)

    target_model = load_model(target, dev, dt, shard=True, weights=weights)
    picks = [Pick(draft=NONE, measured_speedup=1.0, predicted_speedup=1.0, alpha=None, tokens_per_round=1.0)]
    for candidate in measured:
        if candidate == LOOKUP:
            decoder, method = Decoder(target_model), "spec_lookup"
        else:
            try:
                _, draft_tokenizer = preflight(target, candidate)
                draft = load_model(candidate, dev, dt, tokenizer=draft_tokenizer, weights=weights, compact=True)
                decoder, method = Decoder(target_model, draft=draft), "spec_draft"
            except (ModelLoadError, PairingError, OSError, ValueError) as exc:
                picks.append(Pick(draft=candidate, problem=str(exc).splitlines()[0]))
                done += 2 * (1 + len(prompts))
                continue
        bench = Bench(decoder, max_new_tokens, temperature=0.7)  # gives a lookup-only decoder its drafter
        decoder.warm_up(reuse=True)
        configs = [Config("ar", decoding), Config(method, decoding, GAMMA, stop_below="cost")]
        rows = run_all(bench, configs, list(prompts), 1, 0, progress=False,
                       on_run=lambda run, c=candidate: report(run_said(c, run)))
        picks.append(_pick_of(candidate, summarize(rows)["runs"]))
    return rank(picks)


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


def new_ranking(target: str, kind: str, picks: list[Pick]) -> Ranking:
    return Ranking(target=target, kind=kind, machine=machine(), measured_on=datetime.date.today().isoformat(),
                   picks=picks)


