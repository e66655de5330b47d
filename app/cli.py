"""`specdec`: generate, bench, prepare and train-draft from the command line.

Errors reach the user as one line on stderr and a non-zero exit, never as a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

DEFAULT_TARGET = "embedded"
DEFAULT_DRAFT = "embedded-draft"

COLOURS = {  # ANSI colours for the terminal, the same meaning as in the app
    "accepted": "\033[32m", "rejected": "\033[9;31m", "resampled": "\033[34m", "corrected": "\033[34m",
    "bonus": "\033[33m", "target": "",
}
RESET = "\033[0m"
STOP_BELOW_HELP = ("stop a round's drafting before γ once the draft's own estimate that all its drafts will be "
                   "accepted falls below this (0: always γ drafts)")


def finite_float(text: str) -> float:
    """A float argument; NaN and infinity are refused here rather than decoding nonsense later."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _csv_floats(text: str) -> list[float]:
    return [finite_float(x) for x in text.split(",") if x]


def _csv_words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None, help=f"target model: hub id, directory, .gguf, or '{DEFAULT_TARGET}'")
    parser.add_argument("--draft", default=None,
                        help=f"draft model (default {DEFAULT_DRAFT}; '{DEFAULT_TARGET}' drafts for itself)")
    parser.add_argument("--preset", default=None, help="a named target/draft pair (see `specdec presets`)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--draft-weights", default="int8", choices=["int8", "dtype"],
                        help="the draft's weights on CPU: weight-only int8 (default: half the bytes, same α), "
                             "or kept in --dtype")
    parser.add_argument("--target-weights", default="auto", choices=["auto", "native", "dtype"],
                        help="a GGUF target's weights: its own 4-bit blocks on torch's int4 kernel (native), "
                             "de-quantised into --dtype (dtype), or native where that is faster: bfloat16 without a "
                             "draft (auto)")


def build_parser() -> argparse.ArgumentParser:
    from engine.benchmark.bench import METHODS
    from engine.events import DecodeSettings

    defaults = DecodeSettings()
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding, visible and fast.")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate a reply to one prompt")
    gen.add_argument("prompt", nargs="?", help="the message; '-' reads it from standard input")
    gen.add_argument("--prompt-file", type=Path, help="read the message from this UTF-8 text file")
    _add_model_arguments(gen)
    gen.add_argument("--gamma", type=int, default=defaults.gamma, help="most draft tokens per round (γ)")
    gen.add_argument("--stop-below", type=finite_float, default=defaults.stop_below, help=STOP_BELOW_HELP)
    mode = gen.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="greedy decoding (the default)")
    mode.add_argument("--temperature", type=finite_float, default=None, help="sample at this temperature")
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=finite_float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                     help="most tokens in the reply (cut, with a note, to what the model's window leaves)")
    gen.add_argument("--mode", choices=["spec", "ar"], default="spec")
    gen.add_argument("--no-lookup", dest="lookup", action="store_false",
                     help="draft with the draft model only, never by copying from the conversation")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")

    bench = sub.add_parser("bench", help="measure speedups against plain decoding and the peers")
    _add_model_arguments(bench)
    bench.add_argument("--prompts", type=Path, default=None, help="a text file, one prompt per line")
    bench.add_argument("--max-new-tokens", type=int, default=96)
    bench.add_argument("--gammas", type=_csv_ints, default=[1, 2, 4, 6, 8])
    bench.add_argument("--stop-below", type=_csv_floats, default=[defaults.stop_below],
                       help="adaptive draft length for spec and spec_draft, one row per value (0: always γ drafts)")
    bench.add_argument("--decoding", type=_csv_words, default=["greedy", "sample"])
    bench.add_argument("--temperature", type=finite_float, default=0.7)
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--methods", type=_csv_words, default=list(METHODS))
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--out", type=Path, default=None, help="write PNG plots and results.json here")

    prep = sub.add_parser("prepare", help="prepare the embedded pair in the cache directory (one time)")
    prep.add_argument("--force", action="store_true")

    # Options left out keep run_recipe's own defaults, which are the shipped draft's recipe (one place to change).
    train = sub.add_parser("train-draft", help="train the embedded draft model (~77 min on 2 CPU cores)")
    train.add_argument("--out", type=Path, default=Path("assets/draft"))
    train.add_argument("--workdir", type=Path, default=Path("runs/train-draft"))
    train.add_argument("--prompts", type=int, default=None,
                       help="training prompts the target answers (default: the shipped draft's)")
    train.add_argument("--steps", type=int, default=None, help="distillation steps (default: the shipped draft's)")
    train.add_argument("--workers", type=int, default=os.cpu_count(),
                       help="single-threaded processes answering prompts in parallel (default: one per core)")
    train.add_argument("--seed", type=int, default=None,
                       help="seed of the prompts, answers and training (default: the shipped draft's)")
    train.add_argument("--layers", type=_csv_ints, default=None,
                       help="the target's decoder layers the draft starts from (default: the shipped draft's)")

    sub.add_parser("presets", help="list the named model pairs")
    return parser


