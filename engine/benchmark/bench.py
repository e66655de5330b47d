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

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.benchmark.llama_binaries import METHODS as LLAMA_BINARIES
from engine.benchmark.peer_process import PeerError, ended
from engine.benchmark.vllm_peer import VLLM_METHODS
from engine.events import Drafting, RoundEvent
from engine.remote_records import EngineSpecStats

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

        from engine.benchmark.naive import speculative_decode
        from engine.models.loading import synchronize

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