def resolve_pair(args) -> tuple[str, str | None]:
    """Target and draft names from --preset/--target/--draft; the embedded pair by default."""
    from engine.models import embedded
    from engine.models.pairing import PRESETS

    if args.preset:
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
        return args.prompt
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the prompt in {where} is not valid UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                         f"{exc.start})") from None


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
        filled = self.WIDTH * progress.done // progress.total
        print(f"\rreading the prompt [{'#' * filled}{'.' * (self.WIDTH - filled)}] {progress.done}/{progress.total}"
              " tokens", end="", file=sys.stderr, flush=True)
        self.shown = True

    def close(self) -> None:
        if self.shown:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self.shown = False


def cmd_generate(args) -> int:
    from engine.decoding.decoder import Decoder
    from engine.events import ContextNotice, DecodeSettings, PrefillProgress
    from engine.stats import reply_stats

    prompt = read_prompt(args)
    target, draft = resolve_pair(args)
    settings = DecodeSettings(
        mode=args.mode, gamma=args.gamma, greedy=args.temperature is None,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens, lookup=args.lookup,
        stop_below=args.stop_below,
    )
    decoder = Decoder.load(target, draft if args.mode == "spec" else None, args.device, args.dtype,
                           draft_int8=args.draft_weights == "int8", target_weights=args.target_weights)
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
                shown = [t for t in event.drafted if not t.accepted]
                text = "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[:event.n_accepted])
                text += "".join(f"{COLOURS['rejected']}{t.text}{RESET}" for t in shown)
                text += "".join(f"{COLOURS[t.fate.value]}{t.text}{RESET}" for t in event.emitted[event.n_accepted:])
                print(text, end="", flush=True)
            else:
                print(event.text_delta, end="", flush=True)
    finally:
        bar.close()
    stats = reply_stats(events)
    if args.json:
        info = decoder.info()
        token_ids = [t.token_id for e in events for t in e.emitted]
        print(json.dumps({
            "text": "".join(e.text_delta for e in events), "token_ids": token_ids,
            "settings": settings.__dict__, "target": info.target.__dict__,
            "draft": info.draft.__dict__ if info.draft else None, "device": info.device, "dtype": info.dtype,
            "greedy_exact": info.greedy_exact, "finish_reason": events[-1].finish_reason,
            "context": None if notice is None else {**notice.__dict__, "message": notice.message},
            "stats": stats.as_dict(),
            "rounds": [event_dict(e) for e in events],
        }, allow_nan=False))
    else:
        print()
        print(f"\n[{stats.n_tokens} tokens in {stats.wall_s:.2f}s = {stats.tokens_per_s:.1f} tok/s; "
              f"α {stats.alpha:.2f}, {stats.tokens_per_round:.2f} tokens/round over {stats.n_rounds} rounds]",
              file=sys.stderr)
        if settings.mode == "spec" and settings.greedy:
            exact = decoder.info().greedy_exact
            print("[greedy: exactly the tokens of greedy AR decoding]" if exact else
                  "[greedy: the tokens of greedy AR decoding up to rounding; this target is off the batch-invariant "
                  "fast path, so a near-tie can flip]", file=sys.stderr)
    return 0


def event_dict(event) -> dict:
    from dataclasses import asdict

    data = asdict(event)
    for token in data["emitted"]:
        token["fate"] = token["fate"].value
    return data


def cmd_prepare(args) -> int:
    from engine.models import embedded

    embedded.prepare(force=args.force)
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


def cmd_presets(args) -> int:
    from engine.models.pairing import PRESETS

    for preset in PRESETS.values():
        print(f"{preset.name:14} {preset.target} <- {preset.draft}  ({preset.note})")
    return 0


def cmd_bench(args) -> int:
    from engine.benchmark.bench import run_cli

    # Checked before the models load and the benchmark runs, not after it
    if args.prompts is not None and not args.prompts.is_file():
        what = "a directory" if args.prompts.is_dir() else "not found"
        raise ValueError(f"--prompts must be a text file with one prompt per line: {args.prompts} is {what}")
    if args.out is not None:
        check_writable_dir(args.out, "--out")
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
    from engine.models.loading import ModelLoadError
    from engine.models.pairing import PairingError

    commands = {"generate": cmd_generate, "bench": cmd_bench, "prepare": cmd_prepare,
                "train-draft": cmd_train_draft, "presets": cmd_presets}
    try:
        return commands[args.command](args)
    except (ModelLoadError, PairingError, FileNotFoundError, ValueError) as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything unforeseen still gets one line; SPECDEC_DEBUG=1 shows the traceback
        if os.environ.get("SPECDEC_DEBUG"):
            raise
        print(f"specdec: error: {type(exc).__name__}: {exc} (set SPECDEC_DEBUG=1 for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
